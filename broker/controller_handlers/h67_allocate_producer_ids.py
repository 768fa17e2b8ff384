"""AllocateProducerIds (67), v0: a broker's next block of producer ids (KIP-730).

The block is written as a ProducerIdsRecord, so no id is handed out twice
across controller failovers. STALE_BROKER_EPOCH or BROKER_ID_NOT_REGISTERED for
an unknown requester; NOT_CONTROLLER on a controller that is not active.
"""

from __future__ import annotations

from broker.controller_handlers._common import call, controller_role
from broker.server.dispatch import RequestContext
from wire.generated.api_067_allocate_producer_ids import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
)

API_KEY = 67
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: AllocateProducerIdsRequest) -> AllocateProducerIdsResponse:
    role = controller_role(ctx)
    outcome, code = await call(role.cluster_control.allocate_producer_ids(request.broker_id, request.broker_epoch))
    if outcome is None:
        return AllocateProducerIdsResponse(error_code=code)
    error, start, length = outcome
    return AllocateProducerIdsResponse(error_code=error, producer_id_start=start, producer_id_len=length)
