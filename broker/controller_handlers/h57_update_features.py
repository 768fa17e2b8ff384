"""UpdateFeatures (57), v0-2, on the controller listener: feature changes forwarded by
brokers; the active controller applies every update or none. NOT_CONTROLLER (41) on a
controller that is not active."""

from __future__ import annotations

from broker.cluster.feature_requests import response_of, updates_of
from broker.controller_handlers._common import call, controller_role
from broker.server.dispatch import RequestContext
from wire.generated.api_057_update_features import UpdateFeaturesRequest, UpdateFeaturesResponse

API_KEY = 57
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: UpdateFeaturesRequest) -> UpdateFeaturesResponse:
    role = controller_role(ctx)
    result, code = await call(role.controller.update_features(updates_of(request, ctx.api_version),
                                                              request.validate_only), request.timeout_ms)
    error, message = result if result is not None else (code, None)
    return response_of(request, ctx.api_version, error, message)
