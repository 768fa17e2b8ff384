"""One topic's effective settings: its overrides over the broker's defaults (Kafka's ``LogConfig``).

:meth:`TopicConfig.resolve` takes the defaults as a mapping (a broker's come from
``BrokerConfig.topic_defaults``), so the broker and the controller resolve and
validate topic settings alike. The log reads the same object: ``broker.log``'s
``LogConfig`` is :class:`TopicConfig`, and a TopicConfig built directly (tests,
tools) takes the catalog's defaults and is validated as a resolved one is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from config.catalog import TOPIC_CONFIGS
from config.listeners import require
from config.types import (
    INTEGER_BITS,
    LONG_MAX,
    ConfigEntry,
    ConfigError,
    ConfigSource,
    ConfigSynonym,
    ConfigValue,
    format_value,
    invalid,
)

#: Gives the synonym chain of a broker setting, as DescribeConfigs reports it.
BrokerSynonyms = Callable[[str], list[ConfigSynonym]]


def _default(name: str) -> Any:
    # The catalog's default, so that the field and the catalog cannot disagree.
    return TOPIC_CONFIGS[name].default_value


def validate_topic_overrides(overrides: Mapping[str, str | None]) -> dict[str, ConfigValue]:
    """Check names and values of topic-level overrides; returns them typed.

    Raises ConfigError (Kafka answers INVALID_CONFIG) for a null value, an unknown
    name or an invalid value. Checks that involve several settings need the
    defaults too; :meth:`TopicConfig.resolve` does those.
    """
    nulls = sorted(name for name, value in overrides.items() if value is None)
    if nulls:
        raise ConfigError(
            nulls[0], f"Null value not supported for topic configs: {','.join(nulls)}"
        )
    typed: dict[str, ConfigValue] = {}
    for name, value in overrides.items():
        config_key = TOPIC_CONFIGS.get(name)
        if config_key is None:
            raise ConfigError(name, f"Unknown topic config name: {name}")
        typed[name] = config_key.parse(value)
    return typed


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """One topic's effective settings.

    Attributes are the topic settings with dots as underscores (one per entry of
    the catalog, which supplies their defaults); the properties below give the
    values Kafka derives from them. ``overrides`` are the topic-level settings
    given, as strings.
    """

    cleanup_policy: tuple[str, ...] = _default("cleanup.policy")
    compression_gzip_level: int = _default("compression.gzip.level")
    compression_lz4_level: int = _default("compression.lz4.level")
    compression_type: str = _default("compression.type")
    compression_zstd_level: int = _default("compression.zstd.level")
    delete_retention_ms: int = _default("delete.retention.ms")
    errors_deadletterqueue_group_enable: bool = _default("errors.deadletterqueue.group.enable")
    file_delete_delay_ms: int = _default("file.delete.delay.ms")
    flush_messages: int = _default("flush.messages")
    flush_ms: int = _default("flush.ms")
    follower_replication_throttled_replicas: tuple[str, ...] = _default(
        "follower.replication.throttled.replicas"
    )
    index_interval_bytes: int = _default("index.interval.bytes")
    leader_replication_throttled_replicas: tuple[str, ...] = _default(
        "leader.replication.throttled.replicas"
    )
    local_retention_bytes: int = _default("local.retention.bytes")
    local_retention_ms: int = _default("local.retention.ms")
    max_compaction_lag_ms: int = _default("max.compaction.lag.ms")
    max_message_bytes: int = _default("max.message.bytes")
    message_downconversion_enable: bool = _default("message.downconversion.enable")
    message_format_version: str = _default("message.format.version")
    message_timestamp_after_max_ms: int = _default("message.timestamp.after.max.ms")
    message_timestamp_before_max_ms: int = _default("message.timestamp.before.max.ms")
    message_timestamp_difference_max_ms: int = _default("message.timestamp.difference.max.ms")
    message_timestamp_type: str = _default("message.timestamp.type")
    min_cleanable_dirty_ratio: float = _default("min.cleanable.dirty.ratio")
    min_compaction_lag_ms: int = _default("min.compaction.lag.ms")
    min_insync_replicas: int = _default("min.insync.replicas")
    preallocate: bool = _default("preallocate")
    remote_log_copy_disable: bool = _default("remote.log.copy.disable")
    remote_log_delete_on_disable: bool = _default("remote.log.delete.on.disable")
    remote_storage_enable: bool = _default("remote.storage.enable")
    retention_bytes: int = _default("retention.bytes")
    retention_ms: int = _default("retention.ms")
    segment_bytes: int = _default("segment.bytes")
    segment_index_bytes: int = _default("segment.index.bytes")
    segment_jitter_ms: int = _default("segment.jitter.ms")
    segment_ms: int = _default("segment.ms")
    unclean_leader_election_enable: bool = _default("unclean.leader.election.enable")

    overrides: Mapping[str, str] = field(
        default_factory=lambda: MappingProxyType({}), hash=False, compare=False
    )

    def __post_init__(self) -> None:
        # Every value, given or defaulted, passes its setting's validator; then the
        # checks that tie settings together (Kafka's LogConfig.validateValues).
        for name, attribute in _ATTRIBUTES.items():
            _check_value(name, getattr(self, attribute))
        require(
            self.min_compaction_lag_ms <= self.max_compaction_lag_ms,
            "min.compaction.lag.ms",
            f"conflict topic config setting min.compaction.lag.ms ({self.min_compaction_lag_ms}) > "
            f"max.compaction.lag.ms ({self.max_compaction_lag_ms})",
        )
        require(
            not self.remote_storage_enable,
            "remote.storage.enable",
            "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with "
            "remote log storage.",
        )

    @classmethod
    def resolve(
        cls, defaults: Mapping[str, ConfigValue], overrides: Mapping[str, str | None]
    ) -> TopicConfig:
        """Validate ``overrides`` and combine them with ``defaults`` (a value for every
        topic setting, as ``BrokerConfig.topic_defaults`` gives); raises ConfigError."""
        typed = validate_topic_overrides(overrides)
        attributes: dict[str, Any] = {
            attribute: typed[name] if name in typed else defaults[name]
            for name, attribute in _ATTRIBUTES.items()
        }
        strings = {name: str(value) for name, value in overrides.items() if value is not None}
        return cls(**attributes, overrides=MappingProxyType(strings))

    @property
    def compact(self) -> bool:
        """Whether the cleaner compacts this topic."""
        return "compact" in (policy.lower() for policy in self.cleanup_policy)

    @property
    def delete(self) -> bool:
        """Whether old segments are deleted by time or size."""
        return "delete" in (policy.lower() for policy in self.cleanup_policy)

    compact_enabled = compact
    delete_enabled = delete

    @property
    def log_append_time(self) -> bool:
        """Whether the leader stamps batches with its own clock (LogAppendTime)."""
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def timestamp_before_max_ms(self) -> int:
        """Effective before-limit: message.timestamp.difference.max.ms applies while this is unset."""
        if self.message_timestamp_before_max_ms != LONG_MAX:
            return self.message_timestamp_before_max_ms
        return self.message_timestamp_difference_max_ms

    @property
    def timestamp_after_max_ms(self) -> int:
        """Effective after-limit: message.timestamp.difference.max.ms applies while this is unset."""
        if self.message_timestamp_after_max_ms != LONG_MAX:
            return self.message_timestamp_after_max_ms
        return self.message_timestamp_difference_max_ms

    @property
    def max_segment_ms(self) -> int:
        """How long the active segment may collect records before it rolls.

        On a compacted topic the active segment is never cleaned, so it rolls by
        ``max.compaction.lag.ms`` at the latest (Kafka's LogConfig.maxSegmentMs).
        """
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms

    def get(self, key: str) -> ConfigValue:
        """The effective typed value of a topic setting by its Kafka name."""
        attribute = _ATTRIBUTES[key]  # KeyError for an unknown setting
        value: ConfigValue = getattr(self, attribute)
        return value

    def source(self, key: str, broker_synonyms_of: BrokerSynonyms) -> ConfigSource:
        """Where the value of a topic setting comes from."""
        return self.describe_entry(key, broker_synonyms_of).source

    def describe_entry(self, key: str, broker_synonyms_of: BrokerSynonyms) -> ConfigEntry:
        """A topic setting as DescribeConfigs reports it; ``broker_synonyms_of`` gives the
        synonym chain of the broker setting it defaults from."""
        config_key = TOPIC_CONFIGS[key]
        synonyms: list[ConfigSynonym] = []
        value = format_value(config_key.type, self.get(key))
        if key in self.overrides:
            synonyms.append(ConfigSynonym(key, value, ConfigSource.DYNAMIC_TOPIC_CONFIG))
        if config_key.broker_synonym is not None:
            synonyms.extend(broker_synonyms_of(config_key.broker_synonym))
        return ConfigEntry(
            name=key,
            value=value,
            source=synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
            is_sensitive=False,
            read_only=False,
            type=config_key.type,
            documentation=config_key.doc,
            synonyms=tuple(synonyms),
        )

    def describe(
        self, broker_synonyms_of: BrokerSynonyms, keys: Iterable[str] | None = None
    ) -> list[ConfigEntry]:
        """DescribeConfigs entries for ``keys`` (default: every topic setting, by name)."""
        return [
            self.describe_entry(key, broker_synonyms_of)
            for key in (sorted(TOPIC_CONFIGS) if keys is None else keys)
        ]


#: Topic setting -> TopicConfig attribute.
_ATTRIBUTES: Final[Mapping[str, str]] = {name: name.replace(".", "_") for name in TOPIC_CONFIGS}
assert set(_ATTRIBUTES.values()) == {
    f.name for f in dataclasses.fields(TopicConfig) if f.name != "overrides"
}, "TopicConfig has one attribute per topic setting of the catalog"


def _check_value(name: str, value: ConfigValue) -> None:
    config_key = TOPIC_CONFIGS[name]
    bits = INTEGER_BITS.get(config_key.type)
    if bits is not None and isinstance(value, int) and not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
        raise invalid(name, value, f"Not a number of type {config_key.type.name}")
    if config_key.validator is not None and value is not None:
        config_key.validator.check(name, value)
