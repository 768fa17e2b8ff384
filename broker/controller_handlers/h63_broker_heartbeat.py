"""BrokerHeartbeat (63), v0-1: a registered broker keeps its session (KIP-631).

Answers whether the broker has caught up with the metadata log (its offset is
at least its registration's), whether it is fenced (it is unfenced once caught
up) and, after ``want_shut_down``, that it may stop (its leaderships have
moved). BROKER_ID_NOT_REGISTERED, STALE_BROKER_EPOCH, or NOT_CONTROLLER on a
controller that is not active.
"""

from __future__ import annotations

from broker.controller_handlers._common import call, controller_role
from broker.server.dispatch import RequestContext
from wire.generated.api_063_broker_heartbeat import BrokerHeartbeatRequest, BrokerHeartbeatResponse

API_KEY = 63
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: BrokerHeartbeatRequest) -> BrokerHeartbeatResponse:
    role = controller_role(ctx)
    reply, code = await call(role.cluster_control.heartbeat(
        request.broker_id, request.broker_epoch, request.current_metadata_offset,
        request.want_fence, request.want_shut_down))
    if reply is None:
        return BrokerHeartbeatResponse(error_code=code)
    ctx.services.metrics.broker_heartbeat()
    return BrokerHeartbeatResponse(
        error_code=reply.error,
        is_caught_up=reply.is_caught_up,
        is_fenced=reply.is_fenced,
        should_shut_down=reply.should_shut_down,
    )
