"""The share-partition state machine (broker/share/partition.py), with an explicit clock."""

from __future__ import annotations

import random

import pytest

from broker.share.partition import (
    ACCEPT,
    GAP,
    REJECT,
    RELEASE,
    AcquiredBatch,
    RecordState,
    SharePartition,
)
from wire.errors import ErrorCode

LOCK_MS = 30_000


def new_partition(limit: int = 5, max_in_flight: int = 2000) -> SharePartition:
    sp = SharePartition(lock_duration_ms=LOCK_MS, delivery_count_limit=limit, max_in_flight=max_in_flight)
    sp.initialize(0)
    return sp


def offsets_of(batches: list[AcquiredBatch]) -> list[int]:
    return [o for b in batches for o in range(b.first_offset, b.last_offset + 1)]


def test_members_acquire_distinct_records() -> None:
    sp = new_partition()
    log = range(10)
    a = sp.acquire("a", log, 4, now_ms=0)
    b = sp.acquire("b", log, 4, now_ms=0)
    c = sp.acquire("c", log, 4, now_ms=0)
    assert offsets_of(a) == [0, 1, 2, 3]
    assert offsets_of(b) == [4, 5, 6, 7]
    assert offsets_of(c) == [8, 9]
    assert sp.acquire("a", log, 4, now_ms=0) == []


def test_accept_advances_start_offset_and_is_never_redelivered() -> None:
    sp = new_partition()
    sp.acquire("a", range(3), 10, now_ms=0)
    assert sp.acknowledge("a", 0, 2, [ACCEPT], now_ms=1) is ErrorCode.NONE
    assert sp.start_offset == 3 and not sp.records
    assert sp.acquire("b", range(3), 10, now_ms=LOCK_MS * 2) == []


def test_release_redelivers_with_a_higher_delivery_count() -> None:
    sp = new_partition()
    sp.acquire("a", range(2), 10, now_ms=0)
    assert sp.acknowledge("a", 0, 1, [RELEASE, ACCEPT], now_ms=1) is ErrorCode.NONE
    again = sp.acquire("b", range(2), 10, now_ms=2)
    assert again == [AcquiredBatch(0, 0, 2)]
    assert sp.start_offset == 0


def test_reject_archives_and_is_never_redelivered() -> None:
    sp = new_partition()
    sp.acquire("a", range(3), 10, now_ms=0)
    assert sp.acknowledge("a", 1, 1, [REJECT], now_ms=1) is ErrorCode.NONE
    assert sp.records[1].state is RecordState.ARCHIVED
    assert [(r.offset, r.reason, r.delivery_count) for r in sp.archived] == [(1, "rejected", 1)]
    sp.acknowledge("a", 0, 2, [RELEASE, GAP, RELEASE], now_ms=2)
    assert offsets_of(sp.acquire("b", range(3), 10, now_ms=3)) == [0, 2]


def test_expired_lock_redelivers_then_the_limit_archives() -> None:
    sp = new_partition(limit=3)
    now = 0
    counts = []
    for _ in range(3):
        got = sp.acquire("a", range(1), 10, now_ms=now)
        counts.append(got[0].delivery_count)
        assert sp.acquire("b", range(1), 10, now_ms=now + LOCK_MS - 1) == []  # still locked
        now += LOCK_MS
    assert counts == [1, 2, 3]
    assert sp.expire_locks(now) == 1
    assert sp.records == {} and sp.start_offset == 1  # archived, then passed
    assert [(r.offset, r.reason, r.delivery_count) for r in sp.archived] == [(0, "delivery_count_exceeded", 3)]
    assert sp.acquire("b", range(1), 10, now_ms=now) == []


def test_a_leaving_member_gives_back_its_records_and_their_delivery() -> None:
    """Kafka's releaseAcquiredRecords: the records a member held when it left are available
    again with the delivery that acquired them taken back, even at the delivery limit."""
    sp = new_partition(limit=2)
    sp.acquire("a", range(3), 10, now_ms=0)
    assert sp.acknowledge("a", 0, 0, [ACCEPT], now_ms=1) is ErrorCode.NONE
    assert sp.acknowledge("a", 1, 1, [RELEASE], now_ms=1) is ErrorCode.NONE
    assert sp.acquire("b", range(3), 10, now_ms=2) == [AcquiredBatch(1, 1, 2)]
    assert sp.release_member("b") == 1 and sp.release_member("a") == 1
    assert sp.archived == []
    assert {o: (r.state, r.delivery_count) for o, r in sp.records.items()} == {
        1: (RecordState.AVAILABLE, 1), 2: (RecordState.AVAILABLE, 0)}
    assert sp.acquire("c", range(3), 10, now_ms=3) == [AcquiredBatch(1, 1, 2), AcquiredBatch(2, 2, 1)]


