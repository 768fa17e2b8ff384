"""Producer state: deduplication, sequence and epoch checks, transactions, the last stable
offset, the aborted-transaction index, snapshots and reloading after a crash."""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import pytest

from broker.log import PartitionLog
from broker.log.producer_state import (
    NUM_BATCHES_TO_RETAIN,
    AppendOrigin,
    BatchMetadata,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerStateConfig,
    ProducerStateManager,
    TransactionCoordinatorFencedError,
    VerificationGuard,
    read_snapshot,
)
from broker.log.txn_index import AbortedTxn
from wire.batch_builder import build_batch, build_control_batch
from wire.records import ControlRecordType, NewRecord, read_batch_header

from .conftest import OpenLog
from .helpers import Clock

PID = 1000
NOW = Clock().now_ms


def batch(seq: int, records: int = 1, *, pid: int = PID, epoch: int = 0, txn: bool = False,
          timestamp: int = NOW) -> bytearray:
    return bytearray(build_batch(
        [NewRecord(b"k", b"v%d" % (seq + i), timestamp=timestamp) for i in range(records)],
        producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn,
    ))


def append(state: ProducerStateManager, data: bytearray, *, origin: AppendOrigin = AppendOrigin.CLIENT,
           verification_guard: VerificationGuard | None = None) -> tuple[int, int]:
    """The leader's append as the partition makes it: analyze, append to the log, update."""
    plog = state.log
    end = plog.log_end_offset
    plan = state.analyze_append([(0, read_batch_header(data))], end, origin, verification_guard)
    if isinstance(plan, BatchMetadata):
        return plan.first_offset, plan.last_offset
    info = plog.append_as_leader(data, 0, validated=True)
    state.update(end, info, plan)
    return info.first_offset, info.last_offset


def open_state(open_log: OpenLog, clock: Clock, **config: object) -> tuple[PartitionLog, ProducerStateManager]:
    plog = open_log(**config)
    return plog, ProducerStateManager.load(plog, ProducerStateConfig(), clock)


def marker(state: ProducerStateManager, control_type: ControlRecordType, pid: int, epoch: int,
           coordinator_epoch: int) -> int:
    plan = state.analyze_marker(control_type, pid, epoch, coordinator_epoch, NOW)
    end = state.log.log_end_offset
    info = state.log.append_as_leader(bytearray(build_control_batch(control_type, pid, epoch, coordinator_epoch,
                                                                    timestamp_ms=NOW)), 0)
    state.update(end, info, plan)
    return info.first_offset


def commit(state: ProducerStateManager, pid: int = PID, epoch: int = 0, coordinator_epoch: int = 0) -> int:
    return marker(state, ControlRecordType.COMMIT, pid, epoch, coordinator_epoch)


def abort(state: ProducerStateManager, pid: int = PID, epoch: int = 0, coordinator_epoch: int = 0) -> int:
    return marker(state, ControlRecordType.ABORT, pid, epoch, coordinator_epoch)


# -- idempotence ---------------------------------------------------------------------------------


def test_exact_retry_returns_the_original_offsets_and_appends_nothing(open_log: OpenLog, clock: Clock) -> None:
    plog, state = open_state(open_log, clock)
    assert append(state, batch(0, 3)) == (0, 2)
    assert append(state, batch(3, 2)) == (3, 4)
    assert append(state, batch(0, 3)) == (0, 2)
    assert append(state, batch(3, 2)) == (3, 4)
    assert plog.log_end_offset == 5


def test_the_last_five_batches_are_deduplicated(open_log: OpenLog, clock: Clock) -> None:
    plog, state = open_state(open_log, clock)
    for i in range(7):
        append(state, batch(i))
    for i in range(7 - NUM_BATCHES_TO_RETAIN, 7):
        assert append(state, batch(i)) == (i, i)
    # Older than the cache: a sequence below the expected one is out of order, as in Kafka.
    with pytest.raises(OutOfOrderSequenceError):
        append(state, batch(1))
    assert plog.log_end_offset == 7


