"""The broker's own retention loop (paced on its event loop) deletes what has expired, on a
real broker process, and leaves the rest."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from tests.broker.broker_process import BrokerProcess
from tests.broker.scale_clients import produce_one_each


def test_the_retention_loop_deletes_expired_segments_of_every_partition(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", {"log.retention.check.interval.ms": "300"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        futures = admin.create_topics([
            NewTopic("short", 50, 1, config={"retention.ms": "1000"}),
            NewTopic("long", 5, 1),
        ])
        for future in futures.values():
            future.result(timeout=60)
        assert produce_one_each(broker.bootstrap, ["short", "long"], 5, "old") == {}
        assert produce_one_each(broker.bootstrap, ["short"], 50, "old") == {}
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "retention-check"})
        try:
            deadline = time.monotonic() + 60
            starts: list[int] = []
            while time.monotonic() < deadline:
                starts = [consumer.get_watermark_offsets(TopicPartition("short", p), timeout=10)[0] for p in range(50)]
                if all(start == (2 if p < 5 else 1) for p, start in enumerate(starts)):
                    break
                time.sleep(0.5)
            assert starts == [2] * 5 + [1] * 45
            assert [consumer.get_watermark_offsets(TopicPartition("long", p), timeout=10) for p in range(5)] == [(0, 1)] * 5
        finally:
            consumer.close()
        assert "retention_applied" in broker.logs()
    finally:
        broker.kill9()
