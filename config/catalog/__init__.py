"""The catalog of settings: every broker and topic setting Cormorant knows, by Kafka name.

One module per area, as Kafka splits its ``ConfigDef`` (``server``, ``log``,
``replication``, ``group``, ``transaction``, ``security``, ``quotas``; topic
settings in ``topic``; accepted-but-unimplemented Kafka settings in
``unimplemented``). A new setting goes into its area's module, in the list of its
documentation section; :data:`BROKER_CONFIGS` joins the sections in the order
docs/configuration.md shows them. Code reads a broker setting with
``BrokerConfig.get(name)``, or as an attribute once ``BrokerConfig`` declares one
named after it (dots as underscores), which ``build_config`` then fills; a topic
setting is an attribute of ``TopicConfig`` (one per entry, checked at import).
Then ``python scripts/gen_config_docs.py`` regenerates docs/configuration.md.

Three kinds of broker key:

* supported: in :data:`BROKER_CONFIGS`; parsed, validated, exposed on
  ``BrokerConfig`` and reported by DescribeConfigs;
* known Kafka settings Cormorant does not implement
  (:data:`UNIMPLEMENTED_KAFKA_CONFIGS`): accepted with one warning each;
* anything else: a ``ConfigError`` that suggests the closest known key, because
  a typo silently ignored is a setting silently not applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from config.catalog import group, log, quotas, replication, security, server, transaction
from config.catalog.topic import TOPIC_KEYS
from config.catalog.unimplemented import UNIMPLEMENTED_KAFKA_CONFIGS, UNIMPLEMENTED_KAFKA_PREFIXES
from config.types import ConfigKey

BROKER_CONFIGS: Final[Mapping[str, ConfigKey]] = MappingProxyType({
    k.name: k
    for section in (
        server.NODE_AND_CLUSTER,
        server.LISTENERS_AND_NETWORK,
        log.TOPICS_AND_LOGS,
        log.LOG_CLEANER,
        replication.REPLICATION,
        group.CONSUMER_GROUPS_AND_OFFSETS,
        group.CONSUMER_GROUP_PROTOCOL,
        group.SHARE_GROUPS,
        transaction.TRANSACTIONS,
        security.SECURITY,
        security.PASSWORD_ENCODER,
        quotas.QUOTAS,
        quotas.AUDIT,
        security.AUTHORIZATION,
        server.CORMORANT,
    )
    for k in section
})
"""Every broker setting Cormorant supports, by Kafka name, in documentation order."""

TOPIC_CONFIGS: Final[Mapping[str, ConfigKey]] = MappingProxyType({k.name: k for k in TOPIC_KEYS})
"""Every Kafka 3.9 topic setting, by name; each may carry the broker setting it defaults from."""

#: The documentation section whose settings may be overridden per listener.
SECURITY_SECTION: Final = "Security"
_JAAS_SUFFIX: Final = ".sasl.jaas.config"
#: Connection limits a listener may set for itself (listener.name.<l>.<key>), as Kafka's.
PER_LISTENER_CONNECTION_KEYS: Final = frozenset({"max.connections", "max.connection.creation.rate"})


def listener_override(key: str) -> tuple[str, str] | None:
    """``(listener name, setting)`` of a per-listener override ``listener.name.<l>.<setting>``
    that Cormorant applies (a security setting, a connection limit, or ``<mechanism>.sasl.jaas.config``)."""
    if not key.startswith("listener.name."):
        return None
    listener, _, setting = key[len("listener.name."):].partition(".")
    if not listener or not setting:
        return None
    known = BROKER_CONFIGS.get(setting)
    if (known is not None and known.group == SECURITY_SECTION) or setting in PER_LISTENER_CONNECTION_KEYS or (
        setting.endswith(_JAAS_SUFFIX) and "." not in setting[: -len(_JAAS_SUFFIX)]
    ):
        return listener.upper(), setting
    return None


def jaas_config_key(listener: str, mechanism: str) -> str:
    """``listener.name.<listener>.<mechanism>.sasl.jaas.config``, as Kafka's brokers read it."""
    return f"listener.name.{listener.lower()}.{mechanism.lower()}{_JAAS_SUFFIX}"


def is_known_unimplemented(key: str) -> bool:
    """Whether ``key`` is a Kafka broker setting Cormorant accepts without implementing it."""
    return key in UNIMPLEMENTED_KAFKA_CONFIGS or key.startswith(UNIMPLEMENTED_KAFKA_PREFIXES)


__all__ = [
    "BROKER_CONFIGS",
    "TOPIC_CONFIGS",
    "UNIMPLEMENTED_KAFKA_CONFIGS",
    "UNIMPLEMENTED_KAFKA_PREFIXES",
    "is_known_unimplemented",
    "jaas_config_key",
    "listener_override",
]
