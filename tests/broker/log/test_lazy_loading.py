"""Loading a partition lazily: after a clean shutdown nothing is read before it is needed,
and what is read late gives the same answers as reading it all at once."""

from __future__ import annotations

from pathlib import Path

from broker.log import LogConfig, PartitionLog
from broker.log.file_cache import FileCache
from broker.log.files import segment_file_name
from broker.log.leader_epoch import LEADER_EPOCH_CHECKPOINT, EpochEntry, LeaderEpochCache

from .conftest import OpenLog
from .helpers import T0, Clock, make_batch, read_all, record_offsets

SMALL = {"segment_bytes": 1024, "index_interval_bytes": 128}


def build(open_log: OpenLog) -> PartitionLog:
    log = open_log(**SMALL)
    for i in range(60):
        log.append_as_leader(make_batch(3, timestamp=T0 + 10 * i, value_size=20), 1 + i // 20)
    return log


def lookups(log: PartitionLog) -> list[object]:
    """Answers that go through both indexes of every segment."""
    answers: list[object] = [log.log_end_offset, record_offsets(read_all(log))]
    for offset in range(0, 180, 7):
        found = log.read(offset, 200)
        answers.append((found.first_offset, None if found.region is None else len(found.region)))
    for timestamp in range(T0 - 5, T0 + 620, 13):
        answers.append(log.offset_for_timestamp(timestamp))
    answers.append(log.max_timestamp_offset())
    answers.extend(log.end_offset_for_epoch(epoch) for epoch in range(5))
    return answers


def reopen(tmp_path: Path, clock: Clock, files: FileCache, *, clean: bool, recovery_point: int) -> PartitionLog:
    return PartitionLog.open(tmp_path / "topic-0", LogConfig(**SMALL), clock, recovery_point,
                             had_clean_shutdown=clean, files=files)


def test_a_clean_restart_reads_no_index_and_answers_alike(open_log: OpenLog, tmp_path: Path, clock: Clock) -> None:
    log = build(open_log)
    expected = lookups(log)
    log.close()
    files = FileCache(64)
    reopened = reopen(tmp_path, clock, files, clean=True, recovery_point=180)
    try:
        # Only the active segment's last index entry and the .log after it, for the log end
        # offset: no index loaded, no older segment opened.
        assert files.opens <= 2
        assert len(reopened.segments) > 3
        assert lookups(reopened) == expected
    finally:
        reopened.close_handles()


def test_an_index_corrupted_behind_a_clean_shutdown_is_rebuilt_on_first_use(
    open_log: OpenLog, tmp_path: Path, clock: Clock
) -> None:
    log = build(open_log)
    expected = lookups(log)
    second = log.segments[1]
    log.close()
    # A last entry pointing past the end of its log: the cheap start-up check used to catch it.
    with (tmp_path / "topic-0" / segment_file_name(second.base_offset, ".index")).open("ab") as f:
        f.write(bytes.fromhex("00000063 7fff0000"))
    reopened = reopen(tmp_path, clock, FileCache(64), clean=True, recovery_point=180)
    try:
        assert lookups(reopened) == expected
        reopened.segments[1].sanity_check()  # rebuilt when first used
    finally:
        reopened.close_handles()


def test_a_kill_after_a_lazy_restart_still_recovers_a_torn_tail(
    open_log: OpenLog, tmp_path: Path, clock: Clock
) -> None:
    log = build(open_log)
    log.close()
    files = FileCache(64)
    lazy = reopen(tmp_path, clock, files, clean=True, recovery_point=180)
    lazy.append_as_leader(make_batch(3, value_size=20), 4)
    lazy.append_as_leader(make_batch(3, value_size=20), 4)
    active = lazy.active_segment
    lazy.close_handles()  # killed: nothing flushed or written more
    with (tmp_path / "topic-0" / segment_file_name(active.base_offset, ".log")).open("r+b") as f:
        f.truncate(active.size - 10)  # the last batch torn
    recovered = reopen(tmp_path, clock, files, clean=False, recovery_point=180)
    try:
        assert recovered.log_end_offset == 183
        assert record_offsets(read_all(recovered)) == list(range(183))
        assert recovered.latest_epoch == 4
        recovered.append_as_leader(make_batch(1), 4)
        assert recovered.log_end_offset == 184
    finally:
        recovered.close_handles()


def test_leader_epoch_changes_before_the_file_is_read_apply_after_it(tmp_path: Path) -> None:
    path = tmp_path / LEADER_EPOCH_CHECKPOINT
    eager = LeaderEpochCache(path)
    for epoch, start in [(1, 0), (3, 40), (5, 90), (6, 120)]:
        eager.assign(epoch, start)
    eager.flush()
    changes = [("end", 100), ("start", 10), ("assign", (7, 100)), ("assign", (7, 130))]

    def apply(cache: LeaderEpochCache) -> None:
        for kind, value in changes:
            if kind == "end":
                assert isinstance(value, int)
                cache.truncate_from_end(value, sync=False)
            elif kind == "start":
                assert isinstance(value, int)
                cache.truncate_from_start(value, sync=False)
            else:
                assert isinstance(value, tuple)
                cache.assign(*value)

    loaded_first = LeaderEpochCache(path)
    assert loaded_first.latest_epoch == 6  # read now
    apply(loaded_first)
    lazy = LeaderEpochCache(path)
    apply(lazy)  # kept until the file is read
    assert lazy.entries == loaded_first.entries
    assert lazy.entries == (EpochEntry(1, 10), EpochEntry(3, 40), EpochEntry(5, 90), EpochEntry(7, 100))
    lazy.flush()
    assert LeaderEpochCache(path).entries == lazy.entries


def test_a_new_log_reads_no_epoch_file_and_a_busy_one_stops_deferring(tmp_path: Path) -> None:
    path = tmp_path / LEADER_EPOCH_CHECKPOINT
    cache = LeaderEpochCache(path, exists=False)
    for offset in range(0, 100, 5):
        cache.assign(2, offset)  # the same epoch again and again: one entry
    assert cache.entries == (EpochEntry(2, 0),)
    cache.flush()
    assert LeaderEpochCache(path).entries == (EpochEntry(2, 0),)


def test_producer_state_loaded_lazily_deduplicates_and_tracks_transactions_alike(
    open_log: OpenLog, clock: Clock
) -> None:
    from broker.log.producer_state import ProducerStateConfig, ProducerStateManager

    from .test_producer_state import abort, append, batch, open_state

    plog, state = open_state(open_log, clock)
    for i in range(6):
        append(state, batch(i))
    append(state, batch(0, pid=5, txn=True), verification_guard=state.maybe_start_verification(5, 0, 0))
    abort(state, pid=5)
    append(state, batch(1, pid=5, txn=True), verification_guard=state.maybe_start_verification(5, 1, 0))
    state.take_snapshot()
    plog.close()
    reopened = open_log(clean=True, recovery_point=plog.log_end_offset)
    lazy = ProducerStateManager.load(reopened, ProducerStateConfig(), clock, lazily=True)
    assert not lazy.loaded
    lazy.take_snapshot()  # nothing read, nothing written
    assert not lazy.loaded
    for i in range(1, 6):
        assert append(lazy, batch(i)) == (i, i)  # exact retries: read on first use
    assert lazy.loaded
    assert lazy.last_stable_offset(reopened.log_end_offset) == 8
    assert lazy.has_ongoing_transaction(5, 0)
    assert [t.last_offset for t in lazy.aborted_transactions()] == [7]


def test_a_new_log_creates_one_file_and_restarts_without_a_rebuild(
    open_log: OpenLog, tmp_path: Path, clock: Clock
) -> None:
    empty = open_log(name="empty-0")
    one = open_log(name="one-0")
    assert sorted(p.name for p in empty.dir.iterdir()) == ["00000000000000000000.log"]
    one.append_as_leader(make_batch(1, value_size=5), 0)
    empty.close()
    one.close()
    assert len([p for p in one.dir.iterdir() if p.suffix in (".index", ".timeindex")]) == 2  # made at close
    files = FileCache(16)
    for name, end in (("empty-0", 0), ("one-0", 1)):
        reopened = PartitionLog.open(tmp_path / name, LogConfig(), clock, end, had_clean_shutdown=True, files=files)
        try:
            assert not reopened.segments[0].indexes_missing
            assert reopened.log_end_offset == end
            assert record_offsets(read_all(reopened)) == list(range(end))
        finally:
            reopened.close_handles()
