"""The versions Kafka 4.3 added to long-standing APIs, as raw requests against a real broker:
topic ids in Produce 13 and OffsetCommit/OffsetFetch 10 (UNKNOWN_TOPIC_ID for an id the
metadata does not know), ListOffsets 11's EARLIEST_PENDING_UPLOAD, DescribeGroups 6's
GROUP_ID_NOT_FOUND, DescribeCluster 2's fenced brokers, ListTransactions 2's pattern, and
Fetch 18 / Metadata 13 served at all."""

from __future__ import annotations

import time
import uuid
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
from wire.generated.api_002_list_offsets import (
    ListOffsetsRequest,
    ListOffsetsRequestListOffsetsPartition,
    ListOffsetsRequestListOffsetsTopic,
    ListOffsetsResponse,
    ListOffsetsResponseListOffsetsPartitionResponse,
)
from wire.generated.api_003_metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from wire.generated.api_008_offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)
from wire.generated.api_009_offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopics,
    OffsetFetchResponse,
)
from wire.generated.api_010_find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from wire.generated.api_015_describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from wire.generated.api_019_create_topics import (
    CreateTopicsRequest,
    CreateTopicsRequestCreatableTopic,
    CreateTopicsResponse,
)
from wire.generated.api_022_init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from wire.generated.api_028_txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
    TxnOffsetCommitResponse,
)
from wire.generated.api_044_incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsRequestAlterableConfig,
    IncrementalAlterConfigsRequestAlterConfigsResource,
    IncrementalAlterConfigsResponse,
)
from wire.generated.api_060_describe_cluster import DescribeClusterRequest, DescribeClusterResponse
from wire.generated.api_066_list_transactions import (
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from wire.generated.api_074_list_config_resources import (
    ListConfigResourcesRequest,
    ListConfigResourcesResponse,
)
from wire.records import NewRecord, iter_batch_headers, iter_records


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("v43") / "data").start()
    try:
        yield b
    finally:
        assert b.stop() == 0, b.logs()[-3000:]


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[KafkaClient]:
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        yield c


def await_coordinator(client: KafkaClient, key: str, key_type: int) -> None:
    """FindCoordinator until the coordinator (and its internal topic) is ready: bounded."""
    deadline = time.monotonic() + 30
    while True:
        r = client.send(FindCoordinatorRequest(key=key, key_type=key_type), FindCoordinatorResponse, 3)
        if r.error_code == ErrorCode.NONE:
            return
        assert time.monotonic() < deadline, f"no coordinator for {key}: {ErrorCode.for_code(r.error_code)}"
        time.sleep(0.2)


def topic_id(client: KafkaClient, name: str) -> uuid.UUID:
    created = client.send(CreateTopicsRequest(timeout_ms=10_000, topics=[CreateTopicsRequestCreatableTopic(
        name=name, num_partitions=1, replication_factor=1)]), CreateTopicsResponse).topics[0]
    assert created.error_code == ErrorCode.NONE, created.error_message
    md = client.send(MetadataRequest(topics=[MetadataRequestTopic(name=name)], allow_auto_topic_creation=False),
                     MetadataResponse, 13)
    assert md.error_code == ErrorCode.NONE
    return md.topics[0].topic_id


def produce_by_id(client: KafkaClient, tid: uuid.UUID, values: list[bytes]) -> tuple[int, int, uuid.UUID]:
    batch = build_batch([NewRecord(key=None, value=v, timestamp=1_700_000_000_000) for v in values])
    request = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[ProduceRequestTopicProduceData(
        topic_id=tid, partition_data=[ProduceRequestPartitionProduceData(index=0, records=batch)])])
    topic = client.send(request, ProduceResponse, 13).responses[0]
    p = topic.partition_responses[0]
    return p.error_code, p.base_offset, topic.topic_id


