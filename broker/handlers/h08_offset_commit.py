"""OffsetCommit (8), v0-10: store a group's committed offsets in ``__consumer_offsets``.

Acknowledged once the records are committed (acks=all inside the broker).
Partitions of unknown topics get UNKNOWN_TOPIC_OR_PARTITION; the rest go to
the group coordinator, which fences by member id, generation and group
instance id. A commit with generation -1 and no member id (a simple consumer
or an admin tool) is accepted while the group is Empty, creating the group if
needed.

Per version: v0 stored offsets in ZooKeeper, which a KRaft broker does not
have: every partition gets UNSUPPORTED_VERSION, as Kafka 3.9 in KRaft mode
answers. v1 carries a commit timestamp per partition (-1: now); v2-4 a
retention time (-1: the broker's ``offsets.retention.minutes``; otherwise the
offset expires that long after the commit); v6 the leader epoch; v7 the group
instance id; v10 (KIP-848) names topics by id: an id the metadata does not know gets
UNKNOWN_TOPIC_ID.
"""

from __future__ import annotations

from broker.eventloop.pacing import discard
from broker.group.records import OffsetAndMetadata
from broker.security.acl_operations import AclOperation, ResourceType, authorize, checker
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_008_offset_commit import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)

API_KEY = 8
MIN_VERSION = 0
MAX_VERSION = 10

DEFAULT_TIMESTAMP = -1
DEFAULT_RETENTION_TIME = -1
NO_LEADER_EPOCH = -1


async def handle(ctx: RequestContext, request: OffsetCommitRequest) -> OffsetCommitResponse:
    services = ctx.services
    version = ctx.api_version
    errors: dict[tuple[str, int], ErrorCode] = {}
    offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
    now = services.clock_ms()
    retention = request.retention_time_ms if 2 <= version <= 4 else DEFAULT_RETENTION_TIME
    expire = None if retention == DEFAULT_RETENTION_TIME else now + retention
    image = services.image
    group_allowed = authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id)
    may_read = checker(ctx, AclOperation.READ, ResourceType.TOPIC)
    pacer = ctx.pacer
    by_id = version >= 10
    names: list[str | None] = []
    for topic in request.topics:
        known = image.topics_by_id.get(topic.topic_id) if by_id else image.topic(topic.name)
        name = (known.name if known is not None else None) if by_id else topic.name
        names.append(name)
        if name is None:
            continue
        for p in topic.partitions:
            if pacer.tick():
                await pacer.pause()
            tp = (name, p.partition_index)
            if version == 0:
                errors[tp] = ErrorCode.UNSUPPORTED_VERSION
            elif not group_allowed:
                errors[tp] = ErrorCode.GROUP_AUTHORIZATION_FAILED
            elif not may_read(name):
                errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif known is None or p.partition_index not in known.partitions:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                offsets[tp] = OffsetAndMetadata(
                    offset=p.committed_offset,
                    leader_epoch=None if p.committed_leader_epoch == NO_LEADER_EPOCH else p.committed_leader_epoch,
                    metadata=p.committed_metadata or "",
                    commit_timestamp_ms=now if p.commit_timestamp == DEFAULT_TIMESTAMP else p.commit_timestamp,
                    expire_timestamp_ms=expire,
                )
    if offsets:
        errors.update(await services.group_coordinator.commit_offsets(
            request.group_id,
            request.member_id,
            request.group_instance_id if version >= 7 else None,
            request.generation_id_or_member_epoch,
            offsets,
        ))
    response = OffsetCommitResponse()
    for topic, name in zip(request.topics, names, strict=True):
        t = OffsetCommitResponseTopic(name=topic.name, topic_id=topic.topic_id)
        for p in topic.partitions:
            t.partitions.append(OffsetCommitResponsePartition(
                partition_index=p.partition_index,
                error_code=ErrorCode.UNKNOWN_TOPIC_ID if name is None else errors[(name, p.partition_index)]))
            if pacer.tick():
                await pacer.pause()
        response.topics.append(t)
    await discard(pacer, errors, offsets)
    return response
