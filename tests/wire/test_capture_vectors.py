"""Client request frames kept in the repository (capture_vectors.json, written by
scripts/gen_capture_vectors.py from the reference captures): the codec is tested against real
clients' bytes in a plain clone too. Each frame decodes (header and body), names the API,
version and correlation id the client sent, re-encodes byte for byte, and the record batches
of a Produce frame decode with valid CRCs in every compression the clients used."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from wire.frame import request_header_version
from wire.generated.api_000_produce import ProduceRequest
from wire.generated.header_request_header import RequestHeader
from wire.generated.registry import API_SPECS
from wire.primitives import Regions, as_memoryview
from wire.records import crc_is_valid, iter_batch_headers, iter_records

VECTORS: list[dict[str, Any]] = json.loads((Path(__file__).parent / "capture_vectors.json").read_text())
CLIENTS = {"aiokafka", "confluent-kafka", "java", "kafka-python-2", "kafka-python-3", "kafkajs", "kcat", "spark"}


def test_vectors_cover_every_client_and_codec() -> None:
    assert {v["client"] for v in VECTORS} == CLIENTS
    assert len({v["api_key"] for v in VECTORS}) >= 19
    codecs = set()
    for v in VECTORS:
        if v["api_key"] != 0:
            continue
        frame = bytes.fromhex(v["frame"])
        _, pos = RequestHeader.decode_at(frame[4:], 0, request_header_version(0, v["api_version"]))
        body = ProduceRequest.decode(frame[4 + pos:], v["api_version"])
        for topic in body.topic_data:
            for partition in topic.partition_data:
                records = bytes(partition.records or b"")
                codecs |= {batch.compression.name for _, batch in iter_batch_headers(records)}
    assert {"NONE", "GZIP", "SNAPPY", "LZ4", "ZSTD"} <= codecs


@pytest.mark.parametrize(
    "vector", VECTORS, ids=lambda v: f"{v['client']}-{v['api_key']}v{v['api_version']}-{v['scenario']}"
)
def test_captured_request_decodes_and_reencodes(vector: dict[str, Any]) -> None:
    frame = bytes.fromhex(vector["frame"])
    buf = as_memoryview(frame)[4:]
    assert int.from_bytes(frame[:4], "big") == len(buf)
    key, version = vector["api_key"], vector["api_version"]
    hv = request_header_version(key, version)
    header, pos = RequestHeader.decode_at(buf, 0, hv)
    assert (header.request_api_key, header.request_api_version) == (key, version)
    assert header.correlation_id == vector["correlation_id"]
    body, end = API_SPECS[key].request.decode_at(buf, pos, version)
    assert end == len(buf)
    again = bytearray()
    regions: Regions = []
    header.encode_into(again, hv, regions)
    body.encode_into(again, version, regions)
    assert not regions
    assert bytes(again) == bytes(buf)
    if isinstance(body, ProduceRequest):
        batches = 0
        for topic in body.topic_data:
            for partition in topic.partition_data:
                records = bytes(partition.records or b"")
                for at, batch in iter_batch_headers(records):
                    assert crc_is_valid(records, at)
                    assert len(list(iter_records(records, at))) == batch.records_count
                    batches += 1
        assert batches > 0
