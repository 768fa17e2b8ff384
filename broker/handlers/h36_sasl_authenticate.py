"""SaslAuthenticate (36), v0-2, once a connection needs no (more) authentication.

As SaslHandshake: tokens of a SASL exchange are handled before the connection is
served; here the connection has already authenticated, or its listener has no SASL:
ILLEGAL_SASL_STATE, with Kafka's message.
"""

from __future__ import annotations

from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_036_sasl_authenticate import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
)

API_KEY = 36
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: SaslAuthenticateRequest) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(
        error_code=ErrorCode.ILLEGAL_SASL_STATE,
        error_message="SaslAuthenticate request received after successful authentication",
    )
