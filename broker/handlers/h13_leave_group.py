"""LeaveGroup (13), v0-5: members leave at once instead of waiting for their session to expire.

v0-2 name one member and answer with one error code (the member's error, as
Kafka's LeaveGroupResponse folds it); v3 (KIP-345) takes a batch of members,
by member id or, for an administrative removal of a static member, by
``group_instance_id`` alone, and answers per member; v5 adds a reason.
"""

from __future__ import annotations

from broker.acl_operations import AclOperation, ResourceType, authorize
from broker.dispatch import RequestContext
from broker.group.shard import LeavingMember
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


async def handle(ctx: RequestContext, request: LeaveGroupRequest) -> LeaveGroupResponse:
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return LeaveGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    version = ctx.api_version
    if version >= BATCHED_VERSION:
        members = [LeavingMember(m.member_id, m.group_instance_id, m.reason if version >= 5 else None)
                   for m in request.members]
    else:
        members = [LeavingMember(request.member_id, None)]
    error, results = ctx.services.group_coordinator.leave_group(request.group_id, members)
    if version >= BATCHED_VERSION:
        return LeaveGroupResponse(error_code=error, members=[
            LeaveGroupResponseMemberResponse(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                             error_code=e)
            for m, e in zip(members, results, strict=True)])
    if error is ErrorCode.NONE:
        error = next((e for e in results if e is not ErrorCode.NONE), ErrorCode.NONE)
    return LeaveGroupResponse(error_code=error)
