"""Kafka's client security settings (``--command-config client.properties``) for the tools.

The keys are Kafka's: ``security.protocol``, ``ssl.truststore.*``/``ssl.keystore.*`` (PEM or
PKCS12, as on the broker), ``ssl.endpoint.identification.algorithm`` (``https`` checks the
broker's host name, empty does not), ``sasl.mechanism`` (PLAIN, SCRAM-SHA-256/512,
OAUTHBEARER) and ``sasl.jaas.config`` (the login module's ``username``/``password``; for
OAUTHBEARER, the options of oauthbearer_login.py, with ``sasl.oauthbearer.token.endpoint.url``).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from broker.security.jaas import JaasError, parse_jaas_config
from broker.security.oauthbearer_login import OAuthBearerLogin
from broker.security.tls import load_chain, load_keystore, load_truststore
from config import BROKER_CONFIGS, ConfigError, ConfigValue, read_properties_file

SUPPORTED_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str = ""
    password: str = ""
    oauthbearer: OAuthBearerLogin | None = None


def client_security(properties: Mapping[str, str]) -> ClientSecurity:
    protocol = properties.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in SUPPORTED_PROTOCOLS:
        raise ConfigError("security.protocol", f"unknown security protocol {protocol}")
    context = _ssl_context(properties) if protocol in ("SSL", "SASL_SSL") else None
    if protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
        return ClientSecurity(protocol, context)
    mechanism = properties.get("sasl.mechanism", "GSSAPI").strip().upper()
    if mechanism not in SUPPORTED_MECHANISMS:
        raise ConfigError("sasl.mechanism", f"{mechanism} is not supported: use one of {', '.join(SUPPORTED_MECHANISMS)}")
    jaas = properties.get("sasl.jaas.config")
    if not jaas:
        raise ConfigError("sasl.jaas.config", "SASL needs sasl.jaas.config (the login module and its options)")
    try:
        options = parse_jaas_config(jaas).options
    except JaasError as ex:
        raise ConfigError("sasl.jaas.config", f"invalid JAAS configuration: {ex}") from ex
    if mechanism == "OAUTHBEARER":
        return ClientSecurity(protocol, context, mechanism, oauthbearer=OAuthBearerLogin.from_properties(
            properties, options))
    if "username" not in options or "password" not in options:
        raise ConfigError("sasl.jaas.config", "the login module needs username and password")
    return ClientSecurity(protocol, context, mechanism, options["username"], options["password"])


def load_client_security(path: Path) -> ClientSecurity:
    try:
        return client_security(read_properties_file(path))
    except OSError as ex:
        raise ConfigError("--command-config", f"cannot read {path}: {ex.strerror}") from ex


def _ssl_context(properties: Mapping[str, str]) -> ssl.SSLContext:
    def setting(key: str) -> ConfigValue:
        spec = BROKER_CONFIGS[key]
        return spec.parse(properties[key] if key in properties else spec.default)

    context = ssl.create_default_context()
    trusted = load_truststore(setting)
    if trusted is not None:
        context.load_verify_locations(cadata=trusted.decode())
    keys = load_keystore(setting)
    if keys is not None:
        load_chain(context, keys)
    context.check_hostname = properties.get("ssl.endpoint.identification.algorithm", "https").strip() != ""
    if not context.check_hostname:
        context.verify_mode = ssl.CERT_REQUIRED
    return context
