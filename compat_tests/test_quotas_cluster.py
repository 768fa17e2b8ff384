"""Quotas in a 3-node cluster: a ``producer_byte_rate`` quota set through one broker (it reaches
the others as a ClientQuotaRecord in the metadata log) throttles a librdkafka producer writing to
a partition led by another broker, and ``max.connections.per.ip`` refuses the extra connections
to a node while the ones it holds keep being served.

Short quota windows (``quota.window.num=2``, ``quota.window.size.seconds=1``) keep the run short.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from broker.tools.client import ClientError, KafkaClient
from compat_tests.harness import settings
from compat_tests.harness.cluster import LocalCluster
from compat_tests.harness.scenario import unique_topic
from wire.generated.api_003_metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from wire.generated.api_018_api_versions import ApiVersionsRequest, ApiVersionsResponse
from wire.generated.api_019_create_topics import (
    CreateTopicsRequest,
    CreateTopicsRequestCreatableTopic,
    CreateTopicsResponse,
)
from wire.generated.api_049_alter_client_quotas import (
    AlterClientQuotasRequest,
    AlterClientQuotasRequestEntityData,
    AlterClientQuotasRequestEntryData,
    AlterClientQuotasRequestOpData,
    AlterClientQuotasResponse,
)

pytestmark = pytest.mark.skipif(settings.target() != "cormorant", reason="a Cormorant cluster")

QUOTA = 100_000  # bytes per second
#: Every connection from 127.0.0.1 to a node counts, the other nodes' ones too when they hold any.
MAX_CONNECTIONS_PER_IP = 24


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("quota-cluster") / "nodes", overrides={
        "quota.window.num": "2", "quota.window.size.seconds": "1",
        "max.connections.per.ip": str(MAX_CONNECTIONS_PER_IP)})
    c.up()
    try:
        yield c
    finally:
        c.down()


def _leaders(server: str, topic: str) -> dict[int, int]:
    with KafkaClient.connect(server, timeout_s=10) as c:
        reply = c.send(MetadataRequest(topics=[MetadataRequestTopic(name=topic)],
                                       allow_auto_topic_creation=False), MetadataResponse, 9)
    return {p.partition_index: p.leader_id for p in reply.topics[0].partitions if p.error_code == 0}


def _alive(client: KafkaClient) -> bool:
    return bool(client.send(ApiVersionsRequest(), ApiVersionsResponse, 0).error_code == 0)


def test_a_quota_set_at_one_broker_throttles_at_another(cluster: LocalCluster) -> None:
    from confluent_kafka import Producer

    topic = unique_topic("quota-cluster")
    with KafkaClient.connect(cluster.server_of(1), timeout_s=20) as c:
        created = c.send(CreateTopicsRequest(timeout_ms=20_000, topics=[CreateTopicsRequestCreatableTopic(
            name=topic, num_partitions=3, replication_factor=1)]), CreateTopicsResponse)
        assert created.topics[0].error_code == 0
    leaders = cluster.wait_for(lambda: len(_leaders(cluster.servers[0], topic)) == 3 and _leaders(
        cluster.servers[0], topic), 30, "leaders of every partition")
    assert isinstance(leaders, dict)
    leader = leaders[0]
    elsewhere = next(n for n in range(1, cluster.nodes + 1) if n != leader)
    client_id = unique_topic("quota-client")
    with KafkaClient.connect(cluster.server_of(elsewhere), timeout_s=20) as c:
        reply = c.send(AlterClientQuotasRequest(entries=[AlterClientQuotasRequestEntryData(
            entity=[AlterClientQuotasRequestEntityData(entity_type="client-id", entity_name=client_id)],
            ops=[AlterClientQuotasRequestOpData(key="producer_byte_rate", value=float(QUOTA))])]),
            AlterClientQuotasResponse)
        assert reply.entries[0].error_code == 0

    throttles: list[tuple[int, float]] = []

    def on_throttle(event: Any) -> None:
        throttles.append((event.broker_id, event.throttle_time))

    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err.name())

    producer = Producer({"bootstrap.servers": cluster.server_of(leader), "client.id": client_id, "acks": "1",
                         "linger.ms": 5, "message.timeout.ms": 30_000, "throttle_cb": on_throttle})
    started = time.monotonic()
    # 600 kB (librdkafka sends them in a few requests at once), then one more record: at 100 kB/s the
    # broker mutes the connection for seconds after the first, so the last is answered that much later.
    for batch in (60, 1):
        for _ in range(batch):
            producer.produce(topic, bytes(10_000), partition=0, on_delivery=on_delivery)
            producer.poll(0)
        assert producer.flush(40) == 0
    held = time.monotonic() - started
    print(f"610 kB to node {leader} with the quota set at node {elsewhere}: {held:.1f} s, throttles {throttles}")
    assert errors == []
    assert held >= 3.0, held
    assert any(broker == leader and seconds > 0 for broker, seconds in throttles), throttles


def test_connections_over_the_per_ip_limit_are_refused_and_the_rest_served(cluster: LocalCluster) -> None:
    server = cluster.server_of(2)
    held: list[KafkaClient] = []
    refused = False
    try:
        for _ in range(MAX_CONNECTIONS_PER_IP + 1):
            try:
                held.append(KafkaClient.connect(server, timeout_s=5))
            except (ClientError, OSError):
                refused = True
                break
        print(f"node 2 accepted {len(held)} client connections from 127.0.0.1 before refusing one")
        assert refused
        assert 0 < len(held) <= MAX_CONNECTIONS_PER_IP
        node_log = (cluster.dir / "node-2" / "node.log").read_text(errors="replace")
        assert "connection_refused" in node_log and f"limit={MAX_CONNECTIONS_PER_IP}" in node_log
        assert all(_alive(c) for c in held)
        # Another node counts its own connections: it still accepts.
        with KafkaClient.connect(cluster.server_of(3), timeout_s=5) as other:
            assert _alive(other)
        # One closed, one more accepted.
        held.pop().close()
        def reconnect() -> bool:
            held.append(KafkaClient.connect(server, timeout_s=5))
            return True

        cluster.wait_for(reconnect, 10, "a connection once one is freed")
        assert all(_alive(c) for c in held)
    finally:
        for c in held:
            c.close()
