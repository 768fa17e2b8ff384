"""What the StandardAuthorizer lets a PLAINTEXT client (User:ANONYMOUS) do, per API, with Kafka's codes.

The broker runs with ``allow.everyone.if.no.acl.found=true``, so ANONYMOUS may do what no
ACL speaks of (including managing ACLs); ACLs for another principal or DENY ACLs take
rights away resource by resource. Real clients: compat_tests/test_acls.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from broker.tools.client import KafkaClient
from tests.broker.broker_process import BrokerProcess
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.generated.api_000_produce import (
    ProduceRequest,
    ProduceRequestPartitionProduceData,
    ProduceRequestTopicProduceData,
    ProduceResponse,
)
from wire.generated.api_001_fetch import (
    FetchRequest,
    FetchRequestFetchPartition,
    FetchRequestFetchTopic,
    FetchResponse,
)
from wire.generated.api_003_metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from wire.generated.api_008_offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)
from wire.generated.api_010_find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from wire.generated.api_019_create_topics import (
    CreateTopicsRequest,
    CreateTopicsRequestCreatableTopic,
    CreateTopicsResponse,
)
from wire.generated.api_020_delete_topics import DeleteTopicsRequest, DeleteTopicsResponse
from wire.generated.api_022_init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from wire.generated.api_030_create_acls import (
    CreateAclsRequest,
    CreateAclsRequestAclCreation,
    CreateAclsResponse,
)
from wire.generated.api_031_delete_acls import (
    DeleteAclsRequest,
    DeleteAclsRequestDeleteAclsFilter,
    DeleteAclsResponse,
)
from wire.records import NewRecord

TOPIC, GROUP, CLUSTER, TXN = 2, 3, 4, 5
ANY, LITERAL, PREFIXED = 1, 3, 4
ALL, READ, WRITE, CREATE, ALTER, DESCRIBE = 2, 3, 4, 5, 7, 8
DENY, ALLOW = 2, 3
ANON, ALICE = "User:ANONYMOUS", "User:alice"


def acl(rt: int, name: str, op: int, perm: int = ALLOW, principal: str = ALICE,
        pattern: int = LITERAL) -> CreateAclsRequestAclCreation:
    return CreateAclsRequestAclCreation(resource_type=rt, resource_name=name, resource_pattern_type=pattern,
                                        principal=principal, host="*", operation=op, permission_type=perm)


def produce(c: KafkaClient, topic: str, transactional_id: str | None = None) -> int:
    request = ProduceRequest(acks=1, timeout_ms=5000, transactional_id=transactional_id, topic_data=[
        ProduceRequestTopicProduceData(name=topic, partition_data=[ProduceRequestPartitionProduceData(
            index=0, records=build_batch([NewRecord(key=b"k", value=b"v", timestamp=1)]))])])
    return c.send(request, ProduceResponse, 9).responses[0].partition_responses[0].error_code


def fetch(c: KafkaClient, topic: str) -> int:
    request = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, topics=[FetchRequestFetchTopic(
        topic=topic, partitions=[FetchRequestFetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1024)])])
    return c.send(request, FetchResponse, 12).responses[0].partitions[0].error_code


def commit(c: KafkaClient, group: str, topic: str) -> int:
    request = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
        OffsetCommitRequestTopic(name=topic, partitions=[OffsetCommitRequestPartition(
            partition_index=0, committed_offset=0)])])
    return c.send(request, OffsetCommitResponse, 8).topics[0].partitions[0].error_code


def create_topic(c: KafkaClient, name: str) -> int:
    return c.send(CreateTopicsRequest(timeout_ms=10_000, topics=[CreateTopicsRequestCreatableTopic(
        name=name, num_partitions=1, replication_factor=1)]), CreateTopicsResponse).topics[0].error_code


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaClient]:
    broker = BrokerProcess(tmp_path_factory.mktemp("enforce") / "data", {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "true", "auto.create.topics.enable": "true"}).start()
    try:
        with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
            for name in ("open", "secret", "shared"):
                assert create_topic(c, name) == ErrorCode.NONE
            created = c.send(CreateAclsRequest(creations=[
                acl(TOPIC, "secret", ALL),  # ANONYMOUS loses the topic: an ACL names it
                acl(TOPIC, "shared", ALL, ALLOW, ANON),
                acl(TOPIC, "shared", READ, DENY, ANON),
                acl(GROUP, "locked", ALL, DENY, ANON),
                acl(TOPIC, "private-", CREATE, pattern=PREFIXED),
                acl(TXN, "tx-denied", ALL, DENY, ANON),
                # An ACL on the cluster ends allow-everyone there: ANONYMOUS keeps ALTER (ACL management)
                # and what it implies, but no longer CREATE or IDEMPOTENT_WRITE on the cluster.
                acl(CLUSTER, "kafka-cluster", ALTER, ALLOW, ANON),
            ]), CreateAclsResponse)
            assert [r.error_code for r in created.results] == [0] * 7
            yield c
    finally:
        assert broker.stop() == 0, broker.logs()[-3000:]


def test_produce_and_fetch(client: KafkaClient) -> None:
    assert produce(client, "open") == ErrorCode.NONE
    assert produce(client, "secret") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert produce(client, "shared") == ErrorCode.NONE  # ALLOW ALL with DENY READ leaves WRITE
    assert produce(client, "open", transactional_id="tx-denied") == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert fetch(client, "open") == ErrorCode.NONE
    assert fetch(client, "secret") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert fetch(client, "shared") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    # Authorization comes before existence; an ACL on a resource (here alice's prefixed CREATE)
    # ends allow.everyone.if.no.acl.found for it.
    assert produce(client, "private-nothing") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert produce(client, "nothing-here") == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_metadata_lists_only_describable_topics(client: KafkaClient) -> None:
    every = client.send(MetadataRequest(topics=None, include_topic_authorized_operations=True), MetadataResponse, 10)
    names = {t.name for t in every.topics}
    assert {"open", "shared"} <= names and "secret" not in names
    shared = next(t for t in every.topics if t.name == "shared")
    # Every topic operation but READ (DENY READ) — and DESCRIBE stays, as a DENY implies nothing.
    assert shared.topic_authorized_operations == sum(1 << op for op in (4, 5, 6, 7, 8, 10, 11))
    # ALTER on the cluster implies DESCRIBE: the cluster's bits are ALTER and DESCRIBE alone.
    cluster = client.send(MetadataRequest(topics=[], include_cluster_authorized_operations=True),
                          MetadataResponse, 10)
    assert cluster.cluster_authorized_operations == (1 << 7) | (1 << 8)
    named = client.send(MetadataRequest(topics=[MetadataRequestTopic(name="secret")],
                                        allow_auto_topic_creation=False), MetadataResponse, 10)
    assert [(t.name, t.error_code) for t in named.topics] == [("secret", ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
    # Auto-creation needs CREATE: "private-" topics are alice's to create.
    auto = client.send(MetadataRequest(topics=[MetadataRequestTopic(name="private-auto"),
                                               MetadataRequestTopic(name="auto-made")],
                                       allow_auto_topic_creation=True), MetadataResponse, 10)
    codes = {t.name: t.error_code for t in auto.topics}
    assert codes["private-auto"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert codes["auto-made"] in (ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE)


def test_groups_and_transactions(client: KafkaClient) -> None:
    deadline = time.monotonic() + 20
    while True:  # the offsets topic is created by the first FindCoordinator
        found = client.send(FindCoordinatorRequest(key_type=0, coordinator_keys=["locked", "free"]),
                            FindCoordinatorResponse, 4)
        codes = [c.error_code for c in found.coordinators]
        if codes[1] == ErrorCode.NONE or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert codes == [ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.NONE]
    while commit(client, "free", "open") != ErrorCode.NONE and time.monotonic() < deadline:
        time.sleep(0.1)
    assert commit(client, "free", "open") == ErrorCode.NONE
    assert commit(client, "free", "secret") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert commit(client, "locked", "open") == ErrorCode.GROUP_AUTHORIZATION_FAILED
    denied = client.send(InitProducerIdRequest(transactional_id="tx-denied", transaction_timeout_ms=10_000),
                         InitProducerIdResponse, 4)
    assert denied.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    idempotent = client.send(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=10_000),
                             InitProducerIdResponse, 4)
    assert idempotent.error_code == ErrorCode.NONE  # no IDEMPOTENT_WRITE, but WRITE on some topic ("shared")


def test_create_and_delete_topics(client: KafkaClient) -> None:
    assert create_topic(client, "private-x") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert create_topic(client, "public-x") == ErrorCode.NONE
    deleted = client.send(DeleteTopicsRequest(topic_names=["secret", "public-x"], timeout_ms=10_000),
                          DeleteTopicsResponse, 5)
    assert {r.name: r.error_code for r in deleted.responses} == {
        "secret": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "public-x": ErrorCode.NONE}


def test_removing_the_acl_gives_the_topic_back(client: KafkaClient) -> None:
    assert produce(client, "secret") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    removed = client.send(DeleteAclsRequest(filters=[DeleteAclsRequestDeleteAclsFilter(
        resource_type_filter=TOPIC, resource_name_filter="secret", pattern_type_filter=ANY, principal_filter=None,
        host_filter=None, operation=ANY, permission_type=ANY)]), DeleteAclsResponse)
    assert len(removed.filter_results[0].matching_acls) == 1
    assert produce(client, "secret") == ErrorCode.NONE


def test_share_coordinator_lookup_needs_cluster_action(client: KafkaClient) -> None:
    # FindCoordinator key type SHARE is what brokers ask: CLUSTER_ACTION on the cluster, which
    # ANONYMOUS lost with the cluster ACL (ALTER implies no CLUSTER_ACTION).
    key = "g:AAAAAAAAAAAAAAAAAAAAAA:0"
    found = client.send(FindCoordinatorRequest(key_type=2, coordinator_keys=[key]), FindCoordinatorResponse, 6)
    assert [(c.key, c.error_code, c.node_id) for c in found.coordinators] == [
        (key, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, -1)]
