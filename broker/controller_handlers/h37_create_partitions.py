"""CreatePartitions (37), v0-3, on the controller listener: growth forwarded by brokers.

NOT_CONTROLLER (41) on a controller that is not active; REQUEST_TIMED_OUT (7)
when the quorum does not commit within ``timeout_ms``.
"""

from __future__ import annotations

from broker.controller_handlers._common import call, controller_role
from broker.server.dispatch import RequestContext
from wire.generated.api_037_create_partitions import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsResponseCreatePartitionsTopicResult,
)

API_KEY = 37
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(ctx: RequestContext, request: CreatePartitionsRequest) -> CreatePartitionsResponse:
    role = controller_role(ctx)
    changes = [
        (t.name, t.count, None if t.assignments is None else [list(a.broker_ids) for a in t.assignments])
        for t in request.topics
    ]
    outcome, code = await call(role.controller.create_partitions(changes, request.validate_only),
                               request.timeout_ms)
    response = CreatePartitionsResponse()
    for t in request.topics:
        error, message = (code, None) if outcome is None else outcome[t.name]
        response.results.append(CreatePartitionsResponseCreatePartitionsTopicResult(
            name=t.name, error_code=error, error_message=message))
    return response
