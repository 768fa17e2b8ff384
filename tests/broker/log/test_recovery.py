"""Loading a partition after clean and unclean shutdowns: recovery, index rebuilds, stray files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.log import PartitionLog
from broker.log.files import segment_file_name

from .conftest import OpenLog
from .helpers import T0, batches_in, make_batch, read_all, record_offsets

SMALL = {"segment_bytes": 1024, "index_interval_bytes": 128}


def build(open_log: OpenLog, batches: int = 60, epoch: int = 1) -> PartitionLog:
    log = open_log(**SMALL)
    for i in range(batches):
        log.append_as_leader(make_batch(3, timestamp=T0 + 10 * i, value_size=20), epoch)
    return log


def crash(log: PartitionLog) -> None:
    """Stop without flushing or writing anything more, like a killed process."""
    log.close_handles()


def file_of(log: PartitionLog, base_offset: int, suffix: str = ".log") -> Path:
    return log.dir / segment_file_name(base_offset, suffix)


def test_unclean_restart_cuts_a_torn_tail(open_log: OpenLog) -> None:
    log = build(open_log)
    active = log.active_segment
    last_batch_start = active.size - len(make_batch(3, value_size=20))
    crash(log)
    path = file_of(log, active.base_offset)
    with path.open("r+b") as f:
        f.truncate(last_batch_start + 20)
    reopened = open_log(recovery_point=0, **SMALL)
    assert reopened.log_end_offset == 177
    assert record_offsets(read_all(reopened)) == list(range(177))
    reopened.append_as_leader(make_batch(3), 1)
    assert reopened.log_end_offset == 180
    assert record_offsets(read_all(reopened))[-3:] == [177, 178, 179]


def test_corruption_past_the_recovery_point_drops_later_segments(open_log: OpenLog) -> None:
    log = build(open_log)
    log.flush(40)  # the recovery point sits in an early segment
    bases = [s.base_offset for s in log.segments]
    victim = bases[4]
    crash(log)
    path = file_of(log, victim)
    data = bytearray(path.read_bytes())
    data[200] ^= 0xFF  # inside the segment's second or third batch
    path.write_bytes(data)
    reopened = open_log(recovery_point=40, **SMALL)
    assert [s.base_offset for s in reopened.segments] == bases[:5]
    end = reopened.log_end_offset
    assert victim <= end < bases[5]
    assert record_offsets(read_all(reopened)) == list(range(end))
    assert not any(
        name.endswith(".log") and int(name[:20]) > victim for name in os.listdir(reopened.dir)
    )


def test_segments_below_the_recovery_point_are_trusted(open_log: OpenLog) -> None:
    # As Kafka: flushed data is not re-read at start, so this damage goes unnoticed.
    log = build(open_log)
    log.flush()
    end = log.log_end_offset
    crash(log)
    path = file_of(log, 0)
    data = bytearray(path.read_bytes())
    data[200] ^= 0xFF
    path.write_bytes(data)
    reopened = open_log(recovery_point=end, **SMALL)
    assert reopened.log_end_offset == end


def test_clean_shutdown_skips_recovery_and_keeps_the_recovery_point(open_log: OpenLog) -> None:
    log = build(open_log)
    log.close()
    reopened = open_log(recovery_point=0, clean=True, **SMALL)
    assert reopened.recovery_point == reopened.log_end_offset == 180


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
@pytest.mark.parametrize("clean", [True, False])
def test_missing_index_is_rebuilt(open_log: OpenLog, suffix: str, clean: bool) -> None:
    log = build(open_log)
    second = log.segments[1]
    entries = second.offset_index.entries
    top_timestamp = second.max_timestamp_so_far.timestamp
    log.close()
    file_of(log, second.base_offset, suffix).unlink()
    reopened = open_log(recovery_point=180, clean=clean, **SMALL)
    rebuilt = reopened.segments[1]
    assert file_of(reopened, second.base_offset, suffix).exists()
    assert rebuilt.offset_index.entries == entries
    assert rebuilt.max_timestamp_so_far.timestamp == top_timestamp
    assert record_offsets(read_all(reopened)) == list(range(180))
    assert reopened.offset_for_timestamp(T0 + 101) is not None


def test_corrupt_index_is_rebuilt(open_log: OpenLog) -> None:
    log = build(open_log)
    log.close()
    with file_of(log, log.segments[2].base_offset, ".index").open("ab") as f:
        f.write(b"\x01\x02\x03")  # not a whole entry
    with file_of(log, log.segments[3].base_offset, ".timeindex").open("wb") as f:
        # Two entries whose timestamps run backwards.
        f.write(bytes.fromhex("000000000000ffff 00000001 0000000000000001 00000002"))
    reopened = open_log(recovery_point=180, clean=True, **SMALL)
    # After a clean shutdown the indexes are checked, and rebuilt, when first used (as Kafka).
    assert record_offsets(read_all(reopened)) == list(range(180))
    reopened.segments[2].sanity_check()
    reopened.segments[3].sanity_check()


def test_lost_epoch_checkpoint_is_restored_from_batches(open_log: OpenLog) -> None:
    log = open_log(**SMALL)
    for epoch in (1, 1, 3, 3, 7):
        log.append_as_leader(make_batch(2), epoch)
    crash(log)
    # Never written (a new epoch waits for the next flush) or lost: either way rebuilt from the batches.
    (log.dir / "leader-epoch-checkpoint").unlink(missing_ok=True)
    reopened = open_log(recovery_point=0, **SMALL)
    assert [(e.epoch, e.start_offset) for e in reopened.leader_epoch_cache.entries] == [
        (1, 0),
        (3, 4),
        (7, 8),
    ]


def test_epoch_entries_past_the_log_end_are_dropped(open_log: OpenLog) -> None:
    log = build(open_log, batches=5)
    log.leader_epoch_cache.assign(9, 500)
    log.close()
    reopened = open_log(clean=True, **SMALL)
    assert reopened.latest_epoch == 1


def test_stray_files_are_removed(open_log: OpenLog) -> None:
    log = build(open_log, batches=10)
    log.close()
    directory = log.dir
    for name in (
        "00000000000000000003.log.deleted",
        "00000000000000000003.index.deleted",
        "00000000000000000007.log.cleaned",
        "00000000000000000099.index",  # an index with no log
        "00000000000000000099.timeindex",
    ):
        (directory / name).write_bytes(b"junk")
    reopened = open_log(clean=True, **SMALL)
    names = os.listdir(directory)
    assert not any(
        n.endswith((".deleted", ".cleaned")) or n.startswith("00000000000000000099") for n in names
    )
    assert reopened.log_end_offset == 30


def test_interrupted_swap_is_completed(open_log: OpenLog) -> None:
    # A cleaner wrote a replacement for segments [0, 30) and stopped before renaming it in.
    log = build(open_log, batches=30)  # several segments
    bases = [s.base_offset for s in log.segments]
    log.close()
    directory = log.dir
    replacement = make_batch(1, base_offset=0) + make_batch(1, base_offset=bases[2] - 1)
    (directory / (segment_file_name(0, ".log") + ".swap")).write_bytes(replacement)
    reopened = open_log(clean=True, **SMALL)
    assert [s.base_offset for s in reopened.segments] == [0, *bases[2:]]
    assert [b.header.base_offset for b in read_all(reopened)][:3] == [0, bases[2] - 1, bases[2]]
    assert not any(n.endswith(".swap") for n in os.listdir(directory))


def test_swap_of_an_unfinished_split_is_dropped(open_log: OpenLog) -> None:
    log = build(open_log, batches=10)
    log.close()
    directory = log.dir
    (directory / (segment_file_name(5, ".log") + ".swap")).write_bytes(
        bytes(make_batch(1, base_offset=5))
    )
    (directory / (segment_file_name(3, ".log") + ".cleaned")).write_bytes(b"partial")
    reopened = open_log(clean=True, **SMALL)
    assert record_offsets(read_all(reopened)) == list(range(30))
    assert not any(n.endswith((".swap", ".cleaned")) for n in os.listdir(directory))


def test_log_start_offset_checkpoint(open_log: OpenLog) -> None:
    log = build(open_log)
    log.close()
    reopened = open_log(clean=True, log_start_offset=50, **SMALL)
    assert reopened.log_start_offset == 50
    assert reopened.read(50, 100).first_offset == 48


def test_log_behind_its_start_offset_starts_over(open_log: OpenLog) -> None:
    log = build(open_log, batches=5)
    log.close()
    reopened = open_log(clean=True, log_start_offset=1000, **SMALL)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (1000, 1000)
    assert [s.base_offset for s in reopened.segments] == [1000]


def test_empty_directory_and_all_empty_segments(open_log: OpenLog) -> None:
    log = open_log(**SMALL)
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (0, 0, 1)
    crash(log)
    again = open_log(recovery_point=0, **SMALL)
    assert again.log_end_offset == 0


def test_whole_batches_after_a_crash_at_every_byte(open_log: OpenLog, tmp_path: Path) -> None:
    log = open_log()
    sizes = []
    for i in range(4):
        batch = make_batch(2, value_size=5 + i)
        sizes.append(len(batch))
        log.append_as_leader(batch, 0)
    crash(log)
    path = file_of(log, 0)
    original = path.read_bytes()
    ends = [sum(sizes[: i + 1]) for i in range(4)]
    for cut in range(0, len(original) + 1, 7):
        path.write_bytes(original[:cut])
        for suffix in (".index", ".timeindex"):
            file_of(log, 0, suffix).write_bytes(b"")
        reopened = PartitionLog.open(log.dir, log.config, lambda: T0, 0)
        whole = sum(1 for end in ends if end <= cut)
        assert reopened.log_end_offset == 2 * whole
        if whole:
            fetched = reopened.read(0, 10_000)
            assert fetched.region is not None
            assert len(batches_in(fetched.region.read())) == whole
        reopened.close_handles()
