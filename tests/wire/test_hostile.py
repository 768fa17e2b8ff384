"""Hostile input: decoding never raises anything but DecodeError, never allocates from
an unchecked length, and never hangs."""

from __future__ import annotations

import struct
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.shared import capture_files, read_capture
from wire.exceptions import DecodeError
from wire.frame import FrameSplitter, FrameTooLarge, decode_request, encode_request
from wire.generated.api_003_metadata import MetadataRequest, MetadataRequestTopic
from wire.generated.registry import API_SPECS
from wire.primitives import DecodeLimits, read_uvarint


@cache
def captured_requests() -> list[bytes]:
    frames = []
    for path in capture_files():
        for cf in read_capture(path):
            if cf.direction == "C" and "api_key" in cf.meta:
                frames.append(cf.frame[4:])
    return frames


def decode_anything(data: bytes) -> None:
    try:
        decode_request(data)
    except DecodeError:
        pass


def test_array_count_max_int_in_small_frame() -> None:
    # Metadata v1: header v1, then Topics with a count of 2^31-1 and nothing after it.
    frame = struct.pack(">hhih", 3, 1, 7, 0) + struct.pack(">i", 2**31 - 1)
    with pytest.raises(DecodeError, match="array length"):
        decode_request(frame)


def test_negative_length_on_non_nullable_string() -> None:
    frame = struct.pack(">hhih", 3, 1, 7, 0) + struct.pack(">i", 1) + struct.pack(">h", -5)
    with pytest.raises(DecodeError):
        decode_request(frame)


def test_overlong_varint_rejected() -> None:
    data = memoryview(b"\xff" * 6 + b"\x01")
    with pytest.raises(DecodeError, match="longer than 5 bytes"):
        read_uvarint(data, 0, len(data))


def test_limits_apply_below_bytes_left() -> None:
    req = MetadataRequest(topics=[MetadataRequestTopic(name=f"t{i}") for i in range(5)])
    data = req.encode(4)
    with pytest.raises(DecodeError, match="limit"):
        MetadataRequest.decode(data, 4, DecodeLimits(max_array_length=3))


def test_unknown_api_key_and_version_are_decode_errors() -> None:
    with pytest.raises(DecodeError, match="unknown api key"):
        decode_request(struct.pack(">hhih", 999, 0, 1, -1))
    with pytest.raises(DecodeError, match="unsupported version"):
        decode_request(struct.pack(">hhih", 3, 99, 1, -1))


def test_trailing_bytes_after_a_request_are_tolerated() -> None:
    data = MetadataRequest(topics=None).encode(4)
    frame = encode_request(MetadataRequest(topics=None), 4, 9)[4:] + b"\x00\x01junk"
    assert decode_request(frame).body == MetadataRequest.decode(data, 4)


def test_frame_splitter_rejects_sizes_before_allocating() -> None:
    fs = FrameSplitter(max_frame_bytes=100 * 1024 * 1024)
    fs.feed(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc")  # a TLS ClientHello reads as ~369 MB
    with pytest.raises(FrameTooLarge):
        list(fs.frames())
    fs = FrameSplitter(max_frame_bytes=1000)
    fs.feed(struct.pack(">i", -1))
    with pytest.raises(FrameTooLarge):
        list(fs.frames())


def test_frame_splitter_splits_a_stream() -> None:
    fs = FrameSplitter(1000)
    stream = b"".join(struct.pack(">i", len(p)) + p for p in (b"abc", b"", b"defg"))
    out: list[bytes] = []
    for i in range(0, len(stream), 3):
        fs.feed(stream[i : i + 3])
        out.extend(fs.frames())
    assert out == [b"abc", b"", b"defg"]


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_mutated_captured_frames_only_raise_decode_error(data: st.DataObject) -> None:
    frames = captured_requests()
    if not frames:
        pytest.skip("../shared/kafka-captures is absent")
    frame = bytearray(data.draw(st.sampled_from(frames)))
    for _ in range(data.draw(st.integers(1, 8))):
        kind = data.draw(st.sampled_from(["flip", "set", "cut", "insert"]))
        pos = data.draw(st.integers(0, max(0, len(frame) - 1)))
        if kind == "flip" and frame:
            frame[pos] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "set" and frame:
            frame[pos] = data.draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF]))
        elif kind == "cut":
            del frame[pos:]
        else:
            frame[pos:pos] = data.draw(st.binary(min_size=1, max_size=8))
    decode_anything(bytes(frame))


@settings(max_examples=300, deadline=None)
@given(
    key=st.sampled_from(sorted(API_SPECS)),
    version=st.integers(0, 17),
    body=st.binary(max_size=64),
    response=st.booleans(),
)
def test_random_bodies_only_raise_decode_error(
    key: int, version: int, body: bytes, response: bool
) -> None:
    spec = API_SPECS[key]
    cls = spec.response if response else spec.request
    try:
        cls.decode(body, version)
    except DecodeError:
        pass
