"""Broker and topic configuration: the ``cormorant serve`` contract.

Cormorant reads Kafka's own setting names, types, defaults and validation rules
(Apache Kafka 3.9: ``KafkaConfig`` and its ``ConfigDef`` parts for the broker,
``LogConfig`` for topics), so a ``server.properties`` written for Kafka works
unchanged. Where Cormorant's default differs from Kafka's (``node.id``,
``process.roles``, ``listeners``, ``log.dir``) the catalog says so.

A pure package (no I/O beyond reading a properties file, no Trio), used by the
broker and the controller alike:

* :mod:`config.catalog`: every setting, one module per area;
* :mod:`config.types`, :mod:`config.validators`: types, values, validators;
* :mod:`config.properties`: ``server.properties`` and ``--override`` items;
* :mod:`config.listeners`: listeners, addresses and the KRaft role checks;
* :mod:`config.broker`: :class:`BrokerConfig`, built from the catalog;
* :mod:`config.topic`: :class:`TopicConfig`, a topic's settings over its defaults;
* :mod:`config.synonyms`: settings that share a value, and those that apply to logs;
* :mod:`config.docs`: docs/configuration.md.
"""

from __future__ import annotations

from config.broker import (
    BrokerConfig,
    broker_synonym_chain,
    build_config,
    default_config,
    load_config,
)
from config.catalog import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    UNIMPLEMENTED_KAFKA_CONFIGS,
    UNIMPLEMENTED_KAFKA_PREFIXES,
    is_known_unimplemented,
    listener_override,
)
from config.catalog.group import CONSUMER_GROUP_ASSIGNOR_CLASSES, CONSUMER_GROUP_ASSIGNORS
from config.catalog.security import STANDARD_AUTHORIZER
from config.docs import render_configuration_markdown
from config.listeners import HostPort, Listener, QuorumVoter, SecurityProtocol
from config.properties import parse_overrides, parse_properties, read_properties_file
from config.synonyms import DYNAMIC_LOG_CONFIGS, broker_synonyms, dynamic_log_layers
from config.topic import TopicConfig, validate_topic_overrides
from config.types import (
    DOUBLE_MAX,
    INT_MAX,
    LONG_MAX,
    ConfigEntry,
    ConfigError,
    ConfigKey,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    ConfigValue,
    Password,
    UpdateMode,
    format_value,
)
from config.validators import Check, EachOneOf, OneOf, Range, RangeOrValue

__all__ = [
    "BROKER_CONFIGS",
    "CONSUMER_GROUP_ASSIGNORS",
    "CONSUMER_GROUP_ASSIGNOR_CLASSES",
    "DOUBLE_MAX",
    "DYNAMIC_LOG_CONFIGS",
    "INT_MAX",
    "LONG_MAX",
    "STANDARD_AUTHORIZER",
    "TOPIC_CONFIGS",
    "UNIMPLEMENTED_KAFKA_CONFIGS",
    "UNIMPLEMENTED_KAFKA_PREFIXES",
    "BrokerConfig",
    "Check",
    "ConfigEntry",
    "ConfigError",
    "ConfigKey",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "ConfigValue",
    "EachOneOf",
    "HostPort",
    "Listener",
    "OneOf",
    "Password",
    "QuorumVoter",
    "Range",
    "RangeOrValue",
    "SecurityProtocol",
    "TopicConfig",
    "UpdateMode",
    "broker_synonym_chain",
    "broker_synonyms",
    "build_config",
    "default_config",
    "dynamic_log_layers",
    "format_value",
    "is_known_unimplemented",
    "listener_override",
    "load_config",
    "parse_overrides",
    "parse_properties",
    "read_properties_file",
    "render_configuration_markdown",
    "validate_topic_overrides",
]
