"""SyncGroup (14), v0-5: the leader hands in the assignment; every member gets its share.

Followers wait until the leader's assignment is stored (committed to
``__consumer_offsets``). v3 adds ``group_instance_id``; v5 requires the
protocol type and name (INCONSISTENT_GROUP_PROTOCOL without them, as Kafka)
and echoes them back.
"""

from __future__ import annotations

from broker.group.shard_types import SyncRequest
from broker.security.acl_operations import AclOperation, ResourceType, authorize
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_014_sync_group import SyncGroupRequest, SyncGroupResponse

API_KEY = 14
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, request: SyncGroupRequest) -> SyncGroupResponse:
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return SyncGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    version = ctx.api_version
    if version >= 5 and (request.protocol_type is None or request.protocol_name is None):
        return SyncGroupResponse(error_code=ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    req = SyncRequest(
        group_id=request.group_id,
        generation_id=request.generation_id,
        member_id=request.member_id,
        group_instance_id=request.group_instance_id if version >= 3 else None,
        protocol_type=request.protocol_type if version >= 5 else None,
        protocol_name=request.protocol_name if version >= 5 else None,
        assignments={a.member_id: bytes(a.assignment) for a in request.assignments},
    )
    result = await ctx.services.group_coordinator.sync_group(req)
    return SyncGroupResponse(
        error_code=result.error,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )
