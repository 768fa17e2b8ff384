"""Transactional producers and isolation-level consumers, one implementation per client
(test_exactly_once.py).

``produce_transactions`` runs one transactional producer (the client's defaults: idempotent,
acks=all) through a list of transactions, each committed or aborted, and returns where every
record was written — aborted ones included, they occupy offsets too. ``consume_isolated``
reads partitions from the beginning with ``read_committed`` or ``read_uncommitted``.

The Python clients run in process; Java and kafkajs run their drivers' ``txn_produce`` and
``consume_isolated`` ops (compat_tests/java/.../Transactions.java, compat_tests/node/
transactions.js). kcat has no transactional producer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from . import settings
from .drivers import ClientError, ConsumedRecord, Delivery, Driver, Record, Unsupported
from .drivers.base import sort_consumed
from .drivers.jsonproc import JsonProcessDriver, b64, unb64

Isolation = Literal["read_committed", "read_uncommitted"]
#: Clients with a transactional producer.
TXN_PRODUCERS = ("java", "java4", "confluent-kafka", "kafka-python", "aiokafka", "kafkajs")
#: Clients whose consumer can read at either isolation level.
ISOLATED_CONSUMERS = ("java", "confluent-kafka", "kafka-python", "aiokafka", "kafkajs")
TXN_TIMEOUT_MS = 30_000


@dataclass(frozen=True, slots=True)
class TxnSpec:
    records: Sequence[Record]
    commit: bool


@dataclass(frozen=True, slots=True)
class TxnOutcome:
    deliveries: list[Delivery]
    committed: bool


def produce_transactions(
    driver: Driver, topic: str, transactional_id: str, transactions: Sequence[TxnSpec]
) -> list[TxnOutcome]:
    if isinstance(driver, JsonProcessDriver):
        result = driver.call(
            "txn_produce",
            topic=topic,
            transactional_id=transactional_id,
            transactions=[
                {"commit": t.commit, "records": [_record_json(r) for r in t.records]} for t in transactions
            ],
        )
        return [
            TxnOutcome([Delivery(int(p), int(o)) for p, o in t["deliveries"]], bool(t["committed"]))
            for t in result["transactions"]
        ]
    if driver.name == "confluent-kafka":
        return _confluent_produce(driver, topic, transactional_id, transactions)
    if driver.name == "kafka-python":
        return _kafka_python_produce(driver, topic, transactional_id, transactions)
    if driver.name == "aiokafka":
        return _aiokafka_produce(driver, topic, transactional_id, transactions)
    raise Unsupported(f"{driver.name} has no transactional producer")


def consume_isolated(
    driver: Driver,
    topic: str,
    partitions: Sequence[int],
    *,
    count: int,
    isolation: Isolation,
    timeout_s: float = 20.0,
) -> list[ConsumedRecord]:
    """Up to ``count`` records from the beginning of ``partitions``, or what arrived in ``timeout_s``."""
    if isinstance(driver, JsonProcessDriver):
        result = driver.call(
            "consume_isolated",
            timeout_s=timeout_s + settings.SUBPROCESS_TIMEOUT_S,
            topic=topic,
            partitions=list(partitions),
            count=count,
            isolation=isolation,
            timeout_ms=int(timeout_s * 1000),
        )
        return sort_consumed([
            ConsumedRecord(r["partition"], r["offset"], unb64(r["key"]), unb64(r["value"]),
                           tuple((n, unb64(v)) for n, v in r["headers"]), r["timestamp"])
            for r in result["records"]
        ])
    if driver.name == "confluent-kafka":
        return _confluent_consume(driver, topic, partitions, count, isolation, timeout_s)
    if driver.name == "kafka-python":
        return _kafka_python_consume(driver, topic, partitions, count, isolation, timeout_s)
    if driver.name == "aiokafka":
        return _aiokafka_consume(driver, topic, partitions, count, isolation, timeout_s)
    raise Unsupported(f"{driver.name} cannot choose an isolation level")


def read_committed_to_the_end(bootstrap: str, topic: str, partitions: Sequence[int],
                              timeout_s: float = 20.0) -> list[ConsumedRecord]:
    """Every committed record of ``partitions``, read (confluent-kafka, read_committed) until
    the end of each: once every transaction has ended, this is all a read_committed consumer can
    ever see, so a duplicate shows without waiting for one that might come."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "client.id": "compat-confluent-txn",
        "group.id": f"compat-confluent-txn-{time.monotonic_ns()}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": "read_committed",
    })
    out: list[ConsumedRecord] = []
    at_end: set[int] = set()
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        deadline = time.monotonic() + timeout_s
        while at_end != set(partitions):
            if time.monotonic() >= deadline:
                raise AssertionError(f"{topic}: partitions {sorted(set(partitions) - at_end)} not read to "
                                     f"their end within {timeout_s} s")
            for m in consumer.consume(num_messages=500, timeout=0.3):
                error, partition, offset = m.error(), m.partition(), m.offset()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(partition if partition is not None else -1)
                elif error is not None:
                    raise ClientError("confluent-kafka", error.str(), code=error.code())
                elif partition is not None and offset is not None:
                    at_end.discard(partition)
                    headers = cast("list[tuple[str, bytes | None]]", m.headers() or [])
                    out.append(ConsumedRecord(partition, offset, m.key(), m.value(), tuple(headers),
                                              m.timestamp()[1]))
    finally:
        consumer.close()
    return sort_consumed(out)


