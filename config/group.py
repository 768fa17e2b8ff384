"""Group configs (config resource type GROUP, 32), as Kafka 4.3's GroupConfig: what may be
set on a group, what values are valid, and which broker setting each one overrides.

They are ConfigRecords of resource type GROUP in the metadata log: IncrementalAlterConfigs
(and AlterConfigs) of a group is checked here by the broker and again by the controller
that writes them, and every broker reads them from its metadata image, so a group's
settings hold at every partition leader and at its coordinator. A group need not exist to
have configs.

- ``consumer.session.timeout.ms``, ``consumer.heartbeat.interval.ms``: a consumer-protocol
  group's member expiry and the heartbeat interval its members are given (over
  ``group.consumer.*``);
- ``share.session.timeout.ms``, ``share.heartbeat.interval.ms``: the same for a share group
  (over ``group.share.*``);
- ``share.auto.offset.reset`` (latest | earliest | by_duration:<ISO-8601 duration>, KIP-1106):
  where a share-partition starts when the group first reads it;
- ``share.isolation.level`` (read_uncommitted | read_committed): whether a share group is
  delivered records of open and aborted transactions;
- ``share.record.lock.duration.ms``, ``share.delivery.count.limit`` and
  ``share.partition.max.record.locks``: override the broker's ``group.share.*`` of the same
  names;
- ``share.renew.acknowledge.enable`` (boolean, default true; Kafka 4.3, KIP-1240): whether the
  group's consumers may renew their acquisition locks with RENEW acknowledgements (KIP-1222);
  when false a RENEW is refused with INVALID_RECORD_STATE;
- ``errors.deadletterqueue.topic.name`` (KIP-1191, Kafka 4.4): the share group's dead-letter
  topic (blank, the default: none); a name starting with ``__`` is refused;
- ``errors.deadletterqueue.copy.record.enable`` (KIP-1191, Kafka 4.4, default false): whether a
  dead-letter record carries the archived record's key and value, or only the context headers
  (broker/share/dead_letters.py).

Validation is Kafka's: each value parsed and checked against its own lower bound (Kafka's
ConfigDef messages), then against the broker's ``group.*.min/max.*`` settings, then session
timeout against heartbeat interval (an unset one taken from the broker).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from config.types import ConfigType

if TYPE_CHECKING:
    from config.broker import BrokerConfig

CONSUMER_SESSION_TIMEOUT_MS = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL_MS = "consumer.heartbeat.interval.ms"
SHARE_SESSION_TIMEOUT_MS = "share.session.timeout.ms"
SHARE_HEARTBEAT_INTERVAL_MS = "share.heartbeat.interval.ms"
RECORD_LOCK_DURATION_MS = "share.record.lock.duration.ms"
DELIVERY_COUNT_LIMIT = "share.delivery.count.limit"
PARTITION_MAX_RECORD_LOCKS = "share.partition.max.record.locks"
AUTO_OFFSET_RESET = "share.auto.offset.reset"
ISOLATION_LEVEL = "share.isolation.level"
RENEW_ACKNOWLEDGE_ENABLE = "share.renew.acknowledge.enable"
DEAD_LETTER_TOPIC = "errors.deadletterqueue.topic.name"
DEAD_LETTER_COPY_RECORD = "errors.deadletterqueue.copy.record.enable"
#: Every group config, in the order DescribeConfigs lists them (Kafka's definition order).
GROUP_CONFIG_NAMES = (CONSUMER_SESSION_TIMEOUT_MS, CONSUMER_HEARTBEAT_INTERVAL_MS, SHARE_SESSION_TIMEOUT_MS,
                      SHARE_HEARTBEAT_INTERVAL_MS, RECORD_LOCK_DURATION_MS, DELIVERY_COUNT_LIMIT,
                      PARTITION_MAX_RECORD_LOCKS, AUTO_OFFSET_RESET, ISOLATION_LEVEL, RENEW_ACKNOWLEDGE_ENABLE,
                      DEAD_LETTER_TOPIC, DEAD_LETTER_COPY_RECORD)
#: Topic names Kafka keeps for internal topics: never a dead-letter topic.
INTERNAL_TOPIC_PREFIX = "__"
#: The broker setting whose value a group config takes when the group does not set it.
BROKER_SYNONYMS: Mapping[str, str] = {
    CONSUMER_SESSION_TIMEOUT_MS: "group.consumer.session.timeout.ms",
    CONSUMER_HEARTBEAT_INTERVAL_MS: "group.consumer.heartbeat.interval.ms",
    SHARE_SESSION_TIMEOUT_MS: "group.share.session.timeout.ms",
    SHARE_HEARTBEAT_INTERVAL_MS: "group.share.heartbeat.interval.ms",
    RECORD_LOCK_DURATION_MS: "group.share.record.lock.duration.ms",
    DELIVERY_COUNT_LIMIT: "group.share.delivery.count.limit",
    PARTITION_MAX_RECORD_LOCKS: "group.share.partition.max.record.locks",
}
READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
#: Defaults of the group configs without a broker synonym (None: no value).
DEFAULTS: Mapping[str, str | None] = {AUTO_OFFSET_RESET: "latest", ISOLATION_LEVEL: READ_UNCOMMITTED,
                                      RENEW_ACKNOWLEDGE_ENABLE: "true", DEAD_LETTER_TOPIC: "",
                                      DEAD_LETTER_COPY_RECORD: "false"}
#: DescribeConfigs' type and documentation of each group config.
TYPES: Mapping[str, ConfigType] = {name: ConfigType.INT for name in BROKER_SYNONYMS} | {
    AUTO_OFFSET_RESET: ConfigType.STRING, ISOLATION_LEVEL: ConfigType.STRING,
    RENEW_ACKNOWLEDGE_ENABLE: ConfigType.BOOLEAN, DEAD_LETTER_TOPIC: ConfigType.STRING,
    DEAD_LETTER_COPY_RECORD: ConfigType.BOOLEAN}
DOCS: Mapping[str, str] = {
    CONSUMER_SESSION_TIMEOUT_MS: "The timeout to detect client failures when using the consumer group protocol.",
    CONSUMER_HEARTBEAT_INTERVAL_MS: "The heartbeat interval given to the members of a consumer group.",
    SHARE_SESSION_TIMEOUT_MS: "The timeout to detect client failures when using the share group protocol.",
    SHARE_HEARTBEAT_INTERVAL_MS: "The heartbeat interval given to the members of a share group.",
    RECORD_LOCK_DURATION_MS: "The record acquisition lock duration in milliseconds for share groups.",
    DELIVERY_COUNT_LIMIT: "The maximum number of delivery attempts for a record delivered to a share group.",
    PARTITION_MAX_RECORD_LOCKS: "Share-group record lock limit per share-partition.",
    AUTO_OFFSET_RESET: "The strategy to initialize the share-partition start offset: earliest, latest or "
                       "by_duration:<duration> (ISO-8601, PnDTnHnMn.nS; not negative).",
    ISOLATION_LEVEL: "Controls how to read records written transactionally: read_committed delivers only "
                     "committed transactional records, read_uncommitted all of them.",
    RENEW_ACKNOWLEDGE_ENABLE: "Whether the renew acknowledge type is enabled for the share group.",
    DEAD_LETTER_TOPIC: "The name of the topic to be used as the dead-letter queue (DLQ) topic for this share "
                       "group. If blank (the default), the group does not have a DLQ topic.",
    DEAD_LETTER_COPY_RECORD: "When writing onto the dead-letter queue topic, whether to copy the original record "
                             "onto the DLQ topic, or just write a record containing the context information headers.",
}
#: The boolean group configs.
_BOOLEANS = (RENEW_ACKNOWLEDGE_ENABLE, DEAD_LETTER_COPY_RECORD)
#: Each integer config's own lower bound (Kafka's ConfigDef atLeast).
_AT_LEAST = {CONSUMER_SESSION_TIMEOUT_MS: 1, CONSUMER_HEARTBEAT_INTERVAL_MS: 1, SHARE_SESSION_TIMEOUT_MS: 1,
             SHARE_HEARTBEAT_INTERVAL_MS: 1, RECORD_LOCK_DURATION_MS: 1000, DELIVERY_COUNT_LIMIT: 2,
             PARTITION_MAX_RECORD_LOCKS: 100}
_ISOLATION_LEVELS = (READ_COMMITTED, READ_UNCOMMITTED)
_BY_DURATION = "by_duration"
#: java.time.Duration.parse: [-+]PnDTnHnMn.nS, case-insensitive, at least one part.
_ISO_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
    re.IGNORECASE)


class GroupConfigError(ValueError):
    """An invalid group config (INVALID_CONFIG), in Kafka's words."""


