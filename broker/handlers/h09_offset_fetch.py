"""OffsetFetch (9), v0-10: a group's committed offsets (-1 where there is none).

v0 read offsets from ZooKeeper, which a KRaft broker does not have: every
partition gets UNSUPPORTED_VERSION, as Kafka 3.9 answers in KRaft mode. v1
asks for given partitions of one group; v2 adds a top-level error and allows
null topics ("every partition with an offset"); v5 returns the leader epoch;
v7 ``require_stable`` (pending commits answer UNSTABLE_OFFSET_COMMIT, which
clients retry); v8 (KIP-709) asks for several groups at once, each answered
with its own error; v9 (KIP-848) names the member, whose epoch a consumer-protocol
group checks (STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID); v10 names topics by id (a
requested id the metadata does not know: UNKNOWN_TOPIC_ID; with all topics asked for,
offsets of topics that are gone are left out). Before v2 a group-level error has nowhere to go and the
answer holds no partitions, as Kafka's.
"""

from __future__ import annotations

import uuid

from broker.eventloop.pacing import discard
from broker.group.shard_types import FetchedOffset
from broker.security.acl_operations import AclOperation, ResourceType, authorize, checker
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_009_offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartition,
    OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
)
from wire.primitives import ZERO_UUID

API_KEY = 9
MIN_VERSION = 0
MAX_VERSION = 10

MULTI_GROUP_VERSION = 8
TOPIC_ID_VERSION = 10
NO_LEADER_EPOCH = -1
UNAUTHORIZED_OFFSET = FetchedOffset(-1, None, "", ErrorCode.TOPIC_AUTHORIZATION_FAILED)


#: Partitions looked up in one go before the handler may yield.
LOOKUP_CHUNK = 512


async def _group_offsets(
    ctx: RequestContext, group_id: str, wanted: list[tuple[str, list[int]]] | None, require_stable: bool,
    member: tuple[str | None, int] | None = None,
) -> tuple[ErrorCode, list[tuple[str, list[tuple[int, FetchedOffset]]]]]:
    if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, []
    may_describe = checker(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC)
    pacer = ctx.pacer
    partitions: list[tuple[str, int]] | None = None
    allowed: list[tuple[str, int]] | None = None
    if wanted is not None:
        partitions, allowed = [], []
        for t, ps in wanted:
            permitted = may_describe(t)
            for start in range(0, len(ps), LOOKUP_CHUNK):
                named = [(t, p) for p in ps[start:start + LOOKUP_CHUNK]]
                partitions.extend(named)
                if permitted:
                    allowed.extend(named)
                if pacer.tick(len(named)):
                    await pacer.pause()
    coordinator = ctx.services.group_coordinator
    if allowed is None or len(allowed) <= LOOKUP_CHUNK:
        error, found = coordinator.fetch_offsets(group_id, allowed, require_stable, member)
    else:  # a request for many partitions is looked up a chunk at a time
        found = {}
        for start in range(0, len(allowed), LOOKUP_CHUNK):
            error, chunk = coordinator.fetch_offsets(group_id, allowed[start:start + LOOKUP_CHUNK], require_stable,
                                                     member)
            if error is not ErrorCode.NONE:
                break
            found.update(chunk)
            await ctx.pacer.pause()
    if error is not ErrorCode.NONE:
        return error, []
    topics: dict[str, list[tuple[int, FetchedOffset]]] = {}
    # Kafka leaves topics the caller may not describe out of "all topics", and fails them when named.
    order = partitions if partitions is not None else sorted(tp for tp in found if may_describe(tp[0]))
    for tp in order:
        topics.setdefault(tp[0], []).append((tp[1], found[tp] if tp in found else UNAUTHORIZED_OFFSET))
        if pacer.tick():
            await pacer.pause()
    await discard(pacer, found, order, *(c for c in (partitions, allowed) if c is not None))
    return ErrorCode.NONE, list(topics.items())


async def handle(ctx: RequestContext, request: OffsetFetchRequest) -> OffsetFetchResponse:
    version = ctx.api_version
    pacer = ctx.pacer
    require_stable = request.require_stable if version >= 7 else False
    if version >= MULTI_GROUP_VERSION:
        response = OffsetFetchResponse()
        by_id = version >= TOPIC_ID_VERSION
        image = ctx.services.image
        for g in request.groups:
            unknown_ids: list[tuple[uuid.UUID, list[int]]] = []
            wanted: list[tuple[str, list[int]]] | None
            if g.topics is None:
                wanted = None
            elif by_id:
                wanted = []
                for t in g.topics:
                    known = image.topics_by_id.get(t.topic_id)
                    if known is None:
                        unknown_ids.append((t.topic_id, list(t.partition_indexes)))
                    else:
                        wanted.append((known.name, list(t.partition_indexes)))
            else:
                wanted = [(t.name, list(t.partition_indexes)) for t in g.topics]
            member = (g.member_id, g.member_epoch) if version >= 9 else None
            error, topics = await _group_offsets(ctx, g.group_id, wanted, require_stable, member)
            group = OffsetFetchResponseGroup(group_id=g.group_id, error_code=error)
            response.groups.append(group)
            if error is ErrorCode.NONE:
                group.topics.extend(OffsetFetchResponseTopics(topic_id=tid, partitions=[
                    OffsetFetchResponsePartitions(partition_index=i, committed_offset=-1, metadata="",
                                                  error_code=ErrorCode.UNKNOWN_TOPIC_ID) for i in indexes])
                    for tid, indexes in unknown_ids)
            for name, parts in topics:
                topic_id = image.topic_ids.get(name)
                if by_id and topic_id is None:
                    continue  # offsets of a topic that is gone: it has no id to be named by
                group_topic = OffsetFetchResponseTopics(name=name, topic_id=topic_id or ZERO_UUID)
                group.topics.append(group_topic)
                for index, o in parts:
                    group_topic.partitions.append(OffsetFetchResponsePartitions(
                        partition_index=index, committed_offset=o.offset,
                        committed_leader_epoch=NO_LEADER_EPOCH if o.leader_epoch is None else o.leader_epoch,
                        metadata=o.metadata, error_code=o.error))
                    if pacer.tick():
                        await pacer.pause()
                await discard(pacer, parts)
        return response
    requested = request.topics
    if version == 0:
        response_v0 = OffsetFetchResponse()
        for asked in requested or []:
            topic_v0 = OffsetFetchResponseTopic(name=asked.name)
            response_v0.topics.append(topic_v0)
            for p in asked.partition_indexes:
                topic_v0.partitions.append(OffsetFetchResponsePartition(
                    partition_index=p, committed_offset=-1, metadata="", error_code=ErrorCode.UNSUPPORTED_VERSION))
                if pacer.tick():
                    await pacer.pause()
        return response_v0
    wanted_v1 = None if requested is None and version >= 2 else [(t.name, list(t.partition_indexes))
                                                               for t in requested or []]
    error, topics = await _group_offsets(ctx, request.group_id, wanted_v1, require_stable)
    response_v1 = OffsetFetchResponse(error_code=error)
    for name, parts in topics:
        topic = OffsetFetchResponseTopic(name=name)
        response_v1.topics.append(topic)
        for index, o in parts:
            topic.partitions.append(OffsetFetchResponsePartition(
                partition_index=index, committed_offset=o.offset,
                committed_leader_epoch=NO_LEADER_EPOCH if o.leader_epoch is None else o.leader_epoch,
                metadata=o.metadata, error_code=o.error))
            if pacer.tick():
                await pacer.pause()
        await discard(pacer, parts)
    return response_v1
