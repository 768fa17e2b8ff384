"""ElectLeaders (43), v0-2, on the controller listener: elections forwarded by brokers.

NOT_CONTROLLER (41, top level) on a controller that is not active; REQUEST_TIMED_OUT
when the quorum does not commit within ``timeout_ms``.
"""

from __future__ import annotations

from broker.controller_handlers._common import call, controller_role
from broker.handlers.h43_elect_leaders import election_response, failed, requested_partitions
from broker.server.dispatch import RequestContext
from controller.elections import ELECTION_TYPES
from wire.errors import ErrorCode
from wire.generated.api_043_elect_leaders import ElectLeadersRequest, ElectLeadersResponse

API_KEY = 43
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: ElectLeadersRequest) -> ElectLeadersResponse:
    role = controller_role(ctx)
    partitions = requested_partitions(request)
    if request.election_type not in ELECTION_TYPES:
        return failed(partitions, ErrorCode.INVALID_REQUEST)
    outcomes, code = await call(role.controller.elect_leaders(request.election_type, partitions),
                                request.timeout_ms)
    if outcomes is None:
        return failed(partitions, code)
    return election_response(outcomes)
