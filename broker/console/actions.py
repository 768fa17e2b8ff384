"""What the console changes: topics (create, delete, add partitions, alter configs) and group offsets.

Each function is one Kafka request (two for an offset reset: ListOffsets, then
OffsetCommit) and raises :class:`ActionError` with Kafka's error name and
message. The web layer asks for confirmation first and logs every call.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.console.collect import EARLIEST, LATEST, fetch_committed, list_offsets
from broker.console.kafka import ClusterClient
from broker.tools.client import ClientError
from wire.errors import ErrorCode
from wire.generated.api_008_offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)
from wire.generated.api_015_describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from wire.generated.api_019_create_topics import (
    CreateTopicsRequest,
    CreateTopicsRequestCreatableTopic,
    CreateTopicsRequestCreatableTopicConfig,
    CreateTopicsResponse,
)
from wire.generated.api_020_delete_topics import (
    DeleteTopicsRequest,
    DeleteTopicsRequestDeleteTopicState,
    DeleteTopicsResponse,
)
from wire.generated.api_032_describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsRequestDescribeConfigsResource,
    DescribeConfigsResponse,
)
from wire.generated.api_037_create_partitions import (
    CreatePartitionsRequest,
    CreatePartitionsRequestCreatePartitionsTopic,
    CreatePartitionsResponse,
)
from wire.generated.api_044_incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsRequestAlterableConfig,
    IncrementalAlterConfigsRequestAlterConfigsResource,
    IncrementalAlterConfigsResponse,
)

TOPIC_RESOURCE = 2
OP_SET = 0
OP_DELETE = 1
OPERATION_TIMEOUT_MS = 30_000
#: DescribeConfigs source numbers, as Kafka's ConfigSource names them.
CONFIG_SOURCES = {
    -1: "UNKNOWN", 0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG", 7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG",
}


class ActionError(Exception):
    """A request the cluster refused, with Kafka's error name."""


def _check(code: int, message: str | None) -> None:
    if code != ErrorCode.NONE:
        name = ErrorCode.for_code(code).name
        raise ActionError(f"{name}: {message}" if message else name)


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: str
    read_only: bool
    sensitive: bool


def describe_topic_configs(client: ClusterClient, topic: str) -> list[ConfigEntry]:
    request = DescribeConfigsRequest(resources=[DescribeConfigsRequestDescribeConfigsResource(
        resource_type=TOPIC_RESOURCE, resource_name=topic, configuration_keys=None)])
    response = client.any_broker(request, DescribeConfigsResponse)
    result = response.results[0]
    _check(result.error_code, result.error_message)
    return sorted((ConfigEntry(c.name, None if c.is_sensitive else c.value,
                               CONFIG_SOURCES.get(c.config_source, str(c.config_source)), c.read_only,
                               c.is_sensitive) for c in result.configs), key=lambda c: c.name)


def create_topic(client: ClusterClient, name: str, partitions: int, replication_factor: int,
                 configs: dict[str, str]) -> None:
    request = CreateTopicsRequest(timeout_ms=OPERATION_TIMEOUT_MS, topics=[CreateTopicsRequestCreatableTopic(
        name=name, num_partitions=partitions, replication_factor=replication_factor,
        configs=[CreateTopicsRequestCreatableTopicConfig(name=k, value=v) for k, v in sorted(configs.items())])])
    response = client.any_broker(request, CreateTopicsResponse)
    for t in response.topics:
        _check(t.error_code, t.error_message)


def delete_topic(client: ClusterClient, name: str) -> None:
    request = DeleteTopicsRequest(timeout_ms=OPERATION_TIMEOUT_MS, topic_names=[name],
                                  topics=[DeleteTopicsRequestDeleteTopicState(name=name)])
    response = client.any_broker(request, DeleteTopicsResponse)
    for r in response.responses:
        _check(r.error_code, r.error_message)


