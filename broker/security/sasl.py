"""The SASL exchange of a connection before it is served, as Kafka's SaslServerAuthenticator.

States: a first ApiVersions (optional, once), then SaslHandshake naming an enabled
mechanism, then the mechanism's tokens in SaslAuthenticate requests (v1+ handshakes) or as
raw size-prefixed tokens (a v0 handshake). Anything else before the handshake closes the
connection; after it, a request other than SaslAuthenticate is answered with
ILLEGAL_SASL_STATE and the connection closes. A failed authentication is answered with
SASL_AUTHENTICATION_FAILED and a message that does not say why, after
``connection.failed.authentication.delay.ms``, then the connection closes. Until it has
authenticated, a client's frames are bounded by ``sasl.server.max.receive.size``.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import structlog
import trio

from broker.security.kafka_principal import USER_TYPE, KafkaPrincipal
from broker.security.mechanism import AuthenticationFailed, MechanismServer
from broker.server.network import CloseConnection, ConnectionInfo, RequestFrame
from wire.errors import ErrorCode
from wire.exceptions import DecodeError
from wire.frame import (
    EncodedFrame,
    RequestPreamble,
    decode_request,
    encode_response,
    encode_sasl_token,
)
from wire.generated.api_017_sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from wire.generated.api_036_sasl_authenticate import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
)
from wire.primitives import DecodeLimits, Message

log = structlog.get_logger(__name__)

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
API_VERSIONS = 18


class _State(enum.Enum):
    HANDSHAKE_OR_VERSIONS = "handshake_or_versions"
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    COMPLETE = "complete"


@dataclass(frozen=True, slots=True)
class SaslListener:
    """A SASL listener's settings: its mechanisms (name -> a new server exchange) and bounds."""

    name: str
    mechanisms: Mapping[str, Callable[[], MechanismServer]]
    max_receive_size: int
    failure_delay_s: float
    #: connections.max.reauth.ms in seconds; 0: sessions do not expire (no re-authentication).
    session_lifetime_s: float
    #: Called with (listener, mechanism, succeeded) after each exchange ends.
    on_result: Callable[[str, str, bool], None]
    #: Wall clock (seconds) that credential expiries (OAUTHBEARER's exp) are compared with.
    wall_clock: Callable[[], float] = time.time


