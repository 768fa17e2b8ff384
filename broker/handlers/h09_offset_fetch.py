"""OffsetFetch (9), v0-9: a group's committed offsets (-1 where there is none).

v0 read offsets from ZooKeeper, which a KRaft broker does not have: every
partition gets UNSUPPORTED_VERSION, as Kafka 3.9 answers in KRaft mode. v1
asks for given partitions of one group; v2 adds a top-level error and allows
null topics ("every partition with an offset"); v5 returns the leader epoch;
v7 ``require_stable`` (pending commits answer UNSTABLE_OFFSET_COMMIT, which
clients retry); v8 (KIP-709) asks for several groups at once, each answered
with its own error; v9 (KIP-848) names the member, whose epoch a consumer-protocol
group checks (STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID). Before v2 a group-level error has nowhere to go and the
answer holds no partitions, as Kafka's.
"""

from __future__ import annotations

from broker.acl_operations import AclOperation, ResourceType, authorize, checker
from broker.dispatch import RequestContext
from broker.group.shard import FetchedOffset
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

API_KEY = 9
MIN_VERSION = 0
MAX_VERSION = 9

MULTI_GROUP_VERSION = 8
NO_LEADER_EPOCH = -1
UNAUTHORIZED_OFFSET = FetchedOffset(-1, None, "", ErrorCode.TOPIC_AUTHORIZATION_FAILED)


def _group_offsets(
    ctx: RequestContext, group_id: str, wanted: list[tuple[str, list[int]]] | None, require_stable: bool,
    member: tuple[str | None, int] | None = None,
) -> tuple[ErrorCode, list[tuple[str, list[tuple[int, FetchedOffset]]]]]:
    if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, []
    may_describe = checker(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC)
    partitions = None if wanted is None else [(t, p) for t, ps in wanted for p in ps]
    error, found = ctx.node.group_coordinator.fetch_offsets(
        group_id, None if partitions is None else [tp for tp in partitions if may_describe(tp[0])], require_stable,
        member)
    if error is not ErrorCode.NONE:
        return error, []
    topics: dict[str, list[tuple[int, FetchedOffset]]] = {}
    # Kafka leaves topics the caller may not describe out of "all topics", and fails them when named.
    order = partitions if partitions is not None else sorted(tp for tp in found if may_describe(tp[0]))
    for tp in order:
        topics.setdefault(tp[0], []).append((tp[1], found[tp] if tp in found else UNAUTHORIZED_OFFSET))
    return ErrorCode.NONE, list(topics.items())


async def handle(ctx: RequestContext, request: OffsetFetchRequest) -> OffsetFetchResponse:
    version = ctx.api_version
    require_stable = request.require_stable if version >= 7 else False
    if version >= MULTI_GROUP_VERSION:
        response = OffsetFetchResponse()
        for g in request.groups:
            wanted = None if g.topics is None else [(t.name, list(t.partition_indexes)) for t in g.topics]
            member = (g.member_id, g.member_epoch) if version >= 9 else None
            error, topics = _group_offsets(ctx, g.group_id, wanted, require_stable, member)
            response.groups.append(OffsetFetchResponseGroup(group_id=g.group_id, error_code=error, topics=[
                OffsetFetchResponseTopics(name=name, partitions=[
                    OffsetFetchResponsePartitions(
                        partition_index=index, committed_offset=o.offset,
                        committed_leader_epoch=NO_LEADER_EPOCH if o.leader_epoch is None else o.leader_epoch,
                        metadata=o.metadata, error_code=o.error)
                    for index, o in parts])
                for name, parts in topics]))
        return response
    requested = request.topics
    if version == 0:
        return OffsetFetchResponse(topics=[
            OffsetFetchResponseTopic(name=t.name, partitions=[
                OffsetFetchResponsePartition(partition_index=p, committed_offset=-1, metadata="",
                                             error_code=ErrorCode.UNSUPPORTED_VERSION)
                for p in t.partition_indexes])
            for t in requested or []])
    wanted = None if requested is None and version >= 2 else [(t.name, list(t.partition_indexes))
                                                               for t in requested or []]
    error, topics = _group_offsets(ctx, request.group_id, wanted, require_stable)
    return OffsetFetchResponse(error_code=error, topics=[
        OffsetFetchResponseTopic(name=name, partitions=[
            OffsetFetchResponsePartition(
                partition_index=index, committed_offset=o.offset,
                committed_leader_epoch=NO_LEADER_EPOCH if o.leader_epoch is None else o.leader_epoch,
                metadata=o.metadata, error_code=o.error)
            for index, o in parts])
        for name, parts in topics])
