"""Test data and checks shared by the scenarios.

The records exercise what clients commonly get wrong: null keys, null (tombstone) and empty
values, binary keys and values, repeated and empty headers, explicit CreateTime timestamps
and explicit partitions. Where a client cannot express something (kcat: no NUL in keys or
header values, no timestamps; kcat's JSON output: header values must be UTF-8) the data is
narrowed through the Capabilities of every client involved, never silently dropped.
"""

from __future__ import annotations

import itertools
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from .broker import Broker
from .drivers import (
    DRIVER_NAMES,
    Capabilities,
    ConsumedRecord,
    Delivery,
    Driver,
    DriverUnavailable,
    Record,
    make_driver,
)

# 2023-11-14T22:13:20Z: far enough from "now" that a client stamping its own time is caught.
BASE_TIMESTAMP_MS = 1_700_000_000_000

_topic_counter = itertools.count()


def unique_topic(prefix: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in prefix)
    return f"{safe}-{int(time.time() * 1000) % 10**8}-{next(_topic_counter)}"


def get_driver(name: str, broker: Broker) -> Driver:
    """The driver for ``name`` against ``broker``; skips the test if the client is missing."""
    try:
        return make_driver(name, broker.bootstrap)
    except DriverUnavailable as exc:
        pytest.skip(f"{name} unavailable: {exc}")


#: Clients that can only consume through a consumer group (kafkajs has no assign()).
GROUP_ONLY_CONSUMERS = frozenset({"kafkajs"})


def can_consume(name: str, broker: Broker) -> bool:
    return name not in GROUP_ONLY_CONSUMERS or broker.offers_groups()


def skip_unless_can_consume(name: str, broker: Broker) -> None:
    if not can_consume(name, broker):
        pytest.skip(f"{name} consumes only through a consumer group; the broker does not offer JoinGroup (API 11)")


def rotation(producer: str, salt: int, broker: Broker | None = None) -> str:
    """A consumer other than ``producer``; different ``salt`` values walk all the others
    (only those that can consume from ``broker``)."""
    others = [n for n in DRIVER_NAMES if n != producer and (broker is None or can_consume(n, broker))]
    return others[salt % len(others)]


def sample_records(
    tag: str,
    caps: Sequence[Capabilities],
    *,
    partitions: int = 2,
    timestamps: bool = True,
) -> list[Record]:
    """Six records spread over ``partitions`` partitions, narrowed to what ``caps`` allow.

    ``caps[0]`` is the producer's; the others are the consumers'.
    """
    producer = caps[0]
    binary_keys = producer.binary_keys
    binary_headers = all(c.binary_header_values for c in caps)
    ts = timestamps and producer.explicit_timestamps

    def stamp(i: int) -> int | None:
        return BASE_TIMESTAMP_MS + i * 1000 if ts else None

    header_bytes = b"\x00\x01\xfe\xff bin" if binary_headers else "é€ ctl\x01\x7f".encode()
    odd_key = b"\x00key\xff" if binary_keys else b"k\xfe\xff-\x01"
    raw = [
        (f"k0-{tag}".encode(), b"hello " + tag.encode(), (("h1", b"v1"), ("h2", header_bytes))),
        (None, bytes(range(256)) * 4, ()),
        (f"tomb-{tag}".encode(), None, (("dup", b"first"), ("dup", b"second"))),
        (odd_key, "ünïcødé ✓ ".encode() * 10, (("empty", b""),)),
        (b"compressible", b"abcdefgh" * 4096, (("trace-id", tag.encode()),)),
        (f"empty-{tag}".encode(), b"", ()),
    ]
    return [
        Record(key=k, value=v, headers=h, timestamp_ms=stamp(i), partition=i % partitions)
        for i, (k, v, h) in enumerate(raw)
    ]


@dataclass(frozen=True)
class ProduceRun:
    records: list[Record]
    deliveries: list[Delivery]
    started_ms: int
    finished_ms: int


def produce_timed(
    driver: Driver, topic: str, records: list[Record], *, acks: int = -1, compression: str = "none"
) -> ProduceRun:
    started = int(time.time() * 1000)
    deliveries = driver.produce(topic, records, acks=acks, compression=compression)  # type: ignore[arg-type]
    finished = int(time.time() * 1000)
    return ProduceRun(records, deliveries, started, finished)


def describe(r: ConsumedRecord | Record) -> str:
    def short(b: bytes | None) -> str:
        if b is None:
            return "None"
        return repr(b if len(b) <= 24 else b[:24] + b"...") + f"({len(b)}B)"

    if isinstance(r, ConsumedRecord):
        return f"p{r.partition}@{r.offset} key={short(r.key)} value={short(r.value)}"
    return f"p{r.partition} key={short(r.key)} value={short(r.value)}"


def assert_consumed_matches(
    run: ProduceRun,
    consumed: Sequence[ConsumedRecord],
    *,
    base_offsets: dict[int, int] | None = None,
    clock_skew_ms: int = 5000,
) -> None:
    """Every produced record read back exactly once, in order, at gap-free offsets.

    Checks partition, offset (against the delivery report where the client gave one), key,
    value, headers (order included) and timestamp: the explicit CreateTime, or, when the
    producer could not set one, a time within the produce call.
    """
    expected_by_partition: dict[int, list[tuple[Record, Delivery]]] = defaultdict(list)
    for record, delivery in zip(run.records, run.deliveries, strict=True):
        if record.partition is not None:
            assert delivery.partition == record.partition, (
                f"{describe(record)} was delivered to partition {delivery.partition}"
            )
        expected_by_partition[delivery.partition].append((record, delivery))
    got_by_partition: dict[int, list[ConsumedRecord]] = defaultdict(list)
    for c in consumed:
        got_by_partition[c.partition].append(c)

    assert sorted(got_by_partition) == sorted(expected_by_partition), (
        f"records in partitions {sorted(got_by_partition)}, "
        f"expected {sorted(expected_by_partition)}; got: {[describe(c) for c in consumed]}"
    )
    for partition, expected in expected_by_partition.items():
        got = sorted(got_by_partition[partition], key=lambda c: c.offset)
        assert len(got) == len(expected), (
            f"partition {partition}: read {len(got)} records, produced {len(expected)}: "
            f"{[describe(c) for c in got]}"
        )
        base = (base_offsets or {}).get(partition, got[0].offset if got else 0)
        offsets = [c.offset for c in got]
        assert offsets == list(range(base, base + len(got))), (
            f"partition {partition}: offsets {offsets} are not gap-free from {base}"
        )
        for (record, delivery), c in zip(expected, got, strict=True):
            where = f"partition {partition} offset {c.offset}"
            if delivery.offset is not None:
                assert delivery.offset == c.offset, (
                    f"{where}: the producer was told offset {delivery.offset}"
                )
            assert c.key == record.key, f"{where}: key {c.key!r} != {record.key!r}"
            assert c.value == record.value, f"{where}: value {describe(c)} != {describe(record)}"
            assert tuple(c.headers) == tuple(record.headers), (
                f"{where}: headers {c.headers!r} != {record.headers!r}"
            )
            if record.timestamp_ms is not None:
                assert c.timestamp_ms == record.timestamp_ms, (
                    f"{where}: timestamp {c.timestamp_ms} != {record.timestamp_ms}"
                )
            else:
                low, high = run.started_ms - clock_skew_ms, run.finished_ms + clock_skew_ms
                assert low <= c.timestamp_ms <= high, (
                    f"{where}: timestamp {c.timestamp_ms} outside the produce call "
                    f"[{run.started_ms}, {run.finished_ms}]"
                )