def test_only_the_holder_may_acknowledge() -> None:
    sp = new_partition()
    sp.acquire("a", range(2), 10, now_ms=0)
    assert sp.acknowledge("b", 0, 0, [ACCEPT], now_ms=1) is ErrorCode.INVALID_RECORD_STATE
    assert sp.acknowledge("a", 0, 1, [ACCEPT, 9], now_ms=1) is ErrorCode.INVALID_REQUEST
    assert sp.acknowledge("a", 0, 1, [ACCEPT, ACCEPT, ACCEPT], now_ms=1) is ErrorCode.INVALID_REQUEST
    # an expired lock is no longer held
    assert sp.acknowledge("a", 0, 0, [ACCEPT], now_ms=LOCK_MS) is ErrorCode.INVALID_RECORD_STATE
    # a failed batch changes nothing
    sp2 = new_partition()
    sp2.acquire("a", range(2), 10, now_ms=0)
    assert sp2.acknowledge("a", 0, 2, [ACCEPT], now_ms=1) is ErrorCode.INVALID_RECORD_STATE
    assert sp2.records[0].state is RecordState.ACQUIRED


def test_acknowledging_outside_the_in_flight_window_is_refused_at_once() -> None:
    sp = new_partition()
    sp.acquire("a", range(3), 10, now_ms=0)
    assert sp.acknowledge("a", 0, 2**62, [ACCEPT], now_ms=1) is ErrorCode.INVALID_RECORD_STATE
    assert sp.acknowledge("a", -5, 0, [ACCEPT], now_ms=1) is ErrorCode.INVALID_RECORD_STATE
    assert sp.acknowledge("a", 2, 1, [ACCEPT], now_ms=1) is ErrorCode.INVALID_REQUEST
    assert all(r.state is RecordState.ACQUIRED for r in sp.records.values())


def test_max_in_flight_bounds_new_acquisitions() -> None:
    sp = new_partition(max_in_flight=3)
    assert offsets_of(sp.acquire("a", range(10), 10, now_ms=0)) == [0, 1, 2]
    sp.acknowledge("a", 0, 0, [ACCEPT], now_ms=1)
    assert offsets_of(sp.acquire("a", range(10), 10, now_ms=1)) == [3]


def test_persisted_state_restores_deliveries_but_not_locks() -> None:
    sp = new_partition()
    sp.acquire("a", range(6), 10, now_ms=0)
    sp.acknowledge("a", 0, 0, [ACCEPT], now_ms=1)
    sp.acknowledge("a", 2, 2, [REJECT], now_ms=1)
    sp.acknowledge("a", 3, 3, [ACCEPT], now_ms=1)
    restored = new_partition()
    restored.restore(sp.start_offset, sp.state_batches())
    assert restored.start_offset == 1
    # offsets 1, 4, 5 were acquired, never acknowledged: available again, second delivery
    assert restored.acquire("b", range(6), 10, now_ms=0) == [AcquiredBatch(1, 1, 2), AcquiredBatch(4, 5, 2)]


@pytest.mark.parametrize("seed", range(20))
def test_random_operations_keep_the_invariants(seed: int) -> None:
    rng = random.Random(seed)
    limit = rng.randint(2, 5)
    sp = new_partition(limit=limit, max_in_flight=rng.randint(5, 50))
    members = ["a", "b", "c"]
    held: dict[int, str] = {}
    done: set[int] = set()
    log_end = 0
    now = 0
    for _ in range(300):
        now += rng.choice([0, 1, 100, LOCK_MS // 3])
        log_end += rng.randint(0, 3)
        before = {o: r.delivery_count for o, r in sp.records.items()}
        expired = {o for o, m in held.items() if sp.records[o].lock_deadline_ms <= now}
        member = rng.choice(members)
        if rng.random() < 0.5:
            got = offsets_of(sp.acquire(member, range(sp.start_offset, log_end), rng.randint(1, 8), now))
            for o in got:
                assert o not in done, "an accepted or archived record was delivered again"
                assert o not in held or o in expired, "a locked record went to a second member"
                assert sp.records[o].delivery_count == before.get(o, 0) + 1 <= limit
                held[o] = member
        else:
            mine = sorted(o for o, m in held.items() if m == member and o not in expired)
            if mine:
                o = rng.choice(mine)
                kind = rng.choice([ACCEPT, RELEASE, REJECT])
                assert sp.acknowledge(member, o, o, [kind], now) is ErrorCode.NONE
                del held[o]
                if kind != RELEASE or before[o] >= limit:
                    done.add(o)
        for o in expired:
            held.pop(o, None)
        for o in range(sp.start_offset):
            assert o not in sp.records
        for o, r in sp.records.items():
            assert sp.start_offset <= o < sp.end_offset
            assert (r.state is RecordState.ACQUIRED) == (r.member_id != "")
        for archived in sp.archived:
            done.add(archived.offset)
        sp.archived.clear()
