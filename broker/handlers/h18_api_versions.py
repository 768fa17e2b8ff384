"""ApiVersions (18), v0-4: the API keys and versions this broker speaks, and (v3+) the
cluster's features (KIP-584): the levels this software supports, the finalized levels of
the metadata log, and their epoch (the metadata offset), as Kafka 4 brokers answer.

v3+ carries the client's software name and version (KIP-511), which must be
non-empty and made of ASCII alphanumerics, '.', '-' and '_' — else INVALID_REQUEST.
"""

from __future__ import annotations

import re

from broker.cluster.feature_requests import add_features
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_018_api_versions import ApiVersionsRequest, ApiVersionsResponse

API_KEY = 18
MIN_VERSION = 0
MAX_VERSION = 4

_SOFTWARE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-_.]*[a-zA-Z0-9])?$")


async def handle(ctx: RequestContext, request: ApiVersionsRequest) -> ApiVersionsResponse:
    response = ApiVersionsResponse(api_keys=ctx.services.api_versions())
    if ctx.api_version >= 3 and not (
        _SOFTWARE.fullmatch(request.client_software_name) and _SOFTWARE.fullmatch(request.client_software_version)
    ):
        response.error_code = ErrorCode.INVALID_REQUEST
    elif ctx.api_version >= 3:
        ctx.conn.client_software = (request.client_software_name, request.client_software_version)
        add_features(response, ctx.services.image)
    return response
