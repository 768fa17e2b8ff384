"""What a listener runs when a connection opens: the TLS handshake and the SASL state.

Built once per listener from its settings (``listener.name.<name>.<key>`` over ``<key>``);
misconfiguration fails at startup with the setting's name, as Kafka does.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable
from functools import partial

import structlog
import trio

from broker.security.jaas import JaasError, parse_jaas_config
from broker.security.kafka_principal import USER_TYPE, KafkaPrincipal
from broker.security.mechanism import MechanismServer, PlainServer
from broker.security.oauthbearer import (
    JwksValidator,
    OAuthBearerServer,
    TokenValidator,
    UnsecuredValidator,
)
from broker.security.principal import PrincipalMapper, PrincipalMappingError
from broker.security.sasl import SaslListener, SaslSession
from broker.security.scram import MECHANISMS as SCRAM_MECHANISMS
from broker.security.scram import CredentialLookup, ScramServer
from broker.security.tls import peer_distinguished_name, server_context
from broker.server.network import CloseConnection, ConnectionInfo
from config import BrokerConfig, ConfigError, ConfigValue, Listener, SecurityProtocol

log = structlog.get_logger(__name__)

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
OAUTHBEARER_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
SUPPORTED_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS, "OAUTHBEARER")

AuthenticationCallback = Callable[[str, str, bool], None]


class ListenerSecurity:
    """A listener's :class:`~broker.server.network.ConnectionSetup`: TLS, then SASL state."""

    def __init__(self, name: str, tls: ssl.SSLContext | None, handshake_timeout_s: float,
                 mapper: PrincipalMapper, sasl: SaslListener | None, on_result: AuthenticationCallback) -> None:
        self.name = name
        self.tls = tls
        self.handshake_timeout_s = handshake_timeout_s
        self.mapper = mapper
        self.sasl = sasl
        self._on_result = on_result

    async def start(self, stream: trio.SocketStream, info: ConnectionInfo) -> trio.abc.Stream:
        served: trio.abc.Stream = stream
        if self.tls is not None:
            served = await self._handshake(stream, info)
        if self.sasl is not None:
            info.sasl = SaslSession(self.sasl, info)
            info.frame_limit = self.sasl.max_receive_size
        return served

    async def _handshake(self, stream: trio.SocketStream, info: ConnectionInfo) -> trio.SSLStream[trio.SocketStream]:
        assert self.tls is not None
        tls_stream = trio.SSLStream(stream, self.tls, server_side=True)
        with trio.move_on_after(self.handshake_timeout_s) as scope:
            try:
                await tls_stream.do_handshake()
            except trio.BrokenResourceError as ex:
                self._on_result(self.name, "TLS", False)
                await _send_alert(stream, tls_stream)
                cause = ex.__cause__
                raise CloseConnection("TLS handshake failed",
                                      error=getattr(cause, "reason", None) or str(cause or ex)) from None
        if scope.cancelled_caught:
            self._on_result(self.name, "TLS", False)
            raise CloseConnection("TLS handshake timed out", timeout_s=self.handshake_timeout_s)
        self._on_result(self.name, "TLS", True)
        der = tls_stream.getpeercert(binary_form=True)
        if der and self.sasl is None:
            # As Kafka: on SSL listeners the certificate names the principal; on SASL_SSL, SASL does.
            try:
                info.principal = KafkaPrincipal(USER_TYPE, self.mapper.user_name(peer_distinguished_name(der)))
            except (PrincipalMappingError, ValueError) as ex:
                raise CloseConnection("client certificate gives no principal", error=str(ex)) from None
        return tls_stream


#: How long the TLS alert of a failed handshake may take to leave.
ALERT_SEND_TIMEOUT_S = 1.0


async def _send_alert(stream: trio.SocketStream, tls_stream: trio.SSLStream[trio.SocketStream]) -> None:
    """The alert OpenSSL wrote for a failed handshake (protocol_version, unknown_ca...), sent as
    Kafka's SslTransportLayer does: Trio's SSLStream leaves it unsent when the handshake fails."""
    outgoing = getattr(tls_stream, "_outgoing", None)
    if not isinstance(outgoing, ssl.MemoryBIO) or not outgoing.pending:
        return
    with trio.move_on_after(ALERT_SEND_TIMEOUT_S):
        try:
            await stream.send_all(outgoing.read())
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


def _int(value: ConfigValue) -> int:
    assert isinstance(value, int)
    return value


def _strings(value: ConfigValue) -> tuple[str, ...]:
    assert isinstance(value, tuple)
    return value


def _plain_users(config: BrokerConfig, listener: str) -> dict[str, str]:
    text = config.jaas_config(listener, "PLAIN")
    key = f"listener.name.{listener.lower()}.plain.sasl.jaas.config"
    if text is None:
        raise ConfigError(key, f"listener {listener} enables PLAIN but {key} is not set")
    try:
        module = parse_jaas_config(text)
    except JaasError as ex:
        raise ConfigError(key, f"invalid JAAS configuration: {ex}") from ex
    if module.class_name != PLAIN_LOGIN_MODULE:
        raise ConfigError(key, f"PLAIN needs {PLAIN_LOGIN_MODULE}, not {module.class_name}")
    return {name[len("user_"):]: value for name, value in module.options.items() if name.startswith("user_")}


