"""ShareFetch's BatchSize and Kafka's delivery throttling near the delivery count limit, on a
share-partition with an explicit clock (broker/share/partition.py), as Kafka 4.3's
``SharePartition.acquire`` does them."""

from __future__ import annotations

import random

import pytest

from broker.share.partition import ACCEPT, RELEASE, SharePartition, throttle_delivery_count
from wire.errors import ErrorCode

LOCK_MS = 1000
#: Four log batches of five records.
FOUR_BATCHES = [(0, 4), (5, 9), (10, 14), (15, 19)]


def partition(limit: int = 5) -> SharePartition:
    sp = SharePartition(lock_duration_ms=LOCK_MS, delivery_count_limit=limit, max_in_flight=2000)
    sp.initialize(0)
    return sp


def fetch(sp: SharePartition, member: str, log_batches: list[tuple[int, int]], *, max_records: int = 500,
          batch_size: int = 500, record_limit: bool = False, now: int = 0) -> list[tuple[int, int, int]]:
    got = sp.acquire_fetched(member, log_batches, max_records=max_records, batch_size=batch_size,
                             record_limit=record_limit, now_ms=now)
    return [(b.first_offset, b.last_offset, b.delivery_count) for b in got]


@pytest.mark.parametrize(("batch_size", "ranges"), [
    (500, [(0, 19)]),
    (10, [(0, 9), (10, 19)]),
    (7, [(0, 9), (10, 19)]),  # cut at the first log batch reaching 7 records
    (3, [(0, 4), (5, 9), (10, 14), (15, 19)]),
    (0, [(0, 19)]),
])
def test_batch_size_cuts_new_records_at_log_batch_boundaries(batch_size: int, ranges: list[tuple[int, int]]) -> None:
    sp = partition()
    assert fetch(sp, "a", FOUR_BATCHES, batch_size=batch_size) == [(f, la, 1) for f, la in ranges]
    assert sp.batches == dict(ranges)


def test_record_limit_ignores_batch_size_and_max_records_ends_at_a_batch() -> None:
    sp = partition()
    assert fetch(sp, "a", FOUR_BATCHES, batch_size=3, record_limit=True) == [(0, 19, 1)]
    sp = partition()
    # MaxRecords 7 ends inside log batch 5-9: batch_optimized finishes it, in BatchSize pieces.
    assert fetch(sp, "a", FOUR_BATCHES, max_records=7, batch_size=5) == [(0, 4, 1), (5, 9, 1)]


def test_a_released_batch_is_redelivered_whole() -> None:
    sp = partition()
    assert fetch(sp, "a", FOUR_BATCHES, batch_size=10) == [(0, 9, 1), (10, 19, 1)]
    assert sp.acknowledge("a", 0, 19, [RELEASE], now_ms=1) is ErrorCode.NONE
    # MaxRecords 1 still takes the first in-flight batch whole.
    assert fetch(sp, "b", FOUR_BATCHES, max_records=1, now=2) == [(0, 9, 2)]


@pytest.mark.parametrize(("limit", "throttle"), [(2, 2), (3, 2), (4, 2), (5, 3), (6, 3), (10, 5)])
def test_throttle_delivery_count_is_half_the_limit_rounded_up_at_least_two(limit: int, throttle: int) -> None:
    assert throttle_delivery_count(limit) == throttle


def test_throttling_halves_the_records_per_delivery_and_a_last_delivery_goes_alone() -> None:
    sp = partition(limit=6)  # throttled from the 3rd delivery on
    batch = [(0, 9)]
    for delivery in (1, 2, 3):
        assert fetch(sp, "a", batch, now=delivery * 10) == [(0, 9, delivery)]
        assert sp.acknowledge("a", 0, 9, [RELEASE], now_ms=delivery * 10) is ErrorCode.NONE
    # Delivered 3 times: 10 >> (3 - 3 + 1) = 5 records at a time, then the fetch stops.
    assert fetch(sp, "a", batch, now=40) == [(0, 4, 4)]
    assert sp.acknowledge("a", 0, 4, [RELEASE], now_ms=40) is ErrorCode.NONE
    # Delivered 4 times: 10 >> 2 = 2 at a time.
    assert fetch(sp, "a", batch, now=50) == [(0, 1, 5)]
    assert sp.acknowledge("a", 0, 1, [RELEASE], now_ms=50) is ErrorCode.NONE
    # Delivered 5 times (one short of the limit): alone.
    assert fetch(sp, "a", batch, now=60) == [(0, 0, 6)]
    assert fetch(sp, "a", batch, now=60) == [(1, 1, 6)]
    assert fetch(sp, "a", batch, now=60) == [(2, 3, 5)]


