"""Group configs (config resource type GROUP, 32), as Kafka's GroupConfig: what may be set
on a group, what values are valid, and which broker setting each one overrides.

They are ConfigRecords of resource type GROUP in the metadata log: IncrementalAlterConfigs
(and AlterConfigs) of a group is checked here by the broker and again by the controller
that writes them, and every broker reads them from its metadata image, so a group's
settings hold at every partition leader. A group need not exist to have configs.

- ``share.auto.offset.reset`` (latest | earliest): where a share-partition starts when the
  group first reads it;
- ``share.record.lock.duration.ms`` and ``share.delivery.count.limit``: override the
  broker's ``group.share.record.lock.duration.ms`` and ``group.share.delivery.count.limit``;
- ``errors.deadletterqueue.topic.name`` (KIP-1191, beyond Kafka 4.3): the share group's
  dead-letter topic (unset: off).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from config.types import ConfigType

AUTO_OFFSET_RESET = "share.auto.offset.reset"
RECORD_LOCK_DURATION_MS = "share.record.lock.duration.ms"
DELIVERY_COUNT_LIMIT = "share.delivery.count.limit"
DEAD_LETTER_TOPIC = "errors.deadletterqueue.topic.name"
#: Every group config, in the order DescribeConfigs lists them.
GROUP_CONFIG_NAMES = (AUTO_OFFSET_RESET, RECORD_LOCK_DURATION_MS, DELIVERY_COUNT_LIMIT, DEAD_LETTER_TOPIC)
#: The broker setting whose value a group config takes when the group does not set it.
BROKER_SYNONYMS: Mapping[str, str] = {
    RECORD_LOCK_DURATION_MS: "group.share.record.lock.duration.ms",
    DELIVERY_COUNT_LIMIT: "group.share.delivery.count.limit",
}
#: Defaults of the group configs without a broker synonym (None: no value).
DEFAULTS: Mapping[str, str | None] = {AUTO_OFFSET_RESET: "latest", DEAD_LETTER_TOPIC: None}
#: DescribeConfigs' type and documentation of each group config.
TYPES: Mapping[str, ConfigType] = {AUTO_OFFSET_RESET: ConfigType.STRING, RECORD_LOCK_DURATION_MS: ConfigType.INT,
                                   DELIVERY_COUNT_LIMIT: ConfigType.INT, DEAD_LETTER_TOPIC: ConfigType.STRING}
DOCS: Mapping[str, str] = {
    AUTO_OFFSET_RESET: "Where a share group starts reading a partition it has no state for: latest or earliest.",
    RECORD_LOCK_DURATION_MS: "How long a share group member holds an acquired record before it is released.",
    DELIVERY_COUNT_LIMIT: "Deliveries of a record to a share group before it is archived.",
    DEAD_LETTER_TOPIC: "The topic a share group copies the records it archives to (unset: none).",
}
_INT_RANGES = {RECORD_LOCK_DURATION_MS: (1000, 3_600_000), DELIVERY_COUNT_LIMIT: (2, 10)}
_RESETS = ("latest", "earliest")


class GroupConfigError(ValueError):
    """An invalid group config (INVALID_CONFIG), in Kafka's words."""


def validate(configs: Mapping[str, str]) -> None:
    """Kafka's GroupConfig.validate: known names, valid values."""
    for name, value in configs.items():
        if name not in GROUP_CONFIG_NAMES:
            raise GroupConfigError(f"Unknown group config name: {name}")
        if name in _INT_RANGES:
            low, high = _INT_RANGES[name]
            try:
                n = int(value.strip())
            except ValueError:
                raise GroupConfigError(
                    f"Invalid value {value} for configuration {name}: Not a number of type INT") from None
            if not low <= n <= high:
                raise GroupConfigError(
                    f"Invalid value {value} for configuration {name}: Value must be in [{low}, {high}]")
        elif name == AUTO_OFFSET_RESET and value not in _RESETS:
            raise GroupConfigError(f"Invalid value {value} for configuration {name}: "
                                   "String must be one of: " + ", ".join(_RESETS))
        elif name == DEAD_LETTER_TOPIC and not value:
            raise GroupConfigError(f"Invalid value {value} for configuration {name}: must not be empty")


def error(configs: Mapping[str, str]) -> str | None:
    try:
        validate(configs)
    except GroupConfigError as ex:
        return str(ex)
    return None


@dataclass(frozen=True, slots=True)
class ShareGroupSettings:
    """A share group's settings in force: its group configs over the broker's defaults."""

    auto_offset_reset: str
    record_lock_duration_ms: int
    delivery_count_limit: int
    dead_letter_topic: str | None


def share_group_settings(configs: Mapping[str, str], record_lock_duration_ms: int,
                         delivery_count_limit: int) -> ShareGroupSettings:
    """The settings of a group whose group configs are ``configs`` (as validated when
    written; a value that does not parse falls back to the broker default)."""
    def number(name: str, default: int) -> int:
        try:
            return int(configs[name].strip()) if name in configs else default
        except ValueError:
            return default

    reset = configs.get(AUTO_OFFSET_RESET, "latest")
    return ShareGroupSettings(
        auto_offset_reset=reset if reset in _RESETS else "latest",
        record_lock_duration_ms=number(RECORD_LOCK_DURATION_MS, record_lock_duration_ms),
        delivery_count_limit=number(DELIVERY_COUNT_LIMIT, delivery_count_limit),
        dead_letter_topic=configs.get(DEAD_LETTER_TOPIC) or None,
    )