@dataclass(frozen=True, slots=True)
class GroupConfigBounds:
    """The broker settings a group config is checked against: name -> (min setting, max
    setting, their values), and the broker defaults of the session timeouts and intervals."""

    ranges: Mapping[str, tuple[str, int, str, int]]
    defaults: Mapping[str, int]


def bounds_from(c: BrokerConfig) -> GroupConfigBounds:
    return GroupConfigBounds(
        ranges={
            CONSUMER_HEARTBEAT_INTERVAL_MS: ("group.consumer.min.heartbeat.interval.ms",
                                             c.group_consumer_min_heartbeat_interval_ms,
                                             "group.consumer.max.heartbeat.interval.ms",
                                             c.group_consumer_max_heartbeat_interval_ms),
            CONSUMER_SESSION_TIMEOUT_MS: ("group.consumer.min.session.timeout.ms",
                                          c.group_consumer_min_session_timeout_ms,
                                          "group.consumer.max.session.timeout.ms",
                                          c.group_consumer_max_session_timeout_ms),
            SHARE_HEARTBEAT_INTERVAL_MS: ("group.share.min.heartbeat.interval.ms",
                                          c.group_share_min_heartbeat_interval_ms,
                                          "group.share.max.heartbeat.interval.ms",
                                          c.group_share_max_heartbeat_interval_ms),
            SHARE_SESSION_TIMEOUT_MS: ("group.share.min.session.timeout.ms", c.group_share_min_session_timeout_ms,
                                       "group.share.max.session.timeout.ms", c.group_share_max_session_timeout_ms),
            RECORD_LOCK_DURATION_MS: ("group.share.min.record.lock.duration.ms",
                                      c.group_share_min_record_lock_duration_ms,
                                      "group.share.max.record.lock.duration.ms",
                                      c.group_share_max_record_lock_duration_ms),
            DELIVERY_COUNT_LIMIT: ("group.share.min.delivery.count.limit", c.group_share_min_delivery_count_limit,
                                   "group.share.max.delivery.count.limit", c.group_share_max_delivery_count_limit),
            PARTITION_MAX_RECORD_LOCKS: ("group.share.min.partition.max.record.locks",
                                         c.group_share_min_partition_max_record_locks,
                                         "group.share.max.partition.max.record.locks",
                                         c.group_share_max_partition_max_record_locks),
        },
        defaults={
            CONSUMER_SESSION_TIMEOUT_MS: c.group_consumer_session_timeout_ms,
            CONSUMER_HEARTBEAT_INTERVAL_MS: c.group_consumer_heartbeat_interval_ms,
            SHARE_SESSION_TIMEOUT_MS: c.group_share_session_timeout_ms,
            SHARE_HEARTBEAT_INTERVAL_MS: c.group_share_heartbeat_interval_ms,
        },
    )


