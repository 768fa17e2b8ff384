"""How this broker authenticates to other brokers: the inter-broker listener's security.

As Kafka: the listener named by ``inter.broker.listener.name`` (or
``security.inter.broker.protocol``) decides the protocol; its own ``ssl.*`` settings serve
the client side too (the truststore checks the other broker, the keystore is this broker's
certificate for mutual TLS, ``ssl.endpoint.identification.algorithm=https`` checks host
names); ``sasl.mechanism.inter.broker.protocol`` picks the mechanism and the ``username`` and
``password`` of the listener's JAAS setting for it are this broker's credentials. With
OAUTHBEARER the JAAS options give this broker's token instead, as for Kafka's clients (see
:mod:`broker.security.oauthbearer_login`): the ``unsecuredLogin*`` options, or
``sasl.oauthbearer.token.endpoint.url`` with ``clientId`` and ``clientSecret``.

A session the other side ends (KIP-368, ``connections.max.reauth.ms`` or the token's expiry)
closes the connection; the next request opens a new one and authenticates afresh.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio

from broker.security.jaas import JaasError, parse_jaas_config
from broker.security.mechanism import AuthenticationFailed
from broker.security.oauthbearer_login import OAuthBearerClient, OAuthBearerLogin
from broker.security.scram import SaslClient
from broker.security.tls import load_chain, load_keystore, load_truststore
from config import BrokerConfig, ConfigError, SecurityProtocol
from wire.errors import ErrorCode
from wire.generated.api_017_sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from wire.generated.api_036_sasl_authenticate import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
)

PEER_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
TOKEN_ENDPOINT_URL = "sasl.oauthbearer.token.endpoint.url"


@dataclass(frozen=True, slots=True)
class PeerSecurity:
    ssl_context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str = ""
    password: str = ""
    #: OAUTHBEARER: where this broker's token comes from (it caches an endpoint's token).
    oauthbearer: OAuthBearerLogin | None = None


def inter_broker_security(config: BrokerConfig) -> PeerSecurity | None:
    """The client side of the inter-broker listener; None for PLAINTEXT."""
    return listener_client_security(config, config.inter_broker_listener_name, "sasl.mechanism.inter.broker.protocol")


def controller_security(config: BrokerConfig) -> PeerSecurity | None:
    """How a broker reaches the controllers: the first of ``controller.listener.names``, with
    ``sasl.mechanism.controller.protocol`` (as Kafka); None for PLAINTEXT."""
    if not config.controller_listener_names:
        return None
    return listener_client_security(config, config.controller_listener_names[0], "sasl.mechanism.controller.protocol")


def listener_client_security(config: BrokerConfig, name: str, mechanism_key: str) -> PeerSecurity | None:
    """The client side of listener ``name``, its SASL mechanism named by ``mechanism_key``."""
    protocol = config.listener_security_protocol_map.get(name)
    if protocol is None or protocol is SecurityProtocol.PLAINTEXT:
        return None

    def setting(key: str) -> object:
        return config.for_listener(name, key)

    context = None
    if protocol in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL):
        context = ssl.create_default_context()
        trusted = load_truststore(lambda key: config.for_listener(name, key))
        if trusted is not None:
            context.load_verify_locations(cadata=trusted.decode())
        keys = load_keystore(lambda key: config.for_listener(name, key))
        if keys is not None:
            load_chain(context, keys)
        context.check_hostname = str(setting("ssl.endpoint.identification.algorithm") or "") != ""
    if protocol is SecurityProtocol.SSL:
        return PeerSecurity(context)
    mechanism = str(setting(mechanism_key))
    key = f"listener.name.{name.lower()}.{mechanism.lower()}.sasl.jaas.config"
    if mechanism not in PEER_MECHANISMS:
        raise ConfigError(mechanism_key,
                          f"{mechanism} between brokers is not supported: use one of {', '.join(PEER_MECHANISMS)}")
    text = config.jaas_config(name, mechanism)
    credentials = "login options" if mechanism == "OAUTHBEARER" else "username and password"
    if text is None:
        raise ConfigError(key, f"brokers authenticate to each other with {mechanism}: set {key} "
                               f"with this broker's {credentials}")
    try:
        options = parse_jaas_config(text).options
    except JaasError as ex:
        raise ConfigError(key, f"invalid JAAS configuration: {ex}") from ex
    if mechanism == "OAUTHBEARER":
        url = setting(TOKEN_ENDPOINT_URL)
        login = OAuthBearerLogin.from_properties({TOKEN_ENDPOINT_URL: str(url)} if url else {}, options)
        return PeerSecurity(context, mechanism, oauthbearer=login)
    if "username" not in options or "password" not in options:
        raise ConfigError(key, "the login module needs username and password (this broker's credentials)")
    return PeerSecurity(context, mechanism, options["username"], options["password"])


Exchange = Callable[[Any, int, Any], Awaitable[Any]]


async def authenticate(security: PeerSecurity, exchange: Exchange) -> None:
    """SaslHandshake v1 and the mechanism's SaslAuthenticate rounds over ``exchange(message,
    version, response_type)``; raises AuthenticationFailed."""
    assert security.mechanism is not None
    handshake = await exchange(SaslHandshakeRequest(mechanism=security.mechanism), 1, SaslHandshakeResponse)
    if handshake.error_code != ErrorCode.NONE:
        raise AuthenticationFailed(f"SASL handshake failed: {ErrorCode.for_code(handshake.error_code).name}")
    client: SaslClient | OAuthBearerClient
    if security.oauthbearer is not None:
        client = OAuthBearerClient(security.oauthbearer)
        try:  # a token endpoint is asked over blocking HTTP
            token: bytes | None = await trio.to_thread.run_sync(client.first)
        except ConfigError as ex:
            raise AuthenticationFailed(f"no OAUTHBEARER token: {ex.key}: {ex}") from ex
    else:
        client = SaslClient(security.mechanism, security.username, security.password)
        token = client.first()
    while token is not None:
        reply = await exchange(SaslAuthenticateRequest(auth_bytes=token), 1, SaslAuthenticateResponse)
        if reply.error_code != ErrorCode.NONE:
            raise AuthenticationFailed(f"SASL authentication failed: {reply.error_message}")
        token = client.next(reply.auth_bytes)
