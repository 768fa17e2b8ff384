"""The admin and offset APIs against a real broker process, through broker.tools.client.

One broker serves the module (each test uses its own topics); a second one,
with ``delete.topic.enable=false``, serves the test that needs it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.tools.client import ClientError, KafkaClient, parse_bootstrap
from tests.broker.broker_process import BrokerProcess
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.frame import encode_request_parts
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
from wire.generated.api_019_create_topics import (
    CreateTopicsRequest,
    CreateTopicsRequestCreatableReplicaAssignment,
    CreateTopicsRequestCreatableTopic,
    CreateTopicsRequestCreatableTopicConfig,
    CreateTopicsResponse,
)
from wire.generated.api_020_delete_topics import (
    DeleteTopicsRequest,
    DeleteTopicsRequestDeleteTopicState,
    DeleteTopicsResponse,
)
from wire.generated.api_021_delete_records import (
    DeleteRecordsRequest,
    DeleteRecordsRequestDeleteRecordsPartition,
    DeleteRecordsRequestDeleteRecordsTopic,
    DeleteRecordsResponse,
)
from wire.generated.api_023_offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochRequestOffsetForLeaderPartition,
    OffsetForLeaderEpochRequestOffsetForLeaderTopic,
    OffsetForLeaderEpochResponse,
)
from wire.generated.api_032_describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsRequestDescribeConfigsResource,
    DescribeConfigsResponse,
    DescribeConfigsResponseDescribeConfigsResourceResult,
    DescribeConfigsResponseDescribeConfigsResult,
)
from wire.generated.api_033_alter_configs import (
    AlterConfigsRequest,
    AlterConfigsRequestAlterableConfig,
    AlterConfigsRequestAlterConfigsResource,
    AlterConfigsResponse,
)
from wire.generated.api_035_describe_log_dirs import (
    DescribeLogDirsRequest,
    DescribeLogDirsRequestDescribableLogDirTopic,
    DescribeLogDirsResponse,
)
from wire.generated.api_037_create_partitions import (
    CreatePartitionsRequest,
    CreatePartitionsRequestCreatePartitionsAssignment,
    CreatePartitionsRequestCreatePartitionsTopic,
    CreatePartitionsResponse,
)
from wire.generated.api_044_incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsRequestAlterableConfig,
    IncrementalAlterConfigsRequestAlterConfigsResource,
    IncrementalAlterConfigsResponse,
)
from wire.generated.api_060_describe_cluster import DescribeClusterRequest, DescribeClusterResponse
from wire.generated.api_075_describe_topic_partitions import (
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsRequestCursor,
    DescribeTopicPartitionsRequestTopicRequest,
    DescribeTopicPartitionsResponse,
)
from wire.primitives import REFERENCE_FROM, ZERO_UUID, Message
from wire.records import NewRecord, iter_records

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
BASE_TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("admin") / "data").start()
    try:
        yield b
    finally:
        assert b.stop() == 0, b.logs()[-3000:]


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[KafkaClient]:
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        yield c


# ------------------------------------------------------------ helpers


def create(
    client: KafkaClient,
    name: str,
    partitions: int = 1,
    rf: int = 1,
    configs: dict[str, str] | None = None,
    version: int | None = None,
) -> CreateTopicsResponse:
    topic = CreateTopicsRequestCreatableTopic(
        name=name, num_partitions=partitions, replication_factor=rf,
        configs=[CreateTopicsRequestCreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()],
    )
    return client.send(CreateTopicsRequest(topics=[topic], timeout_ms=10_000), CreateTopicsResponse, version)


def created(client: KafkaClient, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> None:
    result = create(client, name, partitions, configs=configs).topics[0]
    assert result.error_code == ErrorCode.NONE, result.error_message


def metadata(client: KafkaClient, name: str) -> MetadataResponse:
    return client.send(
        MetadataRequest(topics=[MetadataRequestTopic(name=name)], allow_auto_topic_creation=False), MetadataResponse
    )


def produce(client: KafkaClient, topic: str, timestamps: list[int], partition: int = 0) -> int:
    """One batch with a record per timestamp; returns its base offset."""
    batch = build_batch(
        [NewRecord(key=f"k{i}".encode(), value=f"v{i}".encode(), timestamp=ts) for i, ts in enumerate(timestamps)]
    )
    request = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[ProduceRequestTopicProduceData(
        name=topic, partition_data=[ProduceRequestPartitionProduceData(index=partition, records=batch)])])
    response = client.send(request, ProduceResponse, 9)
    p = response.responses[0].partition_responses[0]
    assert p.error_code == ErrorCode.NONE
    return p.base_offset


def list_offset(
    client: KafkaClient,
    topic: str,
    target: int,
    version: int | None = None,
    partition: int = 0,
    current_leader_epoch: int = -1,
    isolation_level: int = 0,
) -> ListOffsetsResponseListOffsetsPartitionResponse:
    request = ListOffsetsRequest(replica_id=-1, isolation_level=isolation_level, topics=[
        ListOffsetsRequestListOffsetsTopic(name=topic, partitions=[ListOffsetsRequestListOffsetsPartition(
            partition_index=partition, timestamp=target, current_leader_epoch=current_leader_epoch)])])
    if version is not None and version < 2:
        request.isolation_level = 0
    if version is not None and version < 4:
        request.topics[0].partitions[0].current_leader_epoch = -1
    response = client.send(request, ListOffsetsResponse, version)
    return response.topics[0].partitions[0]


def describe_topic(
    client: KafkaClient, name: str, keys: list[str] | None = None, version: int | None = None,
    synonyms: bool = False, documentation: bool = False,
) -> DescribeConfigsResponseDescribeConfigsResult:
    request = DescribeConfigsRequest(
        resources=[DescribeConfigsRequestDescribeConfigsResource(resource_type=TOPIC, resource_name=name,
                                                                 configuration_keys=keys)],
        include_synonyms=synonyms, include_documentation=documentation,
    )
    return client.send(request, DescribeConfigsResponse, version).results[0]


def config_of(
    result: DescribeConfigsResponseDescribeConfigsResult, name: str
) -> DescribeConfigsResponseDescribeConfigsResourceResult:
    found = [c for c in result.configs if c.name == name]
    assert len(found) == 1, [c.name for c in result.configs]
    return found[0]


def incremental(
    client: KafkaClient, resource_type: int, name: str, ops: list[tuple[str, int, str | None]],
    validate_only: bool = False,
) -> tuple[int, str | None]:
    request = IncrementalAlterConfigsRequest(validate_only=validate_only, resources=[
        IncrementalAlterConfigsRequestAlterConfigsResource(resource_type=resource_type, resource_name=name, configs=[
            IncrementalAlterConfigsRequestAlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops])])
    result = client.send(request, IncrementalAlterConfigsResponse).responses[0]
    return result.error_code, result.error_message


# ------------------------------------------------------------ client and ApiVersions


def test_client_negotiates_versions(client: KafkaClient) -> None:
    expected = {2: (0, 11), 19: (0, 7), 20: (0, 6), 21: (0, 2), 23: (0, 4), 32: (0, 4), 33: (0, 2), 35: (0, 4),
                37: (0, 3), 44: (0, 1), 60: (0, 2), 75: (0, 0)}
    for key, (low, high) in expected.items():
        got = client.api_versions[key]
        assert (got.min_version, got.max_version) == (low, high), key
    assert client.version_for(19) == 7
    with pytest.raises(ClientError):
        client.version_for(19, 8)


def test_parse_bootstrap() -> None:
    assert parse_bootstrap("localhost:9092,other:1") == ("localhost", 9092)
    assert parse_bootstrap("[::1]:9093") == ("::1", 9093)
    with pytest.raises(ClientError):
        parse_bootstrap("nohost")


def test_client_sends_a_large_batch_uncopied(client: KafkaClient) -> None:
    """A 900 KiB batch goes out as a part of its own (not copied into the frame) and is
    stored and fetched back whole."""
    created(client, "large-batch")
    values = [bytes([i]) * (300 * 1024) for i in range(3)]
    batch = build_batch([NewRecord(key=b"k%d" % i, value=v, timestamp=1_700_000_000_000) for i, v in enumerate(values)])
    assert REFERENCE_FROM <= len(batch) < 1 << 20
    request = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[ProduceRequestTopicProduceData(
        name="large-batch", partition_data=[ProduceRequestPartitionProduceData(index=0, records=batch)])])
    frame = encode_request_parts(request, 9, 1)
    assert any(part is batch for part in frame.parts)
    response = client.send(request, ProduceResponse, 9)
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    fetch = FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=2 << 20, topics=[FetchRequestFetchTopic(
        topic="large-batch", partitions=[FetchRequestFetchPartition(
            partition=0, fetch_offset=0, partition_max_bytes=2 << 20)])])
    fetched = client.send(fetch, FetchResponse, 12).responses[0].partitions[0]
    assert fetched.error_code == ErrorCode.NONE and fetched.records is not None
    assert [r.value for r in iter_records(bytes(fetched.records))] == values


def test_client_connection_refused() -> None:
    with pytest.raises(ClientError):
        KafkaClient("127.0.0.1", 1, timeout_s=2)


# ------------------------------------------------------------ CreateTopics


def test_create_topic_v7_returns_id_partitions_and_configs(client: KafkaClient) -> None:
    result = create(client, "ct-v7", 3, configs={"retention.ms": "12345"}).topics[0]
    assert result.error_code == ErrorCode.NONE
    assert result.error_message is None
    assert result.topic_id != ZERO_UUID
    assert (result.num_partitions, result.replication_factor) == (3, 1)
    configs = {c.name: c for c in result.configs or []}
    assert configs["retention.ms"].value == "12345"
    assert configs["retention.ms"].config_source == DYNAMIC_TOPIC_CONFIG
    assert configs["cleanup.policy"].value == "delete"
    assert configs["cleanup.policy"].config_source == DEFAULT_CONFIG
    assert [c.name for c in result.configs or []] == sorted(configs)
    md = metadata(client, "ct-v7").topics[0]
    assert md.error_code == ErrorCode.NONE and md.topic_id == result.topic_id and len(md.partitions) == 3


def test_create_topic_v0_and_defaults(client: KafkaClient) -> None:
    result = create(client, "ct-v0", -1, -1, version=0).topics[0]
    assert result.error_code == ErrorCode.NONE
    assert len(metadata(client, "ct-v0").topics[0].partitions) == 1  # num.partitions


def test_create_topic_validate_only_creates_nothing(client: KafkaClient) -> None:
    topic = CreateTopicsRequestCreatableTopic(name="ct-validate", num_partitions=2, replication_factor=1)
    response = client.send(CreateTopicsRequest(topics=[topic], validate_only=True), CreateTopicsResponse, 5)
    assert response.topics[0].error_code == ErrorCode.NONE
    assert response.topics[0].num_partitions == 2
    assert metadata(client, "ct-validate").topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize(
    ("name", "partitions", "rf", "configs", "code"),
    [
        ("bad/name", 1, 1, {}, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("x" * 250, 1, 1, {}, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("..", 1, 1, {}, ErrorCode.INVALID_TOPIC_EXCEPTION),
        # A regex's "$" also matches before a final newline: the whole name must be legal.
        ("ct-newline\n", 1, 1, {}, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("ct-zero-partitions", 0, 1, {}, ErrorCode.INVALID_PARTITIONS),
        ("ct-negative-partitions", -5, 1, {}, ErrorCode.INVALID_PARTITIONS),
        ("ct-zero-rf", 1, 0, {}, ErrorCode.INVALID_REPLICATION_FACTOR),
        ("ct-rf-too-big", 1, 3, {}, ErrorCode.INVALID_REPLICATION_FACTOR),
        ("ct-bad-config", 1, 1, {"retention.ms": "soon"}, ErrorCode.INVALID_CONFIG),
        ("ct-unknown-config", 1, 1, {"no.such.config": "1"}, ErrorCode.INVALID_CONFIG),
        # Kafka checks configs before the partition count.
        ("ct-config-first", 0, 1, {"cleanup.policy": "sometimes"}, ErrorCode.INVALID_CONFIG),
        ("__cluster_metadata", 1, 1, {}, ErrorCode.INVALID_REQUEST),
    ],
)
def test_create_topic_errors(
    client: KafkaClient, name: str, partitions: int, rf: int, configs: dict[str, str], code: ErrorCode
) -> None:
    result = create(client, name, partitions, rf, configs).topics[0]
    assert result.name == name
    assert result.error_code == code, result.error_message
    assert result.error_message
    assert result.topic_id == ZERO_UUID and result.num_partitions == -1


def test_create_existing_topic(client: KafkaClient) -> None:
    created(client, "ct-exists")
    result = create(client, "ct-exists").topics[0]
    assert result.error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert result.error_message == "Topic 'ct-exists' already exists."


def test_create_colliding_topic(client: KafkaClient) -> None:
    created(client, "ct.collide")
    result = create(client, "ct_collide").topics[0]
    assert result.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_create_duplicate_names_answered_once(client: KafkaClient) -> None:
    topics = [CreateTopicsRequestCreatableTopic(name=n, num_partitions=1, replication_factor=1)
              for n in ("ct-dup", "ct-dup-ok", "ct-dup")]
    response = client.send(CreateTopicsRequest(topics=topics), CreateTopicsResponse)
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("ct-dup-ok", ErrorCode.NONE), ("ct-dup", ErrorCode.INVALID_REQUEST)]
    assert response.topics[1].error_message == "Duplicate topic name."
    assert metadata(client, "ct-dup").topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_create_with_manual_assignment(client: KafkaClient) -> None:
    def with_assignment(name: str, assignment: dict[int, list[int]], rf: int = -1) -> tuple[int, str | None]:
        topic = CreateTopicsRequestCreatableTopic(name=name, num_partitions=-1, replication_factor=rf, assignments=[
            CreateTopicsRequestCreatableReplicaAssignment(partition_index=p, broker_ids=b) for p, b in assignment.items()])
        r = client.send(CreateTopicsRequest(topics=[topic]), CreateTopicsResponse).topics[0]
        return r.error_code, r.error_message

    assert with_assignment("ct-assign", {0: [1], 1: [1]}) == (ErrorCode.NONE, None)
    assert len(metadata(client, "ct-assign").topics[0].partitions) == 2
    assert with_assignment("ct-assign-rf", {0: [1]}, rf=1)[0] == ErrorCode.INVALID_REQUEST
    assert with_assignment("ct-assign-unknown", {0: [7]}) == (
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "The manual partition assignment includes broker 7, but no such broker is registered.")
    assert with_assignment("ct-assign-twice", {0: [1, 1]})[0] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert with_assignment("ct-assign-gap", {0: [1], 2: [1]})[0] == ErrorCode.INVALID_REPLICA_ASSIGNMENT


def test_create_too_many_partitions_refused_whole(client: KafkaClient) -> None:
    result = create(client, "ct-huge", 20_000).topics[0]
    assert result.error_code == ErrorCode.POLICY_VIOLATION
    assert metadata(client, "ct-huge").topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# ------------------------------------------------------------ CreatePartitions


def create_partitions(
    client: KafkaClient, name: str, count: int, assignments: list[list[int]] | None = None,
    validate_only: bool = False,
) -> tuple[int, str | None]:
    topic = CreatePartitionsRequestCreatePartitionsTopic(
        name=name, count=count,
        assignments=None if assignments is None else [
            CreatePartitionsRequestCreatePartitionsAssignment(broker_ids=a) for a in assignments])
    response = client.send(
        CreatePartitionsRequest(topics=[topic], timeout_ms=5000, validate_only=validate_only), CreatePartitionsResponse)
    return response.results[0].error_code, response.results[0].error_message


def test_create_partitions(client: KafkaClient) -> None:
    created(client, "cp", 2)
    assert create_partitions(client, "cp", 3, validate_only=True) == (ErrorCode.NONE, None)
    assert len(metadata(client, "cp").topics[0].partitions) == 2
    assert create_partitions(client, "cp", 4) == (ErrorCode.NONE, None)
    assert len(metadata(client, "cp").topics[0].partitions) == 4
    assert create_partitions(client, "cp", 4) == (ErrorCode.INVALID_PARTITIONS, "Topic already has 4 partition(s).")
    assert create_partitions(client, "cp", 2) == (
        ErrorCode.INVALID_PARTITIONS, "The topic cp currently has 4 partition(s); 2 would not be an increase.")
    assert create_partitions(client, "cp-missing", 2) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
    assert create_partitions(client, "cp", 6, [[1]])[0] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert create_partitions(client, "cp", 5, [[1]]) == (ErrorCode.NONE, None)
    assert len(metadata(client, "cp").topics[0].partitions) == 5
    # A new partition takes produce at once.
    assert produce(client, "cp", [BASE_TS], partition=4) == 0


def test_create_partitions_duplicate_topic(client: KafkaClient) -> None:
    created(client, "cp-dup")
    topics = [CreatePartitionsRequestCreatePartitionsTopic(name="cp-dup", count=3, assignments=None)] * 2
    response = client.send(CreatePartitionsRequest(topics=topics, timeout_ms=5000), CreatePartitionsResponse)
    assert [(r.name, r.error_code) for r in response.results] == [("cp-dup", ErrorCode.INVALID_REQUEST)]
    assert len(metadata(client, "cp-dup").topics[0].partitions) == 1


# ------------------------------------------------------------ DeleteTopics


def test_delete_topics_by_name_and_id(client: KafkaClient) -> None:
    created(client, "dt-name")
    created(client, "dt-id")
    topic_id = metadata(client, "dt-id").topics[0].topic_id
    by_name = client.send(DeleteTopicsRequest(topic_names=["dt-name", "dt-missing"], timeout_ms=5000),
                          DeleteTopicsResponse, 5)
    codes = {r.name: (r.error_code, r.error_message) for r in by_name.responses}
    assert codes["dt-name"] == (ErrorCode.NONE, None)
    assert codes["dt-missing"][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    unknown_id = uuid.uuid4()
    by_id = client.send(DeleteTopicsRequest(topics=[
        DeleteTopicsRequestDeleteTopicState(name=None, topic_id=topic_id),
        DeleteTopicsRequestDeleteTopicState(name=None, topic_id=unknown_id),
        DeleteTopicsRequestDeleteTopicState(name="dt-both", topic_id=unknown_id),
    ], timeout_ms=5000), DeleteTopicsResponse, 6)
    results = {(r.name, r.topic_id): r.error_code for r in by_id.responses}
    assert results == {
        ("dt-id", topic_id): ErrorCode.NONE,
        (None, unknown_id): ErrorCode.UNKNOWN_TOPIC_ID,
        ("dt-both", unknown_id): ErrorCode.INVALID_REQUEST,
    }
    for name in ("dt-name", "dt-id"):
        assert metadata(client, name).topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # The name can be used again, for a new topic with a new id.
    created(client, "dt-id")
    assert metadata(client, "dt-id").topics[0].topic_id != topic_id


def test_delete_topic_v0_duplicates(client: KafkaClient) -> None:
    created(client, "dt-dup")
    response = client.send(DeleteTopicsRequest(topic_names=["dt-dup", "dt-dup"], timeout_ms=5000),
                           DeleteTopicsResponse, 0)
    assert [(r.name, r.error_code) for r in response.responses] == [("dt-dup", ErrorCode.INVALID_REQUEST)]
    assert metadata(client, "dt-dup").topics[0].error_code == ErrorCode.NONE


def test_delete_disabled(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", {"delete.topic.enable": "false"}).start()
    try:
        with KafkaClient.connect(b.bootstrap) as c:
            created(c, "keep")
            for version, code in ((2, ErrorCode.INVALID_REQUEST), (6, ErrorCode.TOPIC_DELETION_DISABLED)):
                request = (DeleteTopicsRequest(topics=[DeleteTopicsRequestDeleteTopicState(name="keep")])
                           if version >= 6 else DeleteTopicsRequest(topic_names=["keep"]))
                response = c.send(request, DeleteTopicsResponse, version)
                assert [(r.name, r.error_code) for r in response.responses] == [("keep", code)]
            assert metadata(c, "keep").topics[0].error_code == ErrorCode.NONE
    finally:
        assert b.stop() == 0


# ------------------------------------------------------------ DescribeConfigs and altering


def test_describe_topic_configs(client: KafkaClient) -> None:
    created(client, "dc", configs={"retention.ms": "60000"})
    result = describe_topic(client, "dc", synonyms=True)
    assert result.error_code == ErrorCode.NONE
    retention = config_of(result, "retention.ms")
    assert (retention.value, retention.config_source, retention.read_only) == ("60000", DYNAMIC_TOPIC_CONFIG, False)
    # As in Kafka: log.retention.ms has no default of its own, and the synonyms of
    # higher precedence than the broker setting itself are dropped.
    assert [(s.name, s.source) for s in retention.synonyms] == [("retention.ms", DYNAMIC_TOPIC_CONFIG)]
    segment = config_of(result, "segment.bytes")
    assert (segment.value, segment.config_source) == ("1073741824", DEFAULT_CONFIG)
    assert [(s.name, s.value, s.source) for s in segment.synonyms] == [
        ("log.segment.bytes", "1073741824", DEFAULT_CONFIG)]
    assert segment.config_type == 3  # INT
    assert segment.documentation is None  # not asked for
    documented = describe_topic(client, "dc", ["segment.bytes"], documentation=True)
    assert [c.name for c in documented.configs] == ["segment.bytes"]
    assert documented.configs[0].documentation
    assert documented.configs[0].synonyms == []
    old = describe_topic(client, "dc", ["retention.ms", "segment.bytes"], version=0)
    assert {c.name: c.is_default for c in old.configs} == {"retention.ms": False, "segment.bytes": True}


def test_describe_configs_errors(client: KafkaClient) -> None:
    assert describe_topic(client, "dc-missing").error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert describe_topic(client, "bad name").error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    request = DescribeConfigsRequest(resources=[
        DescribeConfigsRequestDescribeConfigsResource(resource_type=BROKER, resource_name="2", configuration_keys=None),
        DescribeConfigsRequestDescribeConfigsResource(resource_type=BROKER, resource_name="x", configuration_keys=None),
        DescribeConfigsRequestDescribeConfigsResource(resource_type=BROKER_LOGGER, resource_name="",
                                                      configuration_keys=None),
    ])
    results = client.send(request, DescribeConfigsResponse).results
    assert [r.error_code for r in results] == [ErrorCode.INVALID_REQUEST] * 3
    assert results[0].error_message == "Unexpected broker id, expected 1 or empty string, but received 2"
    unknown_type = client.send(DescribeConfigsRequest(resources=[
        DescribeConfigsRequestDescribeConfigsResource(resource_type=3, resource_name="t", configuration_keys=None)]),
        DescribeConfigsResponse)
    assert unknown_type.results[0].error_code == ErrorCode.INVALID_REQUEST


def test_describe_broker_and_logger_configs(client: KafkaClient, broker: BrokerProcess) -> None:
    request = DescribeConfigsRequest(include_synonyms=True, resources=[
        DescribeConfigsRequestDescribeConfigsResource(resource_type=BROKER, resource_name="1",
                                                      configuration_keys=["log.dirs", "num.partitions", "node.id"]),
        DescribeConfigsRequestDescribeConfigsResource(resource_type=BROKER_LOGGER, resource_name="1",
                                                      configuration_keys=None),
    ])
    broker_result, logger_result = client.send(request, DescribeConfigsResponse).results
    configs = {c.name: c for c in broker_result.configs}
    assert set(configs) == {"log.dirs", "num.partitions", "node.id"}
    assert configs["log.dirs"].value == str(broker.data_dir)
    assert configs["log.dirs"].config_source == STATIC_BROKER_CONFIG
    assert configs["log.dirs"].read_only
    assert (configs["num.partitions"].value, configs["num.partitions"].config_source) == ("1", DEFAULT_CONFIG)
    loggers = {c.name: c for c in logger_result.configs}
    assert loggers["root"].value in ("TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL")
    assert loggers["root"].config_source == 6


def test_incremental_alter_topic_configs(client: KafkaClient) -> None:
    created(client, "iac")
    assert incremental(client, TOPIC, "iac", [("retention.ms", SET, "5000"), ("cleanup.policy", APPEND, "compact")]) \
        == (ErrorCode.NONE, None)
    result = describe_topic(client, "iac", ["retention.ms", "cleanup.policy"])
    assert {c.name: (c.value, c.config_source) for c in result.configs} == {
        "retention.ms": ("5000", DYNAMIC_TOPIC_CONFIG), "cleanup.policy": ("delete,compact", DYNAMIC_TOPIC_CONFIG)}
    assert incremental(client, TOPIC, "iac", [("cleanup.policy", SUBTRACT, "delete")])[0] == ErrorCode.NONE
    assert config_of(describe_topic(client, "iac", ["cleanup.policy"]), "cleanup.policy").value == "compact"
    assert incremental(client, TOPIC, "iac", [("retention.ms", DELETE, None), ("cleanup.policy", DELETE, None)]) \
        == (ErrorCode.NONE, None)
    result = describe_topic(client, "iac", ["retention.ms", "cleanup.policy"])
    assert {c.name: c.config_source for c in result.configs} == {
        "retention.ms": DEFAULT_CONFIG, "cleanup.policy": DEFAULT_CONFIG}
    # validate_only checks but changes nothing.
    assert incremental(client, TOPIC, "iac", [("retention.ms", SET, "7")], validate_only=True)[0] == ErrorCode.NONE
    assert config_of(describe_topic(client, "iac", ["retention.ms"]), "retention.ms").config_source == DEFAULT_CONFIG


def test_incremental_alter_errors(client: KafkaClient) -> None:
    created(client, "iac-err")
    code, message = incremental(client, TOPIC, "iac-err", [("retention.ms", SET, "later")])
    assert code == ErrorCode.INVALID_CONFIG and message and "retention.ms" in message
    assert incremental(client, TOPIC, "iac-err", [("retention.ms", APPEND, "1")]) == (
        ErrorCode.INVALID_CONFIG, "Can't APPEND to key retention.ms because its type is not LIST.")
    assert incremental(client, TOPIC, "iac-missing", [("retention.ms", SET, "1")]) == (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'iac-missing' does not exist.")
    assert incremental(client, TOPIC, "iac-err", [("retention.ms", SET, None)])[0] == ErrorCode.INVALID_REQUEST
    assert incremental(client, TOPIC, "iac-err", [("retention.ms", SET, "1"), ("retention.ms", SET, "2")])[0] \
        == ErrorCode.INVALID_REQUEST
    assert incremental(client, BROKER, "1", [("log.dirs", SET, "/elsewhere")]) == (
        ErrorCode.INVALID_REQUEST, "Cannot update these configs dynamically: Set(log.dirs)")
    assert incremental(client, BROKER, "9", [("log.retention.ms", SET, "1")])[0] == ErrorCode.INVALID_REQUEST
    assert incremental(client, BROKER_LOGGER, "1", [("root", SET, "LOUD")])[0] == ErrorCode.INVALID_CONFIG
    assert incremental(client, BROKER_LOGGER, "1", [("root", DELETE, None)])[0] == ErrorCode.INVALID_REQUEST
    assert incremental(client, 3, "x", [("a", SET, "b")])[0] == ErrorCode.INVALID_REQUEST
    twice = IncrementalAlterConfigsRequest(resources=[
        IncrementalAlterConfigsRequestAlterConfigsResource(resource_type=TOPIC, resource_name="iac-err", configs=[])
    ] * 2)
    assert [r.error_code for r in client.send(twice, IncrementalAlterConfigsResponse).responses] == [
        ErrorCode.INVALID_REQUEST] * 2


def test_dynamic_broker_configs(client: KafkaClient) -> None:
    assert incremental(client, BROKER, "", [("log.retention.ms", SET, "3600000")]) == (ErrorCode.NONE, None)
    assert incremental(client, BROKER, "1", [("log.cleaner.threads", SET, "2")]) == (ErrorCode.NONE, None)
    request = DescribeConfigsRequest(include_synonyms=True, resources=[
        DescribeConfigsRequestDescribeConfigsResource(resource_type=BROKER, resource_name="", configuration_keys=None),
        DescribeConfigsRequestDescribeConfigsResource(resource_type=BROKER, resource_name="1",
                                                      configuration_keys=["log.retention.ms", "log.cleaner.threads"]),
    ])
    cluster, own = client.send(request, DescribeConfigsResponse).results
    assert [(c.name, c.value, c.config_source) for c in cluster.configs] == [
        ("log.retention.ms", "3600000", DYNAMIC_DEFAULT_BROKER_CONFIG)]
    configs = {c.name: (c.value, c.config_source) for c in own.configs}
    assert configs == {"log.retention.ms": ("3600000", DYNAMIC_DEFAULT_BROKER_CONFIG),
                       "log.cleaner.threads": ("2", DYNAMIC_BROKER_CONFIG)}
    assert incremental(client, BROKER, "", [("log.retention.ms", DELETE, None)]) == (ErrorCode.NONE, None)
    assert incremental(client, BROKER, "1", [("log.cleaner.threads", DELETE, None)]) == (ErrorCode.NONE, None)


def test_dynamic_log_configs_apply_to_topics(client: KafkaClient) -> None:
    """Topic settings default from the dynamic broker settings (this broker's own, then the
    cluster default) as soon as they change, and say so when described."""
    created(client, "dyn-logs")
    big = build_batch([NewRecord(key=None, value=b"x" * 500, timestamp=BASE_TS)])

    def produce_code() -> int:
        request = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequestTopicProduceData(
            name="dyn-logs", partition_data=[ProduceRequestPartitionProduceData(index=0, records=big)])])
        return client.send(request, ProduceResponse, 9).responses[0].partition_responses[0].error_code

    def max_message_bytes() -> tuple[str | None, int, list[tuple[str, int]]]:
        request = DescribeConfigsRequest(include_synonyms=True, resources=[DescribeConfigsRequestDescribeConfigsResource(
            resource_type=TOPIC, resource_name="dyn-logs", configuration_keys=["max.message.bytes"])])
        entry = client.send(request, DescribeConfigsResponse, 4).results[0].configs[0]
        return entry.value, entry.config_source, [(s.name, s.source) for s in entry.synonyms]

    try:
        assert produce_code() == ErrorCode.NONE
        assert max_message_bytes() == ("1048588", DEFAULT_CONFIG, [("message.max.bytes", DEFAULT_CONFIG)])

        assert incremental(client, BROKER, "", [("message.max.bytes", SET, "200")]) == (ErrorCode.NONE, None)
        assert produce_code() == ErrorCode.MESSAGE_TOO_LARGE
        assert max_message_bytes() == ("200", DYNAMIC_DEFAULT_BROKER_CONFIG, [
            ("message.max.bytes", DYNAMIC_DEFAULT_BROKER_CONFIG), ("message.max.bytes", DEFAULT_CONFIG)])

        # This broker's own setting beats the cluster default.
        assert incremental(client, BROKER, "1", [("message.max.bytes", SET, "100000")]) == (ErrorCode.NONE, None)
        assert produce_code() == ErrorCode.NONE
        assert max_message_bytes()[:2] == ("100000", DYNAMIC_BROKER_CONFIG)

        # The topic's own setting beats both.
        assert incremental(client, TOPIC, "dyn-logs", [("max.message.bytes", SET, "150")]) == (ErrorCode.NONE, None)
        assert produce_code() == ErrorCode.MESSAGE_TOO_LARGE
        assert max_message_bytes()[:2] == ("150", DYNAMIC_TOPIC_CONFIG)
        assert incremental(client, TOPIC, "dyn-logs", [("max.message.bytes", DELETE, None)]) == (ErrorCode.NONE, None)

        # A topic created now reports the dynamic default it got.
        assert incremental(client, BROKER, "", [("log.retention.ms", SET, "7777777")]) == (ErrorCode.NONE, None)
        result = create(client, "dyn-logs-new").topics[0]
        assert result.error_code == ErrorCode.NONE
        retention = [c for c in result.configs if c.name == "retention.ms"]
        assert [(c.value, c.config_source) for c in retention] == [("7777777", DYNAMIC_DEFAULT_BROKER_CONFIG)]
        assert config_of(describe_topic(client, "dyn-logs-new", ["retention.ms"]), "retention.ms").value == "7777777"
        # A dynamic setting that makes the broker configuration invalid as a whole is refused.
        code, message = incremental(client, BROKER, "", [("log.segment.bytes", SET, "10")])
        assert code == ErrorCode.INVALID_REQUEST and message is not None and "log.segment.bytes" in message
        code, message = incremental(client, BROKER, "", [("log.cleaner.min.compaction.lag.ms", SET, "1000"),
                                                         ("log.cleaner.max.compaction.lag.ms", SET, "10")])
        assert code == ErrorCode.INVALID_REQUEST and message is not None and "compaction.lag.ms" in message, message
        assert produce_code() == ErrorCode.NONE
    finally:
        incremental(client, BROKER, "", [("message.max.bytes", DELETE, None), ("log.retention.ms", DELETE, None),
                                         ("log.cleaner.min.compaction.lag.ms", DELETE, None),
                                         ("log.cleaner.max.compaction.lag.ms", DELETE, None)])
        incremental(client, BROKER, "1", [("message.max.bytes", DELETE, None)])
    assert produce_code() == ErrorCode.NONE
    assert max_message_bytes()[:2] == ("1048588", DEFAULT_CONFIG)


def test_legacy_alter_configs_replaces_the_whole_set(client: KafkaClient) -> None:
    created(client, "lac", configs={"retention.ms": "1000", "segment.ms": "100000"})

    def alter(configs: dict[str, str | None], validate_only: bool = False, name: str = "lac") -> tuple[int, str | None]:
        request = AlterConfigsRequest(validate_only=validate_only, resources=[AlterConfigsRequestAlterConfigsResource(
            resource_type=TOPIC, resource_name=name,
            configs=[AlterConfigsRequestAlterableConfig(name=k, value=v) for k, v in configs.items()])])
        r = client.send(request, AlterConfigsResponse).responses[0]
        return r.error_code, r.error_message

    assert alter({"retention.ms": "2000"}) == (ErrorCode.NONE, None)
    result = describe_topic(client, "lac", ["retention.ms", "segment.ms"])
    assert {c.name: (c.value, c.config_source) for c in result.configs} == {
        "retention.ms": ("2000", DYNAMIC_TOPIC_CONFIG), "segment.ms": ("604800000", DEFAULT_CONFIG)}
    assert alter({"retention.ms": "x"})[0] == ErrorCode.INVALID_CONFIG
    assert alter({"retention.ms": None})[0] == ErrorCode.INVALID_REQUEST
    assert alter({"retention.ms": "1"}, name="lac-missing")[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert alter({}, validate_only=True) == (ErrorCode.NONE, None)
    assert config_of(describe_topic(client, "lac", ["retention.ms"]), "retention.ms").value == "2000"


def test_altered_config_applies_to_live_partition(client: KafkaClient) -> None:
    created(client, "iac-live")
    produce(client, "iac-live", [BASE_TS])
    assert incremental(client, TOPIC, "iac-live", [("max.message.bytes", SET, "100")]) == (ErrorCode.NONE, None)
    batch = build_batch([NewRecord(key=None, value=b"x" * 500, timestamp=BASE_TS)])
    request = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequestTopicProduceData(
        name="iac-live", partition_data=[ProduceRequestPartitionProduceData(index=0, records=batch)])])
    response = client.send(request, ProduceResponse, 9)
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.MESSAGE_TOO_LARGE


# ------------------------------------------------------------ ListOffsets, OffsetForLeaderEpoch, DeleteRecords


def test_list_offsets(client: KafkaClient) -> None:
    created(client, "lo")
    assert list_offset(client, "lo", -2).offset == 0
    assert list_offset(client, "lo", -1).offset == 0
    assert (list_offset(client, "lo", -3).offset, list_offset(client, "lo", -3).timestamp) == (-1, -1)
    produce(client, "lo", [BASE_TS + 10, BASE_TS + 20, BASE_TS + 30])
    produce(client, "lo", [BASE_TS + 50, BASE_TS + 40])
    latest = list_offset(client, "lo", -1)
    assert (latest.offset, latest.timestamp, latest.leader_epoch) == (5, -1, 0)
    assert list_offset(client, "lo", -2).offset == 0
    for target, offset, ts in [
        (BASE_TS, 0, BASE_TS + 10),
        (BASE_TS + 10, 0, BASE_TS + 10),
        (BASE_TS + 11, 1, BASE_TS + 20),
        (BASE_TS + 30, 2, BASE_TS + 30),
        (BASE_TS + 31, 3, BASE_TS + 50),  # the first record at or after the target, not the closest
        (BASE_TS + 45, 3, BASE_TS + 50),
    ]:
        found = list_offset(client, "lo", target)
        assert (found.error_code, found.offset, found.timestamp) == (ErrorCode.NONE, offset, ts), target
        assert found.leader_epoch == 0
    beyond = list_offset(client, "lo", BASE_TS + 51)
    assert (beyond.error_code, beyond.offset, beyond.timestamp) == (ErrorCode.NONE, -1, -1)
    newest = list_offset(client, "lo", -3)
    assert (newest.offset, newest.timestamp) == (3, BASE_TS + 50)
    assert list_offset(client, "lo", -4).offset == 0
    tiered = list_offset(client, "lo", -5)
    assert (tiered.offset, tiered.leader_epoch) == (-1, -1)
    assert list_offset(client, "lo", -1, isolation_level=1).offset == 5
    assert list_offset(client, "lo", -1, version=1).offset == 5
    assert list_offset(client, "lo", -3, version=6).error_code == ErrorCode.UNSUPPORTED_VERSION
    assert list_offset(client, "lo", -4, version=7).error_code == ErrorCode.UNSUPPORTED_VERSION


def test_list_offsets_v0_old_style(client: KafkaClient) -> None:
    created(client, "lo-v0")
    produce(client, "lo-v0", [BASE_TS, BASE_TS])

    def old_style(target: int, max_num: int = 10) -> list[int]:
        request = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequestListOffsetsTopic(name="lo-v0", partitions=[
            ListOffsetsRequestListOffsetsPartition(partition_index=0, timestamp=target, max_num_offsets=max_num)])])
        p = client.send(request, ListOffsetsResponse, 0).topics[0].partitions[0]
        assert p.error_code == ErrorCode.NONE
        return p.old_style_offsets

    assert old_style(-1) == [2, 0]
    assert old_style(-1, 1) == [2]
    assert old_style(-2) == [0]


def test_list_offsets_errors(client: KafkaClient) -> None:
    created(client, "lo-err")
    assert list_offset(client, "lo-missing", -1).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert list_offset(client, "lo-err", -1, partition=3).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert list_offset(client, "lo-err", -1, current_leader_epoch=1).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert list_offset(client, "lo-err", -1, current_leader_epoch=0).error_code == ErrorCode.NONE
    twice = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequestListOffsetsTopic(name="lo-err", partitions=[
        ListOffsetsRequestListOffsetsPartition(partition_index=0, timestamp=-1)] * 2)])
    response = client.send(twice, ListOffsetsResponse)
    assert [p.error_code for p in response.topics[0].partitions] == [ErrorCode.INVALID_REQUEST] * 2


def offset_for_epoch(client: KafkaClient, topic: str, epoch: int, current: int = -1, version: int | None = None
                     ) -> tuple[int, int, int]:
    request = OffsetForLeaderEpochRequest(replica_id=-1, topics=[OffsetForLeaderEpochRequestOffsetForLeaderTopic(
        topic=topic, partitions=[OffsetForLeaderEpochRequestOffsetForLeaderPartition(
            partition=0, current_leader_epoch=current, leader_epoch=epoch)])])
    p = client.send(request, OffsetForLeaderEpochResponse, version).topics[0].partitions[0]
    return p.error_code, p.leader_epoch, p.end_offset


def test_offset_for_leader_epoch(client: KafkaClient) -> None:
    created(client, "ofle")
    produce(client, "ofle", [BASE_TS] * 3)
    assert offset_for_epoch(client, "ofle", 0) == (ErrorCode.NONE, 0, 3)
    assert offset_for_epoch(client, "ofle", 4) == (ErrorCode.NONE, -1, -1)
    assert offset_for_epoch(client, "ofle", -1) == (ErrorCode.NONE, -1, -1)
    assert offset_for_epoch(client, "ofle", 0, version=0) == (ErrorCode.NONE, -1, 3)
    assert offset_for_epoch(client, "ofle", 0, current=1)[0] == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert offset_for_epoch(client, "ofle", 0, current=0)[0] == ErrorCode.NONE
    assert offset_for_epoch(client, "ofle-missing", 0)[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def delete_records(client: KafkaClient, topic: str, offset: int, partition: int = 0) -> tuple[int, int]:
    request = DeleteRecordsRequest(timeout_ms=5000, topics=[DeleteRecordsRequestDeleteRecordsTopic(
        name=topic, partitions=[DeleteRecordsRequestDeleteRecordsPartition(partition_index=partition, offset=offset)])])
    p = client.send(request, DeleteRecordsResponse).topics[0].partitions[0]
    return p.error_code, p.low_watermark


def test_delete_records_moves_log_start(client: KafkaClient) -> None:
    created(client, "dr")
    for i in range(4):
        produce(client, "dr", [BASE_TS + i] * 2)
    assert delete_records(client, "dr", 3) == (ErrorCode.NONE, 3)
    assert list_offset(client, "dr", -2).offset == 3
    assert delete_records(client, "dr", 1) == (ErrorCode.NONE, 3)  # never backwards
    assert delete_records(client, "dr", 9) == (ErrorCode.OFFSET_OUT_OF_RANGE, -1)
    assert delete_records(client, "dr", -7) == (ErrorCode.OFFSET_OUT_OF_RANGE, -1)
    assert delete_records(client, "dr-missing", 1) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)
    fetch = FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, topics=[FetchRequestFetchTopic(
        topic="dr", partitions=[FetchRequestFetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
    fetched = client.send(fetch, FetchResponse, 12).responses[0].partitions[0]
    assert (fetched.error_code, fetched.log_start_offset) == (ErrorCode.OFFSET_OUT_OF_RANGE, 3)
    assert delete_records(client, "dr", -1) == (ErrorCode.NONE, 8)  # -1: the high watermark
    assert list_offset(client, "dr", -2).offset == 8
    assert list_offset(client, "dr", -1).offset == 8


def test_delete_records_refused_on_compacted_topic(client: KafkaClient) -> None:
    created(client, "dr-compact", configs={"cleanup.policy": "compact"})
    assert delete_records(client, "dr-compact", 0)[0] == ErrorCode.POLICY_VIOLATION


# ------------------------------------------------------------ cluster and log dirs


def test_describe_cluster(client: KafkaClient, broker: BrokerProcess) -> None:
    response = client.send(DescribeClusterRequest(include_cluster_authorized_operations=True), DescribeClusterResponse)
    assert response.error_code == ErrorCode.NONE
    assert [(b.broker_id, b.host, b.port) for b in response.brokers] == [(1, "127.0.0.1", broker.port)]
    assert response.controller_id == 1 and response.cluster_id and response.endpoint_type == 1
    assert response.cluster_authorized_operations > 0
    assert client.send(DescribeClusterRequest(), DescribeClusterResponse, 0).cluster_id == response.cluster_id
    assert client.send(DescribeClusterRequest(), DescribeClusterResponse).cluster_authorized_operations == -(2**31)
    controllers = client.send(DescribeClusterRequest(endpoint_type=2), DescribeClusterResponse)
    assert controllers.error_code == ErrorCode.MISMATCHED_ENDPOINT_TYPE
    other = client.send(DescribeClusterRequest(endpoint_type=7), DescribeClusterResponse)
    assert other.error_code == ErrorCode.UNSUPPORTED_ENDPOINT_TYPE


def test_describe_topic_partitions_pages(client: KafkaClient) -> None:
    created(client, "dtp-a", 3)
    created(client, "dtp-b", 2)
    topics = [DescribeTopicPartitionsRequestTopicRequest(name=n) for n in ("dtp-b", "dtp-a", "dtp-missing")]
    page1 = client.send(DescribeTopicPartitionsRequest(topics=topics, response_partition_limit=2),
                        DescribeTopicPartitionsResponse)
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in page1.topics] == [("dtp-a", [0, 1])]
    assert page1.next_cursor is not None
    assert (page1.next_cursor.topic_name, page1.next_cursor.partition_index) == ("dtp-a", 2)
    page2 = client.send(DescribeTopicPartitionsRequest(
        topics=topics, response_partition_limit=2,
        cursor=DescribeTopicPartitionsRequestCursor(topic_name="dtp-a", partition_index=2)),
        DescribeTopicPartitionsResponse)
    assert [(t.name, t.error_code, [p.partition_index for p in t.partitions]) for t in page2.topics] == [
        ("dtp-a", ErrorCode.NONE, [2]), ("dtp-b", ErrorCode.NONE, [0])]
    assert page2.next_cursor is not None and page2.next_cursor.topic_name == "dtp-b"
    page3 = client.send(DescribeTopicPartitionsRequest(
        topics=topics, cursor=DescribeTopicPartitionsRequestCursor(topic_name="dtp-b", partition_index=1)),
        DescribeTopicPartitionsResponse)
    assert [(t.name, t.error_code) for t in page3.topics] == [
        ("dtp-b", ErrorCode.NONE), ("dtp-missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    assert page3.next_cursor is None
    part = page3.topics[0].partitions[0]
    assert (part.partition_index, part.leader_id, part.replica_nodes, part.isr_nodes) == (1, 1, [1], [1])
    assert part.eligible_leader_replicas == [] and part.offline_replicas == []
    bad_cursor = client.send(DescribeTopicPartitionsRequest(
        topics=topics[:1], cursor=DescribeTopicPartitionsRequestCursor(topic_name="dtp-a", partition_index=0)),
        DescribeTopicPartitionsResponse)
    assert [t.error_code for t in bad_cursor.topics] == [ErrorCode.INVALID_REQUEST]


def test_describe_log_dirs(client: KafkaClient, broker: BrokerProcess) -> None:
    created(client, "ldirs", 2)
    produce(client, "ldirs", [BASE_TS] * 10)
    everything = client.send(DescribeLogDirsRequest(topics=None), DescribeLogDirsResponse, 4)
    assert everything.error_code == ErrorCode.NONE
    [result] = everything.results
    assert result.log_dir == str(broker.data_dir.absolute())
    assert result.total_bytes > 0 and 0 <= result.usable_bytes <= result.total_bytes
    topics = {t.name: t for t in result.topics}
    parts = {p.partition_index: p for p in topics["ldirs"].partitions}
    assert set(parts) == {0, 1}
    assert parts[0].partition_size > 0 and parts[1].partition_size == 0
    assert parts[0].offset_lag == 0 and not parts[0].is_future_key
    only = client.send(DescribeLogDirsRequest(topics=[
        DescribeLogDirsRequestDescribableLogDirTopic(topic="ldirs", partitions=[1])]), DescribeLogDirsResponse, 0)
    [result] = only.results
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in result.topics] == [("ldirs", [1])]
    assert result.total_bytes == -1  # v0 has no sizes


# ------------------------------------------------------------ every version


def _requests_for(version: int) -> dict[int, Message]:
    """A representative request per API, valid at ``version`` of that API."""
    topic = "sweep"
    delete_topics = (
        DeleteTopicsRequest(topics=[DeleteTopicsRequestDeleteTopicState(name="sweep-missing")]) if version >= 6
        else DeleteTopicsRequest(topic_names=["sweep-missing"])
    )
    return {
        2: ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequestListOffsetsTopic(
            name=topic, partitions=[ListOffsetsRequestListOffsetsPartition(partition_index=0, timestamp=-1)])]),
        19: CreateTopicsRequest(topics=[CreateTopicsRequestCreatableTopic(
            name=f"sweep-{version}", num_partitions=1, replication_factor=1)]),
        20: delete_topics,
        21: DeleteRecordsRequest(topics=[DeleteRecordsRequestDeleteRecordsTopic(
            name=topic, partitions=[DeleteRecordsRequestDeleteRecordsPartition(partition_index=0, offset=0)])]),
        23: OffsetForLeaderEpochRequest(replica_id=-1 if version >= 3 else -2, topics=[
            OffsetForLeaderEpochRequestOffsetForLeaderTopic(topic=topic, partitions=[
                OffsetForLeaderEpochRequestOffsetForLeaderPartition(partition=0, leader_epoch=0)])]),
        32: DescribeConfigsRequest(
            resources=[
                DescribeConfigsRequestDescribeConfigsResource(resource_type=TOPIC, resource_name=topic,
                                                              configuration_keys=None),
                DescribeConfigsRequestDescribeConfigsResource(resource_type=BROKER, resource_name="1",
                                                              configuration_keys=None),
            ],
            include_synonyms=version >= 1, include_documentation=version >= 3),
        33: AlterConfigsRequest(resources=[AlterConfigsRequestAlterConfigsResource(
            resource_type=TOPIC, resource_name=topic,
            configs=[AlterConfigsRequestAlterableConfig(name="retention.ms", value="100000")])]),
        35: DescribeLogDirsRequest(topics=None),
        37: CreatePartitionsRequest(topics=[CreatePartitionsRequestCreatePartitionsTopic(
            name=topic, count=1, assignments=None)], timeout_ms=1000),
        44: IncrementalAlterConfigsRequest(resources=[IncrementalAlterConfigsRequestAlterConfigsResource(
            resource_type=TOPIC, resource_name=topic, configs=[IncrementalAlterConfigsRequestAlterableConfig(
                name="retention.ms", config_operation=SET, value="200000")])]),
        60: DescribeClusterRequest(),
        75: DescribeTopicPartitionsRequest(),
    }


@pytest.mark.parametrize("api_key", [2, 19, 20, 21, 23, 32, 33, 35, 37, 44, 60, 75])
def test_every_version_answers(client: KafkaClient, api_key: int) -> None:
    """Each supported version decodes and its answer encodes (a failure would close the connection)."""
    if metadata(client, "sweep").topics[0].error_code != ErrorCode.NONE:
        created(client, "sweep")
        produce(client, "sweep", [BASE_TS])
    supported = client.api_versions[api_key]
    for version in range(supported.min_version, supported.max_version + 1):
        response = client.request(_requests_for(version)[api_key], version)
        assert response.API_KEY == api_key
