"""Log compaction seen through a real client: confluent-kafka (librdkafka) against a broker
process with a fast log cleaner (``log.cleaner.backoff.ms=100``).

Records carry explicit timestamps so segments roll by ``segment.ms`` on record
time, without waiting: a last record stamped well after the others closes the
segment the updates are in, and the cleaner may then compact it (the active
segment never is). Producers run with idempotence off. Waiting for the
cleaner is a bounded poll: the broker's background task is not observable
otherwise.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from compat_tests.harness.broker import Broker
from compat_tests.harness.quirks import needs_persistent_storage, tansu_quirk
from compat_tests.harness.scenario import unique_topic

pytestmark = tansu_quirk("no log compaction")

CLEANER_OVERRIDES = {"log.cleaner.backoff.ms": "100"}
#: How long the cleaner gets to compact what was written (it runs every 100 ms).
CLEAN_TIMEOUT_S = 60.0
POLL_INTERVAL_S = 0.25
#: One read of the partition from its start to a known last offset.
READ_TIMEOUT_S = 30.0
DELIVERY_TIMEOUT_S = 30.0
INVALID_RECORD = 87
KEYS = 40
UPDATES = 25


@pytest.fixture(scope="module")
def cleaning_broker(broker_factory: Any) -> Iterator[Broker]:
    broker = broker_factory(CLEANER_OVERRIDES)
    yield broker
    broker.close()


def _producer(broker: Broker, idempotent: bool = False) -> Any:
    from confluent_kafka import Producer

    return Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "client.id": "compat-compaction",
            "enable.idempotence": idempotent,
            "acks": "all",
            "linger.ms": 5,
            "batch.num.messages": 20,
            "message.timeout.ms": int(DELIVERY_TIMEOUT_S * 1000),
        }
    )


def _produce(
    broker: Broker,
    topic: str,
    records: list[tuple[bytes, bytes | None, int]],
    idempotent: bool = False,
) -> list[int]:
    """Send ``(key, value, timestamp)`` records to partition 0 with a new producer; their
    offsets, in order."""
    producer = _producer(broker, idempotent)
    offsets: list[int | None] = [None] * len(records)
    errors: list[str] = []

    def delivered(index: int) -> Any:
        def callback(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                offsets[index] = msg.offset()

        return callback

    for i, (key, value, timestamp) in enumerate(records):
        producer.produce(topic, value=value, key=key, partition=0, timestamp=timestamp, on_delivery=delivered(i))
        producer.poll(0)
    assert producer.flush(DELIVERY_TIMEOUT_S) == 0, "records left undelivered"
    assert errors == []
    assert all(offset is not None for offset in offsets)
    return [offset for offset in offsets if offset is not None]


def _read_to(broker: Broker, topic: str, last_offset: int) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record of partition 0 from the beginning through ``last_offset``: (offset, key, value)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"compat-compaction-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
        }
    )
    out: list[tuple[int, bytes | None, bytes | None]] = []
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + READ_TIMEOUT_S
        while (not out or out[-1][0] < last_offset) and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=500, timeout=0.3):
                assert message.error() is None, message.error()
                out.append((message.offset(), message.key(), message.value()))
    finally:
        consumer.close()
    assert out and out[-1][0] == last_offset, "did not read up to the last record"
    return out


def _watermarks(broker: Broker, topic: str) -> tuple[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "compat-compaction-wm"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return int(low), int(high)
    finally:
        consumer.close()


def _wait_for(
    broker: Broker, topic: str, last_offset: int, done: Any
) -> list[tuple[int, bytes | None, bytes | None]]:
    deadline = time.monotonic() + CLEAN_TIMEOUT_S
    while True:
        records = _read_to(broker, topic, last_offset)
        if done(records) or time.monotonic() > deadline:
            return records
        time.sleep(POLL_INTERVAL_S)


def _compacted_topic(broker: Broker, prefix: str, **extra: str) -> str:
    topic = unique_topic(prefix)
    configs = {
        "cleanup.policy": "compact",
        "segment.bytes": "16384",
        "segment.ms": "10000",
        "min.cleanable.dirty.ratio": "0.01",
        **extra,
    }
    broker.create_topic(topic, 1, configs)
    return topic


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
def test_compaction_keeps_one_record_per_key_with_its_latest_value(
    cleaning_broker: Broker, idempotent: bool
) -> None:
    broker = cleaning_broker
    topic = _compacted_topic(broker, "compact-latest")
    start = int(time.time() * 1000) - 120_000
    updates = [
        (f"key-{k:02d}".encode(), f"value-{u:02d}-{k:02d}".encode() * 8, start + u * KEYS + k)
        for u in range(UPDATES)
        for k in range(KEYS)
    ]
    # A second producer overwrites every key: with idempotence the first producer's last
    # batch then holds nothing current and stays as an empty batch, which the consumer skips.
    offsets = _produce(broker, topic, updates[:-KEYS], idempotent)
    offsets += _produce(broker, topic, updates[-KEYS:], idempotent)
    # Stamped past segment.ms: it starts a new segment, closing the one before.
    (last,) = _produce(broker, topic, [(b"end", b"x", start + 60_000)])
    assert last == len(updates) and offsets == list(range(len(updates)))
    low, high = _watermarks(broker, topic)
    assert (low, high) == (0, len(updates) + 1)

    records = _wait_for(broker, topic, last, lambda rs: len(rs) == KEYS + 1)

    latest = {key: (offset, value) for offset, (key, value, _) in zip(offsets, updates, strict=True)}
    expected = sorted([(o, k, v) for k, (o, v) in latest.items()] + [(last, b"end", b"x")])
    assert records == expected, "exactly one record per key, its latest, at its own offset"
    assert [o for o, _, _ in records] == sorted({o for o, _, _ in records})
    assert _watermarks(broker, topic) == (0, len(updates) + 1), "the log end offset never moves"


def test_tombstones_go_after_delete_retention(cleaning_broker: Broker) -> None:
    broker = cleaning_broker
    retention_ms = 1_000
    topic = _compacted_topic(broker, "compact-tombstones", **{"delete.retention.ms": str(retention_ms)})
    start = int(time.time() * 1000) - 120_000
    keys = [f"k{i}".encode() for i in range(10)]
    written = [(k, b"value-" + k, start + i) for i, k in enumerate(keys)]
    tombstones = [(k, None, start + 100 + i) for i, k in enumerate(keys[:5])]
    _produce(broker, topic, [*written, *tombstones])
    (first_end,) = _produce(broker, topic, [(b"end-1", b"x", start + 30_000)])

    def tombstones_kept(rs: list[tuple[int, bytes | None, bytes | None]]) -> bool:
        return len(rs) == len(keys) + 1

    records = _wait_for(broker, topic, first_end, tombstones_kept)
    assert [(k, v) for _, k, v in records] == [
        *[(k, b"value-" + k) for k in keys[5:]],
        *[(k, None) for k in keys[:5]],
        (b"end-1", b"x"),
    ], "the first clean keeps the tombstones and drops what they delete"

    # A clean after the horizon drops them; it needs new dirty data to run at all.
    time.sleep(retention_ms / 1000 + 0.2)
    (second_end,) = _produce(broker, topic, [(b"end-2", b"y", start + 60_000)])
    records = _wait_for(broker, topic, second_end, lambda rs: all(v is not None for _, _, v in rs))
    assert [(k, v) for _, k, v in records] == [
        *[(k, b"value-" + k) for k in keys[5:]],
        (b"end-1", b"x"),
        (b"end-2", b"y"),
    ]
    assert _watermarks(broker, topic)[1] == second_end + 1


def test_a_keyless_record_to_a_compacted_topic_is_invalid(cleaning_broker: Broker) -> None:
    from confluent_kafka import KafkaError

    broker = cleaning_broker
    topic = _compacted_topic(broker, "compact-keyless")
    producer = _producer(broker)
    results: list[Any] = []
    producer.produce(topic, value=b"no key", partition=0, on_delivery=lambda err, msg: results.append(err))
    assert producer.flush(DELIVERY_TIMEOUT_S) == 0
    (err,) = results
    assert err is not None and err.code() == KafkaError.INVALID_RECORD == INVALID_RECORD
    # The partition still takes keyed records.
    assert _produce(broker, topic, [(b"k", b"v", int(time.time() * 1000))]) == [0]


@needs_persistent_storage()
def test_a_compacted_log_survives_kill_9_and_keeps_compacting(broker_factory: Any) -> None:
    broker = broker_factory(CLEANER_OVERRIDES)
    try:
        topic = _compacted_topic(broker, "compact-restart")
        start = int(time.time() * 1000) - 120_000
        keys = [f"key-{k}".encode() for k in range(20)]
        first = [(k, f"a-{i}".encode(), start + i) for i in range(5) for k in keys]
        _produce(broker, topic, first)
        (end_1,) = _produce(broker, topic, [(b"end-1", b"x", start + 30_000)])
        expected = [(k, b"a-4") for k in keys] + [(b"end-1", b"x")]
        records = _wait_for(broker, topic, end_1, lambda rs: len(rs) == len(keys) + 1)
        assert [(k, v) for _, k, v in records] == expected

        broker.kill9()
        broker.start()
        assert _read_to(broker, topic, end_1) == records, "recovery keeps the compacted log as it was"
        assert _watermarks(broker, topic) == (0, end_1 + 1)

        second = [(k, f"b-{i}".encode(), start + 40_000 + i) for i in range(3) for k in keys[:10]]
        _produce(broker, topic, second)
        (end_2,) = _produce(broker, topic, [(b"end-2", b"y", start + 80_000)])
        records = _wait_for(broker, topic, end_2, lambda rs: len(rs) == len(keys) + 2)
        values = {k: v for _, k, v in records}
        assert values == {
            **{k: b"b-2" for k in keys[:10]},
            **{k: b"a-4" for k in keys[10:]},
            b"end-1": b"x",
            b"end-2": b"y",
        }
        offsets = [o for o, _, _ in records]
        assert offsets == sorted(set(offsets)) and offsets[-1] == end_2
    finally:
        broker.close()
