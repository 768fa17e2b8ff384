"""The C accelerator and the pure-Python codec agree: every captured frame decodes to
equal messages and re-encodes to the same bytes on both paths, generated messages
encode identically, and hostile input gives the same DecodeError (reason, offset, api
key and version) on both. The accelerator must also finish valid input itself rather
than hand it to the Python code."""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.shared import SCHEMAS, capture_files, read_capture
from tests.wire.schema_strategies import message_strategy
from wire import accel
from wire.exceptions import DecodeError
from wire.frame import decode_request, request_header_version, response_header_version
from wire.generated.api_001_fetch import (
    FetchResponse,
    FetchResponseFetchableTopicResponse,
    FetchResponsePartitionData,
)
from wire.generated.header_request_header import RequestHeader
from wire.generated.header_response_header import ResponseHeader
from wire.generated.registry import API_SPECS, COORDINATOR_RECORDS, METADATA_RECORDS
from wire.primitives import DecodeLimits, Message, Regions, as_memoryview
from wire.regions import FileRegion

pytestmark = pytest.mark.skipif(
    not accel.available(),
    reason="the C accelerator is not built (python setup.py build_ext --inplace)",
)


def counters() -> tuple[int, int]:
    sp: Any = accel._speedups
    done, handed_back = sp.counters()
    return int(done), int(handed_back)


@contextmanager
def pure() -> Iterator[None]:
    was = accel.enabled()
    accel.disable()
    try:
        yield
    finally:
        if was:
            accel.enable()


@contextmanager
def fast() -> Iterator[None]:
    was = accel.enabled()
    accel.enable()
    try:
        yield
    finally:
        if not was:
            accel.disable()


def outcome(fn: Callable[[], Any]) -> Any:
    """The value, or the error as something comparable."""
    try:
        return ("ok", fn())
    except DecodeError as ex:
        return ("error", type(ex).__name__, str(ex), ex.offset, ex.api_key, ex.api_version)
    except Exception as ex:  # the same non-DecodeError on both paths is still agreement
        return ("raised", type(ex).__name__, str(ex))


def both(fn: Callable[[], Any]) -> Any:
    with pure():
        expected = outcome(fn)
    with fast():
        got = outcome(fn)
    assert got == expected
    return got


@cache
def frames() -> list[tuple[str, bytes, int, int]]:
    """(direction, frame body, api key, version) of every captured frame with a schema."""
    out = []
    for path in capture_files():
        for cf in read_capture(path):
            meta = cf.meta
            if "api_key" not in meta:
                continue
            key, version = meta["api_key"], meta["api_version"]
            spec = API_SPECS[key]
            if not spec.min_version <= version <= spec.max_version:
                continue
            if cf.direction == "S" and key == 18 and meta["body"].get("ErrorCode") == 35:
                version = 0
            out.append((cf.direction, bytes(cf.frame[4:]), key, version))
    return out


def decode_frame(direction: str, frame: bytes, key: int, version: int) -> tuple[Message, Message, int]:
    buf = as_memoryview(frame)
    spec = API_SPECS[key]
    if direction == "C":
        header, pos = RequestHeader.decode_at(buf, 0, request_header_version(key, version))
        body, end = spec.request.decode_at(buf, pos, version)
    else:
        header, pos = ResponseHeader.decode_at(buf, 0, response_header_version(key, version))
        body, end = spec.response.decode_at(buf, pos, version)
    return header, body, end


def encode_frame(header: Message, hv: int, body: Message, version: int) -> tuple[bytes, bytes]:
    w = bytearray()
    regions: Regions = []
    header.encode_into(w, hv, regions)
    body.encode_into(w, version, regions)
    assert not regions
    return bytes(w), body.encode(version)


@pytest.mark.skipif(not capture_files(), reason="../shared/kafka-captures is absent")
def test_every_capture_same_on_both_paths() -> None:
    assert frames()
    for direction, frame, key, version in frames():
        hv = (request_header_version if direction == "C" else response_header_version)(key, version)
        with pure():
            p_header, p_body, p_end = decode_frame(direction, frame, key, version)
            p_bytes = encode_frame(p_header, hv, p_body, version)
        before = counters()
        with fast():
            c_header, c_body, c_end = decode_frame(direction, frame, key, version)
            c_bytes = encode_frame(c_header, hv, c_body, version)
            # Also the Python-decoded message through the C encoder.
            assert encode_frame(p_header, hv, p_body, version) == p_bytes
        after = counters()
        assert after[1] == before[1], f"api {key} v{version}: the accelerator handed valid input back"
        assert after[0] > before[0]
        assert (c_header, c_body, c_end) == (p_header, p_body, p_end)
        assert type(c_body) is type(p_body)
        assert c_bytes == p_bytes


@cache
def requests() -> list[bytes]:
    return [f for d, f, _, _ in frames() if d == "C"]


