"""Kafka 4.4's decoder caps: arrays over 1,000,000 elements, tagged-field sections over
10,000 fields and any length past the end of the frame are refused before anything is
allocated for them, with the same DecodeError on the pure-Python path and through the
C accelerator."""

from __future__ import annotations

import struct
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wire import accel
from wire.exceptions import DecodeError
from wire.frame import decode_request
from wire.primitives import DEFAULT_LIMITS, write_uvarint

ARRAY_CAP = 1_000_000
TAG_CAP = 10_000


@contextmanager
def accelerator(on: bool) -> Iterator[None]:
    was = accel.enabled()
    if on:
        accel.enable()
    else:
        accel.disable()
    try:
        yield
    finally:
        if was:
            accel.enable()
        else:
            accel.disable()


def paths() -> list[bool]:
    return [False, True] if accel.available() else [False]


def outcome(fn: Callable[[], Any]) -> Any:
    try:
        return ("ok", fn())
    except DecodeError as ex:
        return ("error", str(ex), ex.offset, ex.api_key, ex.api_version)


def on_every_path(fn: Callable[[], Any]) -> Any:
    results = []
    for on in paths():
        with accelerator(on):
            results.append(outcome(fn))
    assert all(r == results[0] for r in results), results
    return results[0]


def describe_groups_v5(groups: int, tags: int = 0, tag_size: int = 0) -> bytes:
    """DescribeGroups v5 (flexible) with ``groups`` empty group names and ``tags`` unknown
    tagged fields of ``tag_size`` bytes each in the body's tagged-field section."""
    w = bytearray(struct.pack(">hhih", 15, 5, 1, -1))
    w.append(0)  # header tagged fields
    write_uvarint(w, groups + 1)
    w += b"\x01" * groups  # each a compact string of length 0
    w.append(0)  # include_authorized_operations
    write_uvarint(w, tags)
    for i in range(tags):
        write_uvarint(w, 1000 + i)
        write_uvarint(w, tag_size)
        w += b"\x00" * tag_size
    return bytes(w)


def test_defaults_are_kafkas() -> None:
    assert DEFAULT_LIMITS.max_array_length == ARRAY_CAP
    assert DEFAULT_LIMITS.max_tagged_fields == TAG_CAP


def test_an_array_of_a_million_is_decoded_and_one_more_refused() -> None:
    at_cap = describe_groups_v5(ARRAY_CAP)
    result = on_every_path(lambda: len(decode_request(at_cap).body.groups))
    assert result == ("ok", ARRAY_CAP)
    over = describe_groups_v5(ARRAY_CAP + 1)
    result = on_every_path(lambda: decode_request(over))
    assert result[0] == "error" and f"array length {ARRAY_CAP + 1} exceeds the limit {ARRAY_CAP}" in result[1]
    assert result[3:] == (15, 5)


def test_ten_thousand_tagged_fields_are_decoded_and_one_more_refused() -> None:
    at_cap = describe_groups_v5(1, tags=TAG_CAP)
    result = on_every_path(lambda: len(decode_request(at_cap).body.unknown_tagged_fields or []))
    assert result == ("ok", TAG_CAP)
    over = describe_groups_v5(1, tags=TAG_CAP + 1)
    result = on_every_path(lambda: decode_request(over))
    assert result[0] == "error" and "tagged field count" in result[1]


def test_the_refusal_allocates_nothing_for_the_array() -> None:
    over = describe_groups_v5(ARRAY_CAP + 1)
    # A count near 2^31 in a frame of a few bytes, and a count over the cap in a frame
    # that holds it: neither may allocate a list of that size (8 MB of pointers).
    tiny = struct.pack(">hhih", 15, 5, 1, -1) + b"\x00" + b"\xff\xff\xff\xff\x07"
    for on in paths():
        with accelerator(on):
            for frame in (over, tiny):
                tracemalloc.start()
                try:
                    with pytest.raises(DecodeError):
                        decode_request(frame)
                    _, peak = tracemalloc.get_traced_memory()
                finally:
                    tracemalloc.stop()
                assert peak < 256 * 1024, (on, peak)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    count=st.integers(0, 2**31 - 2),
    present=st.integers(0, 64),
    width=st.sampled_from(["compact", "fixed"]),
)
def test_any_count_past_the_bytes_left_is_refused_alike(count: int, present: int, width: str) -> None:
    """A declared element count against the elements actually present: decoded exactly
    when they are all there, refused the same way on both paths otherwise."""
    if width == "compact":
        w = bytearray(struct.pack(">hhih", 15, 5, 1, -1) + b"\x00")
        write_uvarint(w, count + 1)
        w += b"\x01" * present + b"\x00\x00"
        version = 5
    else:
        # DescribeGroups v0: a 32-bit count of 16-bit-length strings.
        w = bytearray(struct.pack(">hhih", 15, 0, 1, -1))
        w += struct.pack(">i", count) + b"\x00\x00" * present
        version = 0
    frame = bytes(w)
    result = on_every_path(lambda: len(decode_request(frame).body.groups))
    if count <= present:
        assert result == ("ok", count)
    else:
        assert result[0] == "error" and result[4] == version


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(tags=st.integers(0, 2**32 - 1), size=st.integers(0, 2**32 - 1), room=st.integers(0, 40))
def test_any_tagged_field_past_the_frame_is_refused_alike(tags: int, size: int, room: int) -> None:
    w = bytearray(struct.pack(">hhih", 15, 5, 1, -1) + b"\x00\x02\x01\x00")
    write_uvarint(w, tags)
    write_uvarint(w, 1000)
    write_uvarint(w, size)
    w += b"\x00" * room
    frame = bytes(w)
    result = on_every_path(lambda: decode_request(frame))
    # The first field needs ``size`` bytes; every further one at least two.
    if tags >= 1 and (size > room or 2 * (tags - 1) > room - size):
        assert result[0] == "error"
