"""OffsetForLeaderEpoch (23), v0-4: where a leader epoch ended, from the leader epoch cache.

Followers ask before truncating (KIP-101, KIP-279) and consumers ask to detect
log truncation after a leader change (KIP-320). The answer for an epoch is the
largest epoch at or below it that this leader knows and the start offset of the
next one (the log end offset for the current epoch); an epoch older than every
entry gets itself and the first entry's start offset. UNDEFINED (-1), an epoch
newer than any known, or an empty cache answer -1/-1 without an error, as
Kafka does: UNKNOWN_LEADER_EPOCH comes only from fencing.

v0 answers only the end offset; v1+ add the epoch; v2+ carry
``current_leader_epoch`` for fencing (FENCED_LEADER_EPOCH when the requester is
behind, UNKNOWN_LEADER_EPOCH when it is ahead); v3+ carry ``replica_id``
(-1 consumer, -2 debugging, else a follower's broker id), which does not change
the answer: only the leader answers. v4 is flexible.
"""

from __future__ import annotations

from broker.handlers.h02_list_offsets import PartitionError, hosted_partition, local_log_for
from broker.security.acl_operations import AclOperation, replica_or_topic_checker
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_023_offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochRequestOffsetForLeaderPartition,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderEpochResponseEpochEndOffset,
    OffsetForLeaderEpochResponseOffsetForLeaderTopicResult,
)

API_KEY = 23
MIN_VERSION = 0
MAX_VERSION = 4

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


async def handle(ctx: RequestContext, request: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
    response = OffsetForLeaderEpochResponse()
    # Followers (replica id >= 0, v3+) need CLUSTER_ACTION; consumers DESCRIBE on the topic.
    may_describe = replica_or_topic_checker(ctx, request.replica_id if ctx.api_version >= 3 else -1,
                                            AclOperation.DESCRIBE)
    for topic in request.topics:
        t_resp = OffsetForLeaderEpochResponseOffsetForLeaderTopicResult(topic=topic.topic)
        response.topics.append(t_resp)
        for p in topic.partitions:
            if not may_describe(topic.topic):
                t_resp.partitions.append(OffsetForLeaderEpochResponseEpochEndOffset(
                    partition=p.partition, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            t_resp.partitions.append(_end_offset(ctx, topic.topic, p))
    return response


def _end_offset(
    ctx: RequestContext, topic: str, p: OffsetForLeaderEpochRequestOffsetForLeaderPartition
) -> OffsetForLeaderEpochResponseEpochEndOffset:
    out = OffsetForLeaderEpochResponseEpochEndOffset(partition=p.partition)
    try:
        partition = hosted_partition(ctx, topic, p.partition)
        current = p.current_leader_epoch if ctx.api_version >= 2 else None
        local_log_for(ctx, partition, current, require_leader=True)
    except PartitionError as ex:
        out.error_code = ex.code
        ctx.services.log_client_error("offset_for_leader_epoch_failed", topic=topic, partition=p.partition,
                                      error=ex.code.name, client_id=ctx.client_id)
        return out
    epoch, end_offset = partition.log.end_offset_for_epoch(p.leader_epoch)
    if end_offset == UNDEFINED_EPOCH_OFFSET:
        return out
    out.end_offset = end_offset
    if ctx.api_version >= 1:
        out.leader_epoch = epoch
    return out