def _record_json(r: Record) -> dict[str, Any]:
    return {
        "key": b64(r.key),
        "value": b64(r.value),
        "headers": [[name, b64(value)] for name, value in r.headers],
        "timestamp": r.timestamp_ms,
        "partition": r.partition,
    }


# -- confluent-kafka ------------------------------------------------------------------------


def _confluent_produce(driver: Driver, topic: str, transactional_id: str,
                       transactions: Sequence[TxnSpec]) -> list[TxnOutcome]:
    from confluent_kafka import KafkaException, Producer

    producer = Producer({
        "bootstrap.servers": driver.bootstrap,
        "client.id": "compat-confluent-txn",
        "transactional.id": transactional_id,
        "transaction.timeout.ms": TXN_TIMEOUT_MS,
        "linger.ms": 5,
        "socket.timeout.ms": settings.REQUEST_TIMEOUT_MS,
        "message.timeout.ms": settings.DELIVERY_TIMEOUT_MS,
    })
    timeout_s = settings.API_TIMEOUT_MS / 1000
    outcomes = []
    try:
        producer.init_transactions(timeout_s)
        for txn in transactions:
            producer.begin_transaction()
            results: list[Any] = [None] * len(txn.records)

            def on_delivery(index: int, results: list[Any] = results) -> Any:
                def callback(err: Any, msg: Any) -> None:
                    results[index] = err if err is not None else msg
                return callback

            for i, r in enumerate(txn.records):
                kwargs: dict[str, Any] = {"value": r.value, "key": r.key, "headers": list(r.headers),
                                          "on_delivery": on_delivery(i)}
                if r.partition is not None:
                    kwargs["partition"] = r.partition
                if r.timestamp_ms is not None:
                    kwargs["timestamp"] = r.timestamp_ms
                producer.produce(topic, **kwargs)
            # Deliver before ending, so aborted records land in the log (abort would purge them).
            if producer.flush(settings.DELIVERY_TIMEOUT_MS / 1000):
                raise ClientError(driver.name, "records still undelivered after flush")
            deliveries = []
            for result in results:
                if result is None or not hasattr(result, "partition"):
                    raise ClientError(driver.name, f"delivery failed: {result}")
                deliveries.append(Delivery(result.partition(), result.offset()))
            if txn.commit:
                producer.commit_transaction(timeout_s)
            else:
                producer.abort_transaction(timeout_s)
            outcomes.append(TxnOutcome(deliveries, txn.commit))
    except KafkaException as exc:
        err = exc.args[0] if exc.args else exc
        raise ClientError(driver.name, str(err), code=getattr(err, "code", lambda: None)()) from exc
    finally:
        producer.flush(5)
    return outcomes


def _confluent_consume(driver: Driver, topic: str, partitions: Sequence[int], count: int,
                       isolation: Isolation, timeout_s: float) -> list[ConsumedRecord]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": driver.bootstrap,
        "client.id": "compat-confluent-txn",
        "group.id": f"compat-confluent-txn-{time.monotonic_ns()}",
        "enable.auto.commit": False,
        "enable.partition.eof": False,
        "fetch.wait.max.ms": 200,
        "isolation.level": isolation,
    })
    out: list[ConsumedRecord] = []
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        deadline = time.monotonic() + timeout_s
        while len(out) < count and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=count - len(out), timeout=0.3):
                if m.error() is not None:
                    raise ClientError(driver.name, m.error().str(), code=m.error().code())
                out.append(ConsumedRecord(m.partition(), m.offset(), m.key(), m.value(),
                                          tuple(m.headers() or ()), m.timestamp()[1]))
    finally:
        consumer.close()
    return sort_consumed(out)


# -- kafka-python ---------------------------------------------------------------------------


