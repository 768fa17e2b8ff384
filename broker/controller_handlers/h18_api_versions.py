"""ApiVersions (18), v0-4, on the controller listener: the controller APIs this node serves.

Same checks as the broker listener's (KIP-511 software name and version); the list
is the controller listener's own table; the features are the quorum's (as
``kafka-features.sh --bootstrap-controller`` reads them).
"""

from __future__ import annotations

import re

from broker.cluster.feature_requests import add_features
from broker.controller_handlers._common import controller_role
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_018_api_versions import ApiVersionsRequest, ApiVersionsResponse

API_KEY = 18
MIN_VERSION = 0
MAX_VERSION = 4

_SOFTWARE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-_.]*[a-zA-Z0-9])?$")


async def handle(ctx: RequestContext, request: ApiVersionsRequest) -> ApiVersionsResponse:
    role = controller_role(ctx)
    response = ApiVersionsResponse(api_keys=role.dispatcher.api_versions())
    if ctx.api_version >= 3 and not (
        _SOFTWARE.fullmatch(request.client_software_name) and _SOFTWARE.fullmatch(request.client_software_version)
    ):
        response.error_code = ErrorCode.INVALID_REQUEST
    elif ctx.api_version >= 3:
        add_features(response, role.controller.image)
    return response
