"""Share-group metrics read back from a real broker's Prometheus endpoint after a
confluent-kafka ShareConsumer has acquired, accepted, released and rejected records: the
counts match what the consumer did (docs/metrics.md, "Share groups")."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.observability.helpers import MetricsBroker, scrape, value

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")
if not hasattr(confluent_kafka, "ShareConsumer"):
    pytest.skip("confluent-kafka without ShareConsumer", allow_module_level=True)

TOPIC, GROUP, RECORDS = "obs-share", "obs-share-group", 6
TIMEOUT_S = 30.0
OVERRIDES = {"offsets.topic.num.partitions": "1", "offsets.topic.replication.factor": "1",
             "share.coordinator.state.topic.num.partitions": "1",
             "share.coordinator.state.topic.replication.factor": "1"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MetricsBroker]:
    b = MetricsBroker(tmp_path_factory.mktemp("obs-share") / "data", OVERRIDES).start()
    try:
        yield b
    finally:
        b.stop()


def setup_queue(bootstrap: str) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewTopic,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(20)
    resource = ConfigResource(ResourceType.GROUP, GROUP, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(20)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(RECORDS):
        p.produce(TOPIC, value=f"v{i}".encode(), partition=0)
    assert p.flush(20) == 0


def test_share_consumption_is_counted(broker: MetricsBroker) -> None:
    from confluent_kafka import AcknowledgeType, ShareConsumer

    setup_queue(broker.bootstrap)
    c = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP,
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([TOPIC])
    delivered: list[tuple[int, int]] = []
    try:
        first: list[Any] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(first) < RECORDS and time.monotonic() < deadline:
            first.extend(m for m in c.poll(0.5) or [] if m.error() is None)
        assert sorted(m.offset() for m in first) == list(range(RECORDS))
        delivered.extend((m.offset(), m.delivery_count()) for m in first)
        # 0-3 accepted, 4 released (delivered again, then accepted), 5 rejected
        for m in first:
            kind = {4: AcknowledgeType.RELEASE, 5: AcknowledgeType.REJECT}.get(m.offset(), AcknowledgeType.ACCEPT)
            c.acknowledge(m, kind)
        c.commit_sync()
        again: list[Any] = []
        deadline = time.monotonic() + TIMEOUT_S
        while not again and time.monotonic() < deadline:
            again.extend(m for m in c.poll(0.5) or [] if m.error() is None)
        assert [(m.offset(), m.delivery_count()) for m in again] == [(4, 2)]
        c.acknowledge(again[0], AcknowledgeType.ACCEPT)
        c.commit_sync()
        samples = scrape(broker.metrics_url)
        assert value(samples, "cormorant_share_group_count", state="Stable") == 1
    finally:
        c.close()

    def counted() -> dict[str, float]:
        s = scrape(broker.metrics_url)
        return {
            "requests": value(s, "cormorant_share_acknowledgements_total"),
            "accept": value(s, "cormorant_share_records_acknowledged_total", ack_type="accept"),
            "release": value(s, "cormorant_share_records_acknowledged_total", ack_type="release"),
            "reject": value(s, "cormorant_share_records_acknowledged_total", ack_type="reject"),
            "acquired": value(s, "cormorant_share_records_acquired_total"),
            "rejected": value(s, "cormorant_share_records_archived_total", reason="rejected"),
            "exceeded": value(s, "cormorant_share_records_archived_total", reason="delivery_count_exceeded"),
            "loads": value(s, "cormorant_share_partition_load_duration_seconds_count"),
            "writes": value(s, "cormorant_share_coordinator_writes_total"),
            "write_latencies": value(s, "cormorant_share_coordinator_write_duration_seconds_count"),
            "rebalances": value(s, "cormorant_share_group_rebalances_total"),
            "empty": value(s, "cormorant_share_group_count", state="Empty"),
        }

    deadline = time.monotonic() + 10
    while (got := counted())["empty"] != 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert (got["accept"], got["release"], got["reject"]) == (5, 1, 1), got
    assert (got["acquired"], got["rejected"], got["exceeded"]) == (RECORDS + 1, 1, 0), got
    assert got["requests"] >= 2 and got["loads"] == 1, got
    # every acquisition and acknowledgement was written at the share coordinator (this node)
    assert got["writes"] >= 3 and got["write_latencies"] == got["writes"], got
    assert got["rebalances"] >= 2 and got["empty"] == 1, got  # joined, then left
