"""Real clients against a single node and a 3-node ``cormorant cluster up`` cluster.

Both targets keep Kafka's ``group.initial.rebalance.delay.ms`` (3000 ms) and set ``node.id``
(as every node ``cluster up`` starts does).

- DescribeConfigs of every broker (all settings with synonyms, and ``broker.id``/``node.id``
  by name) answers on every node.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

import pytest

from broker.client import KafkaClient
from compat_tests.harness.cluster import LocalCluster
from compat_tests.harness.drivers import make_driver
from compat_tests.harness.drivers.base import DriverUnavailable
from wire.errors import ErrorCode
from wire.generated.api_032_describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsRequestDescribeConfigsResource,
    DescribeConfigsResponse,
)

PARTITIONS = 2
INPUTS = 30
CTP_TIMEOUT_S = 90
_serial = itertools.count()


class Target:
    """What a test needs of a single node or a cluster."""

    def __init__(self, name: str, bootstrap: str, node_ids: list[int], servers: list[str],
                 cluster: LocalCluster | None) -> None:
        self.name = name
        self.bootstrap = bootstrap
        self.node_ids = node_ids
        self.servers = servers
        self.cluster = cluster

    def driver(self, client: str) -> Any:
        try:
            return make_driver(client, self.bootstrap)
        except DriverUnavailable as exc:
            pytest.skip(f"{client} unavailable: {exc}")

    def create_topic(self, name: str, partitions: int) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics([NewTopic(name, partitions, -1)], operation_timeout=20, request_timeout=30)
        futures[name].result(30)
        # Every broker must know the topic's leaders before clients use it.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            described = admin.list_topics(name, timeout=10).topics.get(name)
            if described is not None and described.error is None and len(described.partitions) == partitions \
                    and all(p.leader >= 0 for p in described.partitions.values()):
                return
            time.sleep(0.2)
        raise AssertionError(f"topic {name} has no leaders after 20 s")

    def ids(self, tag: str) -> tuple[str, str]:
        """A group id and a transactional id; on a cluster, coordinated by different nodes."""
        unique = f"{tag}-{int(time.time() * 1000) % 10**8}-{next(_serial)}"
        if self.cluster is None:
            return f"{unique}-group", f"{unique}-txn"
        group_id, txn_id, group_node, txn_node = self.cluster.separated_coordinators(unique)
        assert group_node != txn_node
        return group_id, txn_id


@pytest.fixture(scope="module", params=["single", "cluster"])
def target(request: pytest.FixtureRequest, broker_factory: Any,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    if request.param == "single":
        broker = broker_factory({"node.id": "1", "group.initial.rebalance.delay.ms": "3000"})
        try:
            yield Target("single", broker.bootstrap, [1], [broker.bootstrap], None)
        finally:
            broker.close()
        return
    cluster = LocalCluster(tmp_path_factory.mktemp("cluster") / "nodes")
    cluster.up()
    try:
        yield Target("cluster", cluster.bootstrap, [1, 2, 3], cluster.servers, cluster)
    finally:
        cluster.down()


# -- DescribeConfigs of brokers -------------------------------------------------------------------------


def test_every_node_describes_its_broker_configs(target: Target) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": target.bootstrap})
    for node_id, server in zip(target.node_ids, target.servers, strict=True):
        resource = ConfigResource(ResourceType.BROKER, str(node_id))
        configs = admin.describe_configs([resource], request_timeout=20)[resource].result(30)
        for key in ("node.id", "broker.id"):
            entry = configs[key]
            assert entry.value == str(node_id), (node_id, key, entry.value)
            assert entry.source == ConfigSource.STATIC_BROKER_CONFIG.value, (key, entry.source)
            assert key in entry.synonyms, (key, entry.synonyms)
        # Named keys with synonyms, straight to the node (a broker answers only for itself).
        request = DescribeConfigsRequest(
            resources=[DescribeConfigsRequestDescribeConfigsResource(
                resource_type=ResourceType.BROKER.value, resource_name=str(node_id),
                configuration_keys=["broker.id", "node.id"])],
            include_synonyms=True)
        with KafkaClient.connect(server, timeout_s=10) as client:
            result = client.send(request, DescribeConfigsResponse).results[0]
        assert result.error_code == ErrorCode.NONE, result.error_message
        assert {c.name: c.value for c in result.configs} == {"broker.id": str(node_id), "node.id": str(node_id)}
        for entry in result.configs:
            assert (entry.synonyms[0].name, entry.synonyms[0].value) == (entry.name, str(node_id)), entry.synonyms
