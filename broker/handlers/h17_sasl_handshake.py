"""SaslHandshake (17), v0-1, once a connection needs no (more) authentication.

On a SASL listener the handshake is handled before the connection is served
(broker/security/sasl.py); reaching this handler means the connection has already
authenticated, or its listener has no SASL: ILLEGAL_SASL_STATE, as Kafka's KafkaApis.
"""

from __future__ import annotations

from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_017_sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse

API_KEY = 17
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: SaslHandshakeRequest) -> SaslHandshakeResponse:
    return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE)