def test_a_gap_is_out_of_order(open_log: OpenLog, clock: Clock) -> None:
    plog, state = open_state(open_log, clock)
    append(state, batch(0))
    with pytest.raises(OutOfOrderSequenceError):
        append(state, batch(2))
    assert plog.log_end_offset == 1


def test_an_unknown_producer_starts_at_any_sequence(open_log: OpenLog, clock: Clock) -> None:
    _, state = open_state(open_log, clock)
    assert append(state, batch(42)) == (0, 0)
    assert append(state, batch(43)) == (1, 1)


def test_a_new_epoch_must_start_at_zero_and_an_old_one_is_fenced(open_log: OpenLog, clock: Clock) -> None:
    _, state = open_state(open_log, clock)
    append(state, batch(0, epoch=1))
    with pytest.raises(OutOfOrderSequenceError):
        append(state, batch(5, epoch=2))
    assert append(state, batch(0, epoch=2)) == (1, 1)
    with pytest.raises(InvalidProducerEpochError):
        append(state, batch(1, epoch=1))


def test_sequence_wraps_past_int32_max(open_log: OpenLog, clock: Clock) -> None:
    _, state = open_state(open_log, clock)
    append(state, batch(2**31 - 2, 2))
    assert append(state, batch(0)) == (2, 2)
    assert append(state, batch(2**31 - 2, 2)) == (0, 1)


# -- transactions ----------------------------------------------------------------------------------


def test_lso_stops_at_an_open_transaction_and_moves_on_commit(open_log: OpenLog, clock: Clock) -> None:
    plog, state = open_state(open_log, clock)
    append(state, batch(0, pid=7))
    guard = state.maybe_start_verification(PID, 0, 0)
    append(state, batch(0, 2, txn=True), verification_guard=guard)
    assert state.last_stable_offset(plog.log_end_offset) == 1
    marker = commit(state)
    assert marker == 3
    # The marker must be below the high watermark before the transaction counts as stable.
    assert state.last_stable_offset(3) == 1
    assert state.last_stable_offset(4) == 4
    assert state.aborted_transactions() == []


def test_an_abort_is_indexed_with_the_lso_it_leaves(open_log: OpenLog, clock: Clock) -> None:
    plog, state = open_state(open_log, clock)
    append(state, batch(0, txn=True), verification_guard=state.maybe_start_verification(PID, 0, 0))
    append(state, batch(0, pid=9, txn=True), verification_guard=state.maybe_start_verification(9, 0, 0))
    assert abort(state) == 2
    assert state.aborted_transactions() == [AbortedTxn(PID, 0, 2, 1)]
    assert state.last_stable_offset(3) == 1  # producer 9 is still open
    assert abort(state, pid=9) == 3
    assert state.last_stable_offset(4) == 4
    assert state.collect_aborted_transactions(0, 4) == [AbortedTxn(PID, 0, 2, 1), AbortedTxn(9, 1, 3, 4)]
    assert state.collect_aborted_transactions(3, 4) == [AbortedTxn(9, 1, 3, 4)]
    assert (plog.dir / "00000000000000000000.txnindex").stat().st_size == 2 * 34


def test_a_new_transaction_index_is_made_durable_by_the_next_flush_not_on_the_append_path(
    open_log: OpenLog, clock: Clock, fsynced: list[str]
) -> None:
    """The first abort of a segment creates its .txnindex: the directory's fsync waits for the
    log's next flush (a worker thread), as a rolled segment's does, and comes with it."""
    plog, state = open_state(open_log, clock)
    plog.flush()
    fsynced.clear()  # from here on
    append(state, batch(0, txn=True), verification_guard=state.maybe_start_verification(PID, 0, 0))
    abort(state)
    assert (plog.dir / "00000000000000000000.txnindex").exists()
    assert fsynced == []  # nothing on the append path
    plog.flush()
    assert str(plog.dir) in fsynced


