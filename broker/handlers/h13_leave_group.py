"""LeaveGroup (13), v0-5: members leave at once instead of waiting for their session to expire.

v0-2 name one member and answer with one error code (the member's error, as
Kafka's LeaveGroupResponse folds it); v3 (KIP-345) takes a batch of members,
by member id or, for an administrative removal of a static member, by
``group_instance_id`` alone, and answers per member; v5 adds a reason.
"""

from __future__ import annotations

from broker.group.shard_types import LeavingMember
from broker.security.acl_operations import AclOperation, ResourceType, authorize
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_013_leave_group import (
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeaveGroupResponseMemberResponse,
)

API_KEY = 13
MIN_VERSION = 0
MAX_VERSION = 5

BATCHED_VERSION = 3
#: Members of one LeaveGroup handled before the handler yields.
LEAVE_CHUNK = 64


async def handle(ctx: RequestContext, request: LeaveGroupRequest) -> LeaveGroupResponse:
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return LeaveGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    version = ctx.api_version
    coordinator = ctx.services.group_coordinator
    if version < BATCHED_VERSION:
        error, results = coordinator.leave_group(request.group_id, [LeavingMember(request.member_id, None)])
        if error is ErrorCode.NONE:
            error = next((e for e in results if e is not ErrorCode.NONE), ErrorCode.NONE)
        return LeaveGroupResponse(error_code=error)
    # A batch is handled LEAVE_CHUNK members at a time, other requests running in between:
    # each member's leave is logged and may change the group, and a batch may name 1,000,000.
    response = LeaveGroupResponse()
    asked = request.members
    for start in range(0, max(len(asked), 1), LEAVE_CHUNK):
        if start:
            await ctx.pacer.pause()
        # Counted, so that a response this long is counted and encoded off the loop.
        ctx.pacer.tick(min(LEAVE_CHUNK, len(asked) - start))
        members = [LeavingMember(m.member_id, m.group_instance_id, m.reason if version >= 5 else None)
                   for m in asked[start:start + LEAVE_CHUNK]]
        error, results = coordinator.leave_group(request.group_id, members)
        if error is not ErrorCode.NONE:  # the group's error alone, as Kafka answers it
            return LeaveGroupResponse(error_code=error)
        response.members.extend(
            LeaveGroupResponseMemberResponse(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                             error_code=e)
            for m, e in zip(members, results, strict=True))
    return response
