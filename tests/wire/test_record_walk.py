"""The record walk of the produce path: the pure-Python reference finds what the record
decoder finds in valid batches and refuses what it refuses, and the C accelerator's walk
gives exactly the reference's answer (result or fault, index and value) on every input:
valid batches, mutated ones and random bytes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wire import record_walk
from wire.batch_builder import build_batch
from wire.exceptions import CorruptRecordError, DecodeError
from wire.record_walk import INT64_MAX, INT64_MIN, walk_records, walk_records_py
from wire.records import RECORDS_OFFSET, NewRecord, iter_records, read_batch_header

accelerated: Any = record_walk._accelerated
needs_accel = pytest.mark.skipif(accelerated is None, reason="the C accelerator is not built")

headers_st = st.lists(
    st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=8))), max_size=3)
record_st = st.builds(
    NewRecord,
    key=st.one_of(st.none(), st.binary(max_size=12)),
    value=st.one_of(st.none(), st.binary(max_size=40)),
    headers=headers_st,
    timestamp=st.integers(min_value=-1, max_value=2**42),
)
batch_st = st.lists(record_st, min_size=1, max_size=8).map(build_batch)


def args_of(batch: bytes) -> tuple[bytes, int, int]:
    header = read_batch_header(batch, 0)
    return batch[RECORDS_OFFSET:], header.records_count, header.base_timestamp


@st.composite
def mutated(draw: st.DrawFn) -> tuple[bytes, int, int]:
    data, count, base = args_of(draw(batch_st))
    buf = bytearray(data)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "count"]))
        if kind == "flip" and buf:
            at = draw(st.integers(0, len(buf) - 1))
            buf[at] = draw(st.integers(0, 255))
        elif kind == "cut" and buf:
            at = draw(st.integers(0, len(buf) - 1))
            del buf[at : at + draw(st.integers(1, 4))]
        elif kind == "insert":
            at = draw(st.integers(0, len(buf)))
            buf[at:at] = draw(st.binary(min_size=1, max_size=6))
        else:
            count = draw(st.integers(0, count + 2))
    return bytes(buf), count, base


def both(data: bytes, count: int, base: int, lo: int, hi: int, ts: bool, keys: bool) -> Any:
    ref = walk_records_py(data, count, base, lo, hi, ts, keys)
    if accelerated is not None:
        assert accelerated(data, count, base, lo, hi, ts, keys) == ref
        assert accelerated(memoryview(bytearray(data)), count, base, lo, hi, ts, keys) == ref
    return ref


@given(batch_st, st.integers(-1, 2**42), st.integers(0, 2**42))
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_valid_batches_walk_as_the_decoder_reads_them(batch: bytes, low: int, span: int) -> None:
    data, count, base = args_of(batch)
    decoded = list(iter_records(batch, 0))
    code, highest, _, keyless, bad = both(data, count, base, low, low + span, True, True)
    assert code == 0
    assert highest == max(r.timestamp for r in decoded)
    assert keyless == [i for i, r in enumerate(decoded) if r.key is None]
    assert bad == [(i, r.timestamp) for i, r in enumerate(decoded)
                   if r.key is not None and r.timestamp != -1 and not low <= r.timestamp <= low + span]


@given(mutated())
@settings(max_examples=1500, suppress_health_check=[HealthCheck.too_slow])
def test_mutated_batches_get_the_same_answer_on_both_paths(case: tuple[bytes, int, int]) -> None:
    data, count, base = case
    code = both(data, count, base, INT64_MIN, INT64_MAX, True, True)[0]
    # Whatever the walk accepts the record decoder reads, and what it refuses the decoder
    # refuses (the walk is stricter only about offset deltas, which must count from 0).
    header = bytearray(build_batch([NewRecord(b"k", b"v")])[:RECORDS_OFFSET])
    header[8:12] = (RECORDS_OFFSET - 12 + len(data)).to_bytes(4, "big")
    header[57:61] = count.to_bytes(4, "big", signed=True)
    header[23:27] = (count - 1).to_bytes(4, "big", signed=True)
    try:
        list(iter_records(bytes(header) + data, 0, verify_crc=False))
        decoded_ok = True
    except DecodeError:
        decoded_ok = False
    if count > 0 and code != record_walk.OFFSET_DELTA:
        assert decoded_ok == (code == 0)


@given(st.binary(max_size=64), st.integers(0, 5), st.integers(INT64_MIN, INT64_MAX))
@settings(max_examples=1000)
def test_random_bytes_get_the_same_answer_on_both_paths(data: bytes, count: int, base: int) -> None:
    both(data, count, base, -(2**40), 2**40, True, False)


def test_timestamps_wrap_as_java_longs() -> None:
    batch = build_batch([NewRecord(b"k", b"v", timestamp=0), NewRecord(b"k", b"v", timestamp=10)])
    data, count, _ = args_of(batch)
    # From a base timestamp 5 below the largest long, a delta of 10 wraps to a negative.
    code, highest, _, _, bad = both(data, count, INT64_MAX - 5, 0, INT64_MAX, True, False)
    assert (code, highest, bad) == (0, INT64_MAX - 5, [(1, INT64_MIN + 4)])


@pytest.mark.parametrize(("mutation", "reason"), [
    (lambda d: d[:-1], "record 0: record length"),
    (lambda d: d + b"\x00", "record 1: record length 0 out of range"),
    (lambda d: d, "record 1: the batch declares more records"),
])
def test_faults_name_the_record(mutation: Any, reason: str) -> None:
    data, _, base = args_of(build_batch([NewRecord(b"k", b"v")]))
    with pytest.raises(CorruptRecordError) as info:
        walk_records(mutation(data), 1 if "record 0" in reason else 2, base)
    assert info.value.reason.startswith(reason)


@needs_accel
def test_the_produce_path_uses_the_accelerator() -> None:
    assert record_walk.accelerated()
