"""Kafka's dynamic listener update of TLS stores: ``listener.name.<l>.ssl.keystore.*`` (and
``ssl.truststore.*``) set with IncrementalAlterConfigs on this broker's resource (passwords stored encrypted, see
password_encoder.py).

The new settings are layered over the static ones, the listener's TLS context is rebuilt and
swapped in: new connections get the new certificate, open ones keep the one they shook hands
with. As Kafka's SslFactory, a new keystore must name the same subject and subject alternative
names as the one it replaces, unless ``ssl.allow.dn.changes`` / ``ssl.allow.san.changes``.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

import structlog
from cryptography import x509

from broker.security.password_encoder import DynamicPasswords
from broker.security.setup import ListenerSecurity
from broker.security.tls import Setting, load_keystore, server_context
from config import BROKER_CONFIGS, BrokerConfig, ConfigError, ConfigValue, SecurityProtocol
from controller.delta import MetadataDelta
from controller.image import BROKER_RESOURCE, MetadataImage

log = structlog.get_logger(__name__)

#: The listener settings Kafka's SslFactory reconfigures at runtime.
RECONFIGURABLE_SSL: Final = frozenset((
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates",
))


def listener_ssl_key(name: str) -> tuple[str, str] | None:
    """``(listener, key)`` when ``name`` is ``listener.name.<listener>.<reconfigurable ssl key>``."""
    if not name.startswith("listener.name."):
        return None
    listener, _, key = name[len("listener.name."):].partition(".")
    return (listener, key) if listener and key in RECONFIGURABLE_SSL else None


def layered_setting(config: BrokerConfig, listener: str, dynamic: Mapping[str, str]) -> Setting:
    """The listener's settings: the dynamic per-broker override, then the static ones."""
    prefix = f"listener.name.{listener.lower()}."

    def setting(key: str) -> ConfigValue:
        value = dynamic.get(prefix + key)
        return config.for_listener(listener, key) if value is None else BROKER_CONFIGS[key].parse(value)

    return setting


@dataclass(frozen=True, slots=True)
class _Identity:
    subject: str
    alt_names: frozenset[str]


def _identity(setting: Setting) -> _Identity | None:
    keys = load_keystore(setting)
    if keys is None:
        return None
    cert = x509.load_pem_x509_certificate(keys.chain_pem)
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        alt_names = frozenset(str(name.value) for name in sans)
    except x509.ExtensionNotFound:
        alt_names = frozenset()
    return _Identity(cert.subject.rfc4514_string(), alt_names)


def _allowed(config: BrokerConfig, listener: str, key: str) -> bool:
    value = config.raw.get(f"listener.name.{listener.lower()}.{key}", config.raw.get(key, "false"))
    return value.strip().lower() == "true"


def rebuild_context(config: BrokerConfig, listener: str, dynamic: Mapping[str, str],
                    current: Mapping[str, str]) -> ssl.SSLContext:
    """The listener's TLS context with ``dynamic`` in force; ConfigError when the new stores do
    not load or name another identity than those of ``current`` (the settings in force)."""
    new_setting = layered_setting(config, listener, dynamic)
    context = server_context(listener, new_setting)
    old, new = _identity(layered_setting(config, listener, current)), _identity(new_setting)
    if old is not None and new is not None:
        if old.subject != new.subject and not _allowed(config, listener, "ssl.allow.dn.changes"):
            raise ConfigError("ssl.keystore.location",
                              f"Keystore DistinguishedName does not match: existing={old.subject}, new={new.subject}")
        if old.alt_names != new.alt_names and not _allowed(config, listener, "ssl.allow.san.changes"):
            raise ConfigError("ssl.keystore.location",
                              f"Keystore SubjectAltNames do not match: existing={sorted(old.alt_names)}, "
                              f"new={sorted(new.alt_names)}")
    return context


def check_listener_update(config: BrokerConfig, current: Mapping[str, str], resulting: Mapping[str, str]) -> None:
    """Validate a per-broker dynamic update touching listener TLS stores; raises ConfigError."""
    changed = {k for k in set(current) | set(resulting) if current.get(k) != resulting.get(k)}
    listeners = {parsed[0] for parsed in map(listener_ssl_key, changed) if parsed is not None}
    for listener in sorted(listeners):
        found = next((lst for lst in config.listeners if lst.name.lower() == listener), None)
        if found is None or found.security_protocol not in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL):
            raise ConfigError(f"listener.name.{listener}.ssl.keystore.location",
                              f"no TLS listener named {listener} on this broker")
        rebuild_context(config, found.name, resulting, current)


def listener_keys_of(names: Iterable[str]) -> list[str]:
    """The names among ``names`` that are listener TLS store settings."""
    return sorted(name for name in names if listener_ssl_key(name) is not None)


class ListenerKeystores:
    """Swaps the TLS contexts of this broker's listeners when their dynamic stores change."""

    def __init__(self, config: BrokerConfig, node_id: int, listeners: Iterable[ListenerSecurity],
                 passwords: DynamicPasswords) -> None:
        self._config = config
        self._node_id = node_id
        self._passwords = passwords
        self._listeners = [s for s in listeners if s.tls is not None]
        #: Per listener: the settings as stored (passwords encrypted), and as in force (in clear).
        self._stored: dict[str, dict[str, str]] = {s.name: {} for s in self._listeners}
        self._in_force: dict[str, dict[str, str]] = {s.name: {} for s in self._listeners}

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        if delta.config_changed(BROKER_RESOURCE, str(self._node_id)):
            self.on_image(image)

    def on_image(self, image: MetadataImage) -> None:
        dynamic = image.broker_config(self._node_id)
        for security in self._listeners:
            prefix = f"listener.name.{security.name.lower()}."
            stored = {k: v for k, v in dynamic.items() if k.startswith(prefix) and listener_ssl_key(k) is not None}
            if stored == self._stored[security.name]:
                continue
            self._stored[security.name] = stored
            wanted = self._passwords.decoded(stored)
            if wanted == self._in_force[security.name]:
                continue  # the same settings, stored anew (passwords re-encrypted)
            try:
                security.tls = rebuild_context(self._config, security.name, wanted, self._in_force[security.name])
            except (ConfigError, OSError, ValueError) as ex:
                # Validated when altered; a file changed since then keeps the old context serving.
                log.error("listener_keystore_reload_failed", listener=security.name, error=str(ex))
                continue
            self._in_force[security.name] = wanted
            log.info("listener_keystore_reloaded", listener=security.name, keys=sorted(wanted))
