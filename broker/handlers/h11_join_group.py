"""JoinGroup (11), v0-9: join (or rejoin) a classic group; the answer waits for the rebalance.

Per version: v0 has no rebalance timeout (the session timeout serves as both,
as Kafka); v4 (KIP-394) answers a dynamic member's first join with
MEMBER_ID_REQUIRED and its new member id; v5 adds ``group_instance_id``
(static membership, KIP-345); v7 echoes the protocol type and makes the
protocol name nullable; v8 adds the leave/join ``reason``; v9 adds
``skip_assignment`` for a static leader rejoining a stable group. The client
host is reported as Kafka does (``/1.2.3.4``).
"""

from __future__ import annotations

from broker.group.shard_types import JoinRequest
from broker.security.acl_operations import AclOperation, ResourceType, authorize
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_011_join_group import (
    JoinGroupRequest,
    JoinGroupResponse,
    JoinGroupResponseMember,
)

API_KEY = 11
MIN_VERSION = 0
MAX_VERSION = 9


async def handle(ctx: RequestContext, request: JoinGroupRequest) -> JoinGroupResponse:
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return JoinGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    version = ctx.api_version
    instance_id = request.group_instance_id if version >= 5 else None
    req = JoinRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=instance_id,
        require_known_member_id=version >= 4 and instance_id is None,
        support_skip_assignment=version >= 9,
        client_id=ctx.client_id or "",
        client_host=f"/{ctx.conn.peer_host}",
        rebalance_timeout_ms=request.rebalance_timeout_ms if version >= 1 else request.session_timeout_ms,
        session_timeout_ms=request.session_timeout_ms,
        protocol_type=request.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
        reason=request.reason if version >= 8 else None,
    )
    result = await ctx.services.group_coordinator.join_group(req)
    protocol_name = result.protocol_name
    if version < 7 and protocol_name is None:
        protocol_name = ""  # not nullable before v7
    elif version >= 7 and protocol_name == "":
        protocol_name = None
    return JoinGroupResponse(
        error_code=result.error,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=protocol_name,
        leader=result.leader_id,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=[JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=md)
                 for m, i, md in result.members],
    )
