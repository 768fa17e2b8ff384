"""Encoding to parts: record data at or above the threshold is referenced, not copied,
and the parts always put together the very bytes ``encode()`` writes."""

from __future__ import annotations

import array
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wire.batch_builder import build_batch
from wire.frame import (
    decode_request,
    decode_response,
    encode_request,
    encode_request_parts,
    encode_response,
)
from wire.generated.api_000_produce import (
    ProduceRequest,
    ProduceRequestPartitionProduceData,
    ProduceRequestTopicProduceData,
)
from wire.generated.api_001_fetch import (
    FetchResponse,
    FetchResponseFetchableTopicResponse,
    FetchResponsePartitionData,
)
from wire.primitives import REFERENCE_FROM, Regions
from wire.records import NewRecord, iter_records
from wire.regions import EncodedParts, FileRegion, split_parts

Records = bytes | bytearray | memoryview | None


def produce(records: list[Records]) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            ProduceRequestTopicProduceData(
                name="t",
                partition_data=[
                    ProduceRequestPartitionProduceData(index=i, records=r) for i, r in enumerate(records)
                ],
            )
        ],
    )


def referenced(parts: EncodedParts, candidates: list[Records]) -> list[int]:
    """Indexes of the candidates that are parts themselves (by identity)."""
    return [i for i, c in enumerate(candidates) if any(p is c for p in parts.parts)]


records_values = st.one_of(
    st.none(),
    st.binary(max_size=80),
    st.binary(max_size=80).map(bytearray),
    st.binary(max_size=80).map(memoryview),
)


@settings(max_examples=300, deadline=None)
@given(
    records=st.lists(records_values, max_size=6),
    reference_from=st.integers(0, 90),
    version=st.sampled_from([3, 8, 9, 10, 11]),
)
def test_parts_equal_encode_and_reference_exactly_the_large_buffers(
    records: list[Records], reference_from: int, version: int
) -> None:
    msg = produce(records)
    whole = msg.encode(version)
    parts = msg.encode_parts(version, reference_from)
    assert parts.to_bytes() == whole
    assert parts.size == len(whole)
    large = [i for i, r in enumerate(records) if r is not None and len(r) >= reference_from]
    assert referenced(parts, records) == large
    # Nothing is referenced unless asked to.
    w = bytearray()
    regions: Regions = []
    msg.encode_into(w, version, regions)
    assert bytes(w) == whole and regions == []


def test_default_threshold_references_a_1_mib_batch_and_copies_a_1_kib_one() -> None:
    big = build_batch([NewRecord(key=b"k", value=b"v" * (1 << 20), timestamp=1)])
    small = build_batch([NewRecord(key=b"k", value=b"v" * 1024, timestamp=1)])
    msg = produce([big, small])
    parts = msg.encode_parts(9)
    assert referenced(parts, [big, small]) == [0]
    assert len(parts.parts) == 3  # bytes before the batch, the batch, bytes after it
    assert sum(len(p) for p in parts.parts if p is not big) < 2048
    assert parts.to_bytes() == msg.encode(9)
    assert len(big) >= REFERENCE_FROM > len(small)


def test_request_frame_parts() -> None:
    big = build_batch([NewRecord(key=None, value=b"x" * 300_000, timestamp=5)])
    msg = produce([big, b"", None])
    frame = encode_request_parts(msg, 9, 42, "parts-test")
    whole = encode_request(msg, 9, 42, "parts-test")
    assert frame.to_bytes() == whole
    assert frame.size == len(whole) == int.from_bytes(whole[:4], "big") + 4
    assert any(p is big for p in frame.parts)
    request = decode_request(whole[4:])
    assert request.correlation_id == 42 and request.header.client_id == "parts-test"
    body = request.body
    assert isinstance(body, ProduceRequest)
    got = body.topic_data[0].partition_data[0].records
    assert got is not None and bytes(got) == big
    assert [r.value for r in iter_records(bytes(got))] == [b"x" * 300_000]


def test_file_regions_in_requests_need_parts() -> None:
    with tempfile.TemporaryFile() as fh:
        batch = build_batch([NewRecord(key=None, value=b"f" * 100, timestamp=5)])
        fh.write(b"pad" + batch)
        fh.flush()
        region = FileRegion(fh.fileno(), 3, len(batch))
        msg = produce([region])
        with pytest.raises(ValueError, match="encode_request_parts"):
            encode_request(msg, 9, 1)
        with pytest.raises(ValueError, match="encode_parts"):
            msg.encode(9)
        frame = encode_request_parts(msg, 9, 1)
        assert region in frame.parts
        assert frame.to_bytes() == encode_request(produce([batch]), 9, 1)


def test_response_frames_reference_large_buffers_and_decode_back() -> None:
    big = bytearray(build_batch([NewRecord(key=b"a", value=b"b" * 200_000, timestamp=9)]))
    msg = FetchResponse(
        responses=[
            FetchResponseFetchableTopicResponse(
                topic="t",
                partitions=[
                    FetchResponsePartitionData(partition_index=0, records=big),
                    FetchResponsePartitionData(partition_index=1, records=b"tiny"),
                ],
            )
        ]
    )
    frame = encode_response(msg, 11, 7)
    assert any(p is big for p in frame.parts)
    copied = encode_response(msg, 11, 7, reference_from=-1)
    assert len(copied.parts) == 1
    data = frame.to_bytes()
    assert data == copied.to_bytes() and frame.size == len(data)
    corr, back = decode_response(data[4:], FetchResponse, 11)
    assert corr == 7 and isinstance(back, FetchResponse)
    parts = back.responses[0].partitions
    assert bytes(parts[0].records or b"") == big and bytes(parts[1].records or b"") == b"tiny"


def test_wide_memoryviews_are_referenced_as_bytes() -> None:
    wide = memoryview(array.array("H", range(100)))
    msg = produce([wide])
    parts = msg.encode_parts(9, reference_from=10)
    assert parts.to_bytes() == msg.encode(9)
    region = [p for p in parts.parts if isinstance(p, memoryview) and p.obj is wide.obj]
    assert len(region) == 1 and region[0].nbytes == 200 and len(region[0]) == 200


def test_split_parts_without_regions_is_the_buffer() -> None:
    w = bytearray(b"abc")
    parts = split_parts(w, [])
    assert parts.parts == [w] and parts.size == 3
