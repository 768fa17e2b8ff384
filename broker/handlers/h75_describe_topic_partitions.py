"""DescribeTopicPartitions (75), v0: topic and partition metadata, paginated (KIP-966).

An empty topic list means every topic. Topics are answered in name order from
the cursor's topic on, and partitions from the cursor's partition, until
``response_partition_limit`` partitions (capped by
``max.request.partition.size.limit``, default 2000, and at least 1) have been
given; then ``next_cursor`` names where to continue. A cursor whose topic is not
among the requested ones, or with a negative partition, fails the request with
INVALID_REQUEST. Named topics that do not exist are answered
UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an invalid name).
Partitions carry the leader (-1 when it is not live on this listener), epoch,
replicas, ISR, offline replicas, and empty eligible-leader lists: the
controller does not keep ELR. Topic authorized operations list every topic
operation, as a broker without an authorizer allows them all.
"""

from __future__ import annotations

from broker.security.acl_operations import (
    AclOperation,
    ResourceType,
    authorize,
    authorized_operations,
)
from broker.server.dispatch import RequestContext
from controller.image import INTERNAL_TOPICS, MetadataImage, TopicImage
from controller.service import validate_topic_name
from wire.errors import ErrorCode
from wire.generated.api_075_describe_topic_partitions import (
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
    DescribeTopicPartitionsResponseCursor,
    DescribeTopicPartitionsResponsePartition,
    DescribeTopicPartitionsResponseTopic,
)
from wire.primitives import ZERO_UUID

API_KEY = 75
MIN_VERSION = 0
MAX_VERSION = 0

#: Kafka's default max.request.partition.size.limit.
DEFAULT_PARTITION_LIMIT = 2000

def _partition_limit(ctx: RequestContext, requested: int) -> int:
    raw = ctx.services.config.raw.get("max.request.partition.size.limit", "").strip()
    cap = int(raw) if raw.lstrip("-").isdigit() else DEFAULT_PARTITION_LIMIT
    return max(min(cap, requested), 1)


def _refuse(request: DescribeTopicPartitionsRequest) -> DescribeTopicPartitionsResponse:
    # Kafka's error response: every requested topic with the error and nothing else.
    return DescribeTopicPartitionsResponse(topics=[
        DescribeTopicPartitionsResponseTopic(error_code=ErrorCode.INVALID_REQUEST, name=t.name)
        for t in request.topics
    ])


async def handle(ctx: RequestContext, request: DescribeTopicPartitionsRequest) -> DescribeTopicPartitionsResponse:
    image = ctx.services.image
    cursor = request.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    fetch_all = not request.topics
    candidates = list(image.topic_ids) if fetch_all else [t.name for t in request.topics]
    names = sorted({n for n in candidates if n >= cursor_topic})
    if cursor is not None and not fetch_all and cursor.topic_name not in names:
        return _refuse(request)
    if cursor is not None and cursor.partition_index < 0:
        return _refuse(request)
    response = DescribeTopicPartitionsResponse()
    remaining = _partition_limit(ctx, request.response_partition_limit)
    for name in names:
        if remaining == 0:
            # The next call starts at this topic's first partition.
            response.next_cursor = DescribeTopicPartitionsResponseCursor(topic_name=name, partition_index=0)
            break
        topic = image.topic(name)
        if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name, log_denied=not fetch_all):
            # Left out of "all topics"; a named one fails without saying whether it exists (as Kafka).
            if not fetch_all:
                response.topics.append(DescribeTopicPartitionsResponseTopic(
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name, topic_id=ZERO_UUID,
                    is_internal=False))
            continue
        if topic is None:
            if not fetch_all:
                invalid = validate_topic_name(name) is not None
                response.topics.append(DescribeTopicPartitionsResponseTopic(
                    error_code=ErrorCode.INVALID_TOPIC_EXCEPTION if invalid else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    name=name, topic_id=ZERO_UUID, is_internal=name in INTERNAL_TOPICS,
                    topic_authorized_operations=authorized_operations(ctx, ResourceType.TOPIC, name)))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor_topic else 0
        partitions, next_index = _partitions(image, topic, ctx.conn.listener, start, remaining)
        response.topics.append(DescribeTopicPartitionsResponseTopic(
            name=name, topic_id=topic.topic_id, is_internal=topic.is_internal, partitions=partitions,
            topic_authorized_operations=authorized_operations(ctx, ResourceType.TOPIC, name)))
        if next_index >= 0:
            response.next_cursor = DescribeTopicPartitionsResponseCursor(topic_name=name, partition_index=next_index)
            break
        remaining -= len(partitions)
    return response


def _partitions(
    image: MetadataImage, topic: TopicImage, listener: str, start: int, limit: int
) -> tuple[list[DescribeTopicPartitionsResponsePartition], int]:
    """Partitions ``start`` up to ``limit`` of them, and the next index (-1 when done)."""
    live = {b.broker_id for b in image.live_brokers()}
    reachable = {b.broker_id for b in image.live_brokers() if b.endpoint(listener) is not None}
    count = len(topic.partitions)
    upper = min(count, start + limit)
    out = []
    for index in range(start, upper):
        part = topic.partitions.get(index)
        if part is None:
            continue
        out.append(DescribeTopicPartitionsResponsePartition(
            partition_index=index,
            leader_id=part.leader if part.leader in reachable else -1,
            leader_epoch=part.leader_epoch,
            replica_nodes=list(part.replicas),
            isr_nodes=list(part.isr),
            eligible_leader_replicas=[],
            last_known_elr=[],
            offline_replicas=[r for r in part.replicas if r not in live],
        ))
    return out, upper if upper < count else -1
