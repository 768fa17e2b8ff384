"""Heartbeat (12), v0-4: keeps a member's session alive; REBALANCE_IN_PROGRESS asks it to rejoin.

v3 adds ``group_instance_id`` (static members, fenced with FENCED_INSTANCE_ID
when another instance took the id). While the group's partition loads the
answer is NONE, as Kafka's.
"""

from __future__ import annotations

from broker.security.acl_operations import AclOperation, ResourceType, authorize
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_012_heartbeat import HeartbeatRequest, HeartbeatResponse

API_KEY = 12
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(ctx: RequestContext, request: HeartbeatRequest) -> HeartbeatResponse:
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return HeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    instance_id = request.group_instance_id if ctx.api_version >= 3 else None
    error = ctx.services.group_coordinator.heartbeat(
        request.group_id, request.member_id, instance_id, request.generation_id)
    return HeartbeatResponse(error_code=error)