def _token_validator(config: BrokerConfig, listener: str) -> TokenValidator:
    def setting(key: str) -> ConfigValue:
        return config.for_listener(listener, key)

    url = setting("sasl.oauthbearer.jwks.endpoint.url")
    principal_claim = str(setting("sasl.oauthbearer.sub.claim.name"))
    if isinstance(url, str) and url:
        try:
            return JwksValidator(url, _strings(setting("sasl.oauthbearer.expected.audience")),
                                 _opt_str(setting("sasl.oauthbearer.expected.issuer")), principal_claim,
                                 _int(setting("sasl.oauthbearer.clock.skew.seconds")))
        except (OSError, ValueError) as ex:
            raise ConfigError("sasl.oauthbearer.jwks.endpoint.url", f"cannot load the JWKS at {url}: {ex}") from ex
    options: dict[str, str] = {}
    text = config.jaas_config(listener, "OAUTHBEARER")
    if text is not None:
        try:
            options = parse_jaas_config(text).options
        except JaasError as ex:
            raise ConfigError(f"listener.name.{listener.lower()}.oauthbearer.sasl.jaas.config",
                              f"invalid JAAS configuration: {ex}") from ex
    log.warning("oauthbearer_unsecured_validator", listener=listener,
                detail="unsigned tokens are accepted: set sasl.oauthbearer.jwks.endpoint.url outside development")
    try:
        skew_s = int(options.get("unsecuredValidatorAllowableClockSkewMs", "0")) / 1000
    except ValueError as ex:
        raise ConfigError("sasl.jaas.config", "unsecuredValidatorAllowableClockSkewMs must be a number") from ex
    return UnsecuredValidator(options.get("unsecuredValidatorPrincipalClaimName", "sub"),
                              options.get("unsecuredValidatorScopeClaimName", "scope"),
                              options.get("unsecuredValidatorRequiredScope", "").replace(",", " ").split(), skew_s)


def _opt_str(value: ConfigValue) -> str | None:
    return value if isinstance(value, str) and value else None


def _sasl_listener(config: BrokerConfig, listener: str, scram_lookup: CredentialLookup,
                   on_result: AuthenticationCallback) -> SaslListener:
    enabled = _strings(config.for_listener(listener, "sasl.enabled.mechanisms"))
    unsupported = [m for m in enabled if m not in SUPPORTED_MECHANISMS]
    if unsupported or not enabled:
        raise ConfigError("sasl.enabled.mechanisms",
                          f"listener {listener}: {', '.join(unsupported) or 'no mechanism'} is not supported; "
                          f"enable some of {', '.join(SUPPORTED_MECHANISMS)}")
    unknown_user_key = os.urandom(32)
    mechanisms: dict[str, Callable[[], MechanismServer]] = {}
    for mechanism in enabled:
        if mechanism == "PLAIN":
            mechanisms[mechanism] = partial(PlainServer, _plain_users(config, listener))
        elif mechanism == "OAUTHBEARER":
            mechanisms[mechanism] = partial(OAuthBearerServer, _token_validator(config, listener))
        else:
            mechanisms[mechanism] = partial(ScramServer, mechanism, scram_lookup, unknown_user_key)
    return SaslListener(
        name=listener,
        mechanisms=mechanisms,
        max_receive_size=_int(config.for_listener(listener, "sasl.server.max.receive.size")),
        failure_delay_s=_int(config.for_listener(listener, "connection.failed.authentication.delay.ms")) / 1000,
        session_lifetime_s=_int(config.for_listener(listener, "connections.max.reauth.ms")) / 1000,
        on_result=on_result,
    )


def listener_security(config: BrokerConfig, listener: Listener, scram_lookup: CredentialLookup,
                      on_result: AuthenticationCallback) -> ListenerSecurity | None:
    """The connection setup of ``listener``, or None for PLAINTEXT."""
    protocol = listener.security_protocol
    if protocol is SecurityProtocol.PLAINTEXT:
        return None
    name = listener.name

    setting = partial(config.for_listener, name)
    tls = None
    if protocol in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL):
        tls = server_context(name, partial(config.for_listener, name))
    try:
        mapper = PrincipalMapper(str(setting("ssl.principal.mapping.rules")))
    except PrincipalMappingError as ex:
        raise ConfigError("ssl.principal.mapping.rules", str(ex)) from ex
    sasl = None
    if protocol in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL):
        sasl = _sasl_listener(config, name, scram_lookup, on_result)
    timeout_s = _int(setting("ssl.handshake.timeout.ms")) / 1000
    return ListenerSecurity(name, tls, timeout_s, mapper, sasl, on_result)
