"""Exactly-once: idempotent producers and transactions, with each client that has them.

- Every transactional producer (Java, confluent-kafka, kafka-python, aiokafka, kafkajs)
  commits and aborts transactions; read_committed consumers of other clients see every
  committed record whole and at the offset its producer was told, and nothing of an aborted
  transaction; read_uncommitted consumers see both.
- A produce whose response is lost (a proxy drops it and the connection) is retried by the
  client's default, idempotent producer and deduplicated: one copy, at the original offset.
- SIGKILL of the broker in the middle of a transaction: after the restart that transaction
  is aborted (it times out) and never partly visible; one whose commit was acknowledged
  just before the kill is complete after the restart.
- A consume-transform-produce loop (confluent-kafka, ``send_offsets_to_transaction``)
  copies every record once, with the group's offsets committed in the same transactions.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from typing import Any

import pytest

from compat_tests.harness import settings
from compat_tests.harness.broker import Broker
from compat_tests.harness.drivers import ConsumedRecord, Delivery, Record
from compat_tests.harness.proxy import FaultProxy
from compat_tests.harness.quirks import needs_persistent_storage, tansu_quirk
from compat_tests.harness.scenario import BASE_TIMESTAMP_MS, get_driver, unique_topic
from compat_tests.harness.transactions import (
    ISOLATED_CONSUMERS,
    TXN_PRODUCERS,
    TxnOutcome,
    TxnSpec,
    consume_isolated,
    produce_transactions,
    read_committed_to_the_end,
)

PARTITIONS = 2
ABORTED_VISIBLE = "read_committed consumers are handed the records of aborted transactions"
_txn_ids = itertools.count()


def txn_id(tag: str) -> str:
    return f"compat-{tag}-{int(time.time() * 1000) % 10**8}-{next(_txn_ids)}"


def records(tag: str, count: int, *, first: int = 0) -> list[Record]:
    return [
        Record(key=f"{tag}-k{i}".encode(), value=f"{tag}-{i}".encode(), headers=(("h", tag.encode()),),
               timestamp_ms=BASE_TIMESTAMP_MS + i, partition=i % PARTITIONS)
        for i in range(first, first + count)
    ]


def expected_at(outcomes: Sequence[TxnOutcome], specs: Sequence[TxnSpec], *, committed_only: bool
                ) -> dict[tuple[int, int], Record]:
    """(partition, offset) -> record, from what each producer was told."""
    out: dict[tuple[int, int], Record] = {}
    for outcome, spec in zip(outcomes, specs, strict=True):
        if committed_only and not outcome.committed:
            continue
        for record, delivery in zip(spec.records, outcome.deliveries, strict=True):
            assert delivery.offset is not None and delivery.offset >= 0
            out[(delivery.partition, delivery.offset)] = record
    return out


def assert_reads(consumed: Sequence[ConsumedRecord], expected: dict[tuple[int, int], Record], what: str) -> None:
    got = {(c.partition, c.offset): c for c in consumed}
    assert sorted(got) == sorted(expected), f"{what}: read {sorted(got)}, expected {sorted(expected)}"
    for where, record in expected.items():
        c = got[where]
        assert (c.key, c.value) == (record.key, record.value), f"{what} at {where}: {c.value!r} != {record.value!r}"
        assert tuple(c.headers) == tuple(record.headers), f"{what} at {where}: headers {c.headers!r}"


def other(names: Sequence[str], producer: str, salt: int) -> str:
    candidates = [n for n in names if n != producer]
    return candidates[salt % len(candidates)]


# -- transactions, client by client ----------------------------------------------------------


@tansu_quirk(ABORTED_VISIBLE)
@pytest.mark.parametrize("producer", TXN_PRODUCERS)
def test_committed_transactions_are_read_whole_and_aborted_ones_never(broker: Broker, producer: str) -> None:
    writer = get_driver(producer, broker)
    topic = unique_topic(f"txn-{producer}")
    broker.create_topic(topic, PARTITIONS)
    specs = [
        TxnSpec(records("first", 4), commit=True),
        TxnSpec(records("aborted", 3), commit=False),
        TxnSpec(records("second", 3, first=4), commit=True),
    ]
    outcomes = produce_transactions(writer, topic, txn_id(producer), specs)
    assert [o.committed for o in outcomes] == [True, False, True]
    committed = expected_at(outcomes, specs, committed_only=True)
    everything = expected_at(outcomes, specs, committed_only=False)

    salt = TXN_PRODUCERS.index(producer)
    reader = get_driver(other(ISOLATED_CONSUMERS, producer, salt), broker)
    consumed = consume_isolated(reader, topic, range(PARTITIONS), count=len(committed), isolation="read_committed")
    assert_reads(consumed, committed, f"read_committed by {reader.name}")

    reader = get_driver(other(ISOLATED_CONSUMERS, producer, salt + 1), broker)
    consumed = consume_isolated(reader, topic, range(PARTITIONS), count=len(everything),
                                isolation="read_uncommitted")
    assert_reads(consumed, everything, f"read_uncommitted by {reader.name}")


# -- a lost produce response --------------------------------------------------------------------


@pytest.mark.skipif(settings.target() == "tansu", reason="Tansu cannot advertise the proxy's address")
@pytest.mark.parametrize("producer", ["kafka-python", "java"])
def test_a_produce_whose_response_is_lost_is_retried_and_not_duplicated(
    broker_factory: Any, producer: str
) -> None:
    lost = {"left": 1}

    def drop(api_key: int) -> bool:
        if api_key == 0 and lost["left"] > 0:  # the first Produce response
            lost["left"] -= 1
            return True
        return False

    proxy = FaultProxy(drop)
    try:
        broker = broker_factory({"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"})
        proxy.upstream_port = broker.port
        get_driver(producer, broker)  # skips if the client is missing
        topic = unique_topic(f"lost-{producer}")
        broker.create_topic(topic, 1)
        writer = get_driver(producer, broker)
        writer.bootstrap = proxy.bootstrap
        sent = [Record(key=b"k%d" % i, value=b"v%d" % i, partition=0, timestamp_ms=BASE_TIMESTAMP_MS + i)
                for i in range(20)]
        deliveries = writer.produce(topic, sent, acks=-1)
        assert proxy.dropped == [0], "the proxy did not drop a Produce response"
        reader = get_driver("confluent-kafka", broker)
        # Every write was acknowledged: a duplicate would already be in the log, one offset more.
        assert reader.list_offsets(topic, 0, "latest") == len(sent), "a record was written twice"
        consumed = reader.consume(topic, [0], count=len(sent), timeout_s=20)
        values = [c.value for c in consumed]
        assert values == [r.value for r in sent], f"duplicated or lost: {values}"
        assert [d.offset for d in deliveries] == [c.offset for c in consumed]
    finally:
        proxy.close()


# -- SIGKILL ----------------------------------------------------------------------------------------


def _confluent_txn_producer(bootstrap: str, transactional_id: str, timeout_ms: int) -> Any:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": timeout_ms, "linger.ms": 2,
                         "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200})
    producer.init_transactions(20)
    return producer


def _send(producer: Any, topic: str, values: Sequence[bytes]) -> list[Delivery]:
    got: list[Any] = [None] * len(values)
    for i, value in enumerate(values):
        def report(err: Any, msg: Any, i: int = i) -> None:
            got[i] = err if err is not None else msg
        producer.produce(topic, value=value, key=value, partition=i % PARTITIONS, on_delivery=report)
    assert producer.flush(20) == 0
    return [Delivery(m.partition(), m.offset()) for m in got]


@needs_persistent_storage()
def test_sigkill_in_the_middle_of_a_transaction_aborts_it(broker_factory: Any) -> None:
    broker: Broker = broker_factory({"transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"})
    get_driver("confluent-kafka", broker)
    topic = unique_topic("kill-mid-txn")
    broker.create_topic(topic, PARTITIONS)
    tid = txn_id("kill-mid")
    producer = _confluent_txn_producer(broker.bootstrap, tid, 6000)
    producer.begin_transaction()
    before = [b"before-%d" % i for i in range(6)]
    _send(producer, topic, before)
    producer.commit_transaction(20)
    producer.begin_transaction()
    open_values = [b"open-%d" % i for i in range(6)]
    _send(producer, topic, open_values)  # in the log, undecided
    broker.kill9()
    del producer
    broker.start()

    reader = get_driver("java", broker)
    # The open transaction holds read_committed readers back until it times out and is aborted.
    committed = consume_isolated(reader, topic, range(PARTITIONS), count=len(before),
                                 isolation="read_committed", timeout_s=20)
    assert sorted(c.value for c in committed) == sorted(before)

    after = _confluent_txn_producer(broker.bootstrap, tid, 6000)  # the same transactional id carries on
    after.begin_transaction()
    later = [b"later-%d" % i for i in range(4)]
    _send(after, topic, later)
    after.commit_transaction(20)
    committed = consume_isolated(reader, topic, range(PARTITIONS), count=len(before) + len(later),
                                 isolation="read_committed", timeout_s=20)
    assert sorted(c.value for c in committed) == sorted(before + later)
    everything = consume_isolated(get_driver("kafka-python", broker), topic, range(PARTITIONS),
                                  count=len(before) + len(open_values) + len(later), isolation="read_uncommitted")
    assert sorted(c.value for c in everything) == sorted(before + open_values + later)


@needs_persistent_storage()
def test_sigkill_right_after_a_commit_is_acknowledged_completes_it(broker_factory: Any) -> None:
    broker: Broker = broker_factory()
    get_driver("confluent-kafka", broker)
    topic = unique_topic("kill-after-commit")
    broker.create_topic(topic, PARTITIONS)
    producer = _confluent_txn_producer(broker.bootstrap, txn_id("kill-commit"), 60_000)
    producer.begin_transaction()
    values = [b"decided-%d" % i for i in range(10)]
    _send(producer, topic, values)
    producer.commit_transaction(20)
    broker.kill9()  # the markers may or may not be written yet: the decision is durable
    del producer
    broker.start()
    committed = consume_isolated(get_driver("java", broker), topic, range(PARTITIONS), count=len(values),
                                 isolation="read_committed", timeout_s=20)
    assert sorted(c.value for c in committed) == sorted(values)


# -- consume-transform-produce ---------------------------------------------------------------------


@tansu_quirk(ABORTED_VISIBLE)
def test_consume_transform_produce_copies_each_record_once(broker: Broker) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    get_driver("confluent-kafka", broker)
    source, target = unique_topic("ctp-in"), unique_topic("ctp-out")
    broker.create_topic(source, PARTITIONS)
    broker.create_topic(target, PARTITIONS)
    inputs = [Record(key=b"k%d" % i, value=b"in-%d" % i, partition=i % PARTITIONS) for i in range(30)]
    get_driver("confluent-kafka", broker).produce(source, inputs)
    group = f"ctp-{int(time.time() * 1000)}"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "session.timeout.ms": 6000})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id("ctp"),
                         "linger.ms": 2})
    producer.init_transactions(20)
    consumer.subscribe([source])
    copied = 0
    batches = 0
    deadline = time.monotonic() + 60
    try:
        while copied < len(inputs) and time.monotonic() < deadline:
            messages = consumer.consume(num_messages=7, timeout=0.5)
            messages = [m for m in messages if m.error() is None]
            if not messages:
                continue
            producer.begin_transaction()
            for m in messages:
                producer.produce(target, key=m.key(), value=m.value().replace(b"in-", b"out-"),
                                 partition=m.partition())
            positions = consumer.position([TopicPartition(source, p) for p in range(PARTITIONS)])
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 20)
            # Abort every third batch, then rewind: its copies must never be seen.
            if batches % 3 == 2:
                producer.abort_transaction(20)
                committed = consumer.committed([TopicPartition(source, p) for p in range(PARTITIONS)], 20)
                for tp in committed:
                    consumer.seek(TopicPartition(source, tp.partition, max(tp.offset, 0)))
            else:
                producer.commit_transaction(20)
                copied += len(messages)
            batches += 1
    finally:
        consumer.close()
    assert copied == len(inputs)
    expected = sorted((r.value or b"").replace(b"in-", b"out-") for r in inputs)
    out = consume_isolated(get_driver("java", broker), target, range(PARTITIONS), count=len(inputs),
                           isolation="read_committed")
    assert sorted(c.value for c in out) == expected
    # Every transaction ended before this read, so a duplicate would already be in the log.
    everything = read_committed_to_the_end(broker.bootstrap, target, range(PARTITIONS))
    assert sorted(c.value for c in everything) == expected
    check = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        committed = check.committed([TopicPartition(source, p) for p in range(PARTITIONS)], 20)
    finally:
        check.close()
    assert {tp.partition: tp.offset for tp in committed} == {
        p: sum(1 for r in inputs if r.partition == p) for p in range(PARTITIONS)}