def parse_duration_ms(text: str) -> int | None:
    """An ISO-8601 duration as java.time.Duration.parse reads it, in milliseconds (None if it
    does not parse)."""
    m = _ISO_DURATION.fullmatch(text)
    if m is None or (m.group(3) is not None and m.group(3).upper() == "T") or not any(
            m.group(i) is not None for i in (2, 4, 5, 6)):
        return None
    days, hours, minutes, seconds = (int(m.group(i) or 0) for i in (2, 4, 5, 6))
    fraction = (m.group(7) or "").ljust(9, "0")[:9]
    nanos = int(fraction) if fraction else 0
    if m.group(6) is not None and m.group(6).startswith("-"):
        nanos = -nanos
    total_ms = ((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000 + nanos // 1_000_000
    return -total_ms if m.group(1) == "-" else total_ms


def reset_duration_ms(value: str) -> int | None:
    """The look-back of ``by_duration:<duration>`` in milliseconds; None for anything else or
    a duration Kafka refuses (malformed or negative)."""
    prefix = _BY_DURATION + ":"
    if not value.startswith(prefix):
        return None
    duration = parse_duration_ms(value[len(prefix):])
    return None if duration is None or duration < 0 else duration


def _valid_reset(value: str) -> bool:
    return value in ("latest", "earliest") or reset_duration_ms(value) is not None


def _parse_int(name: str, value: str) -> int:
    try:
        n = int(value.strip())
    except ValueError:
        raise GroupConfigError(f"Invalid value {value} for configuration {name}: Not a number of type INT") from None
    if not -2**31 <= n < 2**31:
        raise GroupConfigError(f"Invalid value {value} for configuration {name}: Not a number of type INT")
    low = _AT_LEAST[name]
    if n < low:
        raise GroupConfigError(f"Invalid value {value} for configuration {name}: Value must be at least {low}")
    return n


def validate(configs: Mapping[str, str], bounds: GroupConfigBounds) -> None:
    """Kafka's GroupConfig.validate: known names, values that parse, values within the
    broker's bounds, session timeouts above heartbeat intervals."""
    for name in configs:
        if name not in GROUP_CONFIG_NAMES:
            raise GroupConfigError(f"Unknown group config name: {name}")
    numbers: dict[str, int] = {}
    for name in GROUP_CONFIG_NAMES:
        if name not in configs:
            continue
        value = configs[name]
        if name in _AT_LEAST:
            numbers[name] = _parse_int(name, value)
        elif name == AUTO_OFFSET_RESET and not _valid_reset(value):
            raise GroupConfigError(
                f"Invalid value {value} for configuration {name}: Invalid value `{value}` for configuration {name}. "
                "The value must be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS.>'.")
        elif name == ISOLATION_LEVEL and value not in _ISOLATION_LEVELS:
            raise GroupConfigError(f"Invalid value {value} for configuration {name}: "
                                   "String must be one of: " + ", ".join(_ISOLATION_LEVELS))
        elif name in _BOOLEANS and parse_boolean(value) is None:
            raise GroupConfigError(f"Invalid value {value} for configuration {name}: Expected value to be either "
                                   "true or false")
        elif name == DEAD_LETTER_TOPIC and value.strip().startswith(INTERNAL_TOPIC_PREFIX):
            raise GroupConfigError(f"{name}: DLQ topic name must not start with '{INTERNAL_TOPIC_PREFIX}'")
    for name, (min_name, low, max_name, high) in bounds.ranges.items():
        n = numbers.get(name)
        if n is not None and n < low:
            raise GroupConfigError(f"{name} must be greater than or equal to {min_name}")
        if n is not None and n > high:
            raise GroupConfigError(f"{name} must be less than or equal to {max_name}")
    for session, interval in ((CONSUMER_SESSION_TIMEOUT_MS, CONSUMER_HEARTBEAT_INTERVAL_MS),
                              (SHARE_SESSION_TIMEOUT_MS, SHARE_HEARTBEAT_INTERVAL_MS)):
        if numbers.get(session, bounds.defaults[session]) <= numbers.get(interval, bounds.defaults[interval]):
            raise GroupConfigError(f"{session} must be greater than {interval}")


def parse_boolean(value: str) -> bool | None:
    """A BOOLEAN config as Kafka's ConfigDef reads it: true or false in any case, around
    spaces (None otherwise)."""
    text = value.strip().lower()
    return True if text == "true" else False if text == "false" else None


def boolean_config(configs: Mapping[str, str], name: str) -> bool:
    """A boolean group config in force (its default when unset or unreadable)."""
    value = parse_boolean(configs.get(name, ""))
    if value is None:
        return parse_boolean(DEFAULTS[name] or "") is True
    return value


def error(configs: Mapping[str, str], bounds: GroupConfigBounds) -> str | None:
    try:
        validate(configs, bounds)
    except GroupConfigError as ex:
        return str(ex)
    return None


def int_config(configs: Mapping[str, str], name: str, default: int) -> int:
    """An integer group config in force (as validated when written; a value that does not
    parse falls back to the broker default)."""
    try:
        return int(configs[name].strip()) if name in configs else default
    except ValueError:
        return default


@dataclass(frozen=True, slots=True)
class ShareGroupSettings:
    """A share group's settings at the partition leaders: its group configs over the
    broker's defaults."""

    auto_offset_reset: str
    record_lock_duration_ms: int
    delivery_count_limit: int
    dead_letter_topic: str | None
    isolation_level: str = READ_UNCOMMITTED
    partition_max_record_locks: int = 2000

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == READ_COMMITTED

    def reset_timestamp(self, now_ms: int) -> int | None:
        """``by_duration``: the earliest record timestamp a new share-partition starts at
        (now minus the duration); None for earliest and latest."""
        duration = reset_duration_ms(self.auto_offset_reset)
        return None if duration is None else now_ms - duration


def share_group_settings(configs: Mapping[str, str], record_lock_duration_ms: int,
                         delivery_count_limit: int, partition_max_record_locks: int = 2000) -> ShareGroupSettings:
    """The settings of a group whose group configs are ``configs``."""
    reset = configs.get(AUTO_OFFSET_RESET, "latest")
    isolation = configs.get(ISOLATION_LEVEL, READ_UNCOMMITTED)
    return ShareGroupSettings(
        auto_offset_reset=reset if _valid_reset(reset) else "latest",
        record_lock_duration_ms=int_config(configs, RECORD_LOCK_DURATION_MS, record_lock_duration_ms),
        delivery_count_limit=int_config(configs, DELIVERY_COUNT_LIMIT, delivery_count_limit),
        dead_letter_topic=configs.get(DEAD_LETTER_TOPIC, "").strip() or None,
        isolation_level=isolation if isolation in _ISOLATION_LEVELS else READ_UNCOMMITTED,
        partition_max_record_locks=int_config(configs, PARTITION_MAX_RECORD_LOCKS, partition_max_record_locks),
    )