def test_produce_v13_by_topic_id_and_fetch_v18(client: KafkaClient) -> None:
    tid = topic_id(client, "v43-produce")
    assert produce_by_id(client, tid, [b"a", b"b"]) == (ErrorCode.NONE, 0, tid)
    assert produce_by_id(client, tid, [b"c"]) == (ErrorCode.NONE, 2, tid)
    unknown = uuid.uuid4()
    assert produce_by_id(client, unknown, [b"x"])[0::2] == (ErrorCode.UNKNOWN_TOPIC_ID, unknown)
    fetched = client.send(FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, topics=[
        FetchRequestFetchTopic(topic_id=tid, partitions=[FetchRequestFetchPartition(
            partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])]), FetchResponse, 18)
    part = fetched.responses[0].partitions[0]
    assert (part.error_code, part.high_watermark) == (ErrorCode.NONE, 3)
    records = part.records
    assert isinstance(records, (bytes, bytearray, memoryview))
    data = bytes(records)
    assert [r.value for pos, _ in iter_batch_headers(data) for r in iter_records(data, pos)] == [b"a", b"b", b"c"]


def list_offset(client: KafkaClient, topic: str, target: int, version: int
                ) -> ListOffsetsResponseListOffsetsPartitionResponse:
    request = ListOffsetsRequest(replica_id=-1, timeout_ms=1000, topics=[ListOffsetsRequestListOffsetsTopic(
        name=topic, partitions=[ListOffsetsRequestListOffsetsPartition(partition_index=0, timestamp=target)])])
    return client.send(request, ListOffsetsResponse, version).topics[0].partitions[0]


def test_list_offsets_v11_earliest_pending_upload(client: KafkaClient) -> None:
    tid = topic_id(client, "v43-list-offsets")
    produce_by_id(client, tid, [b"a"])
    pending = list_offset(client, "v43-list-offsets", -6, 11)
    assert (pending.error_code, pending.offset, pending.timestamp, pending.leader_epoch) == (ErrorCode.NONE, -1, -1, -1)
    assert list_offset(client, "v43-list-offsets", -6, 10).error_code == ErrorCode.UNSUPPORTED_VERSION
    latest = list_offset(client, "v43-list-offsets", -1, 10)
    assert (latest.error_code, latest.offset) == (ErrorCode.NONE, 1)


def test_offset_commit_and_fetch_v10_by_topic_id(client: KafkaClient) -> None:
    tid = topic_id(client, "v43-offsets")
    await_coordinator(client, "v43-group", 0)
    unknown = uuid.uuid4()
    commit = client.send(OffsetCommitRequest(group_id="v43-group", generation_id_or_member_epoch=-1, member_id="",
                                             topics=[OffsetCommitRequestTopic(topic_id=tid, partitions=[
                                                 OffsetCommitRequestPartition(partition_index=0, committed_offset=7)]),
                                                 OffsetCommitRequestTopic(topic_id=unknown, partitions=[
                                                     OffsetCommitRequestPartition(partition_index=0,
                                                                                  committed_offset=1)])]),
                         OffsetCommitResponse, 10)
    assert [(t.topic_id, [p.error_code for p in t.partitions]) for t in commit.topics] == [
        (tid, [ErrorCode.NONE]), (unknown, [ErrorCode.UNKNOWN_TOPIC_ID])]

    def fetch(topics: list[OffsetFetchRequestTopics] | None) -> list[tuple[uuid.UUID, int, int]]:
        response = client.send(OffsetFetchRequest(groups=[OffsetFetchRequestGroup(group_id="v43-group", topics=topics)]),
                               OffsetFetchResponse, 10)
        group = response.groups[0]
        assert group.error_code == ErrorCode.NONE
        return [(t.topic_id, p.error_code, p.committed_offset) for t in group.topics for p in t.partitions]

    assert fetch([OffsetFetchRequestTopics(topic_id=tid, partition_indexes=[0]),
                  OffsetFetchRequestTopics(topic_id=unknown, partition_indexes=[0])]) == [
        (unknown, ErrorCode.UNKNOWN_TOPIC_ID, -1), (tid, ErrorCode.NONE, 7)]
    assert fetch(None) == [(tid, ErrorCode.NONE, 7)]
    # v9 still names topics.
    v9 = client.send(OffsetFetchRequest(groups=[OffsetFetchRequestGroup(group_id="v43-group", topics=None)]),
                     OffsetFetchResponse, 9)
    assert [(t.name, t.partitions[0].committed_offset) for t in v9.groups[0].topics] == [("v43-offsets", 7)]


