"""ShareGroupHeartbeat (76), v1: share-group membership (KIP-932).

A member brings its own member id, joins with epoch 0 naming its topics, then
heartbeats with the epoch it was given; -1 leaves (its acquired records are
released). The assignment (see broker/share/group.py) comes with the answer
whenever it changed. Served by the group coordinator (broker/group/share_groups.py).
"""

from __future__ import annotations

import uuid

from broker.server.dispatch import RequestContext
from broker.share.feature import share_groups_refusal
from wire.errors import ErrorCode
from wire.generated.api_076_share_group_heartbeat import (
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
    ShareGroupHeartbeatResponseAssignment,
    ShareGroupHeartbeatResponseTopicPartitions,
)

API_KEY = 76
MIN_VERSION = 1
MAX_VERSION = 1


def invalid_reason(request: ShareGroupHeartbeatRequest) -> str | None:
    """Kafka's throwIfShareGroupHeartbeatRequestIsInvalid."""
    if not request.group_id:
        return "GroupId can't be empty."
    if request.rack_id == "":
        return "RackId can't be empty."
    if not request.member_id:
        return "MemberId can't be empty."
    if request.member_epoch == 0:
        if not request.subscribed_topic_names:
            return "SubscribedTopicNames must be set in first request."
    elif request.member_epoch < -1:
        return f"MemberEpoch {request.member_epoch} is invalid."
    return None


async def handle(ctx: RequestContext, request: ShareGroupHeartbeatRequest) -> ShareGroupHeartbeatResponse:
    refusal = share_groups_refusal(ctx.services.image)
    if refusal is not None:
        return ShareGroupHeartbeatResponse(error_code=refusal[0], error_message=refusal[1])
    reason = invalid_reason(request)
    if reason is not None:
        return ShareGroupHeartbeatResponse(error_code=ErrorCode.INVALID_REQUEST, error_message=reason)
    result = await ctx.services.group_coordinator.share.heartbeat(
        request.group_id, request.member_id, request.member_epoch, request.rack_id, request.subscribed_topic_names,
        ctx.client_id or "", f"/{ctx.conn.peer_host}")
    if result.error is not ErrorCode.NONE:
        return ShareGroupHeartbeatResponse(error_code=result.error, error_message=result.message)
    response = ShareGroupHeartbeatResponse(
        member_id=request.member_id, member_epoch=result.member_epoch,
        heartbeat_interval_ms=result.heartbeat_interval_ms)
    if result.assignment is not None:
        by_topic: dict[uuid.UUID, list[int]] = {}
        for topic_id, partition in sorted(result.assignment):
            by_topic.setdefault(topic_id, []).append(partition)
        response.assignment = ShareGroupHeartbeatResponseAssignment(topic_partitions=[
            ShareGroupHeartbeatResponseTopicPartitions(topic_id=t, partitions=ps)
            for t, ps in by_topic.items()])
    return response
