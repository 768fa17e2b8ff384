"""ShareAcquireMode (KIP-1206) and RENEW acknowledgements (KIP-1222) on a share-partition,
with an explicit clock: record_limit never takes more than MaxRecords, splitting a log batch;
batch_optimized finishes the batch; RENEW restarts a held lock and nothing else; Kafka's
checks of acknowledgement batches per version."""

from __future__ import annotations

from broker.observability.share_metrics import ShareMetrics
from broker.share.acknowledgements import batches_valid
from broker.share.acquire_mode import BATCH_OPTIMIZED, RECORD_LIMIT
from broker.share.partition import ACCEPT, GAP, RELEASE, RENEW, RecordState, SharePartition
from wire.errors import ErrorCode

LOCK_MS = 1000


def partition(max_in_flight: int = 100) -> SharePartition:
    sp = SharePartition(lock_duration_ms=LOCK_MS, delivery_count_limit=5, max_in_flight=max_in_flight)
    sp.initialize(0)
    return sp


#: Three log batches: 0-9, 10-14, 15-19.
BATCHES = [(0, 9), (10, 14), (15, 19)]
OFFSETS = list(range(20))


def take(sp: SharePartition, member: str, mode: int, max_records: int, now: int = 0) -> list[tuple[int, int, int]]:
    got = sp.acquire_fetched(member, BATCHES, max_records=max_records, batch_size=500,
                             record_limit=mode == RECORD_LIMIT, now_ms=now)
    return [(b.first_offset, b.last_offset, b.delivery_count) for b in got]


def test_record_limit_splits_a_batch_and_leaves_the_rest_available() -> None:
    sp = partition()
    assert take(sp, "a", RECORD_LIMIT, 3) == [(0, 2, 1)]
    assert take(sp, "b", RECORD_LIMIT, 3) == [(3, 5, 1)]
    # the rest of in-flight batch 0-9, then new records (another in-flight batch)
    assert take(sp, "c", RECORD_LIMIT, 100) == [(6, 9, 1), (10, 19, 1)]
    assert take(sp, "d", RECORD_LIMIT, 100) == []


def test_batch_optimized_goes_on_to_the_end_of_the_batch() -> None:
    sp = partition()
    assert take(sp, "a", BATCH_OPTIMIZED, 3) == [(0, 9, 1)]  # MaxRecords 3 inside batch 0-9
    assert take(sp, "b", BATCH_OPTIMIZED, 5) == [(10, 14, 1)]  # exactly one batch
    assert take(sp, "c", BATCH_OPTIMIZED, 1) == [(15, 19, 1)]


def test_both_modes_on_redeliveries_and_the_in_flight_limit() -> None:
    sp = partition()
    assert take(sp, "a", RECORD_LIMIT, 20) == [(0, 19, 1)]
    assert sp.acknowledge("a", 0, 19, [RELEASE], 1) is ErrorCode.NONE
    assert take(sp, "b", RECORD_LIMIT, 4, now=2) == [(0, 3, 2)]
    # batch_optimized takes the rest of the in-flight batch 0-19 (one batch, acquired whole)
    assert take(sp, "c", BATCH_OPTIMIZED, 2, now=2) == [(4, 19, 2)]
    limited = partition(max_in_flight=4)
    # the in-flight limit bounds both modes, the batch it falls in finished (as Kafka does)
    assert take(limited, "a", BATCH_OPTIMIZED, 10) == [(0, 9, 1)]
    assert take(limited, "b", BATCH_OPTIMIZED, 10) == []
    assert take(partition(max_in_flight=4), "a", RECORD_LIMIT, 10) == [(0, 3, 1)]
    assert take(partition(), "a", RECORD_LIMIT, 0) == []


def test_renew_restarts_the_lock_and_keeps_the_state() -> None:
    sp = partition()
    take(sp, "a", RECORD_LIMIT, 5, now=0)
    assert sp.records[0].lock_deadline_ms == LOCK_MS
    assert sp.acknowledge("a", 0, 4, [RENEW], 900) is ErrorCode.NONE
    assert all(sp.records[o].lock_deadline_ms == 900 + LOCK_MS and sp.records[o].state is RecordState.ACQUIRED
               for o in range(5))
    assert sp.records[0].delivery_count == 1
    # past the first deadline, before the renewed one: still held, nothing comes back
    assert take(sp, "b", RECORD_LIMIT, 5, now=1500) == [(5, 9, 1)]
    assert sp.acknowledge("a", 0, 4, [ACCEPT], 1800) is ErrorCode.NONE
    assert sp.start_offset == 5


def test_renew_needs_the_member_to_hold_the_record_still() -> None:
    sp = partition()
    take(sp, "a", RECORD_LIMIT, 2, now=0)
    assert sp.acknowledge("b", 0, 1, [RENEW], 10) is ErrorCode.INVALID_RECORD_STATE
    # the lock ran out: renewing is too late, the record is available again
    assert sp.acknowledge("a", 0, 1, [RENEW], LOCK_MS + 1) is ErrorCode.INVALID_RECORD_STATE
    assert [sp.records[o].state for o in (0, 1)] == [RecordState.AVAILABLE] * 2
    # per-offset types mix RENEW with others
    take(sp, "a", RECORD_LIMIT, 2, now=LOCK_MS + 2)
    assert sp.acknowledge("a", 0, 1, [RENEW, ACCEPT], LOCK_MS + 3) is ErrorCode.NONE
    assert [sp.records[o].state for o in (0, 1)] == [RecordState.ACQUIRED, RecordState.ACKNOWLEDGED]


def test_acknowledgement_batches_as_kafka_checks_them() -> None:
    assert batches_valid([(0, 4, [ACCEPT]), (5, 6, [ACCEPT, GAP])], 1, False)
    assert batches_valid([(0, 4, [ACCEPT]), (4, 6, [ACCEPT])], 1, False)  # Kafka compares with the previous last
    assert not batches_valid([(5, 4, [ACCEPT])], 2, False)
    assert not batches_valid([(5, 9, [ACCEPT]), (3, 4, [ACCEPT])], 2, False)
    assert not batches_valid([(0, 4, [])], 2, False)
    assert not batches_valid([(0, 4, [ACCEPT, ACCEPT])], 2, False)
    assert not batches_valid([(0, 0, [5])], 2, True)
    assert not batches_valid([(0, 0, [-1])], 2, True)
    # RENEW (4) from version 2 only, and only in a request that says IsRenewAck
    assert not batches_valid([(0, 0, [RENEW])], 1, True)
    assert not batches_valid([(0, 0, [RENEW])], 2, False)
    assert batches_valid([(0, 1, [RENEW, ACCEPT])], 2, True)


def test_renewals_are_counted_by_their_ack_type() -> None:
    metrics = ShareMetrics()
    metrics.acknowledged([RENEW], 3)
    metrics.acknowledged([RENEW, ACCEPT, GAP], 3)
    assert (metrics.records_acknowledged["renew"], metrics.records_acknowledged["accept"]) == (4, 1)
