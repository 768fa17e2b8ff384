"""Clients for the partition-scale tests: librdkafka (confluent-kafka) against a broker process."""

from __future__ import annotations

import time
from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topics(bootstrap: str, names: Iterable[str], partitions: int, timeout_s: float = 60) -> dict[str, str | None]:
    """Create the topics in one request; each topic's error (None when created)."""
    client = admin(bootstrap)  # kept alive until the futures are done
    futures = client.create_topics(
        [NewTopic(name, partitions, 1) for name in names], request_timeout=timeout_s
    )
    out: dict[str, str | None] = {}
    for name, future in futures.items():
        try:
            future.result(timeout=timeout_s)
            out[name] = None
        except KafkaException as exc:
            out[name] = f"{exc.args[0].name()}: {exc.args[0].str()}"
    return out


def produce_one_each(
    bootstrap: str, topics: Iterable[str], partitions: int, tag: str, timeout_s: float = 120
) -> dict[tuple[str, int], str]:
    """One record ``tag`` to every partition; the delivery errors by partition (empty if all landed)."""
    producer = Producer({
        "bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all",
        "message.timeout.ms": int(timeout_s * 1000), "queue.buffering.max.messages": 1_000_000,
        "retries": 0 if timeout_s < 30 else 2147483647,
    })
    errors: dict[tuple[str, int], str] = {}

    def delivered(err: object, msg: object) -> None:
        if err is not None:
            errors[(msg.topic(), msg.partition())] = str(err)  # type: ignore[attr-defined]

    for topic in topics:
        for p in range(partitions):
            producer.produce(topic, value=f"{tag} {topic} {p}".encode(), partition=p, on_delivery=delivered)
            producer.poll(0)
    left = producer.flush(timeout_s)
    assert left == 0, f"{left} records not delivered in {timeout_s}s"
    return errors


def read_all(
    bootstrap: str, topics: Iterable[str], partitions: int, expected: int, timeout_s: float = 120
) -> dict[tuple[str, int], list[bytes]]:
    """Every record of every partition from offset 0, until ``expected`` records arrived."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "scale-reader", "enable.auto.commit": False,
        "fetch.wait.max.ms": 100,
    })
    consumer.assign([TopicPartition(t, p, 0) for t in topics for p in range(partitions)])
    got: dict[tuple[str, int], list[bytes]] = {}
    count = 0
    deadline = time.monotonic() + timeout_s
    try:
        while count < expected and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, timeout=1.0):
                if msg.error() is not None:
                    continue
                got.setdefault((msg.topic(), msg.partition()), []).append(msg.value())
                count += 1
    finally:
        consumer.close()
    return got
