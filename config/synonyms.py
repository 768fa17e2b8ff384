"""Broker settings that share one value (Kafka's ``DynamicBrokerConfig.brokerConfigSynonyms``)
and the broker settings that, changed at run time, apply to running logs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from config.catalog import TOPIC_CONFIGS

_BROKER_SYNONYM_GROUPS: Final[tuple[tuple[str, ...], ...]] = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)
_FLUSH_SYNONYMS: Final = ("log.flush.interval.ms", "log.flush.scheduler.interval.ms")


def broker_synonyms(name: str) -> tuple[str, ...]:
    """The broker settings that decide ``name``'s value, highest precedence first."""
    if name == _FLUSH_SYNONYMS[0]:
        return _FLUSH_SYNONYMS
    for group in _BROKER_SYNONYM_GROUPS:
        if name in group:
            return group
    return (name,)


#: Broker settings that topic settings default from and that, changed dynamically (for
#: this broker or as the cluster default), apply to running logs: Kafka's
#: DynamicLogConfig set, every topic synonym but log.message.format.version.
DYNAMIC_LOG_CONFIGS: Final[frozenset[str]] = frozenset(
    name
    for topic_key in TOPIC_CONFIGS.values()
    if topic_key.broker_synonym is not None
    for name in broker_synonyms(topic_key.broker_synonym)
) - {"log.message.format.version"}


def dynamic_log_layers(
    dynamic_broker: Mapping[str, str], dynamic_default: Mapping[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """The dynamic per-broker and cluster-default settings that apply to logs."""
    return (
        {k: v for k, v in dynamic_broker.items() if k in DYNAMIC_LOG_CONFIGS},
        {k: v for k, v in dynamic_default.items() if k in DYNAMIC_LOG_CONFIGS},
    )