def test_a_throttled_batch_is_delivered_on_its_own() -> None:
    sp = partition(limit=5)
    assert fetch(sp, "a", [(0, 4), (5, 9)], batch_size=5) == [(0, 4, 1), (5, 9, 1)]
    for now in (10, 20):
        assert sp.acknowledge("a", 5, 9, [RELEASE], now_ms=now) is ErrorCode.NONE
        assert fetch(sp, "a", [(5, 9)], now=now) == [(5, 9, now // 10 + 1)]
    assert sp.acknowledge("a", 0, 9, [RELEASE], now_ms=30) is ErrorCode.NONE
    # Batch 0-4 (delivered once) is taken; batch 5-9 (delivered 3 times) waits for a fetch of its own.
    assert fetch(sp, "b", [(0, 4), (5, 9)], now=40) == [(0, 4, 2)]
    assert fetch(sp, "c", [(0, 4), (5, 9)], now=40) == [(5, 6, 4)]  # 5 >> 1 = 2


def consume(sp: SharePartition, poison: int, now: int) -> list[tuple[int, int, int]]:
    """A consumer that crashes on ``poison``: all it holds then runs out of its lock; any
    other delivery it accepts."""
    got = fetch(sp, "m", [(0, 9)], now=now)
    offsets = [o for f, la, _ in got for o in range(f, la + 1)]
    if poison not in offsets:
        for first, last, _ in got:
            assert sp.acknowledge("m", first, last, [ACCEPT], now_ms=now) is ErrorCode.NONE
    return got


def test_a_poison_record_is_archived_alone_not_with_its_batch() -> None:
    sp = partition(limit=5)
    deliveries: list[list[tuple[int, int, int]]] = []
    now = 0
    while sp.start_offset < 10 and len(deliveries) < 30:
        deliveries.append(consume(sp, poison=4, now=now))
        now += LOCK_MS  # every lock taken so far has run out
    assert [(a.offset, a.reason, a.delivery_count) for a in sp.archived] == [(4, "delivery_count_exceeded", 5)]
    assert sp.start_offset == 10 and not sp.records  # the nine good records were accepted
    assert deliveries == [
        [(0, 9, 1)], [(0, 9, 2)], [(0, 9, 3)],  # whole batch while below the throttle count (3)
        [(0, 4, 4)],  # 10 >> 1 = 5 records
        [(0, 0, 5)], [(1, 1, 5)], [(2, 2, 5)], [(3, 3, 5)], [(4, 4, 5)],  # last deliveries alone
        [(5, 9, 4)],  # the rest of the batch, delivered 3 times
    ]


def test_without_throttling_a_limit_of_two_archives_the_whole_batch() -> None:
    sp = partition(limit=2)  # throttle count 2 is never reached by an available record
    now = 0
    while sp.start_offset < 10 and now < 10 * LOCK_MS:
        consume(sp, poison=4, now=now)
        now += LOCK_MS
    assert sorted(a.offset for a in sp.archived) == list(range(10))
    assert sp.start_offset == 10 and not sp.records


@pytest.mark.parametrize("seed", range(20))
def test_random_fetches_in_both_modes_keep_the_invariants(seed: int) -> None:
    rng = random.Random(seed)
    limit = rng.randint(2, 6)
    sp = SharePartition(lock_duration_ms=LOCK_MS, delivery_count_limit=limit, max_in_flight=rng.randint(5, 60))
    sp.initialize(0)
    log: list[tuple[int, int]] = []
    held: dict[int, str] = {}
    now = 0
    for _ in range(300):
        now += rng.choice([0, 1, LOCK_MS // 3])
        if rng.random() < 0.3:
            base = log[-1][1] + 1 if log else 0
            log.append((base, base + rng.randint(0, 6)))
        for o in [o for o in held if sp.records.get(o) is None or sp.records[o].lock_deadline_ms <= now]:
            del held[o]
        member = rng.choice("abc")
        if rng.random() < 0.6:
            start = sp.first_available()
            batches = [(max(b, start), la) for b, la in log if la >= start]
            before = {o: r.delivery_count for o, r in sp.records.items()}
            max_records = rng.randint(1, 12)
            record_limit = rng.random() < 0.5
            got = sp.acquire_fetched(member, batches, max_records=max_records, batch_size=rng.randint(0, 10),
                                     record_limit=record_limit, now_ms=now)
            offsets = [o for a in got for o in range(a.first_offset, a.last_offset + 1)]
            assert len(offsets) == len(set(offsets))
            if record_limit:
                assert len(offsets) <= max_records
            for a in got:
                assert a.first_offset <= a.last_offset
                assert all(sp.records[o].delivery_count == a.delivery_count for o in range(a.first_offset,
                                                                                           a.last_offset + 1))
            for o in offsets:
                assert o not in held, "a locked record went to a second member"
                assert sp.records[o].delivery_count == before.get(o, 0) + 1 <= limit
                held[o] = member
        else:
            mine = sorted(o for o, m in held.items() if m == member)
            if mine:
                o = rng.choice(mine)
                assert sp.acknowledge(member, o, o, [rng.choice([ACCEPT, RELEASE, RELEASE])], now) is ErrorCode.NONE
                del held[o]
        assert all(first <= last for first, last in sp.batches.items())
        assert all(any(f <= o <= la for f, la in sp.batches.items()) for o in sp.records)