def test_describe_groups_v6_group_id_not_found(client: KafkaClient) -> None:
    await_coordinator(client, "v43-no-such-group", 0)
    v6 = client.send(DescribeGroupsRequest(groups=["v43-no-such-group"]), DescribeGroupsResponse, 6).groups[0]
    assert (v6.error_code, v6.group_state) == (ErrorCode.GROUP_ID_NOT_FOUND, "Dead")
    assert v6.error_message == "Group v43-no-such-group not found."
    v5 = client.send(DescribeGroupsRequest(groups=["v43-no-such-group"]), DescribeGroupsResponse, 5).groups[0]
    assert (v5.error_code, v5.group_state) == (ErrorCode.NONE, "Dead")


def test_describe_cluster_v2_includes_fenced_flag(client: KafkaClient) -> None:
    response = client.send(DescribeClusterRequest(include_fenced_brokers=True), DescribeClusterResponse, 2)
    assert response.error_code == ErrorCode.NONE
    assert [(b.broker_id, b.is_fenced) for b in response.brokers] == [(1, False)]
    assert response.controller_id == 1


def test_list_transactions_v2_pattern(client: KafkaClient) -> None:
    for tid in ("v43-orders-1", "v43-orders-2", "v43-billing"):
        await_coordinator(client, tid, 1)
        init = client.send(InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60_000),
                           InitProducerIdResponse, 5)
        assert init.error_code == ErrorCode.NONE

    def listed(pattern: str | None) -> tuple[int, list[str]]:
        response = client.send(ListTransactionsRequest(transactional_id_pattern=pattern), ListTransactionsResponse, 2)
        return response.error_code, sorted(t.transactional_id for t in response.transaction_states
                                           if t.transactional_id.startswith("v43-"))

    assert listed("v43-orders-.*") == (ErrorCode.NONE, ["v43-orders-1", "v43-orders-2"])
    assert listed("orders") == (ErrorCode.NONE, [])  # the whole id must match
    assert listed(None) == (ErrorCode.NONE, ["v43-billing", "v43-orders-1", "v43-orders-2"])
    assert listed("") == listed(None)
    assert listed("v43-(") == (ErrorCode.INVALID_REGULAR_EXPRESSION, [])


def test_list_transactions_pattern_cannot_hold_the_broker(client: KafkaClient) -> None:
    """A pattern that backtracks exponentially in a backtracking engine ((a|aa)*c against 40
    a's: about 10^8 steps) is matched in linear time, and what RE2 cannot run in linear time
    (a backreference) is refused, so no ListTransactions can hold the event loop."""
    tid = "v43-" + "a" * 40
    await_coordinator(client, tid, 1)
    init = client.send(InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60_000),
                       InitProducerIdResponse, 5)
    assert init.error_code == ErrorCode.NONE
    started = time.monotonic()
    response = client.send(ListTransactionsRequest(transactional_id_pattern="v43-(a|aa)*c"),
                           ListTransactionsResponse, 2)
    assert (response.error_code, response.transaction_states) == (ErrorCode.NONE, [])
    assert time.monotonic() - started < 2.0
    response = client.send(ListTransactionsRequest(transactional_id_pattern="v43-(a)\\1*"),
                           ListTransactionsResponse, 2)
    assert response.error_code == ErrorCode.INVALID_REGULAR_EXPRESSION
    listed = client.send(ListTransactionsRequest(transactional_id_pattern="v43-a{40}"), ListTransactionsResponse, 2)
    assert [t.transactional_id for t in listed.transaction_states] == [tid]


