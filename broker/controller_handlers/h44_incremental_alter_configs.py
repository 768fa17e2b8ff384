"""IncrementalAlterConfigs (44), v0-1, on the controller listener: config changes forwarded by brokers.

Brokers resolve APPEND and SUBTRACT against their image and forward SET (0) and
DELETE (1); anything else is INVALID_REQUEST. NOT_CONTROLLER (41) on a
controller that is not active.
"""

from __future__ import annotations

from broker.controller_handlers._common import call, controller_role
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_044_incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    IncrementalAlterConfigsResponseAlterConfigsResourceResponse,
)

API_KEY = 44
MIN_VERSION = 0
MAX_VERSION = 1

SET = 0
DELETE = 1


async def handle(ctx: RequestContext, request: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse:
    role = controller_role(ctx)
    response = IncrementalAlterConfigsResponse()
    for resource in request.resources:
        out = IncrementalAlterConfigsResponseAlterConfigsResourceResponse(
            resource_type=resource.resource_type, resource_name=resource.resource_name, error_message=None)
        response.responses.append(out)
        if any(c.config_operation not in (SET, DELETE) for c in resource.configs):
            out.error_code = ErrorCode.INVALID_REQUEST
            out.error_message = "The controller takes SET and DELETE operations only"
            continue
        changes = {c.name: (c.value if c.config_operation == SET else None) for c in resource.configs}
        outcome, code = await call(role.controller.alter_configs(
            resource.resource_type, resource.resource_name, changes, False, request.validate_only))
        out.error_code, out.error_message = (code, None) if outcome is None else outcome
    return response
