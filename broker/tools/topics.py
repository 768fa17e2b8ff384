"""``cormorant topics``: create, list, describe, delete and configure topics, like kafka-topics.sh.

Every action is one or two Kafka requests through :class:`broker.tools.client.KafkaClient`,
so the tool works against any Kafka-compatible broker. Output follows
kafka-topics.sh; a failure prints one line on stderr ("cormorant topics: ...", with
Kafka's error message) and exits with status 1.
"""

from __future__ import annotations

import argparse
import base64
import sys
import uuid
from typing import TextIO

from broker.tools.client import ClientError, KafkaClient
from wire.errors import ErrorCode
from wire.generated.api_003_metadata import (
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    MetadataResponseTopic,
)
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
from wire.generated.api_044_incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsRequestAlterableConfig,
    IncrementalAlterConfigsRequestAlterConfigsResource,
    IncrementalAlterConfigsResponse,
)

TOPIC_RESOURCE = 2
DEFAULT_CONFIG_SOURCE = 5
OP_SET = 0
OP_DELETE = 1
#: How long the broker may take over topic creation and deletion.
OPERATION_TIMEOUT_MS = 30_000
EXIT_FAILURE = 1


class ToolError(Exception):
    """A failure to report on one line."""


def kafka_uuid(value: uuid.UUID) -> str:
    """A topic id as Kafka prints it: URL-safe base64 of its 16 bytes, unpadded."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def _key_values(items: list[str], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ToolError(f"Invalid {what} '{item}': expected key=value")
        out[key.strip()] = value.strip()
    return out


def _check(code: int, message: str | None) -> None:
    if code != ErrorCode.NONE:
        raise ToolError(message or ErrorCode(code).description)


def run_topics(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        with KafkaClient.connect(args.bootstrap_server) as client:
            actions = {
                "create": _create,
                "list": _list,
                "describe": _describe,
                "delete": _delete,
                "alter-config": _alter_config,
            }
            actions[args.action](client, args, out)
    except (ClientError, ToolError) as ex:
        print(f"cormorant topics: {ex}", file=err)
        return EXIT_FAILURE
    return 0


def _create(client: KafkaClient, args: argparse.Namespace, out: TextIO) -> None:
    configs = _key_values(args.config, "config")
    request = CreateTopicsRequest(
        topics=[CreateTopicsRequestCreatableTopic(
            name=args.topic,
            num_partitions=args.partitions,
            replication_factor=args.replication_factor,
            configs=[CreateTopicsRequestCreatableTopicConfig(name=k, value=v) for k, v in configs.items()],
        )],
        timeout_ms=OPERATION_TIMEOUT_MS,
    )
    response = client.send(request, CreateTopicsResponse)
    for result in response.topics:
        _check(result.error_code, result.error_message)
    print(f"Created topic {args.topic}.", file=out)


def topic_metadata(client: KafkaClient, topic: str | None) -> list[MetadataResponseTopic]:
    request = MetadataRequest(
        topics=None if topic is None else [MetadataRequestTopic(name=topic)],
        allow_auto_topic_creation=False,
    )
    response = client.send(request, MetadataResponse)
    return sorted(response.topics, key=lambda t: t.name or "")


def _list(client: KafkaClient, args: argparse.Namespace, out: TextIO) -> None:
    for topic in topic_metadata(client, None):
        if topic.error_code == ErrorCode.NONE and not (topic.is_internal and args.exclude_internal):
            print(topic.name, file=out)


def _describe(client: KafkaClient, args: argparse.Namespace, out: TextIO) -> None:
    topics = topic_metadata(client, args.topic)
    if args.topic is not None:
        found = [t for t in topics if t.name == args.topic and t.error_code == ErrorCode.NONE]
        if not found:
            raise ToolError(f"Topic '{args.topic}' does not exist as expected")
    topics = [t for t in topics if t.error_code == ErrorCode.NONE and t.name
              and not (t.is_internal and args.exclude_internal)]
    if not topics:
        return
    configs = client.send(
        DescribeConfigsRequest(resources=[
            DescribeConfigsRequestDescribeConfigsResource(resource_type=TOPIC_RESOURCE, resource_name=t.name or "",
                                                          configuration_keys=None)
            for t in topics
        ]),
        DescribeConfigsResponse,
    )
    overrides: dict[str, str] = {}
    for result in configs.results:
        if result.error_code == ErrorCode.NONE:
            # kafka-topics.sh shows every setting not at its default.
            shown = sorted(
                (c.name, c.value) for c in result.configs
                if c.config_source != DEFAULT_CONFIG_SOURCE and not c.is_default
            )
            overrides[result.resource_name] = ",".join(f"{k}={v}" for k, v in shown)
    for topic in topics:
        name = topic.name or ""
        partitions = sorted(topic.partitions, key=lambda p: p.partition_index)
        rf = len(partitions[0].replica_nodes) if partitions else 0
        print(
            f"Topic: {name}\tTopicId: {kafka_uuid(topic.topic_id)}\tPartitionCount: {len(partitions)}"
            f"\tReplicationFactor: {rf}\tConfigs: {overrides.get(name, '')}",
            file=out,
        )
        for p in partitions:
            leader = str(p.leader_id) if p.leader_id >= 0 else "none"
            print(
                f"\tTopic: {name}\tPartition: {p.partition_index}\tLeader: {leader}"
                f"\tReplicas: {','.join(map(str, p.replica_nodes))}\tIsr: {','.join(map(str, p.isr_nodes))}",
                file=out,
            )


def _delete(client: KafkaClient, args: argparse.Namespace, out: TextIO) -> None:
    version = client.version_for(DeleteTopicsRequest.API_KEY)
    if version >= 6:
        request = DeleteTopicsRequest(topics=[DeleteTopicsRequestDeleteTopicState(name=args.topic)],
                                      timeout_ms=OPERATION_TIMEOUT_MS)
    else:
        request = DeleteTopicsRequest(topic_names=[args.topic], timeout_ms=OPERATION_TIMEOUT_MS)
    response = client.send(request, DeleteTopicsResponse, version)
    for result in response.responses:
        if result.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise ToolError(f"Topic '{args.topic}' does not exist as expected")
        _check(result.error_code, result.error_message)


def _alter_config(client: KafkaClient, args: argparse.Namespace, out: TextIO) -> None:
    sets = _key_values(args.set, "config")
    if not sets and not args.delete:
        raise ToolError("Nothing to change: give --set KEY=VALUE or --delete KEY")
    ops = [IncrementalAlterConfigsRequestAlterableConfig(name=k, config_operation=OP_SET, value=v)
           for k, v in sets.items()]
    ops += [IncrementalAlterConfigsRequestAlterableConfig(name=k, config_operation=OP_DELETE, value=None)
            for k in args.delete]
    response = client.send(
        IncrementalAlterConfigsRequest(resources=[IncrementalAlterConfigsRequestAlterConfigsResource(
            resource_type=TOPIC_RESOURCE, resource_name=args.topic, configs=ops)]),
        IncrementalAlterConfigsResponse,
    )
    for result in response.responses:
        _check(result.error_code, result.error_message)
    print(f"Completed updating config for topic {args.topic}.", file=out)