@pytest.mark.skipif(not capture_files(), reason="../shared/kafka-captures is absent")
def test_truncations_same_error_on_both_paths() -> None:
    for frame in requests()[:400]:
        step = max(1, len(frame) // 64)
        for cut in range(8, len(frame), step):
            both(lambda f=frame[:cut]: decode_request(f))


@pytest.mark.skipif(not capture_files(), reason="../shared/kafka-captures is absent")
def test_corruptions_same_result_on_both_paths() -> None:
    rng = random.Random(2)
    patterns = [b"\xff", b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff\x0f", b"\xff" * 6, b"\x80", b"\x00"]
    for frame in requests()[:400]:
        for _ in range(12):
            pos = rng.randrange(8, len(frame)) if len(frame) > 8 else 8
            pat = rng.choice(patterns)
            bad = frame[:pos] + pat + frame[pos + len(pat) :]
            both(lambda f=bad: decode_request(f))


def test_huge_lengths_and_long_varints_same_error() -> None:
    cases = [
        struct.pack(">hhih", 3, 1, 7, 0) + struct.pack(">i", 2**31 - 1),
        struct.pack(">hhih", 3, 1, 7, 0) + struct.pack(">i", 1) + struct.pack(">h", -5),
        struct.pack(">hhih", 3, 1, 7, 0) + struct.pack(">i", 1) + struct.pack(">h", 30000) + b"x",
        # Metadata v12 (flexible): an over-long varint for the topic count, then a huge one.
        struct.pack(">hhih", 3, 12, 7, 0) + b"\x00" + b"\xff" * 6 + b"\x01",
        struct.pack(">hhih", 3, 12, 7, 0) + b"\x00" + b"\xff\xff\xff\xff\x0f",
        struct.pack(">hhih", 3, 12, 7, 0) + b"\x00" + b"\x02" + b"\x00" * 16 + b"\xff\xff\x03",
        # Tagged fields: a count larger than the bytes left, a size past the end.
        struct.pack(">hhih", 3, 12, 7, 0) + b"\x05\x01\x02",
        struct.pack(">hhih", 3, 12, 7, 0) + b"\x01\x00\x7f" + b"\x00",
        # Produce v9: records longer than the frame.
        struct.pack(">hhih", 0, 9, 7, 0) + b"\x00\x00\xff\xff\x00\x00\x75\x30\x02\x02t\x02"
        + b"\x00\x00\x00\x00\xff\xff\xff\x0f",
    ]
    for frame in cases:
        result = both(lambda f=frame: decode_request(f))
        assert result[0] == "error"


def test_limits_same_on_both_paths() -> None:
    for frame in requests()[:200] if capture_files() else []:
        for lim in (DecodeLimits(max_array_length=1), DecodeLimits(max_bytes_length=3),
                    DecodeLimits(max_tagged_fields=0)):
            both(lambda f=frame, lim=lim: decode_request(f, lim))


def test_a_short_compact_array_is_held_to_the_array_limit() -> None:
    # Flexible versions write an array of up to 126 entries with a one-byte length, which
    # both decoders read on a fast path: the limit applies there too, as it does to a longer one.
    from wire.generated.api_003_metadata import MetadataRequest, MetadataRequestTopic

    for count in (5, 126, 127, 200):
        data = MetadataRequest(topics=[MetadataRequestTopic(name=f"t{i}") for i in range(count)]).encode(12)
        for limit, refused in ((count - 1, True), (count, False)):
            result = both(lambda d=data, n=limit: MetadataRequest.decode(d, 12, DecodeLimits(max_array_length=n)))
            assert (result[0] == "error") is refused, (count, limit, result)


def test_file_regions_and_memoryviews() -> None:
    import os
    import tempfile

    with tempfile.TemporaryFile() as fh:
        fh.write(b"r" * 100)
        fh.flush()
        region = FileRegion(fh.fileno(), 10, 50)
        msg = FetchResponse(
            responses=[
                FetchResponseFetchableTopicResponse(
                    topic="t",
                    partitions=[
                        FetchResponsePartitionData(partition_index=0, records=region),
                        FetchResponsePartitionData(partition_index=1, records=memoryview(b"abc")),
                        FetchResponsePartitionData(partition_index=2, records=bytearray(b"de")),
                        FetchResponsePartitionData(partition_index=3, records=None),
                    ],
                )
            ]
        )
        for version in (4, 12, 13):
            outs = []
            for ctx in (pure, fast):
                with ctx():
                    w = bytearray(b"head")
                    regions: Regions = []
                    msg.encode_into(w, version, regions)
                    outs.append((bytes(w), regions))
            assert outs[0] == outs[1]
            both(lambda v=version: msg.encode(v))  # both raise the same ValueError
        os.lseek(fh.fileno(), 0, 0)


ROUNDTRIP: list[tuple[type, int]] = []
for _spec in API_SPECS.values():
    for _v in range(_spec.min_version, _spec.max_version + 1):
        ROUNDTRIP.append((_spec.request, _v))
        ROUNDTRIP.append((_spec.response, _v))
for _cls in [*METADATA_RECORDS.values(), *COORDINATOR_RECORDS.values()]:
    for _v in range(_cls.MIN_VERSION, _cls.MAX_VERSION + 1):
        ROUNDTRIP.append((_cls, _v))


@pytest.mark.skipif(not (SCHEMAS / "messages").is_dir(), reason="../shared/kafka-protocol is absent")
def test_generated_messages_same_on_both_paths() -> None:
    @settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        cls, version = data.draw(st.sampled_from(ROUNDTRIP))
        msg = data.draw(message_strategy(cls, version))
        with pure():
            encoded = msg.encode(version)
            p_decoded = cls.decode(encoded, version)
        before = counters()
        with fast():
            assert msg.encode(version) == encoded
            c_decoded = cls.decode(encoded, version)
            assert c_decoded.encode(version) == encoded
        assert counters()[1] == before[1], f"{cls.__name__} v{version} handed back"
        assert c_decoded == p_decoded == msg
        # Every truncation of a small message fails the same way on both paths.
        if len(encoded) < 200:
            for cut in range(len(encoded)):
                both(lambda c=cut: cls.decode(encoded[:c], version))

    run()


def test_encoding_errors_same_on_both_paths() -> None:
    from wire.generated.api_000_produce import (
        ProduceRequest,
        ProduceRequestPartitionProduceData,
        ProduceRequestTopicProduceData,
    )

    def produce(**kw: Any) -> ProduceRequest:
        part = ProduceRequestPartitionProduceData(index=kw.pop("index", 0), records=kw.pop("records", b"r"))
        topic = ProduceRequestTopicProduceData(name=kw.pop("name", "t"), partition_data=[part])
        return ProduceRequest(**{"acks": 1, "timeout_ms": 5, "topic_data": [topic], **kw})

    bad: list[tuple[ProduceRequest, int]] = [
        (produce(transactional_id="tx"), 0),  # a field version 0 lacks
        (produce(acks=1 << 20), 9),  # out of int16 range
        (produce(acks="1"), 9),
        (produce(name="x" * 40_000), 9),  # a string over 32,767 bytes
        (produce(name=None), 3),
        (produce(name="\udcff"), 9),  # not encodable as UTF-8
        (produce(index=2**31), 9),
        (produce(records="text"), 9),
        (produce(records=memoryview(b"abcd").cast("I")), 9),  # counted by its bytes
        (produce(topic_data=None), 9),
        (produce(topic_data=(ProduceRequestTopicProduceData(name="t"),)), 9),
        (produce(unknown_tagged_fields=[(5, b"x"), (1, b"yy")]), 9),
        (produce(unknown_tagged_fields=[(-1, b"x")]), 9),
        (produce(unknown_tagged_fields=[(1, "x")]), 9),
    ]
    for msg, version in bad:
        both(lambda m=msg, v=version: m.encode(v))

        def into(m: ProduceRequest = msg, v: int = version) -> tuple[Any, bytes]:
            """The outcome, and what the buffer holds afterwards (partial writes too)."""
            w = bytearray(b"xx")
            regions: Regions = []
            result = outcome(lambda: m.encode_into(w, v, regions))
            return result, bytes(w)

        both(into)


def test_pure_switch(tmp_path: Any) -> None:
    import subprocess
    import sys

    from tests.shared import ROOT

    code = "import wire.accel as a; print(a.available(), a.enabled())"
    env = {"CORMORANT_WIRE_PURE": "1", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["False", "False"], out.stderr
    assert accel.enabled()
    accel.disable()
    assert not accel.enabled() and Message.__dict__["encode"] is accel._PURE["encode"]
    accel.enable()
    assert accel.enabled()


def test_referenced_records_same_on_both_paths() -> None:
    import array

    from wire.generated.api_000_produce import (
        ProduceRequest,
        ProduceRequestPartitionProduceData,
        ProduceRequestTopicProduceData,
    )

    class Bytes(bytes):
        pass

    values: list[Any] = [
        b"x" * 40, b"y" * 3, bytearray(b"z" * 50), memoryview(b"w" * 60), None, b"",
        Bytes(b"s" * 40), memoryview(b"abcdefgh" * 8)[::2],
        memoryview(array.array("H", range(30))), memoryview(b"c" * 40).cast("b"),
    ]
    for value in values:
        msg = ProduceRequest(
            transactional_id=None, acks=1, timeout_ms=1,
            topic_data=[ProduceRequestTopicProduceData(
                name="t", partition_data=[ProduceRequestPartitionProduceData(index=0, records=value)])],
        )
        for version in (3, 9):
            for reference_from in (-1, 0, 16, 1000):
                def run(v: int = version, r: int = reference_from, m: Message = msg, o: Any = value) -> Any:
                    w = bytearray(b"head")
                    regions: Regions = []
                    m.encode_into(w, v, regions, r)
                    return bytes(w), [(p, type(x).__name__, bytes(x), x is o) for p, x in regions]

                both(run)
    # Valid plain buffers are finished by the accelerator itself.
    with fast():
        before = counters()
        msg = ProduceRequest(
            transactional_id=None, acks=1, timeout_ms=1,
            topic_data=[ProduceRequestTopicProduceData(
                name="t", partition_data=[ProduceRequestPartitionProduceData(index=0, records=b"q" * 99)])],
        )
        parts = msg.encode_parts(9, 10)
        assert counters() == (before[0] + 1, before[1])
        assert parts.to_bytes() == msg.encode(9)