def add_partitions(client: ClusterClient, topic: str, total: int) -> None:
    request = CreatePartitionsRequest(timeout_ms=OPERATION_TIMEOUT_MS, topics=[
        CreatePartitionsRequestCreatePartitionsTopic(name=topic, count=total, assignments=None)])
    response = client.any_broker(request, CreatePartitionsResponse)
    for r in response.results:
        _check(r.error_code, r.error_message)


def alter_topic_config(client: ClusterClient, topic: str, name: str, value: str | None) -> None:
    """Set ``name`` to ``value``, or remove the topic's override when ``value`` is None."""
    request = IncrementalAlterConfigsRequest(resources=[IncrementalAlterConfigsRequestAlterConfigsResource(
        resource_type=TOPIC_RESOURCE, resource_name=topic, configs=[IncrementalAlterConfigsRequestAlterableConfig(
            name=name, config_operation=OP_DELETE if value is None else OP_SET, value=value)])])
    response = client.any_broker(request, IncrementalAlterConfigsResponse)
    for r in response.responses:
        _check(r.error_code, r.error_message)


@dataclass(frozen=True, slots=True)
class OffsetChange:
    topic: str
    partition: int
    current: int | None
    target: int


RESET_TARGETS = ("earliest", "latest", "offset", "datetime")


def plan_reset(client: ClusterClient, group: str, topic: str, target: str, value: int) -> list[OffsetChange]:
    """The offsets a reset would commit, per partition of ``topic`` (the dry run)."""
    metadata = client.metadata([topic])
    leaders = {(topic, p.partition_index): p.leader_id
               for t in metadata.topics if t.name == topic and t.error_code == ErrorCode.NONE
               for p in t.partitions}
    if not leaders:
        raise ActionError(f"UNKNOWN_TOPIC_OR_PARTITION: {topic}")
    host, port = client.coordinator(group)
    current = fetch_committed(client, host, port, group)
    errors: list[str] = []
    by_leader: dict[int, list[tuple[str, int]]] = {}
    for tp, leader in leaders.items():
        by_leader.setdefault(leader, []).append(tp)
    starts: dict[tuple[str, int], int] = {}
    ends: dict[tuple[str, int], int] = {}
    at_time: dict[tuple[str, int], int] = {}
    for leader, tps in by_leader.items():
        starts.update(list_offsets(client, leader, tps, EARLIEST, errors))
        ends.update(list_offsets(client, leader, tps, LATEST, errors))
        if target == "datetime":
            at_time.update(list_offsets(client, leader, tps, value, errors))
    if errors:
        raise ActionError("; ".join(errors))
    changes = []
    for tp in sorted(leaders):
        if target == "earliest":
            new = starts[tp]
        elif target == "latest":
            new = ends[tp]
        elif target == "offset":
            new = min(max(value, starts[tp]), ends[tp])
        elif target == "datetime":
            found = at_time.get(tp, -1)
            new = found if found >= 0 else ends[tp]
        else:
            raise ActionError(f"unknown reset target {target!r}")
        changes.append(OffsetChange(tp[0], tp[1], current.get(tp), new))
    return changes


def apply_reset(client: ClusterClient, group: str, changes: list[OffsetChange]) -> None:
    """Commit ``changes``; like kafka-consumer-groups.sh, only while the group has no members."""
    host, port = client.coordinator(group)
    described = client.address(host, port, DescribeGroupsRequest(groups=[group]), DescribeGroupsResponse)
    state = described.groups[0].group_state if described.groups else "Dead"
    if state not in ("Empty", "Dead"):
        raise ActionError(f"group {group!r} is {state}: stop its consumers before resetting offsets")
    topics = sorted({c.topic for c in changes})
    request = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
        OffsetCommitRequestTopic(name=t, partitions=[
            OffsetCommitRequestPartition(partition_index=c.partition, committed_offset=c.target)
            for c in changes if c.topic == t]) for t in topics])
    try:
        response = client.address(host, port, request, OffsetCommitResponse)
    except ClientError as ex:
        raise ActionError(str(ex)) from ex
    for t in response.topics:
        for p in t.partitions:
            _check(p.error_code, f"{t.name}-{p.partition_index}")