def test_txn_offset_commit_v4_answers_transaction_abortable(client: KafkaClient) -> None:
    """Offsets committed without AddOffsetsToTxn: TRANSACTION_ABORTABLE from v4 (KIP-890),
    INVALID_TXN_STATE for older clients."""
    topic_id(client, "v43-txn-offsets")
    await_coordinator(client, "v43-txn-offsets", 1)
    await_coordinator(client, "v43-txn-group", 0)
    init = client.send(InitProducerIdRequest(transactional_id="v43-txn-offsets", transaction_timeout_ms=60_000),
                       InitProducerIdResponse, 5)
    assert init.error_code == ErrorCode.NONE

    def commit(version: int) -> int:
        request = TxnOffsetCommitRequest(
            transactional_id="v43-txn-offsets", group_id="v43-txn-group", producer_id=init.producer_id,
            producer_epoch=init.producer_epoch, topics=[TxnOffsetCommitRequestTopic(name="v43-txn-offsets", partitions=[
                TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=1)])])
        return client.send(request, TxnOffsetCommitResponse, version).topics[0].partitions[0].error_code

    assert commit(4) == ErrorCode.TRANSACTION_ABORTABLE
    assert commit(3) == ErrorCode.INVALID_TXN_STATE


def test_list_config_resources(client: KafkaClient) -> None:
    topic_id(client, "v43-configs")
    altered = client.send(IncrementalAlterConfigsRequest(resources=[IncrementalAlterConfigsRequestAlterConfigsResource(
        resource_type=32, resource_name="v43-config-group", configs=[IncrementalAlterConfigsRequestAlterableConfig(
            name="share.record.lock.duration.ms", config_operation=0, value="15000")])]),
        IncrementalAlterConfigsResponse)
    assert altered.responses[0].error_code == ErrorCode.NONE, altered.responses[0].error_message

    def listed(types: list[int], version: int = 1) -> tuple[int, list[tuple[int, str]]]:
        r = client.send(ListConfigResourcesRequest(resource_types=types), ListConfigResourcesResponse, version)
        return r.error_code, [(c.resource_type, c.resource_name) for c in r.config_resources]

    error, every = listed([])
    assert error == ErrorCode.NONE
    assert (32, "v43-config-group") in every and (2, "v43-configs") in every
    assert (4, "1") in every and (8, "1") in every
    assert [kind for kind, _ in every] == sorted((kind for kind, _ in every), key=[32, 16, 8, 4, 2].index)
    assert listed([4, 8]) == (ErrorCode.NONE, [(8, "1"), (4, "1")])
    assert listed([2])[1] == [(2, name) for name in sorted(name for kind, name in every if kind == 2)]
    assert listed([64]) == (ErrorCode.UNSUPPORTED_VERSION, [])
    # v0 (ListClientMetricsResources) lists client metrics subscriptions only: none here.
    assert listed([], 0) == (ErrorCode.NONE, [])


def test_client_telemetry_is_advertised(client: KafkaClient) -> None:
    """The broker's metrics pipeline is its ClientTelemetry receiver, so, as a Kafka 4.3 broker
    with one, GetTelemetrySubscriptions (71) and PushTelemetry (72) v0 are advertised (without
    metrics they are not: tests/broker/test_client_telemetry.py); ListConfigResources (74) is in."""
    assert (client.api_versions[71].min_version, client.api_versions[71].max_version) == (0, 0)
    assert (client.api_versions[72].min_version, client.api_versions[72].max_version) == (0, 0)
    assert (client.api_versions[74].min_version, client.api_versions[74].max_version) == (0, 1)
