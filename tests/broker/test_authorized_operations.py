"""Authorized operations without an authorizer: every operation the resource type supports.

The expected sets are Kafka 3.9's AclEntry.supportedOperations, spelled out here by
AclOperation code: TOPIC {READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8,
DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11}, CLUSTER {CREATE 5, ALTER 7, DESCRIBE 8,
CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12},
GROUP {READ 3, DELETE 6, DESCRIBE 8}. A field not asked for (or not in the version)
keeps the schemas' INT32_MIN. Real admin clients: compat_tests/test_cluster_mode.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from broker.tools.client import KafkaClient
from tests.broker.broker_process import BrokerProcess
from wire.errors import ErrorCode
from wire.generated.api_003_metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from wire.generated.api_010_find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from wire.generated.api_015_describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from wire.generated.api_019_create_topics import (
    CreateTopicsRequest,
    CreateTopicsRequestCreatableTopic,
    CreateTopicsResponse,
)
from wire.generated.api_060_describe_cluster import DescribeClusterRequest, DescribeClusterResponse
from wire.generated.api_075_describe_topic_partitions import (
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsRequestTopicRequest,
    DescribeTopicPartitionsResponse,
)


def bits(*codes: int) -> int:
    return sum(1 << c for c in codes)


TOPIC_OPERATIONS = bits(3, 4, 5, 6, 7, 8, 10, 11)
CLUSTER_OPERATIONS = bits(5, 7, 8, 9, 10, 11, 12)
GROUP_OPERATIONS = bits(3, 6, 8)
NOT_REQUESTED = -(2**31)
TOPIC = "ops-topic"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaClient]:
    broker = BrokerProcess(tmp_path_factory.mktemp("ops") / "data").start()
    try:
        with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
            created = c.send(CreateTopicsRequest(topics=[CreateTopicsRequestCreatableTopic(
                name=TOPIC, num_partitions=2, replication_factor=1)], timeout_ms=10_000), CreateTopicsResponse)
            assert created.topics[0].error_code == ErrorCode.NONE
            yield c
    finally:
        assert broker.stop() == 0, broker.logs()[-3000:]


@pytest.mark.parametrize("version", range(8, 13))
def test_metadata_reports_topic_and_cluster_operations_when_asked(client: KafkaClient, version: int) -> None:
    request = MetadataRequest(topics=[MetadataRequestTopic(name=TOPIC), MetadataRequestTopic(name="ops-missing")],
                              allow_auto_topic_creation=False, include_topic_authorized_operations=True,
                              include_cluster_authorized_operations=version <= 10)
    response = client.send(request, MetadataResponse, version)
    by_name = {t.name: t for t in response.topics}
    assert by_name[TOPIC].error_code == ErrorCode.NONE
    # As Kafka: every topic answered by name carries them, an unknown one too.
    assert by_name["ops-missing"].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert by_name[TOPIC].topic_authorized_operations == TOPIC_OPERATIONS
    assert by_name["ops-missing"].topic_authorized_operations == TOPIC_OPERATIONS
    # v11 dropped the cluster's field (DescribeCluster answers it).
    assert response.cluster_authorized_operations == (CLUSTER_OPERATIONS if version <= 10 else NOT_REQUESTED)

    all_topics = client.send(MetadataRequest(topics=None, include_topic_authorized_operations=True),
                             MetadataResponse, version)
    assert {t.name: t.topic_authorized_operations for t in all_topics.topics}[TOPIC] == TOPIC_OPERATIONS


@pytest.mark.parametrize("version", range(0, 13))
def test_metadata_leaves_operations_unset_unless_asked(client: KafkaClient, version: int) -> None:
    response = client.send(MetadataRequest(topics=[MetadataRequestTopic(name=TOPIC)]), MetadataResponse, version)
    assert response.topics[0].topic_authorized_operations == NOT_REQUESTED
    assert response.cluster_authorized_operations == NOT_REQUESTED


@pytest.mark.parametrize("version", [0, 1])
def test_describe_cluster_reports_cluster_operations(client: KafkaClient, version: int) -> None:
    asked = client.send(DescribeClusterRequest(include_cluster_authorized_operations=True),
                        DescribeClusterResponse, version)
    assert asked.cluster_authorized_operations == CLUSTER_OPERATIONS
    plain = client.send(DescribeClusterRequest(), DescribeClusterResponse, version)
    assert plain.cluster_authorized_operations == NOT_REQUESTED


def test_describe_topic_partitions_reports_topic_operations(client: KafkaClient) -> None:
    response = client.send(DescribeTopicPartitionsRequest(
        topics=[DescribeTopicPartitionsRequestTopicRequest(name=TOPIC)], response_partition_limit=10),
        DescribeTopicPartitionsResponse)
    assert [(t.name, t.topic_authorized_operations) for t in response.topics] == [(TOPIC, TOPIC_OPERATIONS)]


@pytest.mark.parametrize("version", range(3, 6))
def test_describe_groups_reports_group_operations(client: KafkaClient, version: int) -> None:
    deadline = time.monotonic() + 20  # the first FindCoordinator creates __consumer_offsets
    while client.send(FindCoordinatorRequest(key="ops-group"), FindCoordinatorResponse, 3).error_code:
        assert time.monotonic() < deadline, "no group coordinator within 20 s"
        time.sleep(0.1)
    response = client.send(DescribeGroupsRequest(groups=["ops-group"], include_authorized_operations=True),
                           DescribeGroupsResponse, version)
    [group] = response.groups
    assert (group.error_code, group.group_state) == (ErrorCode.NONE, "Dead")
    assert group.authorized_operations == GROUP_OPERATIONS
