"""Recovery after a crash starts at the recovery point, not at the start of the segment
holding it: the flushed part is walked by its headers only, the rest is re-validated, and
whatever does not add up falls back to re-validating the whole segment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from broker.log import LogConfig, PartitionLog
from broker.log.file_cache import FileCache
from broker.log.files import segment_file_name
from broker.log.manager import LOAD_CHUNK_PARTITIONS, LogManager

from .conftest import OpenLog
from .helpers import T0, Clock, make_batch, read_all, record_offsets

SMALL: dict[str, Any] = {"segment_bytes": 8192, "index_interval_bytes": 128}
BATCH = len(make_batch(3, value_size=20))


def build(open_log: OpenLog, batches: int) -> PartitionLog:
    log = open_log(**SMALL)
    for i in range(batches):
        log.append_as_leader(make_batch(3, timestamp=T0 + 10 * i, value_size=20), 1 + i // 10)
    return log


def active_file(log: PartitionLog, suffix: str = ".log") -> Path:
    return log.dir / segment_file_name(log.active_segment.base_offset, suffix)


def lookups(log: PartitionLog) -> list[object]:
    """Answers that go through both indexes and the epochs."""
    answers: list[object] = [log.log_end_offset, record_offsets(read_all(log))]
    for offset in range(0, log.log_end_offset, 5):
        found = log.read(offset, 300)
        answers.append((found.first_offset, None if found.region is None else len(found.region)))
    for timestamp in range(T0 - 5, T0 + 10 * 30, 7):
        answers.append(log.offset_for_timestamp(timestamp))
    answers.append(log.max_timestamp_offset())
    answers.extend(log.end_offset_for_epoch(epoch) for epoch in range(5))
    return answers


def flushed_then_more(open_log: OpenLog, tmp_path: Path) -> tuple[PartitionLog, int, list[object]]:
    """A one-segment log flushed after 20 batches, with 6 more never flushed, then killed;
    and the answers it gave before the kill."""
    log = build(open_log, 20)
    log.flush()
    for i in range(20, 26):
        log.append_as_leader(make_batch(3, timestamp=T0 + 10 * i, value_size=20), 3)
    assert len(log.segments) == 1
    expected = lookups(log)
    recovery_point = log.recovery_point
    log.close_handles()  # killed: nothing more flushed or written
    return log, recovery_point, expected


def reopen(tmp_path: Path, recovery_point: int) -> PartitionLog:
    return PartitionLog.open(tmp_path / "topic-0", LogConfig(**SMALL), Clock(), recovery_point)


def test_the_flushed_part_of_the_segment_is_not_revalidated(open_log: OpenLog, tmp_path: Path) -> None:
    log, recovery_point, _ = flushed_then_more(open_log, tmp_path)
    assert recovery_point == 60
    path = active_file(log)
    data = bytearray(path.read_bytes())
    data[3 * BATCH + 70] ^= 0xFF  # a record of the fourth batch, below the recovery point
    path.write_bytes(data)
    recovered = reopen(tmp_path, recovery_point)
    try:
        # As Kafka trusts flushed segments, the flushed batches are not CRC-checked again...
        assert recovered.log_end_offset == 78
        assert recovered.recovery_point == recovery_point
        assert path.read_bytes() == data
    finally:
        recovered.close_handles()
    # ...while a whole-segment recovery (recovery point 0) finds the damage and cuts there.
    from_zero = reopen(tmp_path, 0)
    try:
        assert from_zero.log_end_offset == 9
    finally:
        from_zero.close_handles()


def test_a_torn_tail_past_the_recovery_point_is_cut(open_log: OpenLog, tmp_path: Path) -> None:
    log, recovery_point, _ = flushed_then_more(open_log, tmp_path)
    path = active_file(log)
    size = path.stat().st_size
    with path.open("r+b") as f:
        f.truncate(size - 10)  # the last (unflushed) batch torn
    recovered = reopen(tmp_path, recovery_point)
    try:
        assert recovered.log_end_offset == 75
        assert record_offsets(read_all(recovered)) == list(range(75))
        assert recovered.latest_epoch == 3  # restored from the re-validated batches
        assert path.stat().st_size == size - BATCH
        recovered.append_as_leader(make_batch(2), 3)
        assert record_offsets(read_all(recovered)) == list(range(77))
    finally:
        recovered.close_handles()


def test_a_bad_batch_past_the_recovery_point_stops_the_scan(open_log: OpenLog, tmp_path: Path) -> None:
    log, recovery_point, _ = flushed_then_more(open_log, tmp_path)
    path = active_file(log)
    data = bytearray(path.read_bytes())
    data[22 * BATCH + 70] ^= 0xFF  # the third unflushed batch
    path.write_bytes(data)
    recovered = reopen(tmp_path, recovery_point)
    try:
        assert recovered.log_end_offset == 66
        assert record_offsets(read_all(recovered)) == list(range(66))
        assert path.stat().st_size == 22 * BATCH
    finally:
        recovered.close_handles()


def test_index_entries_past_the_recovery_point_are_rebuilt(open_log: OpenLog, tmp_path: Path) -> None:
    log, recovery_point, expected = flushed_then_more(open_log, tmp_path)
    index = active_file(log, ".index")
    entries = index.read_bytes()
    # The entries for the unflushed part point into the middle of their batches: never made
    # durable, they may hold anything a crash left.
    flushed = [entries[i : i + 8] for i in range(0, len(entries), 8)]
    kept = [e for e in flushed if int.from_bytes(e[:4], "big") < recovery_point]
    assert len(kept) < len(flushed)
    shifted = [e[:4] + (int.from_bytes(e[4:], "big") + 1).to_bytes(4, "big") for e in flushed[len(kept):]]
    index.write_bytes(b"".join(kept + shifted))
    with capture_logs() as logs:
        recovered = reopen(tmp_path, recovery_point)
    try:
        assert not [e for e in logs if e["event"] == "segment_recovered_in_full"]
        assert lookups(recovered) == expected
        assert index.read_bytes() == entries
    finally:
        recovered.close_handles()


def test_indexes_that_do_not_add_up_fall_back_to_the_whole_segment(open_log: OpenLog, tmp_path: Path) -> None:
    log, recovery_point, expected = flushed_then_more(open_log, tmp_path)
    index = active_file(log, ".index")
    entries = index.read_bytes()
    # The entry the scan of the flushed part starts from points into the middle of a batch.
    slot = next(i for i in range(0, len(entries), 8) if int.from_bytes(entries[i : i + 4], "big") == recovery_point - 1)
    position = int.from_bytes(entries[slot + 4 : slot + 8], "big")
    index.write_bytes(entries[: slot + 4] + (position + 7).to_bytes(4, "big") + entries[slot + 8 :])
    with capture_logs() as logs:
        recovered = reopen(tmp_path, recovery_point)
    try:
        assert [e for e in logs if e["event"] == "segment_recovered_in_full"]
        assert lookups(recovered) == expected
        assert index.read_bytes() == entries  # rebuilt from the log
    finally:
        recovered.close_handles()


def test_a_crash_at_every_byte_past_the_recovery_point(open_log: OpenLog, tmp_path: Path) -> None:
    log, recovery_point, _ = flushed_then_more(open_log, tmp_path)
    path = active_file(log)
    original = path.read_bytes()
    for cut in range(20 * BATCH, len(original) + 1, 11):
        path.write_bytes(original[:cut])
        recovered = reopen(tmp_path, recovery_point)
        try:
            whole = cut // BATCH
            assert recovered.log_end_offset == 3 * whole
            assert record_offsets(read_all(recovered)) == list(range(3 * whole))
        finally:
            recovered.close_handles()


def test_recovery_point_in_an_older_segment(open_log: OpenLog, tmp_path: Path) -> None:
    log = open_log(segment_bytes=1024, index_interval_bytes=128)
    for i in range(40):
        log.append_as_leader(make_batch(3, timestamp=T0 + 10 * i, value_size=20), 1)
    log.flush(log.segments[2].base_offset + 3)
    recovery_point = log.recovery_point
    bases = [s.base_offset for s in log.segments]
    log.close_handles()
    with (log.dir / segment_file_name(bases[-1], ".log")).open("ab") as f:
        f.write(b"\x00" * 30)  # a torn header at the end
    recovered = PartitionLog.open(log.dir, LogConfig(segment_bytes=1024, index_interval_bytes=128), Clock(),
                                  recovery_point)
    try:
        assert [s.base_offset for s in recovered.segments] == bases
        assert record_offsets(read_all(recovered)) == list(range(120))
    finally:
        recovered.close_handles()


def test_recovery_threads_load_every_partition_alike(tmp_path: Path) -> None:
    """Partitions loaded by several recovery threads: the same logs, torn tails cut, no
    descriptor beyond the budget."""
    clock = Clock()
    count = 2 * LOAD_CHUNK_PARTITIONS + 40
    files = FileCache(64)
    manager = LogManager([tmp_path], LogConfig(), clock, files=files)
    for i in range(count):
        plog = manager.get_or_create(f"t{i % 7}", i)
        for _ in range(1 + i % 3):
            plog.append_as_leader(make_batch(2), 0)
        if i % 5 == 0:
            plog.flush()
    manager.checkpoint_all()
    ends = {tp: plog.log_end_offset for tp, plog in manager.logs.items()}
    torn = []
    for tp, plog in list(manager.logs.items())[::9]:
        torn.append(tp)
        ends[tp] -= 2
        path = plog.dir / segment_file_name(0, ".log")
        with path.open("r+b") as f:
            f.truncate(path.stat().st_size - 5)
    for plog in manager.logs.values():
        plog.close_handles()  # killed
    manager._release_locks()
    reloaded = LogManager([tmp_path], LogConfig(), clock, files=files, recovery_threads=3)
    try:
        assert not reloaded.had_clean_shutdown
        assert {tp: plog.log_end_offset for tp, plog in reloaded.logs.items()} == ends
        for tp in torn:
            assert record_offsets(read_all(reloaded.logs[tp])) == list(range(ends[tp]))
        assert files.open_files <= 64
    finally:
        reloaded.close()