def test_unverified_transactional_write_is_refused(open_log: OpenLog, clock: Clock) -> None:
    plog, state = open_state(open_log, clock)
    with pytest.raises(InvalidTxnStateError):
        append(state, batch(0, txn=True))
    stale = state.maybe_start_verification(PID, 0, 0)
    state.maybe_start_verification(PID, 0, 0)
    append(state, batch(0, txn=True), verification_guard=stale)
    # Once the transaction is open here, later writes need no verification.
    append(state, batch(1, txn=True))
    abort(state)
    # The guard was used up by the first write; a new transaction needs a new one.
    with pytest.raises(InvalidTxnStateError):
        append(state, batch(2, txn=True), verification_guard=stale)
    assert plog.log_end_offset == 3


def test_non_transactional_write_inside_a_transaction_is_refused(open_log: OpenLog, clock: Clock) -> None:
    _, state = open_state(open_log, clock)
    append(state, batch(0, txn=True), verification_guard=state.maybe_start_verification(PID, 0, 0))
    with pytest.raises(InvalidTxnStateError):
        append(state, batch(1))


def test_markers_are_fenced_by_producer_and_coordinator_epoch(open_log: OpenLog, clock: Clock) -> None:
    _, state = open_state(open_log, clock)
    append(state, batch(0, epoch=3, txn=True), verification_guard=state.maybe_start_verification(PID, 0, 3))
    with pytest.raises(InvalidProducerEpochError):
        commit(state, epoch=2)
    commit(state, epoch=3, coordinator_epoch=5)
    with pytest.raises(TransactionCoordinatorFencedError):
        abort(state, epoch=3, coordinator_epoch=4)
    # A marker with a bumped epoch (a fenced producer's transaction aborted) is accepted.
    abort(state, epoch=4, coordinator_epoch=5)


# -- persistence -------------------------------------------------------------------------------------


def test_a_reload_after_a_crash_rebuilds_everything_from_the_log(open_log: OpenLog, clock: Clock) -> None:
    plog, state = open_state(open_log, clock)
    for i in range(6):
        append(state, batch(i))
    append(state, batch(0, pid=5, txn=True), verification_guard=state.maybe_start_verification(5, 0, 0))
    abort(state, pid=5)
    append(state, batch(1, pid=5, txn=True), verification_guard=state.maybe_start_verification(5, 1, 0))
    plog.close_handles()
    plog2 = open_log()
    (plog2.dir / "00000000000000000000.txnindex").unlink()
    state2 = ProducerStateManager.load(plog2, ProducerStateConfig(), clock)
    for i in range(1, 6):
        assert append(state2, batch(i)) == (i, i)
    assert state2.aborted_transactions() == [AbortedTxn(5, 6, 7, 8)]
    assert state2.last_stable_offset(plog2.log_end_offset) == 8
    assert state2.has_ongoing_transaction(5, 0)


def test_snapshots_keep_five_batches_and_stay_readable_as_kafka_reads_them(
    open_log: OpenLog, clock: Clock, tmp_path: Path
) -> None:
    plog, state = open_state(open_log, clock)
    for i in range(6):
        append(state, batch(2 * i, 2))
    append(state, batch(0, pid=5))
    state.take_snapshot()
    path = plog.dir / "00000000000000000013.snapshot"
    data = path.read_bytes()
    version, crc = struct.unpack_from(">hI", data)
    assert version == 1 and crc == crc32c.crc32c(data[6:])
    # Kafka's reader keeps the last entry of each producer: its newest batch.
    (count,) = struct.unpack_from(">i", data, 6)
    last_by_pid = {}
    for i in range(count):
        pid, _, seq, offset, delta, _, _, _ = struct.unpack_from(">qhiqiqiq", data, 10 + 46 * i)
        last_by_pid[pid] = (seq, offset, delta)
    assert last_by_pid == {PID: (11, 11, 1), 5: (0, 12, 0)}
    entries = {e.producer_id: e for e in read_snapshot(path)}
    assert [b.last_offset for b in entries[PID].batches] == [3, 5, 7, 9, 11]
    plog.close()
    plog2 = open_log(clean=True)
    state2 = ProducerStateManager.load(plog2, ProducerStateConfig(), clock)
    for i in range(1, 6):
        assert append(state2, batch(2 * i, 2)) == (2 * i, 2 * i + 1)


