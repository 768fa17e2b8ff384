"""A restart is summarised at info level: no line per partition, no warning about the
broker's own directories (internal topics and the metadata log included)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.broker.broker_process import BrokerProcess

confluent_kafka = pytest.importorskip("confluent_kafka")


def _use_topics_and_a_group(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic("orders", 3, 1), NewTopic("payments", 3, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for topic in ("orders", "payments"):
        producer.produce(topic, b"one")
    assert producer.flush(30) == 0
    # A group commit creates __consumer_offsets (50 partitions by default).
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "restart-log",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["orders"])
    try:
        for _ in range(60):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                consumer.commit(message, asynchronous=False)
                break
        else:
            pytest.fail("the consumer read nothing within 30 s")
    finally:
        consumer.close()


def test_restart_logs_a_summary_not_a_line_per_partition(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", {"log.format": "json"}).start()
    try:
        _use_topics_and_a_group(broker.bootstrap)
        broker.stop()
        before = len(broker.logs())
        broker.start()
        restart = broker.logs()[before:]
    finally:
        broker.stop()
    events = [json.loads(line) for line in restart.splitlines() if line.startswith("{")]
    assert events, restart[-2000:]
    loud = [e for e in events if e.get("level") in ("warning", "error", "critical")]
    assert loud == [], loud
    # 56 partitions (two topics of 3, __consumer_offsets' 50) and the metadata log: a few summary lines.
    assert len(events) <= 15, [e.get("event") for e in events]
    loaded = [e for e in events if e.get("event") == "log_dir_loaded"]
    assert loaded and loaded[0]["partitions"] == 56, loaded
