"""Periodic producer-state snapshots: a reload replays a bounded number of batches, and the
state it rebuilds from a snapshot is the state a replay of the whole log gives."""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from broker.log import LogConfig, PartitionLog
from broker.log.producer_state import (
    AppendOrigin,
    BatchMetadata,
    ProducerStateConfig,
    ProducerStateManager,
)
from wire.batch_builder import build_batch, build_control_batch
from wire.records import ControlRecordType, NewRecord, read_batch_header

from .conftest import OpenLog
from .helpers import Clock

EXPIRATION_MS = 3_600_000


def batch(clock: Clock, pid: int, seq: int, *, txn: bool = False, records: int = 1) -> bytearray:
    return bytearray(build_batch(
        [NewRecord(b"k", b"v%d" % i, timestamp=clock()) for i in range(records)],
        producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=seq if pid >= 0 else -1,
        is_transactional=txn,
    ))


def append(state: ProducerStateManager, data: bytearray) -> None:
    """A leader's client append, as the partition makes it; transactional writes verified first."""
    plog = state.log
    header = read_batch_header(data)
    guard = None
    if header.is_transactional:
        guard = state.maybe_start_verification(header.producer_id, header.base_sequence, header.producer_epoch)
    end = plog.log_end_offset
    plan = state.analyze_append([(0, header)], end, AppendOrigin.CLIENT, guard)
    assert not isinstance(plan, BatchMetadata)
    info = plog.append_as_leader(data, 0, validated=True)
    state.update(end, info, plan)


def end_txn(state: ProducerStateManager, clock: Clock, pid: int, control_type: ControlRecordType) -> None:
    plan = state.analyze_marker(control_type, pid, 0, 0, clock())
    end = state.log.log_end_offset
    info = state.log.append_as_leader(
        bytearray(build_control_batch(control_type, pid, 0, 0, timestamp_ms=clock())), 0)
    state.update(end, info, plan)


def replayed_batches(action: Callable[[], object]) -> list[int]:
    """The ``batches_replayed`` of every load ``action`` made."""
    with capture_logs() as logs:
        action()
    return [e["batches_replayed"] for e in logs if e["event"] == "producer_state_loaded"]


def state_of(state: ProducerStateManager) -> tuple[object, ...]:
    """What must survive a reload: producers with their retained batches, open transactions
    (and the LSO they give), the aborted-transaction index."""
    end = state.log.log_end_offset
    producers = {}
    for d in state.active_producers():
        entry = state.last_entry(d.producer_id)
        assert entry is not None
        producers[d.producer_id] = (d, list(entry.batches))
    return producers, state.first_unstable_offset(end), state.aborted_transactions()


def full_replay(plog: PartitionLog, tmp: Path, clock: Clock, config: ProducerStateConfig,
                segment_bytes: int) -> tuple[object, ...]:
    """The state a replay of the whole log gives: the partition copied without its snapshots."""
    copy = tmp / "replayed" / plog.dir.name
    shutil.rmtree(copy.parent, ignore_errors=True)
    shutil.copytree(plog.dir, copy, ignore=shutil.ignore_patterns("*.snapshot"))
    other = PartitionLog.open(copy, LogConfig(segment_bytes=segment_bytes), clock, plog.log_end_offset,
                              log_start_offset=plog.log_start_offset, had_clean_shutdown=True)
    try:
        state = ProducerStateManager.load(other, config, clock)
        state.remove_expired_producers(clock())
        return state_of(state)
    finally:
        other.close_handles()


