"""ACLs in a 3-node cluster: an ACL created through one broker reaches the others through the
metadata log within a second, and a real client bootstrapped at another broker is refused.

The nodes run the StandardAuthorizer with ``allow.everyone.if.no.acl.found=true`` and no ACL on
the cluster, so the brokers (User:ANONYMOUS over PLAINTEXT, as every client) keep CLUSTER_ACTION
for replication; acks=all produces show that replication still works.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from broker.tools.client import KafkaClient
from compat_tests.harness import settings
from compat_tests.harness.cluster import LocalCluster
from compat_tests.harness.scenario import unique_topic
from wire.generated.api_003_metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from wire.generated.api_019_create_topics import (
    CreateTopicsRequest,
    CreateTopicsRequestCreatableTopic,
    CreateTopicsResponse,
)
from wire.generated.api_030_create_acls import (
    CreateAclsRequest,
    CreateAclsRequestAclCreation,
    CreateAclsResponse,
)

pytestmark = pytest.mark.skipif(settings.target() != "cormorant", reason="a Cormorant cluster")
#: The client these tests drive, as the matrix names it.
MATRIX_CLIENT = "confluent-kafka"

TOPIC_AUTHORIZATION_FAILED = 29
PROPAGATION_BOUND_S = 1.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("acl-cluster") / "nodes", overrides={
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "true"})
    c.up()
    try:
        yield c
    finally:
        c.down()


def _produce(bootstrap: str, topic: str) -> str | None:
    """One acks=all record through confluent-kafka; None, or the error's name."""
    from confluent_kafka import Producer

    errors: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 15000})
    producer.produce(topic, b"v", on_delivery=lambda err, _msg: err is not None and errors.append(err.name()))
    remaining = producer.flush(20)
    assert remaining == 0
    return errors[0] if errors else None


def _metadata_error(server: str, topic: str) -> int:
    with KafkaClient.connect(server, timeout_s=10) as c:
        response = c.send(MetadataRequest(topics=[MetadataRequestTopic(name=topic)],
                                          allow_auto_topic_creation=False), MetadataResponse, 9)
    return response.topics[0].error_code


def test_acl_created_at_one_broker_is_enforced_by_the_others(cluster: LocalCluster) -> None:
    topic = unique_topic("acl-cluster")
    with KafkaClient.connect(cluster.server_of(1), timeout_s=20) as c:
        created = c.send(CreateTopicsRequest(timeout_ms=20_000, topics=[CreateTopicsRequestCreatableTopic(
            name=topic, num_partitions=1, replication_factor=3)]), CreateTopicsResponse)
        assert created.topics[0].error_code == 0
    cluster.wait_for(lambda: all(_metadata_error(s, topic) == 0 for s in cluster.servers), 30, "topic everywhere")
    assert _produce(cluster.server_of(3), topic) is None

    with KafkaClient.connect(cluster.server_of(1), timeout_s=20) as c:
        acl = c.send(CreateAclsRequest(creations=[CreateAclsRequestAclCreation(
            resource_type=2, resource_name=topic, resource_pattern_type=3, principal="User:alice", host="*",
            operation=2, permission_type=3)]), CreateAclsResponse)
        assert acl.results[0].error_code == 0
    created_at = time.monotonic()
    seen_at: dict[str, float] = {}
    while len(seen_at) < len(cluster.servers) and time.monotonic() - created_at < 10:
        for server in cluster.servers:
            if server not in seen_at and _metadata_error(server, topic) == TOPIC_AUTHORIZATION_FAILED:
                seen_at[server] = time.monotonic() - created_at
    print(f"ACL propagation (s after CreateAcls answered): {seen_at}")
    assert set(seen_at) == set(cluster.servers), seen_at
    assert max(seen_at.values()) < PROPAGATION_BOUND_S, seen_at
    assert _produce(cluster.server_of(3), topic) == "TOPIC_AUTHORIZATION_FAILED"
    assert _produce(cluster.server_of(2), topic) == "TOPIC_AUTHORIZATION_FAILED"
