"""The fault checker on synthetic histories: it passes a clean one and catches each violation."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.replication.fault_checker import (
    NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    BatchSummary,
    Fault,
    Outcome,
    Read,
    Send,
    check,
    classify_error,
    compare_replicas,
    failover_gaps,
    segment_batches,
)
from wire.batch_builder import build_batch
from wire.records import NewRecord

pytestmark = pytest.mark.timeout(60)

T = "events"


def acked(writer: str, seq: int, partition: int, offset: int, at: float = 0.0) -> Send:
    return Send(writer, seq, T, partition, at, at, Outcome.ACKED, offset)


def unknown(writer: str, seq: int, partition: int = 0) -> Send:
    return Send(writer, seq, T, partition, 0.0, 0.0, Outcome.UNKNOWN, error="_MSG_TIMED_OUT")


def read(partition: int, offset: int, value: str) -> Read:
    return Read(T, partition, offset, value)


def clean_history() -> tuple[list[Send], list[Read]]:
    sends = [acked("a", 0, 0, 0), acked("b", 0, 0, 1), acked("a", 1, 0, 2), unknown("b", 1), acked("a", 2, 1, 0)]
    reads = [read(0, 0, "a:0"), read(0, 1, "b:0"), read(0, 2, "a:1"), read(0, 3, "b:1"), read(1, 0, "a:2")]
    return sends, reads


def test_a_clean_history_passes() -> None:
    sends, reads = clean_history()
    report = check(sends, reads, end_offsets={(T, 0): 4, (T, 1): 1})
    assert report.ok, report.problems
    assert (report.acknowledged, report.unknown, report.unknown_present, report.read) == (4, 1, 1, 5)


def test_an_unknown_send_that_never_landed_is_fine() -> None:
    sends, reads = clean_history()
    reads = [r for r in reads if r.value != "b:1"]
    assert check(sends, reads, end_offsets={(T, 0): 3, (T, 1): 1}).ok


def test_a_lost_acknowledged_write_fails() -> None:
    sends, reads = clean_history()
    reads = [r for r in reads if r.value != "a:2"]
    report = check(sends, reads)
    assert not report.ok and len(report.lost) == 1 and "a:2" in report.lost[0]


def test_a_duplicate_fails_even_of_an_unknown_send() -> None:
    sends, reads = clean_history()
    report = check(sends, [*reads, read(0, 4, "b:1")], end_offsets={(T, 0): 5, (T, 1): 1})
    assert report.duplicated == ["b:1 read 2 times"] and not report.ok
    report = check(sends, [*reads, read(0, 4, "a:0")], end_offsets={(T, 0): 5, (T, 1): 1})
    assert report.duplicated == ["a:0 read 2 times"]


def test_reordering_within_a_writer_and_partition_fails() -> None:
    sends = [acked("a", 0, 0, 1), acked("a", 1, 0, 0)]
    report = check(sends, [read(0, 0, "a:1"), read(0, 1, "a:0")])
    assert len(report.reordered) == 1 and not report.ok
    # Two writers interleaving is not a reordering.
    sends = [acked("a", 0, 0, 1), acked("b", 0, 0, 0)]
    assert check(sends, [read(0, 0, "b:0"), read(0, 1, "a:0")]).ok


def test_offset_gaps_repeats_and_a_short_read_fail() -> None:
    sends = [acked("a", 0, 0, 0), acked("a", 1, 0, 2)]
    gap = check(sends, [read(0, 0, "a:0"), read(0, 2, "a:1")])
    assert gap.offset_gaps and "gap at 2" in gap.offset_gaps[0]
    short = check(sends[:1], [read(0, 0, "a:0")], end_offsets={(T, 0): 3})
    assert short.offset_gaps == [f"{T}-0: read up to 1, end offset 3"]
    nothing = check([], [], end_offsets={(T, 0): 2})
    assert nothing.offset_gaps and not nothing.ok
    late_start = check(sends[:1], [read(0, 0, "a:0")], log_start_offsets={(T, 0): 0}, end_offsets={(T, 0): 1})
    assert late_start.ok
    missing_head = check([acked("a", 0, 0, 3)], [read(0, 3, "a:0")], log_start_offsets={(T, 0): 0})
    assert missing_head.offset_gaps


def test_transactional_topics_skip_only_the_contiguity_check() -> None:
    sends = [acked("a", 0, 0, 0), acked("a", 1, 0, 2)]
    reads = [read(0, 0, "a:0"), read(0, 2, "a:1")]
    assert check(sends, reads, transactional_topics=[T]).ok
    assert not check(sends, reads[:1], transactional_topics=[T]).ok


def test_an_ack_at_another_offset_fails() -> None:
    report = check([acked("a", 0, 0, 5)], [read(0, 0, "a:0")])
    assert report.misplaced and not report.ok
    # An acknowledgement that carried no offset is only checked for loss.
    no_offset = Send("a", 0, T, 0, 0.0, 0.0, Outcome.ACKED, None)
    report = check([no_offset], [read(0, 0, "a:0")])
    assert report.ok and report.acked_without_offset == 1
    assert check([no_offset], []).lost


def test_a_definitive_failure_that_landed_is_reported() -> None:
    failed = Send("a", 0, T, 0, 0.0, 0.0, Outcome.FAILED, error="NOT_ENOUGH_REPLICAS")
    assert check([failed], [read(0, 0, "a:0")]).failed_but_present
    assert check([failed], []).ok


def test_timeouts_and_after_append_errors_are_unknown_never_failures() -> None:
    assert classify_error(None) is Outcome.UNKNOWN
    assert classify_error(NOT_ENOUGH_REPLICAS_AFTER_APPEND) is Outcome.UNKNOWN
    assert classify_error(7) is Outcome.UNKNOWN  # REQUEST_TIMED_OUT
    assert classify_error(19, retriable_timeout=True) is Outcome.UNKNOWN
    assert classify_error(19) is Outcome.FAILED


def test_failover_gaps_around_each_fault() -> None:
    sends = [acked("a", i, 0, i, at) for i, at in enumerate([0.0, 1.0, 5.0, 6.0, 6.5, 9.5])]
    gaps = failover_gaps(sends, [2.0, 7.0, 100.0])
    assert gaps.per_fault == [4.0, 3.0] and gaps.max_s == 4.0 and gaps.median_s == 3.5
    # A fault that hit partition 1 is measured on partition 1's acks only.
    other = [Send("b", i, T, 1, at, at, Outcome.ACKED, i) for i, at in enumerate([1.5, 8.0])]
    hit = failover_gaps([*sends, *other], [Fault(2.0, "kill", ((T, 1),))])
    assert hit.per_fault == [6.5]


def summary(base: int, count: int, crc: int) -> BatchSummary:
    return BatchSummary(base, base + count - 1, count, crc, True)


def test_replicas_identical_below_the_high_watermark() -> None:
    a = [summary(0, 3, 11), summary(3, 2, 12), summary(5, 1, 13)]
    b = [summary(0, 3, 11), summary(3, 2, 12), summary(5, 4, 99)]  # differs only above the HW
    assert compare_replicas({1: a, 2: b}, 5) == []
    diverged = compare_replicas({1: a, 2: [summary(0, 3, 11), summary(3, 2, 77)]}, 5)
    assert len(diverged) == 1 and "batch 1" in diverged[0]
    short = compare_replicas({1: a, 2: a[:1]}, 5)
    assert any("below the high watermark" in p for p in short)


def test_segment_files_are_read_batch_by_batch(tmp_path: Path) -> None:
    part = tmp_path / "events-0"
    part.mkdir()
    first = bytearray(build_batch([NewRecord(key=None, value=b"x")
                                   for i in range(3)], base_offset=0))
    second = bytearray(build_batch([NewRecord(key=None, value=b"y")],
                                   base_offset=3))
    (part / "00000000000000000000.log").write_bytes(bytes(first))
    (part / "00000000000000000003.log").write_bytes(bytes(second) + b"\x00\x01torn")
    batches = segment_batches(part)
    assert [(b.base_offset, b.last_offset, b.count, b.crc_valid) for b in batches] == [(0, 2, 3, True),
                                                                                        (3, 3, 1, True)]
    # A flipped byte inside the records breaks the CRC, and the comparison says so.
    first[-1] ^= 0xFF
    (part / "00000000000000000000.log").write_bytes(bytes(first))
    bad = segment_batches(part)
    assert not bad[0].crc_valid
    assert any("bad CRC" in p for p in compare_replicas({1: bad, 2: batches}, 4))