@pytest.mark.parametrize("seed", range(8))
def test_a_reload_from_periodic_snapshots_equals_a_full_replay(
    open_log: OpenLog, clock: Clock, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    segment_bytes = rng.choice([1 << 30, 2_000])
    config = ProducerStateConfig(producer_id_expiration_ms=EXPIRATION_MS, snapshot_every_batches=rng.choice([3, 7]))
    plog = open_log(segment_bytes=segment_bytes)
    state = ProducerStateManager.load(plog, config, clock)
    pids = [100, 101, 102, 103]
    txn_pids = {102, 103}
    next_seq: dict[int, int] = {}
    checked = with_aborts = from_snapshots = 0
    for _ in range(400):
        op = rng.random()
        if op < 0.55:
            pid = rng.choice([*pids, -1])
            seq = next_seq.get(pid, 0)
            txn = pid in txn_pids
            if txn and rng.random() < 0.3 and state.has_ongoing_transaction(pid, 0):
                end_txn(state, clock, pid, rng.choice([ControlRecordType.COMMIT, ControlRecordType.ABORT]))
                continue
            records = rng.randint(1, 3)
            append(state, batch(clock, pid, seq, txn=txn, records=records))
            next_seq[pid] = seq + records
        elif op < 0.62:
            # A follower's truncation (as after_truncation): the producers continue from there.
            end = plog.log_end_offset
            plog.truncate_to(rng.randint(max(plog.log_start_offset, end - 12), end))
            state.sync()
            next_seq = {p: e.last_seq + 1 for p in pids if (e := state.last_entry(p)) is not None}
        elif op < 0.8:
            state.truncate_and_reload()
        elif op < 0.88:
            # A restart after a crash: no snapshot at the log end, the newest periodic one is used.
            plog.close_handles()
            plog = open_log(segment_bytes=segment_bytes)
            state = ProducerStateManager.load(plog, config, clock, lazily=True)
        elif op < 0.9:
            # The producers go idle long enough to expire; new ones take over.
            clock.advance(EXPIRATION_MS)
            state.remove_expired_producers(clock())
            pids = [p + 10 for p in pids]
            txn_pids = {p + 10 for p in txn_pids}
        else:
            # Compare after a reload (of this state) with a replay of everything.
            with capture_logs() as logs:
                state.truncate_and_reload()
            state.remove_expired_producers(clock())
            assert state_of(state) == full_replay(plog, tmp_path, clock, config, segment_bytes)
            checked += 1
            with_aborts += bool(state.aborted_transactions())
            from_snapshots += any(e.get("snapshot_offset", -1) > 0 for e in logs)
    state.truncate_and_reload()
    state.remove_expired_producers(clock())
    assert state_of(state) == full_replay(plog, tmp_path, clock, config, segment_bytes)
    # The comparisons covered reloads from periodic snapshots, with aborted transactions.
    assert checked > 5 and with_aborts > 0 and from_snapshots > 0, (checked, with_aborts, from_snapshots)


def test_a_reload_replays_at_most_the_batches_since_the_newest_snapshot(open_log: OpenLog, clock: Clock) -> None:
    every = 10
    config = ProducerStateConfig(snapshot_every_batches=every)
    plog = open_log()
    state = ProducerStateManager.load(plog, config, clock)
    for seq in range(5 * every + 3):
        append(state, batch(clock, 100, seq))
    # The newest two are kept (no segment rolled): the older ones are deleted.
    assert state.snapshot_offsets() == [4 * every, 5 * every]
    assert replayed_batches(state.truncate_and_reload) == [3]
    # A truncation just below the newest snapshot deletes it and uses the one before.
    plog.truncate_to(5 * every - 2)
    assert replayed_batches(state.sync) == [every - 2]
    assert state.snapshot_offsets() == [4 * every]
    plog.close_handles()
    plog = open_log()
    state = ProducerStateManager.load(plog, config, clock, lazily=True)
    assert replayed_batches(lambda: state.last_entry(100)) == [every - 2]
    entry = state.last_entry(100)
    assert entry is not None and entry.last_seq == 5 * every - 3


def test_a_long_replay_writes_a_snapshot_so_the_next_reload_is_short(open_log: OpenLog, clock: Clock) -> None:
    """A log written before periodic snapshots (or truncated below all of them) is replayed
    once; the reload leaves a snapshot at the log end."""
    plog = open_log()
    state = ProducerStateManager.load(plog, ProducerStateConfig(snapshot_every_batches=1_000_000), clock)
    for seq in range(50):
        append(state, batch(clock, 100, seq))
    assert state.snapshot_offsets() == []
    plog.close_handles()
    plog = open_log()
    state = ProducerStateManager.load(plog, ProducerStateConfig(snapshot_every_batches=10), clock, lazily=True)
    assert replayed_batches(state.sync) == [50]
    assert state.snapshot_offsets() == [50]
    assert replayed_batches(state.truncate_and_reload) == [0]


def test_many_producers_space_the_snapshots_out(open_log: OpenLog, clock: Clock) -> None:
    """A snapshot costs a row per producer: with more producers than batches between two
    snapshots, the next comes after as many batches as there are producers."""
    plog = open_log()
    state = ProducerStateManager.load(plog, ProducerStateConfig(snapshot_every_batches=5), clock)
    for seq in range(2):
        for pid in range(20):
            append(state, batch(clock, pid, seq))
    assert state.snapshot_offsets() == [5, 25]


def test_a_truncation_to_a_snapshots_offset_drops_the_aborts_above_it(open_log: OpenLog, clock: Clock) -> None:
    """Nothing is replayed from a snapshot at the new log end, but an abort cut from the log
    must leave the aborted-transaction index all the same."""
    plog = open_log()
    state = ProducerStateManager.load(plog, ProducerStateConfig(snapshot_every_batches=2), clock)
    append(state, batch(clock, 100, 0))
    append(state, batch(clock, 100, 1))
    assert state.snapshot_offsets() == [2]
    append(state, batch(clock, 102, 0, txn=True))
    end_txn(state, clock, 102, ControlRecordType.ABORT)
    assert len(state.aborted_transactions()) == 1
    plog.truncate_to(2)
    assert replayed_batches(state.sync) == [0]
    assert state.aborted_transactions() == []
    assert state.last_entry(102) is None
