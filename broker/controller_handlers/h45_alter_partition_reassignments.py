"""AlterPartitionReassignments (45), v0, on the controller listener: forwarded by brokers.

NOT_CONTROLLER (41, top level) on a controller that is not active; REQUEST_TIMED_OUT
when the quorum does not commit within ``timeout_ms``.
"""

from __future__ import annotations

from broker.controller_handlers._common import call, controller_role
from broker.handlers.h45_alter_partition_reassignments import reassignment_response, requested
from broker.server.dispatch import RequestContext
from wire.generated.api_045_alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
)

API_KEY = 45
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: AlterPartitionReassignmentsRequest) -> AlterPartitionReassignmentsResponse:
    role = controller_role(ctx)
    requests = requested(request)
    outcomes, code = await call(role.controller.alter_reassignments(requests), request.timeout_ms)
    return reassignment_response(requests, outcomes, code)
