"""AlterConfigs (33), v0-2, on the controller listener: legacy config changes forwarded by brokers.

Each resource's configs become its whole set (the others return to their
defaults). NOT_CONTROLLER (41) on a controller that is not active.
"""

from __future__ import annotations

from broker.controller_handlers._common import call, controller_role
from broker.server.dispatch import RequestContext
from wire.generated.api_033_alter_configs import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    AlterConfigsResponseAlterConfigsResourceResponse,
)

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: AlterConfigsRequest) -> AlterConfigsResponse:
    role = controller_role(ctx)
    response = AlterConfigsResponse()
    for resource in request.resources:
        changes: dict[str, str | None] = {c.name: c.value for c in resource.configs if c.value is not None}
        outcome, code = await call(role.controller.alter_configs(
            resource.resource_type, resource.resource_name, changes, True, request.validate_only))
        error, message = (code, None) if outcome is None else outcome
        response.responses.append(AlterConfigsResponseAlterConfigsResourceResponse(
            error_code=error, error_message=message,
            resource_type=resource.resource_type, resource_name=resource.resource_name))
    return response