def test_a_roll_writes_a_snapshot_at_the_new_segment(open_log: OpenLog, clock: Clock) -> None:
    plog, state = open_state(open_log, clock, segment_bytes=300)
    for i in range(6):
        append(state, batch(i))
    assert len(plog.segments) > 1
    assert state.snapshot_offsets() == [s.base_offset for s in plog.segments[1:]]


def test_a_rolls_snapshot_is_fsynced_by_the_next_flush_not_on_the_append_path(
    open_log: OpenLog, clock: Clock, fsynced: list[str]
) -> None:
    """As Kafka's UnifiedLog.roll: appends run on the event loop, so the snapshot written at a
    roll is not fsynced there; the flush of the rolled segment (a worker thread) does it."""
    plog, state = open_state(open_log, clock, segment_bytes=300)
    fsynced.clear()  # from here on
    for i in range(6):
        append(state, batch(i))
    snapshots = [plog.dir / f"{offset:020d}.snapshot" for offset in state.snapshot_offsets()]
    assert snapshots and all(p.exists() for p in snapshots)
    assert not [path for path in fsynced if path.endswith(".snapshot")]  # nothing on the append path
    plog.flush()
    assert {str(p) for p in snapshots} <= set(fsynced)
    # ...before the directory, which makes their renames durable.
    last_dir_sync = max(i for i, path in enumerate(fsynced) if path == str(plog.dir))
    assert last_dir_sync > max(fsynced.index(str(p)) for p in snapshots)


def test_a_corrupt_snapshot_is_skipped(open_log: OpenLog, clock: Clock) -> None:
    plog, state = open_state(open_log, clock)
    append(state, batch(0))
    state.take_snapshot()
    path = plog.dir / "00000000000000000001.snapshot"
    path.write_bytes(path.read_bytes()[:-3])
    plog.close_handles()
    plog2 = open_log()
    state2 = ProducerStateManager.load(plog2, ProducerStateConfig(), clock)
    assert not path.exists()
    assert append(state2, batch(0)) == (0, 0)


def test_foreign_appends_are_picked_up(open_log: OpenLog, clock: Clock) -> None:
    plog, state = open_state(open_log, clock)
    plog.append_as_leader(batch(0, txn=True), 0)
    assert state.last_stable_offset(plog.log_end_offset) == 0
    assert state.has_ongoing_transaction(PID, 0)
    commit(state)
    assert state.last_stable_offset(plog.log_end_offset) == 2


def test_idle_producers_expire_but_not_inside_a_transaction(open_log: OpenLog, clock: Clock) -> None:
    plog = open_log()
    state = ProducerStateManager.load(plog, ProducerStateConfig(producer_id_expiration_ms=1000), clock)
    now = clock()
    append(state, batch(0, timestamp=now))
    append(state, batch(0, pid=5, txn=True, timestamp=now), verification_guard=state.maybe_start_verification(5, 0, 0))
    clock.advance(999)
    assert state.remove_expired_producers(clock()) == 0
    clock.advance(1)
    assert state.remove_expired_producers(clock()) == 1
    assert state.last_entry(PID) is None and state.last_entry(5) is not None
    # Forgotten: the next write is accepted at any sequence.
    assert append(state, batch(17)) == (2, 2)


def test_replication_origin_skips_sequence_checks(open_log: OpenLog, clock: Clock) -> None:
    _, state = open_state(open_log, clock)
    append(state, batch(0))
    append(state, batch(9), origin=AppendOrigin.REPLICATION)


def test_a_write_at_the_next_epoch_is_a_new_transaction_to_verify(open_log: OpenLog, clock: Clock) -> None:
    """Transactions v2: the commit bumped the epoch, and the next transaction's first write
    arrives before the last one's marker. It is not part of the open transaction (whose marker
    would otherwise commit it): it needs verification of its own."""
    _plog, state = open_state(open_log, clock)
    append(state, batch(0, txn=True), verification_guard=state.maybe_start_verification(PID, 0, 0))
    assert state.has_ongoing_transaction(PID, 0)
    assert not state.has_ongoing_transaction(PID, 1)
    assert state.maybe_start_verification(PID, 0, 0) is None  # the same transaction goes on
    assert state.maybe_start_verification(PID, 0, 1) is not None  # the next one is verified