def _kafka_python_produce(driver: Driver, topic: str, transactional_id: str,
                          transactions: Sequence[TxnSpec]) -> list[TxnOutcome]:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    producer = KafkaProducer(
        bootstrap_servers=driver.bootstrap,
        client_id="compat-kafka-python-txn",
        transactional_id=transactional_id,
        transaction_timeout_ms=TXN_TIMEOUT_MS,
        request_timeout_ms=settings.REQUEST_TIMEOUT_MS,
        linger_ms=5,
    )
    outcomes = []
    try:
        producer.init_transactions()
        for txn in transactions:
            producer.begin_transaction()
            futures = [
                producer.send(topic, value=r.value, key=r.key, headers=list(r.headers), partition=r.partition,
                              timestamp_ms=r.timestamp_ms)
                for r in txn.records
            ]
            producer.flush(timeout=settings.DELIVERY_TIMEOUT_MS / 1000)
            metas = [f.get(timeout=settings.DELIVERY_TIMEOUT_MS / 1000) for f in futures]
            if txn.commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
            outcomes.append(TxnOutcome([Delivery(m.partition, m.offset) for m in metas], txn.commit))
    except KafkaError as exc:
        raise ClientError(driver.name, str(exc), code=getattr(exc, "errno", None)) from exc
    finally:
        producer.close(timeout=5)
    return outcomes


def _kafka_python_consume(driver: Driver, topic: str, partitions: Sequence[int], count: int,
                          isolation: Isolation, timeout_s: float) -> list[ConsumedRecord]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=driver.bootstrap, client_id="compat-kafka-python-txn",
                             group_id=None, enable_auto_commit=False, fetch_max_wait_ms=200,
                             isolation_level=isolation)
    out: list[ConsumedRecord] = []
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + timeout_s
        while len(out) < count and time.monotonic() < deadline:
            for tp, messages in consumer.poll(timeout_ms=300).items():
                out.extend(ConsumedRecord(tp.partition, m.offset, m.key, m.value, tuple(m.headers), m.timestamp)
                           for m in messages)
    finally:
        consumer.close(autocommit=False)
    return sort_consumed(out)


# -- aiokafka -------------------------------------------------------------------------------


def _aiokafka_produce(driver: Driver, topic: str, transactional_id: str,
                      transactions: Sequence[TxnSpec]) -> list[TxnOutcome]:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError

    async def run() -> list[TxnOutcome]:
        producer = AIOKafkaProducer(bootstrap_servers=driver.bootstrap, client_id="compat-aiokafka-txn",
                                    transactional_id=transactional_id, transaction_timeout_ms=TXN_TIMEOUT_MS,
                                    request_timeout_ms=settings.REQUEST_TIMEOUT_MS, linger_ms=5)
        await producer.start()
        outcomes = []
        try:
            for txn in transactions:
                await producer.begin_transaction()
                futures = [
                    await producer.send(topic, value=r.value, key=r.key, partition=r.partition,
                                        timestamp_ms=r.timestamp_ms, headers=list(r.headers))
                    for r in txn.records
                ]
                metas = [await f for f in futures]
                if txn.commit:
                    await producer.commit_transaction()
                else:
                    await producer.abort_transaction()
                outcomes.append(TxnOutcome([Delivery(m.partition, m.offset) for m in metas], txn.commit))
        finally:
            await producer.stop()
        return outcomes

    try:
        return asyncio.run(asyncio.wait_for(run(), settings.SUBPROCESS_TIMEOUT_S))
    except KafkaError as exc:
        raise ClientError(driver.name, str(exc), code=getattr(exc, "errno", None)) from exc


def _aiokafka_consume(driver: Driver, topic: str, partitions: Sequence[int], count: int,
                      isolation: Isolation, timeout_s: float) -> list[ConsumedRecord]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> list[ConsumedRecord]:
        consumer = AIOKafkaConsumer(bootstrap_servers=driver.bootstrap, client_id="compat-aiokafka-txn",
                                    group_id=None, enable_auto_commit=False, fetch_max_wait_ms=200,
                                    isolation_level=isolation)
        await consumer.start()
        out: list[ConsumedRecord] = []
        try:
            tps = [TopicPartition(topic, p) for p in partitions]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            deadline = time.monotonic() + timeout_s
            while len(out) < count and time.monotonic() < deadline:
                for tp, messages in (await consumer.getmany(timeout_ms=300)).items():
                    out.extend(ConsumedRecord(tp.partition, m.offset, m.key, m.value, tuple(m.headers),
                                              m.timestamp) for m in messages)
        finally:
            await consumer.stop()
        return sort_consumed(out)

    return asyncio.run(asyncio.wait_for(run(), timeout_s + settings.SUBPROCESS_TIMEOUT_S))