class SaslSession:
    def __init__(self, listener: SaslListener, conn: ConnectionInfo,
                 clock: Callable[[], float] = trio.current_time) -> None:
        self.listener = listener
        self.conn = conn
        self._clock = clock
        self._state = _State.HANDSHAKE_OR_VERSIONS
        self._server: MechanismServer | None = None
        #: Clock time the session ends (KIP-368), None while unauthenticated or without expiry.
        self.expires_at: float | None = None
        #: Set while a KIP-368 re-authentication runs: the principal it must keep.
        self._reauth_principal: KafkaPrincipal | None = None
        self._session_lifetime_s: float | None = None
        #: True after a v0 handshake: tokens come without Kafka headers.
        self.raw_tokens = False

    @property
    def complete(self) -> bool:
        return self._state is _State.COMPLETE

    def expired(self) -> bool:
        return self.expires_at is not None and self._clock() >= self.expires_at

    def reauthenticate(self, pre: RequestPreamble) -> bool:
        """Whether a SaslHandshake on an authenticated connection starts a KIP-368 re-authentication
        (v1+ and sessions that expire); else KafkaApis answers it ILLEGAL_SASL_STATE."""
        if not (self.complete and pre.api_version >= 1 and self.expires_at is not None):
            return False
        self._state = _State.HANDSHAKE
        self._reauth_principal = self.conn.principal
        return True

    def take_api_versions(self) -> bool:
        """Whether an ApiVersions request may be served now (once, before the handshake)."""
        if self._state is _State.HANDSHAKE_OR_VERSIONS:
            self._state = _State.HANDSHAKE
            return True
        return False

    async def handle(self, pre: RequestPreamble, frame: RequestFrame, limits: DecodeLimits) -> EncodedFrame:
        if self._state is _State.AUTHENTICATE:
            return await self._authenticate(pre, frame, limits)
        if pre.api_key != SASL_HANDSHAKE:
            raise CloseConnection("request before SASL authentication", api_key=pre.api_key)
        if not SaslHandshakeRequest.MIN_VERSION <= pre.api_version <= SaslHandshakeRequest.MAX_VERSION:
            raise CloseConnection("unsupported SaslHandshake version", api_version=pre.api_version)
        request = self._decode(frame, limits)
        assert isinstance(request, SaslHandshakeRequest)
        enabled = list(self.listener.mechanisms)
        factory = self.listener.mechanisms.get(request.mechanism)
        if self._reauth_principal is not None and self._server is not None and \
                request.mechanism != self._server.mechanism:
            factory = None  # as Kafka: re-authentication keeps the mechanism
        if factory is None:
            response = SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled)
            raise CloseConnection("unsupported SASL mechanism", mechanism=request.mechanism[:64],
                                  response=encode_response(response, pre.api_version, pre.correlation_id))
        self._server = factory()
        self._state = _State.AUTHENTICATE
        self.raw_tokens = pre.api_version == 0
        return encode_response(SaslHandshakeResponse(mechanisms=enabled), pre.api_version, pre.correlation_id)

    async def handle_raw(self, frame: RequestFrame) -> EncodedFrame:
        """One token after a v0 handshake; the answer is a raw token too."""
        try:
            answer = self._evaluate(bytes(frame))
        except AuthenticationFailed as ex:
            # Kafka sends nothing to v0 clients on failure: the connection just closes.
            await self._failed(ex)
            raise CloseConnection("SASL authentication failed", mechanism=self._mechanism) from None
        return encode_sasl_token(answer)

    @property
    def _mechanism(self) -> str:
        return self._server.mechanism if self._server is not None else ""

    def _decode(self, frame: RequestFrame, limits: DecodeLimits) -> Message:
        try:
            return decode_request(frame, limits).body
        except DecodeError as ex:
            raise CloseConnection("malformed SASL request", error=ex.reason) from ex

    async def _authenticate(self, pre: RequestPreamble, frame: RequestFrame, limits: DecodeLimits) -> EncodedFrame:
        if pre.api_key != SASL_AUTHENTICATE:
            illegal = _illegal_state_response(pre)
            await trio.sleep(self.listener.failure_delay_s)
            raise CloseConnection("unexpected request during SASL authentication", api_key=pre.api_key,
                                  response=illegal)
        if not SaslAuthenticateRequest.MIN_VERSION <= pre.api_version <= SaslAuthenticateRequest.MAX_VERSION:
            raise CloseConnection("unsupported SaslAuthenticate version", api_version=pre.api_version)
        request = self._decode(frame, limits)
        assert isinstance(request, SaslAuthenticateRequest)
        try:
            answer = self._evaluate(request.auth_bytes)
        except AuthenticationFailed as ex:
            await self._failed(ex)
            response = SaslAuthenticateResponse(
                error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
                error_message=f"Authentication failed during authentication due to invalid credentials "
                              f"with SASL mechanism {self._mechanism}",
            )
            raise CloseConnection("SASL authentication failed", mechanism=self._mechanism,
                                  response=encode_response(response, pre.api_version, pre.correlation_id)) from None
        lifetime_ms = 0
        if self.complete and self._session_lifetime_s is not None:
            lifetime_ms = max(1, int(self._session_lifetime_s * 1000))
        return encode_response(SaslAuthenticateResponse(auth_bytes=answer, session_lifetime_ms=lifetime_ms),
                               pre.api_version, pre.correlation_id)

    def _evaluate(self, token: bytes) -> bytes:
        server = self._server
        assert server is not None
        answer = server.evaluate(token)
        if server.complete:
            principal = KafkaPrincipal(USER_TYPE, server.authorization_id)
            reauthenticated = self._reauth_principal is not None
            if reauthenticated and principal != self._reauth_principal:
                raise AuthenticationFailed("re-authentication cannot change the principal")
            self._reauth_principal = None
            self._state = _State.COMPLETE
            self.expires_at = self._session_end(server)
            self.conn.principal = principal
            self.conn.frame_limit = None
            self.listener.on_result(self.listener.name, server.mechanism, True)
            log.info("sasl_reauthenticated" if reauthenticated else "sasl_authenticated",
                     listener=self.listener.name, mechanism=server.mechanism, principal=str(self.conn.principal),
                     peer=f"{self.conn.peer_host}:{self.conn.peer_port}")
        return answer

    def _session_end(self, server: MechanismServer) -> float | None:
        """When the new session ends: connections.max.reauth.ms, or the credential's expiry if sooner."""
        lifetimes = [self.listener.session_lifetime_s] if self.listener.session_lifetime_s > 0 else []
        expiry = getattr(server, "credential_expires_at_s", None)
        if isinstance(expiry, float):
            lifetimes.append(max(0.0, expiry - self.listener.wall_clock()))
        self._session_lifetime_s = min(lifetimes) if lifetimes else None
        return self._clock() + self._session_lifetime_s if self._session_lifetime_s is not None else None

    async def _failed(self, ex: AuthenticationFailed) -> None:
        self.listener.on_result(self.listener.name, self._mechanism, False)
        log.info("sasl_authentication_failed", listener=self.listener.name, mechanism=self._mechanism,
                 reason=str(ex), peer=f"{self.conn.peer_host}:{self.conn.peer_port}")
        await trio.sleep(self.listener.failure_delay_s)


def _illegal_state_response(pre: RequestPreamble) -> EncodedFrame | None:
    """ILLEGAL_SASL_STATE in the request's own response, when it has a top-level error code."""
    from wire.generated.registry import API_SPECS

    spec = API_SPECS.get(pre.api_key)
    if spec is None:
        return None
    response = spec.response()
    if not hasattr(response, "error_code"):
        return None
    response.error_code = ErrorCode.ILLEGAL_SASL_STATE
    try:
        return encode_response(response, pre.api_version, pre.correlation_id)
    except Exception:
        return None
