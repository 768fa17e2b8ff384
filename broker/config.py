"""Broker and topic configuration: the ``cormorant serve`` contract.

Cormorant reads Kafka's own setting names, types, defaults and validation rules
(Apache Kafka 3.9: ``KafkaConfig`` and its ``ConfigDef`` parts for the broker,
``LogConfig`` for topics), so a ``server.properties`` written for Kafka works
unchanged. Where Cormorant's default differs from Kafka's (``node.id``,
``process.roles``, ``listeners``, ``log.dir``) the catalog says so.

Three kinds of key:

* supported: in :data:`BROKER_CONFIGS`; parsed, validated, exposed on
  :class:`BrokerConfig` and reported by DescribeConfigs;
* known Kafka settings Cormorant does not implement
  (:data:`UNIMPLEMENTED_KAFKA_CONFIGS`): accepted with one warning each;
* anything else: a :class:`ConfigError` that suggests the closest known key,
  because a typo silently ignored is a setting silently not applied.

Topic-level settings (:data:`TOPIC_CONFIGS`) take their defaults from broker
settings, as Kafka's do; :class:`TopicConfig` resolves one topic's effective
values and where each came from, for CreateTopics, AlterConfigs and
DescribeConfigs.
"""

from __future__ import annotations

import dataclasses
import decimal
import difflib
import enum
import ipaddress
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Final, Protocol

INT_MAX: Final = 2**31 - 1
#: The one authorizer Cormorant has: Kafka's KRaft authorizer, with ACLs in the metadata log.
STANDARD_AUTHORIZER: Final = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
LONG_MAX: Final = 2**63 - 1
DOUBLE_MAX: Final = 1.7976931348623157e308

_MS_PER_MINUTE: Final = 60_000
_MS_PER_HOUR: Final = 3_600_000


class ConfigError(ValueError):
    """A setting that cannot be accepted; ``key`` names it."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key
        self.message = message


def _invalid(key: str, value: object, reason: str) -> ConfigError:
    # Kafka's ConfigException wording, which clients show to users verbatim.
    return ConfigError(key, f"Invalid value {value} for configuration {key}: {reason}")


class ConfigType(enum.IntEnum):
    """A setting's type, numbered as DescribeConfigs (v3+) reports it."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9

    @property
    def type_name(self) -> str:
        """Kafka's lower-case name for the type, as its documentation prints it."""
        return self.name.lower()


class ConfigSource(enum.IntEnum):
    """Where a reported value came from, numbered as DescribeConfigs reports it."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class UpdateMode(enum.Enum):
    """Kafka's dynamic-update class of a broker setting; only READ_ONLY ones are read-only."""

    READ_ONLY = "read-only"
    PER_BROKER = "per-broker"
    CLUSTER_WIDE = "cluster-wide"


class SecurityProtocol(enum.Enum):
    """Kafka's security protocols, as named in listener.security.protocol.map."""

    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"


@dataclass(frozen=True, slots=True)
class Password:
    """A secret setting; its repr never shows the value, so it cannot leak into logs."""

    value: str

    def __repr__(self) -> str:
        return "[hidden]"

    __str__ = __repr__


ConfigValue = bool | int | float | str | tuple[str, ...] | Password | None


# --- validators -------------------------------------------------------------------------------


class Validator(Protocol):
    """Checks a parsed, non-null value; ``describe`` is the "valid values" text for docs."""

    def check(self, key: str, value: ConfigValue) -> None: ...

    def describe(self) -> str: ...


def _number(value: ConfigValue) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected a number, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Range:
    """An inclusive numeric range; either end may be open (Kafka's ``ConfigDef.Range``)."""

    min: int | float | None = None
    max: int | float | None = None

    def check(self, key: str, value: ConfigValue) -> None:
        number = _number(value)
        if self.min is not None and number < self.min:
            raise _invalid(key, value, f"Value must be at least {self.min}")
        if self.max is not None and number > self.max:
            raise _invalid(key, value, f"Value must be no more than {self.max}")

    def describe(self) -> str:
        low = "" if self.min is None else f"{self.min},"
        high = "" if self.max is None else f",{self.max}"
        return f"[{low}...{high}]"


@dataclass(frozen=True, slots=True)
class RangeOrValue:
    """A range plus one out-of-range sentinel, such as gzip's level -1 (codec default)."""

    range: Range
    value: int

    def check(self, key: str, value: ConfigValue) -> None:
        if value == self.value:
            return
        try:
            self.range.check(key, value)
        except ConfigError:
            reason = (
                f"Value must be between {self.range.min} and {self.range.max} "
                f"or equal to {self.value}"
            )
            raise _invalid(key, value, reason) from None

    def describe(self) -> str:
        return f"{self.range.describe()} or {self.value}"


@dataclass(frozen=True, slots=True)
class OneOf:
    """A string that must be one of ``choices``, case-sensitively (``ValidString``)."""

    choices: tuple[str, ...]

    def check(self, key: str, value: ConfigValue) -> None:
        if value not in self.choices:
            raise _invalid(key, value, f"String must be one of: {', '.join(self.choices)}")

    def describe(self) -> str:
        return f"[{', '.join(self.choices)}]"


@dataclass(frozen=True, slots=True)
class EachOneOf:
    """A list whose every item is one of ``choices`` (``ValidList``); empty is allowed."""

    choices: tuple[str, ...]

    def check(self, key: str, value: ConfigValue) -> None:
        if not isinstance(value, tuple):
            raise TypeError(f"expected a list, got {value!r}")
        for item in value:
            if item not in self.choices:
                raise _invalid(key, item, f"String must be one of: {', '.join(self.choices)}")

    def describe(self) -> str:
        return f"[{', '.join(self.choices)}]"


@dataclass(frozen=True, slots=True)
class Check:
    """A validator given as a function plus the text that documents it."""

    function: Callable[[str, ConfigValue], None]
    description: str

    def check(self, key: str, value: ConfigValue) -> None:
        self.function(key, value)

    def describe(self) -> str:
        return self.description


# Kafka 3.9's MetadataVersion list: log.message.format.version and the topic's
# message.format.version accept any of these, or a release prefix such as "2.8".
METADATA_VERSIONS: Final[tuple[str, ...]] = (
    "0.8.0", "0.8.1", "0.8.2", "0.9.0", "0.10.0-IV0", "0.10.0-IV1", "0.10.1-IV0", "0.10.1-IV1",
    "0.10.1-IV2", "0.10.2-IV0", "0.11.0-IV0", "0.11.0-IV1", "0.11.0-IV2", "1.0-IV0", "1.1-IV0",
    "2.0-IV0", "2.0-IV1", "2.1-IV0", "2.1-IV1", "2.1-IV2", "2.2-IV0", "2.2-IV1", "2.3-IV0",
    "2.3-IV1", "2.4-IV0", "2.4-IV1", "2.5-IV0", "2.6-IV0", "2.7-IV0", "2.7-IV1", "2.7-IV2",
    "2.8-IV0", "2.8-IV1", "3.0-IV0", "3.0-IV1", "3.1-IV0", "3.2-IV0", "3.3-IV0", "3.3-IV1",
    "3.3-IV2", "3.3-IV3", "3.4-IV0", "3.5-IV0", "3.5-IV1", "3.5-IV2", "3.6-IV0", "3.6-IV1",
    "3.6-IV2", "3.7-IV0", "3.7-IV1", "3.7-IV2", "3.7-IV3", "3.7-IV4", "3.8-IV0", "3.9-IV0",
    "4.0-IV0", "4.0-IV1",
)  # fmt: skip
_METADATA_VERSION_KEYS: Final = frozenset(METADATA_VERSIONS) | {
    version.split("-")[0] for version in METADATA_VERSIONS
}


def _check_metadata_version(key: str, value: ConfigValue) -> None:
    text = str(value)
    # As MetadataVersion.fromVersionString: keep two dotted parts (three for 0.x
    # releases); Java's split drops trailing empty parts.
    parts = text.split(".")
    while parts and not parts[-1]:
        parts.pop()
    keep = 3 if text.startswith("0.") else 2
    candidate = text if keep >= len(parts) else ".".join(parts[:keep])
    if candidate not in _METADATA_VERSION_KEYS:
        raise _invalid(key, text, f"Version {text} is not a valid version")


_METADATA_VERSION_VALIDATOR: Final = Check(
    _check_metadata_version,
    f"a Kafka version from {METADATA_VERSIONS[0]} to {METADATA_VERSIONS[-1]}, such as 2.8 or 3.0-IV1",
)

_THROTTLED_REPLICA_RE: Final = re.compile(r"([0-9]+:[0-9]+)?")


def _check_throttled_replicas(key: str, value: ConfigValue) -> None:
    items = [item.strip() for item in value] if isinstance(value, tuple) else []
    if "".join(items) == "*" or all(_THROTTLED_REPLICA_RE.fullmatch(item) for item in items):
        return
    raise _invalid(
        key,
        ",".join(items),
        f"{key} must be the literal '*' or a list of replicas in the following format: "
        "[partitionId]:[brokerId],[partitionId]:[brokerId],...",
    )


_THROTTLED_REPLICAS_VALIDATOR: Final = Check(
    _check_throttled_replicas, "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
)


_HOST_PORT_RE: Final = re.compile(r"\[?([0-9a-zA-Z\-%._:]*)\]?:([0-9]+)")


def _port(key: str, text: str, entry: str) -> int:
    port = int(text)
    if not 0 <= port <= 65535:
        raise _invalid(key, entry, f"port {port} is outside 0..65535")
    return port


@dataclass(frozen=True, slots=True)
class HostPort:
    """A plain ``host:port`` address; an empty host means every interface."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def _parse_host_port(key: str, text: str) -> HostPort | None:
    if not text:
        return None
    match = _HOST_PORT_RE.fullmatch(text)
    if match is None:
        raise _invalid(key, text, "expected host:port")
    return HostPort(match.group(1), _port(key, match.group(2), text))


def _check_host_port(key: str, value: ConfigValue) -> None:
    _parse_host_port(key, str(value))


# Kafka's Uuid string form: 16 bytes as URL-safe base64, normally without padding.
_UUID_RE: Final = re.compile(r"[A-Za-z0-9_-]{22}(?:==)?")


def connection_overrides(key: str, text: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides`` (``host:count,...``) as a map; ConfigError if malformed."""
    overrides: dict[str, int] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        host, sep, count = entry.rpartition(":")
        if not sep or not host or not count.strip().isdigit():
            raise _invalid(key, text, f"Invalid connection override {entry}: expected host:count")
        overrides[host.strip().strip("[]")] = int(count)
    return overrides


def _check_connection_overrides(key: str, value: ConfigValue) -> None:
    connection_overrides(key, str(value))


def _check_cluster_id(key: str, value: ConfigValue) -> None:
    if not _UUID_RE.fullmatch(str(value)):
        raise _invalid(
            key, value, "expected a 22-character base64 UUID, as kafka-storage random-uuid prints"
        )


def _check_voters(key: str, value: ConfigValue) -> None:
    if isinstance(value, tuple):
        _parse_voters(value)


# --- catalog ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One setting: Kafka's name, type and default, how it is validated, and what it means.

    ``default`` is the default written as it would appear in a properties file, or
    None for Kafka's null (unset). ``kafka_default`` is Kafka's default, as its
    documentation prints it, when Cormorant's differs. ``broker_synonym`` (topic
    settings only) is the broker setting that supplies the topic's default.
    ``implemented`` is False for topic settings that are accepted and reported
    but have no effect in Cormorant.
    """

    name: str
    type: ConfigType
    default: str | None
    doc: str
    validator: Validator | None = None
    update_mode: UpdateMode = UpdateMode.READ_ONLY
    group: str = ""
    kafka_default: str | None = None
    cormorant_only: bool = False
    broker_synonym: str | None = None
    implemented: bool = True

    @property
    def is_sensitive(self) -> bool:
        """Whether DescribeConfigs must hide the value (Kafka hides passwords)."""
        return self.type is ConfigType.PASSWORD

    @property
    def read_only(self) -> bool:
        """Whether Kafka refuses to change the setting without a restart."""
        return self.update_mode is UpdateMode.READ_ONLY

    def parse(self, raw: str | None) -> ConfigValue:
        """The typed value of ``raw`` (None for null), validated; raises ConfigError."""
        if raw is None:
            return None
        value = _parse_typed(self.name, self.type, raw)
        if self.validator is not None and value is not None:
            self.validator.check(self.name, value)
        return value

    @property
    def default_value(self) -> ConfigValue:
        """The typed default."""
        return self.parse(self.default)


_INTEGER_RE: Final = re.compile(r"[+-]?[0-9]+")
_DOUBLE_RE: Final = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)"
)
_LIST_SEPARATOR_RE: Final = re.compile(r"\s*,\s*")
_INTEGER_BITS: Final = {ConfigType.SHORT: 16, ConfigType.INT: 32, ConfigType.LONG: 64}


def _parse_typed(key: str, config_type: ConfigType, raw: str) -> ConfigValue:
    # Mirrors ConfigDef.parseType: values are trimmed, numbers are Java-style and range-checked.
    text = raw.strip()
    if config_type is ConfigType.BOOLEAN:
        lowered = text.lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        raise _invalid(key, raw, "Expected value to be either true or false")
    if config_type in _INTEGER_BITS:
        bits = _INTEGER_BITS[config_type]
        if _INTEGER_RE.fullmatch(text):
            number = int(text)
            if -(2 ** (bits - 1)) <= number < 2 ** (bits - 1):
                return number
        raise _invalid(key, raw, f"Not a number of type {config_type.name}")
    if config_type is ConfigType.DOUBLE:
        if _DOUBLE_RE.fullmatch(text):
            # Java allows a trailing type letter ("1.5d"); Python's float does not.
            return float(text[:-1] if text[-1] in "fFdD" else text)
        raise _invalid(key, raw, "Not a number of type DOUBLE")
    if config_type is ConfigType.LIST:
        return () if not text else tuple(_LIST_SEPARATOR_RE.split(text))
    if config_type is ConfigType.PASSWORD:
        return Password(text)
    return text


def _java_double(value: float) -> str:
    # Java's Double.toString, which is what Kafka reports: plain notation for
    # 1e-3 <= |x| < 1e7, otherwise the shortest round-trip digits as "d.dddE[-]n".
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(value)
    sign, digits, exponent = decimal.Decimal(repr(value)).as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits)).rstrip("0")
    power = exponent + len(digits) - 1
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{power}"


def format_value(config_type: ConfigType, value: ConfigValue) -> str | None:
    """A typed value as Kafka's DescribeConfigs writes it (``ConfigDef.convertToString``)."""
    if value is None:
        return None
    if isinstance(value, Password):
        return value.value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(value)
    if isinstance(value, float) or config_type is ConfigType.DOUBLE:
        return _java_double(float(value))
    return str(value)


def _key(
    name: str,
    config_type: ConfigType,
    default: str | None,
    doc: str,
    validator: Validator | None = None,
    mode: UpdateMode = UpdateMode.READ_ONLY,
    *,
    kafka_default: str | None = None,
    cormorant_only: bool = False,
) -> ConfigKey:
    return ConfigKey(
        name=name,
        type=config_type,
        default=default,
        doc=doc,
        validator=validator,
        update_mode=mode,
        kafka_default=kafka_default,
        cormorant_only=cormorant_only,
    )


def _group(title: str, keys: Iterable[ConfigKey]) -> list[ConfigKey]:
    return [dataclasses.replace(key, group=title) for key in keys]


BOOLEAN: Final = ConfigType.BOOLEAN
STRING: Final = ConfigType.STRING
INT: Final = ConfigType.INT
SHORT: Final = ConfigType.SHORT
LONG: Final = ConfigType.LONG
DOUBLE: Final = ConfigType.DOUBLE
LIST: Final = ConfigType.LIST
PASSWORD: Final = ConfigType.PASSWORD
PER_BROKER: Final = UpdateMode.PER_BROKER
CLUSTER_WIDE: Final = UpdateMode.CLUSTER_WIDE

AT_LEAST_0: Final = Range(min=0)
AT_LEAST_1: Final = Range(min=1)

COMPRESSION_TYPES: Final = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES: Final = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES: Final = ("compact", "delete")
#: Server-side assignors of consumer-protocol groups, by name and by Kafka's class name.
CONSUMER_GROUP_ASSIGNOR_CLASSES: Final = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}
CONSUMER_GROUP_ASSIGNORS: Final = ("uniform", "range", *CONSUMER_GROUP_ASSIGNOR_CLASSES)

_LISTENERS_DOC: Final = (
    "NAME://host:port,... addresses to listen on; an empty host binds every interface "
    "and port 0 binds an ephemeral port."
)

_BROKER_KEYS: Final[list[ConfigKey]] = [
    *_group("Node and cluster", [
        _key("node.id", INT, "1", "This node's id, unique in the cluster; also its id in the metadata quorum.",
             kafka_default="-1"),
        _key("broker.id", INT, "-1", "Older name for node.id; if set, it must equal node.id (and supplies it when node.id is unset)."),
        _key("process.roles", LIST, "broker,controller",
             "Roles this node runs: broker, controller, or both (a single-node cluster runs both).",
             EachOneOf(("broker", "controller")), kafka_default='""'),
        _key("controller.quorum.voters", LIST, "",
             "Voters of the metadata quorum; empty means a quorum of this node alone.",
             Check(_check_voters, "id@host:port,...")),
        _key("controller.listener.names", STRING, None,
             "Comma-separated names of the listeners the controller uses; may be empty when the quorum is this node alone."),
        _key("cluster.id", STRING, None,
             "The cluster id to use when formatting new storage; unset means generate one.",
             Check(_check_cluster_id, "22-character base64 UUID"), cormorant_only=True),
        _key("broker.rack", STRING, None, "Rack (or zone) of this broker, reported in metadata for rack-aware clients."),
        _key("broker.session.timeout.ms", INT, "9000",
             "How long the controller waits without a heartbeat before fencing a broker."),
        _key("broker.heartbeat.interval.ms", INT, "2000", "How often a broker heartbeats to the controller."),
        _key("initial.broker.registration.timeout.ms", INT, "60000",
             "How long a starting broker waits to register with the controller before giving up."),
    ]),
    *_group("Listeners and network", [
        _key("listeners", STRING, "PLAINTEXT://127.0.0.1:9092", _LISTENERS_DOC, mode=PER_BROKER,
             kafka_default="PLAINTEXT://:9092"),
        _key("advertised.listeners", STRING, None,
             "Addresses given to clients in metadata, if different from listeners; unset means listeners.",
             mode=PER_BROKER),
        _key("listener.security.protocol.map", STRING,
             "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT",
             "Security protocol of each listener name, as NAME:PROTOCOL,...; when unset, controller listener names map to PLAINTEXT.",
             mode=PER_BROKER),
        _key("inter.broker.listener.name", STRING, None,
             "Listener brokers use to reach each other; unset means the one named by security.inter.broker.protocol."),
        _key("security.inter.broker.protocol", STRING, "PLAINTEXT",
             "Security protocol between brokers; set this or inter.broker.listener.name, not both.",
             OneOf(("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"))),
        _key("socket.request.max.bytes", INT, "104857600",
             "Largest request frame accepted; a larger size prefix closes the connection.", AT_LEAST_1),
        _key("socket.send.buffer.bytes", INT, "102400", "SO_SNDBUF of client sockets; -1 keeps the OS default."),
        _key("socket.receive.buffer.bytes", INT, "102400", "SO_RCVBUF of client sockets; -1 keeps the OS default."),
        _key("socket.listen.backlog.size", INT, "50", "Listen backlog of each listener socket.", AT_LEAST_1),
        _key("connections.max.idle.ms", LONG, "600000", "Idle connections are closed after this long."),
        _key("queued.max.request.bytes", LONG, "536870912",
             "Bytes of requests being read or handled, all connections together; a connection whose next "
             "frame does not fit waits, unread, until memory frees (one frame is admitted while any is left, "
             "as Kafka's memory pool does). -1 means no bound.",
             RangeOrValue(Range(min=1), -1), kafka_default="-1"),
        _key("socket.request.read.timeout.ms", LONG, "60000",
             "Once a request frame has started to arrive, the rest of it must arrive within this time "
             "(waiting for request memory excluded), or the connection is closed.",
             AT_LEAST_1, cormorant_only=True),
        _key("queued.max.requests", INT, "500",
             "Requests read from one connection but not yet answered before reading pauses.", AT_LEAST_1),
        _key("num.network.threads", INT, "3",
             "Accepted for compatibility; Cormorant serves each connection in its own task.", AT_LEAST_1,
             CLUSTER_WIDE),
        _key("num.io.threads", INT, "8",
             "Accepted for compatibility; Cormorant does not use a request thread pool.", AT_LEAST_1, CLUSTER_WIDE),
        _key("max.connections", INT, str(INT_MAX),
             "Most client connections the broker holds at once, all listeners together: at the limit a "
             "listener stops accepting until one closes (listener.name.<l>.max.connections bounds one "
             "listener; the inter-broker listener is bound only by its own).", AT_LEAST_0, CLUSTER_WIDE),
        _key("max.connections.per.ip", INT, str(INT_MAX),
             "Most connections from one IP address; one more is closed at once.", AT_LEAST_0, CLUSTER_WIDE),
        _key("fetch.max.bytes", INT, "57671680", "Most bytes returned for one fetch request.", Range(min=1024)),
        _key("max.incremental.fetch.session.cache.slots", INT, "1000",
             "Most incremental fetch sessions kept at once.", AT_LEAST_0),
    ]),
    *_group("Topics and logs", [
        _key("log.dirs", STRING, None, "Comma-separated directories for partition data; unset means log.dir."),
        _key("log.dir", STRING, "./cormorant-data", "Data directory used when log.dirs is unset.",
             kafka_default="/tmp/kafka-logs"),
        _key("num.partitions", INT, "1", "Partitions of a topic created without a partition count.", AT_LEAST_1),
        _key("auto.create.topics.enable", BOOLEAN, "true",
             "Create a topic when a client asks for its metadata or produces to it."),
        _key("default.replication.factor", INT, "1",
             "Replication factor of a topic created without one, including auto-created topics."),
        _key("min.insync.replicas", INT, "1",
             "Default least number of in-sync replicas an acks=all produce needs (topic: min.insync.replicas).",
             AT_LEAST_1, CLUSTER_WIDE),
        _key("message.max.bytes", INT, "1048588",
             "Default largest record batch a topic accepts (topic: max.message.bytes).", AT_LEAST_0, CLUSTER_WIDE),
        _key("log.retention.hours", INT, "168",
             "Hours to keep a segment before deleting it; overridden by log.retention.minutes and log.retention.ms."),
        _key("log.retention.minutes", INT, None,
             "Minutes to keep a segment; beats log.retention.hours, loses to log.retention.ms."),
        _key("log.retention.ms", LONG, None,
             "Milliseconds to keep a segment (topic: retention.ms); beats minutes and hours; -1 keeps forever.",
             mode=CLUSTER_WIDE),
        _key("log.retention.bytes", LONG, "-1",
             "Default largest partition size before old segments are deleted (topic: retention.bytes); -1 means no limit.",
             mode=CLUSTER_WIDE),
        _key("log.retention.check.interval.ms", LONG, "300000",
             "How often segments are checked for deletion.", AT_LEAST_1),
        _key("log.segment.bytes", INT, "1073741824",
             "Default size at which a segment is rolled (topic: segment.bytes).", Range(min=14), CLUSTER_WIDE),
        _key("log.roll.hours", INT, "168", "Hours after which a segment is rolled even if not full.", AT_LEAST_1),
        _key("log.roll.ms", LONG, None,
             "Milliseconds after which a segment is rolled (topic: segment.ms); beats log.roll.hours.",
             mode=CLUSTER_WIDE),
        _key("log.roll.jitter.hours", INT, "0", "Hours of random jitter subtracted from the roll time.", AT_LEAST_0),
        _key("log.roll.jitter.ms", LONG, None,
             "Milliseconds of roll jitter (topic: segment.jitter.ms); beats log.roll.jitter.hours.",
             mode=CLUSTER_WIDE),
        _key("log.index.interval.bytes", INT, "4096",
             "Bytes of records between offset-index entries (topic: index.interval.bytes).", AT_LEAST_0,
             CLUSTER_WIDE),
        _key("log.index.size.max.bytes", INT, "10485760",
             "Largest offset or time index file (topic: segment.index.bytes).", Range(min=4), CLUSTER_WIDE),
        _key("log.flush.interval.messages", LONG, str(LONG_MAX),
             "Records appended before the log is fsynced (topic: flush.messages).", AT_LEAST_1, CLUSTER_WIDE),
        _key("log.flush.interval.ms", LONG, None,
             "Milliseconds before the log is fsynced (topic: flush.ms); unset means log.flush.scheduler.interval.ms.",
             mode=CLUSTER_WIDE),
        _key("log.flush.scheduler.interval.ms", LONG, str(LONG_MAX),
             "How often logs are checked for a due flush; also the flush interval when log.flush.interval.ms is unset."),
        _key("log.flush.offset.checkpoint.interval.ms", INT, "60000",
             "How often the recovery-point checkpoint is written.", AT_LEAST_0),
        _key("log.flush.start.offset.checkpoint.interval.ms", INT, "60000",
             "How often the log-start-offset checkpoint is written.", AT_LEAST_0),
        _key("log.segment.delete.delay.ms", LONG, "60000",
             "Delay before a deleted segment's files are removed (topic: file.delete.delay.ms).", AT_LEAST_0,
             CLUSTER_WIDE),
        _key("log.cleanup.policy", LIST, "delete",
             "Default cleanup policy: delete old segments, compact by key, or both (topic: cleanup.policy).",
             EachOneOf(CLEANUP_POLICIES), CLUSTER_WIDE),
        _key("log.message.timestamp.type", STRING, "CreateTime",
             "Default record timestamp: the producer's (CreateTime) or the broker's (LogAppendTime).",
             OneOf(TIMESTAMP_TYPES), CLUSTER_WIDE),
        _key("log.message.timestamp.before.max.ms", LONG, str(LONG_MAX),
             "Default largest amount a CreateTime timestamp may lie before the broker's clock.", AT_LEAST_0,
             CLUSTER_WIDE),
        _key("log.message.timestamp.after.max.ms", LONG, str(LONG_MAX),
             "Default largest amount a CreateTime timestamp may lie after the broker's clock.", AT_LEAST_0,
             CLUSTER_WIDE),
        _key("log.message.timestamp.difference.max.ms", LONG, str(LONG_MAX),
             "Deprecated: the before/after limit used when those two are unset.", AT_LEAST_0, CLUSTER_WIDE),
        _key("log.message.format.version", STRING, "3.0-IV1",
             "Deprecated and without effect since Kafka 3.0; accepted and validated.", _METADATA_VERSION_VALIDATOR),
        _key("log.message.downconversion.enable", BOOLEAN, "true",
             "Whether fetches by old clients may be answered with down-converted batches.", mode=CLUSTER_WIDE),
        _key("log.preallocate", BOOLEAN, "false", "Preallocate segment files at their full size.",
             mode=CLUSTER_WIDE),
        _key("log.local.retention.ms", LONG, "-2",
             "Tiered storage only: local retention time; -2 means use retention.ms.", Range(min=-2), CLUSTER_WIDE),
        _key("log.local.retention.bytes", LONG, "-2",
             "Tiered storage only: local retention size; -2 means use retention.bytes.", Range(min=-2),
             CLUSTER_WIDE),
        _key("num.recovery.threads.per.data.dir", INT, "1",
             "Parallelism of log recovery at startup for each data directory.", AT_LEAST_1, CLUSTER_WIDE),
        _key("compression.type", STRING, "producer",
             "Default codec for stored batches; producer keeps the producer's codec.", OneOf(COMPRESSION_TYPES),
             CLUSTER_WIDE),
        _key("compression.gzip.level", INT, "-1", "gzip level when the broker compresses; -1 is the codec default.",
             RangeOrValue(Range(1, 9), -1), CLUSTER_WIDE),
        _key("compression.lz4.level", INT, "9", "lz4 level when the broker compresses.", Range(1, 17),
             CLUSTER_WIDE),
        _key("compression.zstd.level", INT, "3", "zstd level when the broker compresses.", Range(-131072, 22),
             CLUSTER_WIDE),
        _key("delete.topic.enable", BOOLEAN, "true", "Whether DeleteTopics may delete topics."),
        _key("unclean.leader.election.enable", BOOLEAN, "false",
             "Whether an out-of-sync replica may become leader when no in-sync one is left, losing data.",
             mode=CLUSTER_WIDE),
        _key("auto.leader.rebalance.enable", BOOLEAN, "true",
             "Move leadership back to preferred replicas in the background."),
        _key("leader.imbalance.check.interval.seconds", LONG, "300",
             "How often leadership balance is checked.", AT_LEAST_1),
        _key("leader.imbalance.per.broker.percentage", INT, "10",
             "Share of non-preferred leaders on a broker that triggers a rebalance."),
    ]),
    *_group("Log cleaner", [
        _key("log.cleaner.enable", BOOLEAN, "true", "Run the log cleaner, which compacts topics with cleanup.policy=compact."),
        _key("log.cleaner.threads", INT, "1", "Cleaner threads.", AT_LEAST_0, CLUSTER_WIDE),
        _key("log.cleaner.backoff.ms", LONG, "15000", "Sleep when no log needs cleaning.", AT_LEAST_0, CLUSTER_WIDE),
        _key("log.cleaner.dedupe.buffer.size", LONG, "134217728",
             "Memory for the key-offset map of all cleaner threads together.", mode=CLUSTER_WIDE),
        _key("log.cleaner.io.buffer.size", INT, "524288", "I/O buffer of all cleaner threads together.", AT_LEAST_0,
             CLUSTER_WIDE),
        _key("log.cleaner.io.buffer.load.factor", DOUBLE, "0.9", "Fill factor of the dedupe buffer's hash map.",
             mode=CLUSTER_WIDE),
        _key("log.cleaner.io.max.bytes.per.second", DOUBLE, "1.7976931348623157E308",
             "Throttle on cleaner reads plus writes.", mode=CLUSTER_WIDE),
        _key("log.cleaner.delete.retention.ms", LONG, "86400000",
             "Default time tombstones are kept on compacted topics (topic: delete.retention.ms).", AT_LEAST_0,
             CLUSTER_WIDE),
        _key("log.cleaner.min.cleanable.ratio", DOUBLE, "0.5",
             "Default dirty share of a log that makes it eligible for cleaning (topic: min.cleanable.dirty.ratio).",
             Range(0, 1), CLUSTER_WIDE),
        _key("log.cleaner.min.compaction.lag.ms", LONG, "0",
             "Default least age of a record before it may be compacted (topic: min.compaction.lag.ms).",
             AT_LEAST_0, CLUSTER_WIDE),
        _key("log.cleaner.max.compaction.lag.ms", LONG, str(LONG_MAX),
             "Default greatest time a record stays ineligible for compaction (topic: max.compaction.lag.ms).",
             AT_LEAST_1, CLUSTER_WIDE),
    ]),
    *_group("Replication", [
        _key("replica.lag.time.max.ms", LONG, "30000",
             "A follower that has not caught up for this long leaves the ISR."),
        _key("replica.fetch.max.bytes", INT, "1048576", "Bytes a follower asks for per partition.", AT_LEAST_0),
        _key("replica.fetch.min.bytes", INT, "1", "Bytes a follower's fetch waits for."),
        _key("replica.fetch.wait.max.ms", INT, "500",
             "Longest wait of a follower's fetch; at most replica.lag.time.max.ms."),
        _key("replica.fetch.response.max.bytes", INT, "10485760", "Bytes a follower asks for per fetch.",
             AT_LEAST_0),
        _key("replica.fetch.backoff.ms", INT, "1000", "Pause after a follower's fetch fails.", AT_LEAST_0),
        _key("replica.socket.timeout.ms", INT, "30000",
             "Network timeout of follower fetches; at least replica.fetch.wait.max.ms."),
        _key("replica.high.watermark.checkpoint.interval.ms", LONG, "5000",
             "How often high watermarks are checkpointed to disk."),
        _key("num.replica.fetchers", INT, "1", "Fetcher tasks per source broker.", mode=CLUSTER_WIDE),
    ]),
    *_group("Consumer groups and offsets", [
        _key("offsets.topic.num.partitions", INT, "50", "Partitions of __consumer_offsets.", AT_LEAST_1),
        _key("offsets.topic.replication.factor", SHORT, "3",
             "Replication factor of __consumer_offsets; lowered (with a warning) to the live brokers when it is created.", AT_LEAST_1),
        _key("offsets.topic.segment.bytes", INT, "104857600", "Segment size of __consumer_offsets.", AT_LEAST_1),
        _key("offsets.retention.minutes", INT, "10080",
             "How long committed offsets of an empty group are kept.", AT_LEAST_1),
        _key("offsets.retention.check.interval.ms", LONG, "600000", "How often stale offsets are checked.",
             AT_LEAST_1),
        _key("offsets.commit.timeout.ms", INT, "5000",
             "How long an offset commit waits for __consumer_offsets replication.", AT_LEAST_1),
        _key("offset.metadata.max.bytes", INT, "4096", "Longest metadata string of a committed offset."),
        _key("group.initial.rebalance.delay.ms", INT, "3000",
             "How long a new group waits for more members before its first rebalance."),
        _key("group.min.session.timeout.ms", INT, "6000", "Shortest session timeout a member may ask for."),
        _key("group.max.session.timeout.ms", INT, "1800000", "Longest session timeout a member may ask for."),
        _key("group.max.size", INT, str(INT_MAX), "Most members in one group.", AT_LEAST_1),
    ]),
    *_group("Consumer groups (consumer rebalance protocol, KIP-848)", [
        _key("group.consumer.session.timeout.ms", INT, "45000",
             "How long a consumer-protocol member may go without a heartbeat before it is fenced.", AT_LEAST_1),
        _key("group.consumer.min.session.timeout.ms", INT, "45000",
             "Lower bound of group.consumer.session.timeout.ms.", AT_LEAST_1),
        _key("group.consumer.max.session.timeout.ms", INT, "60000",
             "Upper bound of group.consumer.session.timeout.ms.", AT_LEAST_1),
        _key("group.consumer.heartbeat.interval.ms", INT, "5000",
             "The heartbeat interval the coordinator gives consumer-protocol members.", AT_LEAST_1),
        _key("group.consumer.min.heartbeat.interval.ms", INT, "5000",
             "Lower bound of group.consumer.heartbeat.interval.ms.", AT_LEAST_1),
        _key("group.consumer.max.heartbeat.interval.ms", INT, "15000",
             "Upper bound of group.consumer.heartbeat.interval.ms.", AT_LEAST_1),
        _key("group.consumer.max.size", INT, str(INT_MAX), "Most members in one consumer-protocol group.",
             AT_LEAST_1),
        _key("group.consumer.assignors", LIST, "uniform,range",
             "Server-side assignors (uniform, range, or Kafka's class names of them); the first is used "
             "when members ask for none.", EachOneOf(CONSUMER_GROUP_ASSIGNORS)),
        _key("group.consumer.migration.policy", STRING, "bidirectional",
             "Online migration between the classic and the consumer protocol: upgrade turns a classic "
             "group into a consumer group when a consumer-protocol member joins; downgrade turns it back "
             "when the last one leaves; bidirectional does both.",
             OneOf(("disabled", "downgrade", "upgrade", "bidirectional"))),
    ]),
    *_group("Share groups (KIP-932)", [
        _key("group.share.session.timeout.ms", INT, "45000",
             "How long a share-group member may go without a heartbeat before it is removed.", AT_LEAST_1),
        _key("group.share.heartbeat.interval.ms", INT, "5000",
             "The heartbeat interval the coordinator gives share-group members.", AT_LEAST_1),
        _key("group.share.record.lock.duration.ms", INT, "30000",
             "How long a share consumer holds the acquisition lock of a record it fetched.", Range(1000, 3_600_000)),
        _key("group.share.delivery.count.limit", INT, "5",
             "Deliveries of a record before it is archived (and dead-lettered when the group says so).",
             Range(2, 10)),
        _key("group.share.partition.max.record.locks", INT, "2000",
             "Most in-flight records of one share-partition.", Range(100, 10_000)),
        _key("group.share.max.size", INT, "200", "Most members in one share group.", Range(1, 1000)),
        _key("share.coordinator.state.topic.num.partitions", INT, "50", "Partitions of __share_group_state.",
             AT_LEAST_1),
        _key("share.coordinator.state.topic.replication.factor", SHORT, "3",
             "Replication factor of __share_group_state (lowered to the live brokers).", AT_LEAST_1),
        _key("share.coordinator.state.topic.min.isr", SHORT, "2", "min.insync.replicas of __share_group_state.",
             AT_LEAST_1),
        _key("share.coordinator.state.topic.segment.bytes", INT, "104857600",
             "Segment size of __share_group_state.", AT_LEAST_1),
    ]),
    *_group("Transactions and producer ids", [
        _key("transaction.state.log.num.partitions", INT, "50", "Partitions of __transaction_state.", AT_LEAST_1),
        _key("transaction.state.log.replication.factor", SHORT, "3", "Replication factor of __transaction_state.",
             AT_LEAST_1),
        _key("transaction.state.log.min.isr", INT, "2", "min.insync.replicas of __transaction_state.", AT_LEAST_1),
        _key("transaction.state.log.segment.bytes", INT, "104857600", "Segment size of __transaction_state.",
             AT_LEAST_1),
        _key("transaction.max.timeout.ms", INT, "900000", "Longest transaction timeout a producer may ask for.",
             AT_LEAST_1),
        _key("transactional.id.expiration.ms", INT, "604800000",
             "A transactional id unused for this long is expired.", AT_LEAST_1),
        _key("transaction.abort.timed.out.transaction.cleanup.interval.ms", INT, "10000",
             "How often timed-out transactions are aborted.", AT_LEAST_1),
        _key("transaction.remove.expired.transaction.cleanup.interval.ms", INT, "3600000",
             "How often expired transactional ids are removed.", AT_LEAST_1),
        _key("producer.id.expiration.ms", INT, "86400000",
             "Idempotent producer state is dropped this long after the producer's last write.", AT_LEAST_1,
             CLUSTER_WIDE),
        _key("producer.id.expiration.check.interval.ms", INT, "600000",
             "How often expired producer ids are removed.", AT_LEAST_1),
    ]),
    *_group("Security", [
        _key("ssl.keystore.type", STRING, "JKS",
             "Format of the keystore: PEM (KIP-651, inline or in a file) or PKCS12; JKS files are refused.",
             OneOf(("JKS", "PKCS12", "PEM"))),
        _key("ssl.keystore.location", STRING, None, "Keystore file: PKCS12, or PEM holding the chain and the key."),
        _key("ssl.keystore.password", PASSWORD, None, "Password of the PKCS12 keystore file."),
        _key("ssl.key.password", PASSWORD, None, "Password of the private key (PKCS12, or an encrypted PEM key)."),
        _key("ssl.keystore.certificate.chain", PASSWORD, None,
             "PEM certificate chain given inline (ssl.keystore.type=PEM), leaf first."),
        _key("ssl.keystore.key", PASSWORD, None, "PEM private key given inline (ssl.keystore.type=PEM)."),
        _key("ssl.truststore.type", STRING, "JKS",
             "Format of the truststore: PEM or PKCS12; JKS files are refused.", OneOf(("JKS", "PKCS12", "PEM"))),
        _key("ssl.truststore.location", STRING, None, "Truststore file: PKCS12, or PEM CA certificates."),
        _key("ssl.truststore.password", PASSWORD, None, "Password of the PKCS12 truststore file."),
        _key("ssl.truststore.certificates", PASSWORD, None,
             "PEM CA certificates given inline (ssl.truststore.type=PEM)."),
        _key("ssl.client.auth", STRING, "none",
             "Client certificates on TLS listeners: required (mutual TLS), requested (used when given) or none.",
             OneOf(("required", "requested", "none"))),
        _key("ssl.enabled.protocols", LIST, "TLSv1.2,TLSv1.3", "TLS versions accepted.",
             EachOneOf(("TLSv1.2", "TLSv1.3"))),
        _key("ssl.protocol", STRING, "TLSv1.3", "Accepted for compatibility; ssl.enabled.protocols decides."),
        _key("ssl.cipher.suites", LIST, "",
             "TLS 1.2 cipher suites accepted, by IANA or OpenSSL name; empty means OpenSSL's defaults. "
             "TLS 1.3 suites are always OpenSSL's (all strong)."),
        _key("ssl.principal.mapping.rules", STRING, "DEFAULT",
             "Rules mapping a client certificate's distinguished name to a user name "
             "(DEFAULT or RULE:pattern/replacement/[LU], ...); DEFAULT keeps the whole DN."),
        _key("ssl.handshake.timeout.ms", LONG, "10000",
             "A TLS handshake not finished within this long closes the connection.", AT_LEAST_1,
             cormorant_only=True),
        _key("sasl.enabled.mechanisms", LIST, "GSSAPI",
             "SASL mechanisms offered on SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 "
             "(GSSAPI is not supported and must be replaced)."),
        _key("sasl.server.max.receive.size", INT, "524288",
             "Largest frame accepted from a client before it has authenticated.", AT_LEAST_1),
        _key("connection.failed.authentication.delay.ms", INT, "100",
             "How long a failed authentication waits before its answer and the close.", AT_LEAST_0),
        _key("sasl.oauthbearer.jwks.endpoint.url", STRING, None,
             "OAUTHBEARER: JWKS of the keys that sign valid tokens (file: or https: URL); unset means Kafka's "
             "unsecured validator (unsigned tokens, development only)."),
        _key("sasl.oauthbearer.expected.audience", LIST, "",
             "OAUTHBEARER: a token's aud must name one of these; empty skips the check."),
        _key("sasl.oauthbearer.expected.issuer", STRING, None,
             "OAUTHBEARER: a token's iss must be this; unset skips the check."),
        _key("sasl.oauthbearer.sub.claim.name", STRING, "sub", "OAUTHBEARER: the claim naming the principal."),
        _key("sasl.oauthbearer.scope.claim.name", STRING, "scope", "OAUTHBEARER: the claim holding the scopes."),
        _key("sasl.oauthbearer.clock.skew.seconds", INT, "30",
             "OAUTHBEARER: tolerated difference between the token issuer's clock and the broker's.", AT_LEAST_0),
        _key("ssl.endpoint.identification.algorithm", STRING, "https",
             "How this broker checks other brokers' certificates: https checks the host name, empty does not."),
        _key("sasl.mechanism.inter.broker.protocol", STRING, "GSSAPI",
             "SASL mechanism brokers authenticate to each other with (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)."),
        _key("sasl.mechanism.controller.protocol", STRING, "GSSAPI",
             "SASL mechanism brokers authenticate to controllers with (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)."),
        _key("controller.quorum.secret", PASSWORD, None,
             "Shared secret of the metadata quorum's voters: their own traffic is encrypted and authenticated "
             "with it (Fernet: AES-128 and HMAC-SHA256); required when a controller listener is not PLAINTEXT.",
             cormorant_only=True),
        _key("connections.max.reauth.ms", LONG, "0",
             "Lifetime of a SASL session (KIP-368): clients re-authenticate before it ends, and a connection "
             "whose session has ended is closed at its next request; 0 means sessions do not expire.",
             AT_LEAST_0),
    ]),
    # ---- Quotas, connection limits and the authorizer's audit log (issue 16): one block, to move as a whole.
    *_group("Quotas", [
        _key("quota.window.num", INT, "11", "Samples a client quota's rate is measured over.", AT_LEAST_1),
        _key("quota.window.size.seconds", INT, "1", "Length of each client quota sample.", AT_LEAST_1),
        _key("controller.quota.window.num", INT, "11",
             "Samples a controller mutation quota's token bucket is sized by (its burst is num - 1 windows).",
             AT_LEAST_1),
        _key("controller.quota.window.size.seconds", INT, "1",
             "Length of each controller mutation quota sample.", AT_LEAST_1),
        _key("max.connections.per.ip.overrides", STRING, "",
             "Per-IP or hostname overrides of max.connections.per.ip, as host:count,host:count.",
             Check(_check_connection_overrides, "host:count,... (count at least 0)"), CLUSTER_WIDE),
        _key("max.connection.creation.rate", INT, str(INT_MAX),
             "Most new connections the broker accepts per second (over quota.window.num windows); an "
             "acceptor over it waits before accepting more. listener.name.<l>.max.connection.creation.rate "
             "sets one listener's own bound; the inter-broker listener is bound only by its own.",
             AT_LEAST_0, CLUSTER_WIDE),
    ]),
    *_group("Audit", [
        _key("authorizer.audit.log.file", STRING, "",
             "File the authorizer's decisions are written to as JSON lines (kafka.authorizer.logger: every "
             "denial, every allowed create, delete, alter and alter-configs); empty writes them to the "
             "broker's own log.", cormorant_only=True),
        _key("authorizer.audit.log.max.bytes", LONG, "104857600",
             "Size at which the audit log file is rotated.", Range(min=1024), cormorant_only=True),
        _key("authorizer.audit.log.backup.count", INT, "10",
             "Rotated audit log files kept (file.1 ... file.N); the oldest is deleted.", AT_LEAST_1,
             cormorant_only=True),
    ]),
    # ---- end of the issue 16 block.
    *_group("Authorization", [
        _key("authorizer.class.name", STRING, "",
             "The authorizer: empty for none (every client may do everything, ACL APIs answer "
             "SECURITY_DISABLED), or org.apache.kafka.metadata.authorizer.StandardAuthorizer for ACLs "
             "kept in the metadata log.",
             OneOf(("", STANDARD_AUTHORIZER))),
        _key("super.users", STRING, None,
             "Principals allowed everything whatever the ACLs, separated by semicolons (User:admin;User:broker)."),
        _key("allow.everyone.if.no.acl.found", BOOLEAN, "false",
             "Whether an action on a resource no ACL names is allowed."),
    ]),
    *_group("Cormorant", [
        _key("metrics.listener", STRING, "127.0.0.1:9464",
             "Address of the Prometheus scrape endpoint; empty disables it.",
             Check(_check_host_port, "host:port, or empty"), cormorant_only=True),
        _key("log.format", STRING, "console", "Format of Cormorant's own log lines.", OneOf(("console", "json")),
             cormorant_only=True),
        _key("metrics.enabled", BOOLEAN, "true",
             "Record metrics (docs/metrics.md); false also turns off the scrape endpoint and OTLP metric export.",
             cormorant_only=True),
        _key("max.partitions.per.request", INT, "10000",
             "Most partitions one CreateTopics or CreatePartitions request (or one Metadata request's "
             "auto-created topics) may create: Kafka's controller writes at most 10,000 records for one "
             "request. A topic asking for more gets INVALID_PARTITIONS, topics past it in the request "
             "POLICY_VIOLATION, each with a message naming this setting.",
             AT_LEAST_1, cormorant_only=True),
        _key("max.partitions.per.broker", INT, "100000",
             "Most partition replicas one broker may host; a CreateTopics or CreatePartitions that would "
             "place more on a broker gets POLICY_VIOLATION naming this setting. The default is what one "
             "broker serves within 1 GB of memory (about 6 KB per idle partition).",
             AT_LEAST_1, cormorant_only=True),
        _key("event.loop.slow.step.ms", INT, "100",
             "An event-loop task step longer than this is logged (slow_task_step, with the stack it was "
             "running) and counted in cormorant.eventloop.slow_step.duration; 0 turns the watchdog off.",
             AT_LEAST_0, cormorant_only=True),
        _key("event.loop.stall.abort.ms", INT, "0",
             "A task step using more CPU time than this stops the broker (exit status 70) after it is logged, "
             "so that a stall fails the test that caused it; 0 never stops. Needs event.loop.slow.step.ms > 0.",
             AT_LEAST_0, cormorant_only=True),
        _key("tracing.sampling.ratio", DOUBLE, "0.0",
             "Fraction of produce, fetch, group and transaction requests traced with OpenTelemetry spans; "
             "0 turns tracing off. Spans are exported over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set.",
             Range(min=0.0, max=1.0), cormorant_only=True),
        _key("log.open.files.max", INT, "-1",
             "Most log segment and index files held open at once; the least recently used idle ones are "
             "closed to open others. -1 takes half of the open-file limit left after 128 reserved descriptors "
             "(the other half is for connections; docs/operations.md).",
             RangeOrValue(Range(min=16), -1), cormorant_only=True),
    ]),
]  # fmt: skip

BROKER_CONFIGS: Final[Mapping[str, ConfigKey]] = MappingProxyType(
    {key.name: key for key in _BROKER_KEYS}
)
"""Every broker setting Cormorant supports, by Kafka name, in documentation order."""


def _topic_key(
    name: str,
    config_type: ConfigType,
    default: str | None,
    broker_synonym: str | None,
    doc: str,
    validator: Validator | None = None,
    *,
    implemented: bool = True,
) -> ConfigKey:
    return ConfigKey(
        name=name,
        type=config_type,
        default=default,
        doc=doc,
        validator=validator,
        update_mode=UpdateMode.CLUSTER_WIDE,
        broker_synonym=broker_synonym,
        implemented=implemented,
    )


_TOPIC_KEYS: Final[list[ConfigKey]] = [
    _topic_key("cleanup.policy", LIST, "delete", "log.cleanup.policy",
               "delete removes old segments, compact keeps the latest record per key; both may be given.",
               EachOneOf(CLEANUP_POLICIES)),
    _topic_key("compression.gzip.level", INT, "-1", "compression.gzip.level", "gzip level when compression.type=gzip.",
               RangeOrValue(Range(1, 9), -1)),
    _topic_key("compression.lz4.level", INT, "9", "compression.lz4.level", "lz4 level when compression.type=lz4.",
               Range(1, 17)),
    _topic_key("compression.type", STRING, "producer", "compression.type",
               "Codec of stored batches; producer keeps whatever the producer used.", OneOf(COMPRESSION_TYPES)),
    _topic_key("compression.zstd.level", INT, "3", "compression.zstd.level", "zstd level when compression.type=zstd.",
               Range(-131072, 22)),
    _topic_key("delete.retention.ms", LONG, "86400000", "log.cleaner.delete.retention.ms",
               "How long tombstones stay readable on a compacted topic.", AT_LEAST_0),
    _topic_key("file.delete.delay.ms", LONG, "60000", "log.segment.delete.delay.ms",
               "Delay before a deleted segment's files are removed.", AT_LEAST_0),
    _topic_key("flush.messages", LONG, str(LONG_MAX), "log.flush.interval.messages",
               "Records appended before an fsync; the default leaves flushing to the OS.", AT_LEAST_1),
    _topic_key("flush.ms", LONG, str(LONG_MAX), "log.flush.interval.ms",
               "Milliseconds between fsyncs; the default leaves flushing to the OS.", AT_LEAST_0),
    _topic_key("follower.replication.throttled.replicas", LIST, "", None,
               "Replicas whose follower-side replication is throttled.", _THROTTLED_REPLICAS_VALIDATOR,
               implemented=False),
    _topic_key("index.interval.bytes", INT, "4096", "log.index.interval.bytes",
               "Bytes of records between offset-index entries.", AT_LEAST_0),
    _topic_key("leader.replication.throttled.replicas", LIST, "", None,
               "Replicas whose leader-side replication is throttled.", _THROTTLED_REPLICAS_VALIDATOR,
               implemented=False),
    _topic_key("local.retention.bytes", LONG, "-2", "log.local.retention.bytes",
               "Tiered storage only: local retention size; -2 means retention.bytes.", Range(min=-2),
               implemented=False),
    _topic_key("local.retention.ms", LONG, "-2", "log.local.retention.ms",
               "Tiered storage only: local retention time; -2 means retention.ms.", Range(min=-2), implemented=False),
    _topic_key("max.compaction.lag.ms", LONG, str(LONG_MAX), "log.cleaner.max.compaction.lag.ms",
               "Greatest time a record stays ineligible for compaction.", AT_LEAST_1),
    _topic_key("max.message.bytes", INT, "1048588", "message.max.bytes",
               "Largest record batch (after compression) the topic accepts.", AT_LEAST_0),
    _topic_key("message.downconversion.enable", BOOLEAN, "true", "log.message.downconversion.enable",
               "Whether fetches by old clients may be answered with down-converted batches."),
    _topic_key("message.format.version", STRING, "3.0-IV1", "log.message.format.version",
               "Deprecated and without effect since Kafka 3.0; accepted and validated.",
               _METADATA_VERSION_VALIDATOR, implemented=False),
    _topic_key("message.timestamp.after.max.ms", LONG, str(LONG_MAX), "log.message.timestamp.after.max.ms",
               "Largest amount a CreateTime timestamp may lie after the broker's clock.", AT_LEAST_0),
    _topic_key("message.timestamp.before.max.ms", LONG, str(LONG_MAX), "log.message.timestamp.before.max.ms",
               "Largest amount a CreateTime timestamp may lie before the broker's clock.", AT_LEAST_0),
    _topic_key("message.timestamp.difference.max.ms", LONG, str(LONG_MAX), "log.message.timestamp.difference.max.ms",
               "Deprecated: the before/after limit used when those two are unset.", AT_LEAST_0),
    _topic_key("message.timestamp.type", STRING, "CreateTime", "log.message.timestamp.type",
               "Record timestamps: the producer's (CreateTime) or the broker's (LogAppendTime).",
               OneOf(TIMESTAMP_TYPES)),
    _topic_key("min.cleanable.dirty.ratio", DOUBLE, "0.5", "log.cleaner.min.cleanable.ratio",
               "Dirty share of the log that makes it eligible for compaction.", Range(0, 1)),
    _topic_key("min.compaction.lag.ms", LONG, "0", "log.cleaner.min.compaction.lag.ms",
               "Least age of a record before it may be compacted.", AT_LEAST_0),
    _topic_key("min.insync.replicas", INT, "1", "min.insync.replicas",
               "Least number of in-sync replicas an acks=all produce needs.", AT_LEAST_1),
    _topic_key("preallocate", BOOLEAN, "false", "log.preallocate", "Preallocate segment files at their full size."),
    _topic_key("remote.log.copy.disable", BOOLEAN, "false", None,
               "Tiered storage only: stop copying segments to remote storage.", implemented=False),
    _topic_key("remote.log.delete.on.disable", BOOLEAN, "false", None,
               "Tiered storage only: delete remote data when tiering is turned off.", implemented=False),
    _topic_key("remote.storage.enable", BOOLEAN, "false", None,
               "Tiered storage; Cormorant has none, so only false is accepted.", implemented=False),
    _topic_key("retention.bytes", LONG, "-1", "log.retention.bytes",
               "Largest partition size before old segments are deleted; -1 means no limit."),
    _topic_key("retention.ms", LONG, "604800000", "log.retention.ms",
               "How long records are kept before their segment is deleted; -1 keeps them forever.", Range(min=-1)),
    _topic_key("segment.bytes", INT, "1073741824", "log.segment.bytes", "Size at which a segment is rolled.",
               Range(min=14)),
    _topic_key("segment.index.bytes", INT, "10485760", "log.index.size.max.bytes",
               "Largest offset or time index file of a segment.", Range(min=4)),
    _topic_key("segment.jitter.ms", LONG, "0", "log.roll.jitter.ms",
               "Random jitter subtracted from segment.ms so segments do not all roll at once.", AT_LEAST_0),
    _topic_key("segment.ms", LONG, "604800000", "log.roll.ms", "Time after which a segment is rolled even if not full.",
               AT_LEAST_1),
    _topic_key("unclean.leader.election.enable", BOOLEAN, "false", "unclean.leader.election.enable",
               "Whether an out-of-sync replica may become leader when no in-sync one is left, losing data."),
]  # fmt: skip

TOPIC_CONFIGS: Final[Mapping[str, ConfigKey]] = MappingProxyType(
    {key.name: key for key in _TOPIC_KEYS}
)
"""Every Kafka 3.9 topic setting, by name; each may carry the broker setting it defaults from."""

# Kafka 3.9 broker settings (its documented ones plus the internal ones it still
# accepts, and the standard authorizer's) that Cormorant accepts but ignores.
UNIMPLEMENTED_KAFKA_CONFIGS: Final[frozenset[str]] = frozenset((
    "alter.config.policy.class.name",
    "alter.log.dirs.replication.quota.window.num",
    "alter.log.dirs.replication.quota.window.size.seconds",
    "auto.include.jmx.reporter", "background.threads", "broker.id.generation.enable",
    "client.quota.callback.class",
    "control.plane.listener.name", "controlled.shutdown.enable",
    "controlled.shutdown.max.retries", "controlled.shutdown.retry.backoff.ms",
    "controller.quorum.append.linger.ms", "controller.quorum.bootstrap.servers",
    "controller.quorum.election.backoff.max.ms", "controller.quorum.election.timeout.ms",
    "controller.quorum.fetch.timeout.ms", "controller.quorum.request.timeout.ms",
    "controller.quorum.retry.backoff.ms", "controller.socket.timeout.ms",
    "create.topic.policy.class.name", "delegation.token.expiry.check.interval.ms",
    "delegation.token.expiry.time.ms", "delegation.token.master.key",
    "delegation.token.max.lifetime.ms", "delegation.token.secret.key",
    "delete.records.purgatory.purge.interval.requests", "early.start.listeners",
    "eligible.leader.replicas.enable", "fetch.purgatory.purge.interval.requests",
    "group.coordinator.append.linger.ms",
    "group.coordinator.new.enable", "group.coordinator.rebalance.protocols",
    "group.coordinator.threads", "group.share.enable", "group.share.max.groups",
    "group.share.max.heartbeat.interval.ms", "group.share.max.record.lock.duration.ms",
    "group.share.max.session.timeout.ms", "group.share.min.heartbeat.interval.ms",
    "group.share.min.record.lock.duration.ms", "group.share.min.session.timeout.ms", "inter.broker.protocol.version", "kafka.metrics.polling.interval.secs",
    "kafka.metrics.reporters", "log.dir.failure.timeout.ms", "log.initial.task.delay.ms",
    "max.request.partition.size.limit", "metadata.log.dir",
    "metadata.log.max.record.bytes.between.snapshots", "metadata.log.max.snapshot.interval.ms",
    "metadata.log.segment.bytes", "metadata.log.segment.min.bytes", "metadata.log.segment.ms",
    "metadata.max.idle.interval.ms", "metadata.max.retention.bytes", "metadata.max.retention.ms",
    "metric.reporters", "metrics.num.samples", "metrics.recording.level",
    "metrics.sample.window.ms", "num.replica.alter.log.dirs.threads",
    "offsets.commit.required.acks", "offsets.load.buffer.size", "offsets.topic.compression.codec",
    "password.encoder.cipher.algorithm", "password.encoder.iterations",
    "password.encoder.key.length", "password.encoder.keyfactory.algorithm",
    "password.encoder.old.secret", "password.encoder.secret", "principal.builder.class",
    "producer.purgatory.purge.interval.requests",
    "remote.fetch.max.wait.ms",
    "remote.log.index.file.cache.total.size.bytes", "remote.log.manager.copier.thread.pool.size",
    "remote.log.manager.copy.max.bytes.per.second", "remote.log.manager.copy.quota.window.num",
    "remote.log.manager.copy.quota.window.size.seconds",
    "remote.log.manager.expiration.thread.pool.size",
    "remote.log.manager.fetch.max.bytes.per.second", "remote.log.manager.fetch.quota.window.num",
    "remote.log.manager.fetch.quota.window.size.seconds", "remote.log.manager.task.interval.ms",
    "remote.log.manager.task.retry.backoff.max.ms", "remote.log.manager.task.retry.backoff.ms",
    "remote.log.manager.task.retry.jitter", "remote.log.manager.thread.pool.size",
    "remote.log.metadata.custom.metadata.max.bytes", "remote.log.metadata.manager.class.name",
    "remote.log.metadata.manager.class.path", "remote.log.metadata.manager.impl.prefix",
    "remote.log.metadata.manager.listener.name", "remote.log.reader.max.pending.tasks",
    "remote.log.reader.threads", "remote.log.storage.manager.class.name",
    "remote.log.storage.manager.class.path", "remote.log.storage.manager.impl.prefix",
    "remote.log.storage.system.enable", "replica.selector.class",
    "replica.socket.receive.buffer.bytes", "replication.quota.window.num",
    "replication.quota.window.size.seconds", "request.timeout.ms", "reserved.broker.max.id",
    "sasl.client.callback.handler.class", "sasl.jaas.config",
    "sasl.kerberos.kinit.cmd", "sasl.kerberos.min.time.before.relogin",
    "sasl.kerberos.principal.to.local.rules", "sasl.kerberos.service.name",
    "sasl.kerberos.ticket.renew.jitter", "sasl.kerberos.ticket.renew.window.factor",
    "sasl.login.callback.handler.class", "sasl.login.class", "sasl.login.connect.timeout.ms",
    "sasl.login.read.timeout.ms", "sasl.login.refresh.buffer.seconds",
    "sasl.login.refresh.min.period.seconds", "sasl.login.refresh.window.factor",
    "sasl.login.refresh.window.jitter", "sasl.login.retry.backoff.max.ms",
    "sasl.login.retry.backoff.ms",
    "sasl.oauthbearer.jwks.endpoint.refresh.ms",
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms",
    "sasl.oauthbearer.token.endpoint.url", "sasl.server.callback.handler.class",
    "security.providers", "server.max.startup.time.ms",
    "socket.connection.setup.timeout.max.ms", "socket.connection.setup.timeout.ms",
    "ssl.allow.dn.changes", "ssl.allow.san.changes",
    "ssl.engine.factory.class",
    "ssl.keymanager.algorithm",
    "ssl.provider",
    "ssl.secure.random.implementation", "ssl.trustmanager.algorithm",
    "telemetry.max.bytes",
    "transaction.partition.verification.enable", "transaction.state.log.load.buffer.size",
    "unclean.leader.election.interval.ms", "unstable.api.versions.enable",
    "unstable.feature.versions.enable", "zookeeper.clientCnxnSocket", "zookeeper.connect",
    "zookeeper.connection.timeout.ms", "zookeeper.max.in.flight.requests",
    "zookeeper.metadata.migration.enable", "zookeeper.metadata.migration.min.batch.size",
    "zookeeper.session.timeout.ms", "zookeeper.set.acl", "zookeeper.ssl.cipher.suites",
    "zookeeper.ssl.client.enable", "zookeeper.ssl.crl.enable", "zookeeper.ssl.enabled.protocols",
    "zookeeper.ssl.endpoint.identification.algorithm", "zookeeper.ssl.keystore.location",
    "zookeeper.ssl.keystore.password", "zookeeper.ssl.keystore.type", "zookeeper.ssl.ocsp.enable",
    "zookeeper.ssl.protocol", "zookeeper.ssl.truststore.location",
    "zookeeper.ssl.truststore.password", "zookeeper.ssl.truststore.type",
))  # fmt: skip

# Families of keys Kafka accepts under a prefix: per-listener overrides and the
# tiered-storage plugins' own settings.
UNIMPLEMENTED_KAFKA_PREFIXES: Final[tuple[str, ...]] = (
    "listener.name.",
    "rlmm.config.",
    "rsm.config.",
)


_JAAS_SUFFIX: Final = ".sasl.jaas.config"
#: Connection limits a listener may set for itself (listener.name.<l>.<key>), as Kafka's (issue 16 block).
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
    if (known is not None and known.group == "Security") or setting in PER_LISTENER_CONNECTION_KEYS or (
        setting.endswith(_JAAS_SUFFIX) and "." not in setting[: -len(_JAAS_SUFFIX)]
    ):
        return listener.upper(), setting
    return None


def is_known_unimplemented(key: str) -> bool:
    """Whether ``key`` is a Kafka broker setting Cormorant accepts without implementing it."""
    return key in UNIMPLEMENTED_KAFKA_CONFIGS or key.startswith(UNIMPLEMENTED_KAFKA_PREFIXES)


# --- properties files -------------------------------------------------------------------------

_PROPERTIES_WHITESPACE: Final = " \t\f"
_SIMPLE_ESCAPES: Final = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> Iterator[str]:
    # As java.util.Properties: leading blanks go, '#'/'!' lines are comments, and a
    # line ending in an odd number of backslashes continues on the next line (whose
    # leading blanks go too). A continued line is never a comment.
    natural = re.split(r"\r\n|\r|\n", text)
    index = 0
    while index < len(natural):
        line = natural[index].lstrip(_PROPERTIES_WHITESPACE)
        index += 1
        if not line or line[0] in "#!":
            continue
        pieces: list[str] = []
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1:
            pieces.append(line[:-1])
            if index >= len(natural):
                line = ""
                break
            line = natural[index].lstrip(_PROPERTIES_WHITESPACE)
            index += 1
        pieces.append(line)
        yield "".join(pieces)


def _unescape(text: str, line: str) -> str:
    out: list[str] = []
    position = 0
    while position < len(text):
        char = text[position]
        position += 1
        if char != "\\":
            out.append(char)
            continue
        if position >= len(text):
            break
        escaped = text[position]
        position += 1
        if escaped == "u":
            digits = text[position : position + 4]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise ConfigError(line, f"Malformed \\uxxxx encoding in properties line: {line!r}")
            out.append(chr(int(digits, 16)))
            position += 4
        else:
            out.append(_SIMPLE_ESCAPES.get(escaped, escaped))
    return "".join(out)


def _split_key_value(line: str) -> tuple[str, str]:
    # The key ends at the first unescaped '=', ':' or blank; then blanks and at most
    # one '=' or ':' separate it from the value, whose trailing blanks are kept.
    key_end = len(line)
    value_start = len(line)
    has_separator = False
    preceding_backslash = False
    for position, char in enumerate(line):
        if char in "=:" and not preceding_backslash:
            key_end, value_start, has_separator = position, position + 1, True
            break
        if char in _PROPERTIES_WHITESPACE and not preceding_backslash:
            key_end, value_start = position, position + 1
            break
        preceding_backslash = (not preceding_backslash) if char == "\\" else False
    while value_start < len(line):
        char = line[value_start]
        if char not in _PROPERTIES_WHITESPACE:
            if not has_separator and char in "=:":
                has_separator = True
            else:
                break
        value_start += 1
    return _unescape(line[:key_end], line), _unescape(line[value_start:], line)


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java properties-file text; a key given twice keeps its last value."""
    result: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split_key_value(line)
        result[key] = value
    return result


def read_properties_file(path: Path) -> dict[str, str]:
    """Read and parse a properties file.

    Java reads these files as ISO-8859-1; Cormorant reads UTF-8 so non-ASCII
    values mean what they say, and falls back to ISO-8859-1 for files that are not
    UTF-8 (which then read exactly as Java reads them).
    """
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("iso-8859-1")
    return parse_properties(text.removeprefix("\ufeff"))


def parse_overrides(overrides: Iterable[str]) -> dict[str, str]:
    """Parse ``--override`` items: ``key=value`` (split at the first '='); ``key`` alone is empty."""
    result: dict[str, str] = {}
    for item in overrides:
        key, _, value = item.partition("=")
        if not key:
            raise ConfigError(item, f"Invalid --override {item!r}: expected key=value")
        result[key] = value
    return result


# --- broker configuration ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Listener:
    """One listener: ``name://host:port``. An empty host means every interface; port 0, any free port."""

    name: str
    host: str
    port: int
    security_protocol: SecurityProtocol

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class QuorumVoter:
    """One voter of the metadata quorum, from controller.quorum.voters (``id@host:port``)."""

    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    """One setting that contributes to a reported value, in order of precedence."""

    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One setting as DescribeConfigs reports it."""

    name: str
    value: str | None
    source: ConfigSource
    is_sensitive: bool
    read_only: bool
    type: ConfigType
    documentation: str
    synonyms: tuple[ConfigSynonym, ...]


# Kafka's DynamicBrokerConfig.brokerConfigSynonyms: settings that share one value,
# highest precedence first. log.flush.scheduler.interval.ms only stands in for
# log.flush.interval.ms, not the other way round.
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


class _Values:
    """Typed reads of parsed values, so building BrokerConfig type-checks."""

    def __init__(self, values: Mapping[str, ConfigValue]) -> None:
        self._values = values

    def int_of(self, key: str) -> int:
        value = self._values[key]
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{key} is not an integer: {value!r}")
        return value

    def opt_int_of(self, key: str) -> int | None:
        return None if self._values[key] is None else self.int_of(key)

    def bool_of(self, key: str) -> bool:
        value = self._values[key]
        if not isinstance(value, bool):
            raise TypeError(f"{key} is not a boolean: {value!r}")
        return value

    def float_of(self, key: str) -> float:
        value = self._values[key]
        if not isinstance(value, float):
            raise TypeError(f"{key} is not a double: {value!r}")
        return value

    def str_of(self, key: str) -> str:
        value = self._values[key]
        if not isinstance(value, str):
            raise TypeError(f"{key} is not a string: {value!r}")
        return value

    def opt_str_of(self, key: str) -> str | None:
        return None if self._values[key] is None else self.str_of(key)

    def list_of(self, key: str) -> tuple[str, ...]:
        value = self._values[key]
        if not isinstance(value, tuple):
            raise TypeError(f"{key} is not a list: {value!r}")
        return value


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """The broker's validated configuration.

    Attributes are the Kafka settings with dots as underscores. A few hold the
    effective value Kafka derives rather than the setting itself: ``node_id``
    (node.id or broker.id), ``log_dirs`` (log.dirs or log.dir),
    ``log_retention_ms`` (ms, else minutes, else hours; any negative value is -1),
    ``log_roll_ms``/``log_roll_jitter_ms`` (ms, else hours), ``log_flush_interval_ms``
    (else log.flush.scheduler.interval.ms), ``advertised_listeners`` (else listeners,
    without controller listeners) and ``inter_broker_listener_name``. :meth:`get`
    returns any supported setting by its Kafka name as configured, for DescribeConfigs.
    """

    node_id: int
    process_roles: tuple[str, ...]
    controller_quorum_voters: tuple[QuorumVoter, ...]
    controller_listener_names: tuple[str, ...]
    cluster_id: str | None
    broker_rack: str | None
    broker_session_timeout_ms: int
    broker_heartbeat_interval_ms: int
    initial_broker_registration_timeout_ms: int

    listeners: tuple[Listener, ...]
    advertised_listeners: tuple[Listener, ...]
    listener_security_protocol_map: Mapping[str, SecurityProtocol]
    inter_broker_listener_name: str
    socket_request_max_bytes: int
    socket_send_buffer_bytes: int
    socket_receive_buffer_bytes: int
    socket_listen_backlog_size: int
    connections_max_idle_ms: int
    queued_max_request_bytes: int
    socket_request_read_timeout_ms: int
    queued_max_requests: int
    num_network_threads: int
    num_io_threads: int
    max_connections: int
    max_connections_per_ip: int
    fetch_max_bytes: int
    max_incremental_fetch_session_cache_slots: int

    log_dirs: tuple[Path, ...]
    num_partitions: int
    auto_create_topics_enable: bool
    default_replication_factor: int
    min_insync_replicas: int
    message_max_bytes: int
    log_retention_ms: int
    log_retention_bytes: int
    log_retention_check_interval_ms: int
    log_segment_bytes: int
    log_roll_ms: int
    log_roll_jitter_ms: int
    log_index_interval_bytes: int
    log_index_size_max_bytes: int
    log_flush_interval_messages: int
    log_flush_interval_ms: int
    log_flush_scheduler_interval_ms: int
    log_flush_offset_checkpoint_interval_ms: int
    log_flush_start_offset_checkpoint_interval_ms: int
    log_segment_delete_delay_ms: int
    log_cleanup_policy: tuple[str, ...]
    log_message_timestamp_type: str
    log_message_timestamp_before_max_ms: int
    log_message_timestamp_after_max_ms: int
    log_message_timestamp_difference_max_ms: int
    log_message_format_version: str
    log_message_downconversion_enable: bool
    log_preallocate: bool
    log_local_retention_ms: int
    log_local_retention_bytes: int
    num_recovery_threads_per_data_dir: int
    compression_type: str
    compression_gzip_level: int
    compression_lz4_level: int
    compression_zstd_level: int
    delete_topic_enable: bool
    quota_window_num: int
    quota_window_size_seconds: int
    # issue 16 block: connection limits, controller mutation quota window, audit log
    controller_quota_window_num: int
    controller_quota_window_size_seconds: int
    max_connections_per_ip_overrides: str
    max_connection_creation_rate: int
    authorizer_audit_log_file: str
    authorizer_audit_log_max_bytes: int
    authorizer_audit_log_backup_count: int
    authorizer_class_name: str
    super_users: frozenset[str]
    allow_everyone_if_no_acl_found: bool
    unclean_leader_election_enable: bool
    auto_leader_rebalance_enable: bool
    leader_imbalance_check_interval_seconds: int
    leader_imbalance_per_broker_percentage: int

    log_cleaner_enable: bool
    log_cleaner_threads: int
    log_cleaner_backoff_ms: int
    log_cleaner_dedupe_buffer_size: int
    log_cleaner_io_buffer_size: int
    log_open_files_max: int
    log_cleaner_io_buffer_load_factor: float
    log_cleaner_io_max_bytes_per_second: float
    log_cleaner_delete_retention_ms: int
    log_cleaner_min_cleanable_ratio: float
    log_cleaner_min_compaction_lag_ms: int
    log_cleaner_max_compaction_lag_ms: int

    replica_lag_time_max_ms: int
    replica_fetch_max_bytes: int
    replica_fetch_min_bytes: int
    replica_fetch_wait_max_ms: int
    replica_fetch_response_max_bytes: int
    replica_fetch_backoff_ms: int
    replica_socket_timeout_ms: int
    replica_high_watermark_checkpoint_interval_ms: int
    num_replica_fetchers: int

    offsets_topic_num_partitions: int
    offsets_topic_replication_factor: int
    offsets_topic_segment_bytes: int
    offsets_retention_minutes: int
    offsets_retention_check_interval_ms: int
    offsets_commit_timeout_ms: int
    offset_metadata_max_bytes: int
    group_initial_rebalance_delay_ms: int
    group_min_session_timeout_ms: int
    group_max_session_timeout_ms: int
    group_max_size: int

    group_consumer_session_timeout_ms: int
    group_consumer_min_session_timeout_ms: int
    group_consumer_max_session_timeout_ms: int
    group_consumer_heartbeat_interval_ms: int
    group_consumer_min_heartbeat_interval_ms: int
    group_consumer_max_heartbeat_interval_ms: int
    group_consumer_max_size: int
    #: by name (uniform, range), in the configured order
    group_consumer_assignors: tuple[str, ...]
    group_consumer_migration_policy: str

    group_share_session_timeout_ms: int
    group_share_heartbeat_interval_ms: int
    group_share_record_lock_duration_ms: int
    group_share_delivery_count_limit: int
    group_share_partition_max_record_locks: int
    group_share_max_size: int
    share_coordinator_state_topic_num_partitions: int
    share_coordinator_state_topic_replication_factor: int
    share_coordinator_state_topic_min_isr: int
    share_coordinator_state_topic_segment_bytes: int

    transaction_state_log_num_partitions: int
    transaction_state_log_replication_factor: int
    transaction_state_log_min_isr: int
    transaction_state_log_segment_bytes: int
    transaction_max_timeout_ms: int
    transactional_id_expiration_ms: int
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int
    transaction_remove_expired_transaction_cleanup_interval_ms: int
    producer_id_expiration_ms: int
    producer_id_expiration_check_interval_ms: int

    metrics_listener: HostPort | None
    log_format: str
    metrics_enabled: bool
    max_partitions_per_request: int
    max_partitions_per_broker: int
    event_loop_slow_step_ms: int
    event_loop_stall_abort_ms: int
    tracing_sampling_ratio: float

    raw: Mapping[str, str] = field(hash=False)
    """Every key given (file then overrides), with its original string."""
    values: Mapping[str, ConfigValue] = field(hash=False, repr=False)
    """Typed value of every supported setting, explicit or default."""

    @property
    def is_broker(self) -> bool:
        return "broker" in self.process_roles

    @property
    def is_controller(self) -> bool:
        return "controller" in self.process_roles

    def get(self, key: str) -> ConfigValue:
        """The typed value of a supported setting by its Kafka name; KeyError if unsupported."""
        if key not in BROKER_CONFIGS:
            raise KeyError(key)
        return self.values[key]

    def for_listener(self, listener: str, key: str) -> ConfigValue:
        """A security setting as the listener sees it: ``listener.name.<listener>.<key>`` over ``key``."""
        override = self.raw.get(f"listener.name.{listener.lower()}.{key}")
        return self.get(key) if override is None else BROKER_CONFIGS[key].parse(override)

    def jaas_config(self, listener: str, mechanism: str) -> str | None:
        """``listener.name.<listener>.<mechanism>.sasl.jaas.config``, as Kafka's brokers read it."""
        return self.raw.get(f"listener.name.{listener.lower()}.{mechanism.lower()}{_JAAS_SUFFIX}")

    def is_set(self, key: str) -> bool:
        """Whether the setting was given (in the file or an override) rather than defaulted."""
        if key in ("node.id", "broker.id"):
            # Kafka copies whichever of the two is given into the other.
            return "node.id" in self.raw or "broker.id" in self.raw
        return key in self.raw

    def source(self, key: str) -> ConfigSource:
        """Where the reported value of a supported setting comes from."""
        return self.describe_entry(key).source

    def static_value(self, key: str) -> str | None:
        """A supported setting's value as configured, or as derived from its synonym
        (node.id and broker.id, as Kafka's populateSynonyms) or its default."""
        config_key = BROKER_CONFIGS[key]
        if key in self.raw:
            return self.raw[key]
        return format_value(config_key.type, self.values[key])

    def synonyms(self, key: str) -> list[ConfigSynonym]:
        """The settings behind ``key``'s reported value, as DescribeConfigs lists them.

        As Kafka's ConfigHelper: settings given explicitly, then defaults, each in
        synonym order, dropping the entries that come before ``key`` itself.
        """
        names = broker_synonyms(key)
        found: list[ConfigSynonym] = []
        for name in names:
            if self.is_set(name):
                found.append(
                    ConfigSynonym(name, self.static_value(name), ConfigSource.STATIC_BROKER_CONFIG)
                )
        for name in names:
            default = format_value(BROKER_CONFIGS[name].type, BROKER_CONFIGS[name].default_value)
            if default is not None:
                found.append(ConfigSynonym(name, default, ConfigSource.DEFAULT_CONFIG))
        while found and found[0].name != key:
            found.pop(0)
        if BROKER_CONFIGS[key].is_sensitive:
            found = [ConfigSynonym(s.name, None, s.source) for s in found]
        return found

    def describe_entry(self, key: str) -> ConfigEntry:
        """A supported setting as DescribeConfigs reports it for this broker."""
        config_key = BROKER_CONFIGS[key]
        synonyms = self.synonyms(key)
        return ConfigEntry(
            name=key,
            value=None if config_key.is_sensitive else self.static_value(key),
            source=synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
            is_sensitive=config_key.is_sensitive,
            read_only=config_key.read_only,
            type=config_key.type,
            documentation=config_key.doc,
            synonyms=tuple(synonyms),
        )

    def describe(self, keys: Iterable[str] | None = None) -> list[ConfigEntry]:
        """DescribeConfigs entries for ``keys`` (default: every supported setting)."""
        return [self.describe_entry(key) for key in (BROKER_CONFIGS if keys is None else keys)]

    def with_dynamic(
        self, dynamic_broker: Mapping[str, str], dynamic_default: Mapping[str, str]
    ) -> BrokerConfig:
        """This configuration with the dynamic log settings in force.

        Key by key, per-broker beats cluster default beats static; values are then
        derived as at start-up, so a static ``log.retention.ms`` still beats a dynamic
        ``log.retention.hours``, as in Kafka. Raises ConfigError if the result is
        invalid, topic defaults included. Returns ``self`` when no dynamic log setting
        is set.
        """
        per_broker, default = dynamic_log_layers(dynamic_broker, dynamic_default)
        if not per_broker and not default:
            return self
        config, _ = build_config({**self.raw, **default, **per_broker})
        TopicConfig.resolve(config, {})  # topic defaults that contradict each other
        return config


def broker_synonym_chain(
    config: BrokerConfig,
    key: str,
    dynamic_broker: Mapping[str, str],
    dynamic_default: Mapping[str, str],
) -> list[ConfigSynonym]:
    """Kafka's ConfigHelper.configSynonyms for a broker setting.

    Each layer in precedence order (dynamic per-broker, dynamic cluster default,
    static, default), each listing the synonyms that are set; then everything
    before ``key`` itself is dropped (a synonym of higher precedence that is set
    is reported on its own entry).
    """
    names = broker_synonyms(key) if key in BROKER_CONFIGS else (key,)
    chain: list[ConfigSynonym] = []
    for layer, source in ((dynamic_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
                          (dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)):
        chain.extend(ConfigSynonym(n, layer[n], source) for n in names if n in layer)
    chain.extend(
        ConfigSynonym(n, config.static_value(n), ConfigSource.STATIC_BROKER_CONFIG) for n in names if config.is_set(n)
    )
    for n in names:
        spec = BROKER_CONFIGS.get(n)
        if spec is not None:
            default = format_value(spec.type, spec.default_value)
            if default is not None:
                chain.append(ConfigSynonym(n, default, ConfigSource.DEFAULT_CONFIG))
    while chain and chain[0].name != key:
        chain.pop(0)
    return chain


def _close_match(key: str) -> str | None:
    known = [*BROKER_CONFIGS, *UNIMPLEMENTED_KAFKA_CONFIGS]
    matches = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return matches[0] if matches else None


def _unknown_key_error(key: str) -> ConfigError:
    suggestion = _close_match(key)
    message = f"Unknown configuration '{key}'"
    if suggestion is not None:
        message += f"; did you mean '{suggestion}'?"
    elif key in TOPIC_CONFIGS:
        message += "; it is a topic setting (set it on the topic, or use its log.* broker default)"
    return ConfigError(key, message)


_LISTENER_RE: Final = re.compile(r"(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)")


def _csv(text: str | None) -> list[str]:
    # Kafka's Csv.parseCsvList: split at commas with surrounding blanks, drop empties.
    if not text:
        return []
    return [item for item in _LIST_SEPARATOR_RE.split(text.strip()) if item]


def _parse_security_protocol_map(text: str) -> dict[str, SecurityProtocol]:
    key = "listener.security.protocol.map"
    result: dict[str, SecurityProtocol] = {}
    for entry in _csv(text):
        name, colon, protocol = entry.rpartition(":")
        if not colon or not name.strip():
            raise _invalid(key, text, f"entry {entry!r} is not NAME:PROTOCOL")
        try:
            result[name.strip().upper()] = SecurityProtocol(protocol.strip().upper())
        except ValueError:
            raise ConfigError(
                key, f"Invalid security protocol `{protocol.strip()}` defined in {key}"
            ) from None
    return result


def _parse_listeners(
    key: str, text: str, protocols: Mapping[str, SecurityProtocol], distinct_ports: bool
) -> tuple[Listener, ...]:
    listeners: list[Listener] = []
    for entry in _csv(text):
        match = _LISTENER_RE.fullmatch(entry)
        if match is None:
            raise _invalid(key, text, f"Unable to parse {entry} to a broker endpoint")
        name = match.group(1).strip().upper()
        if not name:
            raise _invalid(key, text, "The provided listener name is null or empty string")
        protocol = protocols.get(name)
        if protocol is None:
            raise _invalid(key, text, f"No security protocol defined for listener {name}")
        listeners.append(
            Listener(name, match.group(2), _port(key, match.group(3), entry), protocol)
        )
    names = [listener.name for listener in listeners]
    if len(set(names)) != len(names):
        raise _invalid(key, text, f"Each listener must have a different name, listeners: {text}")
    if distinct_ports:
        _check_distinct_ports(key, text, listeners)
    return tuple(listeners)


def _ip_version(host: str) -> int | None:
    try:
        return ipaddress.ip_address(host.split("%")[0]).version
    except ValueError:
        return None


def _check_distinct_ports(key: str, text: str, listeners: list[Listener]) -> None:
    # Port 0 may repeat (each gets its own ephemeral port); otherwise a port may be
    # shared only by exactly one IPv4 and one IPv6 literal address, as in Kafka.
    by_port: dict[int, list[Listener]] = {}
    for listener in listeners:
        if listener.port != 0:
            by_port.setdefault(listener.port, []).append(listener)
    for port, sharing in by_port.items():
        if len(sharing) == 1:
            continue
        versions = sorted(_ip_version(listener.host) or 0 for listener in sharing)
        if versions != [4, 6]:
            raise _invalid(
                key,
                text,
                f"Each listener must have a different port unless exactly one has an IPv4 "
                f"and the other an IPv6 address, port: {port}",
            )


def _parse_voters(text: tuple[str, ...]) -> tuple[QuorumVoter, ...]:
    key = "controller.quorum.voters"
    voters: list[QuorumVoter] = []
    for entry in text:
        node, at, address = entry.partition("@")
        match = _HOST_PORT_RE.fullmatch(address) if at and "@" not in address else None
        if match is None or not _INTEGER_RE.fullmatch(node.strip()) or not match.group(1):
            raise _invalid(
                key, ",".join(text), f"entry {entry!r} is not in the form {{id}}@{{host}}:{{port}}"
            )
        host = match.group(1)
        if host == "0.0.0.0":
            raise _invalid(key, ",".join(text), f"Host string ({host}) is not routeable")
        voters.append(QuorumVoter(int(node), host, _port(key, match.group(2), entry)))
    ids = [voter.node_id for voter in voters]
    if len(set(ids)) != len(ids):
        raise _invalid(key, ",".join(text), "a node id appears more than once")
    return tuple(voters)


def _require(condition: bool, key: str, message: str) -> None:
    if not condition:
        raise ConfigError(key, message)


def _effective_protocol_map(
    raw: Mapping[str, str], values: _Values, controller_names: tuple[str, ...]
) -> dict[str, SecurityProtocol]:
    protocols = _parse_security_protocol_map(values.str_of("listener.security.protocol.map"))
    if "listener.security.protocol.map" in raw:
        return protocols
    # As Kafka in KRaft mode: with the default map, controller listener names map to
    # PLAINTEXT unless some listener already uses TLS or SASL.
    listener_names = [
        entry.split(":", 1)[0].strip().upper() for entry in _csv(values.str_of("listeners"))
    ]
    secured = {"SSL", "SASL_PLAINTEXT", "SASL_SSL"}
    if secured.isdisjoint(controller_names) and secured.isdisjoint(listener_names):
        for name in controller_names:
            protocols.setdefault(name, SecurityProtocol.PLAINTEXT)
    return protocols


@dataclass(frozen=True, slots=True)
class _Network:
    protocols: dict[str, SecurityProtocol]
    listeners: tuple[Listener, ...]
    advertised_listeners: tuple[Listener, ...]
    inter_broker_listener_name: str


def _resolve_network(
    raw: Mapping[str, str], values: _Values, controller_names: tuple[str, ...]
) -> _Network:
    protocols = _effective_protocol_map(raw, values, controller_names)
    listeners = _parse_listeners(
        "listeners", values.str_of("listeners"), protocols, distinct_ports=True
    )
    advertised_text = values.opt_str_of("advertised.listeners")
    advertised_all = (
        listeners
        if advertised_text is None
        else _parse_listeners(
            "advertised.listeners", advertised_text, protocols, distinct_ports=False
        )
    )
    for listener in advertised_all:
        _require(
            listener.host != "0.0.0.0",
            "advertised.listeners",
            "advertised.listeners cannot use the nonroutable meta-address 0.0.0.0. Use a routable IP address.",
        )

    inter_broker_name = values.opt_str_of("inter.broker.listener.name")
    if inter_broker_name is not None:
        _require(
            "security.inter.broker.protocol" not in raw,
            "inter.broker.listener.name",
            "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set.",
        )
        inter_broker_name = inter_broker_name.upper()
        _require(
            bool(inter_broker_name),
            "inter.broker.listener.name",
            "The provided listener name is null or empty string",
        )
        _require(
            inter_broker_name in protocols,
            "inter.broker.listener.name",
            f"Listener with name {inter_broker_name} defined in inter.broker.listener.name not found in "
            "listener.security.protocol.map.",
        )
    else:
        inter_broker_name = values.str_of("security.inter.broker.protocol")
    return _Network(
        protocols=protocols,
        listeners=listeners,
        # Clients are never told about controller listeners.
        advertised_listeners=tuple(
            listener for listener in advertised_all if listener.name not in controller_names
        ),
        inter_broker_listener_name=inter_broker_name,
    )


def _check_roles(
    process_roles: tuple[str, ...],
    node_id: int,
    voters: tuple[QuorumVoter, ...],
    controller_names: tuple[str, ...],
    network: _Network,
) -> None:
    # Kafka's KRaft checks (KafkaConfig.validateValues), with one relaxation: a
    # node running the controller role may leave controller.listener.names empty,
    # because Cormorant's quorum does not need a Kafka listener of its own.
    is_broker = "broker" in process_roles
    is_controller = "controller" in process_roles
    voter_ids = {voter.node_id for voter in voters}
    listener_names = {listener.name for listener in network.listeners}
    if is_controller:
        _require(
            not voters or node_id in voter_ids,
            "controller.quorum.voters",
            f"If process.roles contains the 'controller' role, the node id {node_id} must be included in "
            f"the set of voters controller.quorum.voters={sorted(voter_ids)}",
        )
        _require(
            all(name in listener_names for name in controller_names),
            "controller.listener.names",
            "controller.listener.names must only contain values appearing in the 'listeners' configuration "
            "when running the KRaft controller role",
        )
    if is_controller and not is_broker:
        _require(
            bool(controller_names),
            "controller.listener.names",
            "controller.listener.names must contain at least one value appearing in the 'listeners' "
            "configuration when running the KRaft controller role",
        )
        _require(
            listener_names <= set(controller_names),
            "listeners",
            "The listeners config must only contain KRaft controller listeners from "
            "controller.listener.names when process.roles=controller",
        )
    if is_broker and not is_controller:
        _require(
            bool(voters),
            "controller.quorum.voters",
            "A broker-only node needs controller.quorum.voters to find the controllers",
        )
        _require(
            node_id not in voter_ids,
            "controller.quorum.voters",
            f"If process.roles contains just the 'broker' role, the node id {node_id} must not be included "
            f"in the set of voters controller.quorum.voters={sorted(voter_ids)}",
        )
        _require(
            bool(controller_names),
            "controller.listener.names",
            "controller.listener.names must contain at least one value when running KRaft with just the broker role",
        )
        _require(
            not set(controller_names) & listener_names,
            "controller.listener.names",
            "controller.listener.names must not contain a value appearing in the 'listeners' configuration "
            "when running KRaft with just the broker role",
        )
        for name in controller_names:
            _require(
                name in network.protocols,
                "controller.listener.names",
                f"Controller listener with name {name} defined in controller.listener.names not found in "
                "listener.security.protocol.map",
            )
    if is_broker:
        advertised_names = {listener.name for listener in network.advertised_listeners}
        _require(
            bool(advertised_names),
            "advertised.listeners",
            "There must be at least one broker advertised listener. Perhaps all listeners appear in "
            "controller.listener.names?",
        )
        _require(
            network.inter_broker_listener_name in advertised_names,
            "inter.broker.listener.name",
            "inter.broker.listener.name must be a listener name defined in advertised.listeners. The valid "
            f"options based on currently configured listeners are {','.join(sorted(advertised_names))}",
        )
        _require(
            advertised_names <= listener_names,
            "advertised.listeners",
            "advertised.listeners listener names must be equal to or a subset of the ones defined in "
            f"listeners. Found {','.join(sorted(advertised_names))}. The valid options based on the current "
            f"configuration are {','.join(sorted(listener_names))}",
        )


def _check_limits(raw: Mapping[str, str], values: _Values) -> None:
    # Kafka's checks that tie one setting to another.
    session_ms = values.int_of("group.consumer.session.timeout.ms")
    heartbeat_ms = values.int_of("group.consumer.heartbeat.interval.ms")
    for key, value, low, high in (
        ("group.consumer.session.timeout.ms", session_ms, "group.consumer.min.session.timeout.ms",
         "group.consumer.max.session.timeout.ms"),
        ("group.consumer.heartbeat.interval.ms", heartbeat_ms, "group.consumer.min.heartbeat.interval.ms",
         "group.consumer.max.heartbeat.interval.ms"),
    ):
        _require(values.int_of(low) <= value, key, f"{key} must be greater than or equal to {low}")
        _require(value <= values.int_of(high), key, f"{key} must be less than or equal to {high}")
    _require(heartbeat_ms < session_ms, "group.consumer.heartbeat.interval.ms",
             "group.consumer.heartbeat.interval.ms must be less than group.consumer.session.timeout.ms")
    _require(bool(values.list_of("group.consumer.assignors")), "group.consumer.assignors",
             "group.consumer.assignors must contain at least one assignor")
    cleaner_threads = values.int_of("log.cleaner.threads")
    _require(
        cleaner_threads == 0
        or values.int_of("log.cleaner.dedupe.buffer.size") // cleaner_threads > 1024 * 1024,
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.dedupe.buffer.size must be at least 1MB per cleaner thread.",
    )
    fetch_wait_ms = values.int_of("replica.fetch.wait.max.ms")
    _require(
        fetch_wait_ms <= values.int_of("replica.socket.timeout.ms"),
        "replica.socket.timeout.ms",
        "replica.socket.timeout.ms should always be at least replica.fetch.wait.max.ms to prevent "
        "unnecessary socket timeouts",
    )
    _require(
        fetch_wait_ms <= values.int_of("replica.lag.time.max.ms"),
        "replica.fetch.wait.max.ms",
        "replica.fetch.wait.max.ms should always be less than or equal to replica.lag.time.max.ms to "
        "prevent frequent changes in ISR",
    )
    _require(
        values.int_of("max.connections.per.ip") != 0
        or bool(raw.get("max.connections.per.ip.overrides", "").strip()),
        "max.connections.per.ip",
        "max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides property is set.",
    )


def build_config(raw: Mapping[str, str]) -> tuple[BrokerConfig, list[str]]:
    """Validate ``raw`` settings (already merged) into a BrokerConfig, plus warnings."""
    warnings: list[str] = []
    for key in raw:
        if key in BROKER_CONFIGS:
            continue
        override = listener_override(key)
        if override is not None:
            if override[1] in BROKER_CONFIGS:
                BROKER_CONFIGS[override[1]].parse(raw[key])
            continue
        if is_known_unimplemented(key):
            warnings.append(
                f"Kafka setting '{key}' is accepted but not implemented by Cormorant; it has no effect"
            )
            continue
        raise _unknown_key_error(key)

    parsed: dict[str, ConfigValue] = {}
    for name, config_key in BROKER_CONFIGS.items():
        parsed[name] = config_key.parse(raw[name] if name in raw else config_key.default)

    # node.id and broker.id name the same thing; Kafka copies the one given into the other.
    if "node.id" not in raw and "broker.id" in raw:
        parsed["node.id"] = parsed["broker.id"]
    elif "broker.id" in raw and parsed["broker.id"] != parsed["node.id"]:
        raise ConfigError("node.id", "You must set `node.id` to the same value as `broker.id`.")
    parsed["broker.id"] = parsed["node.id"]
    values = _Values(parsed)
    node_id = values.int_of("node.id")
    _require(
        node_id >= 0,
        "node.id",
        f"Invalid value {node_id} for configuration node.id: must be at least 0",
    )

    process_roles = values.list_of("process.roles")
    _require(
        bool(process_roles),
        "process.roles",
        "process.roles must name broker, controller or both; Cormorant has no ZooKeeper mode",
    )
    _require(
        len(set(process_roles)) == len(process_roles),
        "process.roles",
        f"Duplicate role names found in process.roles: {','.join(process_roles)}",
    )

    voters = _parse_voters(values.list_of("controller.quorum.voters"))
    controller_names = tuple(
        name.upper() for name in _csv(values.opt_str_of("controller.listener.names"))
    )
    network = _resolve_network(raw, values, controller_names)
    _check_roles(process_roles, node_id, voters, controller_names, network)

    log_dirs_text = values.opt_str_of("log.dirs")
    log_dirs = tuple(
        Path(item)
        for item in _csv(log_dirs_text if log_dirs_text is not None else values.str_of("log.dir"))
    )
    _require(
        bool(log_dirs),
        "log.dirs",
        "At least one log directory must be defined via log.dirs or log.dir.",
    )

    retention_key, retention_ms = _retention_ms(values)
    _require(
        retention_ms >= 1 or retention_ms == -1,
        retention_key,
        "log.retention.ms must be unlimited (-1) or, greater than or equal to 1",
    )
    roll_ms = _ms_or_hours(values, "log.roll.ms", "log.roll.hours")
    _require(roll_ms >= 1, "log.roll.ms", "log.roll.ms must be greater than or equal to 1")
    roll_jitter_ms = _ms_or_hours(values, "log.roll.jitter.ms", "log.roll.jitter.hours")
    _require(
        roll_jitter_ms >= 0,
        "log.roll.jitter.ms",
        "log.roll.jitter.ms must be greater than or equal to 0",
    )
    flush_interval_ms = values.opt_int_of("log.flush.interval.ms")
    if flush_interval_ms is None:
        flush_interval_ms = values.int_of("log.flush.scheduler.interval.ms")
    _check_limits(raw, values)

    config = BrokerConfig(
        node_id=node_id,
        process_roles=process_roles,
        controller_quorum_voters=voters,
        controller_listener_names=controller_names,
        cluster_id=values.opt_str_of("cluster.id"),
        broker_rack=values.opt_str_of("broker.rack"),
        broker_session_timeout_ms=values.int_of("broker.session.timeout.ms"),
        broker_heartbeat_interval_ms=values.int_of("broker.heartbeat.interval.ms"),
        initial_broker_registration_timeout_ms=values.int_of(
            "initial.broker.registration.timeout.ms"
        ),
        listeners=network.listeners,
        advertised_listeners=network.advertised_listeners,
        listener_security_protocol_map=MappingProxyType(network.protocols),
        inter_broker_listener_name=network.inter_broker_listener_name,
        socket_request_max_bytes=values.int_of("socket.request.max.bytes"),
        socket_send_buffer_bytes=values.int_of("socket.send.buffer.bytes"),
        socket_receive_buffer_bytes=values.int_of("socket.receive.buffer.bytes"),
        socket_listen_backlog_size=values.int_of("socket.listen.backlog.size"),
        connections_max_idle_ms=values.int_of("connections.max.idle.ms"),
        queued_max_request_bytes=values.int_of("queued.max.request.bytes"),
        socket_request_read_timeout_ms=values.int_of("socket.request.read.timeout.ms"),
        queued_max_requests=values.int_of("queued.max.requests"),
        num_network_threads=values.int_of("num.network.threads"),
        num_io_threads=values.int_of("num.io.threads"),
        max_connections=values.int_of("max.connections"),
        max_connections_per_ip=values.int_of("max.connections.per.ip"),
        fetch_max_bytes=values.int_of("fetch.max.bytes"),
        max_incremental_fetch_session_cache_slots=values.int_of(
            "max.incremental.fetch.session.cache.slots"
        ),
        log_dirs=log_dirs,
        num_partitions=values.int_of("num.partitions"),
        auto_create_topics_enable=values.bool_of("auto.create.topics.enable"),
        default_replication_factor=values.int_of("default.replication.factor"),
        min_insync_replicas=values.int_of("min.insync.replicas"),
        message_max_bytes=values.int_of("message.max.bytes"),
        log_retention_ms=retention_ms,
        log_retention_bytes=values.int_of("log.retention.bytes"),
        log_retention_check_interval_ms=values.int_of("log.retention.check.interval.ms"),
        log_segment_bytes=values.int_of("log.segment.bytes"),
        log_roll_ms=roll_ms,
        log_roll_jitter_ms=roll_jitter_ms,
        log_index_interval_bytes=values.int_of("log.index.interval.bytes"),
        log_index_size_max_bytes=values.int_of("log.index.size.max.bytes"),
        log_flush_interval_messages=values.int_of("log.flush.interval.messages"),
        log_flush_interval_ms=flush_interval_ms,
        log_flush_scheduler_interval_ms=values.int_of("log.flush.scheduler.interval.ms"),
        log_flush_offset_checkpoint_interval_ms=values.int_of(
            "log.flush.offset.checkpoint.interval.ms"
        ),
        log_flush_start_offset_checkpoint_interval_ms=values.int_of(
            "log.flush.start.offset.checkpoint.interval.ms"
        ),
        log_segment_delete_delay_ms=values.int_of("log.segment.delete.delay.ms"),
        log_cleanup_policy=values.list_of("log.cleanup.policy"),
        log_message_timestamp_type=values.str_of("log.message.timestamp.type"),
        log_message_timestamp_before_max_ms=values.int_of("log.message.timestamp.before.max.ms"),
        log_message_timestamp_after_max_ms=values.int_of("log.message.timestamp.after.max.ms"),
        log_message_timestamp_difference_max_ms=values.int_of(
            "log.message.timestamp.difference.max.ms"
        ),
        log_message_format_version=values.str_of("log.message.format.version"),
        log_message_downconversion_enable=values.bool_of("log.message.downconversion.enable"),
        log_preallocate=values.bool_of("log.preallocate"),
        log_local_retention_ms=values.int_of("log.local.retention.ms"),
        log_local_retention_bytes=values.int_of("log.local.retention.bytes"),
        num_recovery_threads_per_data_dir=values.int_of("num.recovery.threads.per.data.dir"),
        compression_type=values.str_of("compression.type"),
        compression_gzip_level=values.int_of("compression.gzip.level"),
        compression_lz4_level=values.int_of("compression.lz4.level"),
        compression_zstd_level=values.int_of("compression.zstd.level"),
        delete_topic_enable=values.bool_of("delete.topic.enable"),
        quota_window_num=values.int_of("quota.window.num"),
        quota_window_size_seconds=values.int_of("quota.window.size.seconds"),
        controller_quota_window_num=values.int_of("controller.quota.window.num"),
        controller_quota_window_size_seconds=values.int_of("controller.quota.window.size.seconds"),
        max_connections_per_ip_overrides=values.str_of("max.connections.per.ip.overrides"),
        max_connection_creation_rate=values.int_of("max.connection.creation.rate"),
        authorizer_audit_log_file=values.str_of("authorizer.audit.log.file"),
        authorizer_audit_log_max_bytes=values.int_of("authorizer.audit.log.max.bytes"),
        authorizer_audit_log_backup_count=values.int_of("authorizer.audit.log.backup.count"),
        authorizer_class_name=values.str_of("authorizer.class.name"),
        super_users=frozenset(p.strip() for p in (values.opt_str_of("super.users") or "").split(";") if p.strip()),
        allow_everyone_if_no_acl_found=values.bool_of("allow.everyone.if.no.acl.found"),
        unclean_leader_election_enable=values.bool_of("unclean.leader.election.enable"),
        auto_leader_rebalance_enable=values.bool_of("auto.leader.rebalance.enable"),
        leader_imbalance_check_interval_seconds=values.int_of(
            "leader.imbalance.check.interval.seconds"
        ),
        leader_imbalance_per_broker_percentage=values.int_of(
            "leader.imbalance.per.broker.percentage"
        ),
        log_cleaner_enable=values.bool_of("log.cleaner.enable"),
        log_cleaner_threads=values.int_of("log.cleaner.threads"),
        log_cleaner_backoff_ms=values.int_of("log.cleaner.backoff.ms"),
        log_cleaner_dedupe_buffer_size=values.int_of("log.cleaner.dedupe.buffer.size"),
        log_cleaner_io_buffer_size=values.int_of("log.cleaner.io.buffer.size"),
        log_open_files_max=values.int_of("log.open.files.max"),
        log_cleaner_io_buffer_load_factor=values.float_of("log.cleaner.io.buffer.load.factor"),
        log_cleaner_io_max_bytes_per_second=values.float_of("log.cleaner.io.max.bytes.per.second"),
        log_cleaner_delete_retention_ms=values.int_of("log.cleaner.delete.retention.ms"),
        log_cleaner_min_cleanable_ratio=values.float_of("log.cleaner.min.cleanable.ratio"),
        log_cleaner_min_compaction_lag_ms=values.int_of("log.cleaner.min.compaction.lag.ms"),
        log_cleaner_max_compaction_lag_ms=values.int_of("log.cleaner.max.compaction.lag.ms"),
        replica_lag_time_max_ms=values.int_of("replica.lag.time.max.ms"),
        replica_fetch_max_bytes=values.int_of("replica.fetch.max.bytes"),
        replica_fetch_min_bytes=values.int_of("replica.fetch.min.bytes"),
        replica_fetch_wait_max_ms=values.int_of("replica.fetch.wait.max.ms"),
        replica_fetch_response_max_bytes=values.int_of("replica.fetch.response.max.bytes"),
        replica_fetch_backoff_ms=values.int_of("replica.fetch.backoff.ms"),
        replica_socket_timeout_ms=values.int_of("replica.socket.timeout.ms"),
        replica_high_watermark_checkpoint_interval_ms=values.int_of(
            "replica.high.watermark.checkpoint.interval.ms"
        ),
        num_replica_fetchers=values.int_of("num.replica.fetchers"),
        offsets_topic_num_partitions=values.int_of("offsets.topic.num.partitions"),
        offsets_topic_replication_factor=values.int_of("offsets.topic.replication.factor"),
        offsets_topic_segment_bytes=values.int_of("offsets.topic.segment.bytes"),
        offsets_retention_minutes=values.int_of("offsets.retention.minutes"),
        offsets_retention_check_interval_ms=values.int_of("offsets.retention.check.interval.ms"),
        offsets_commit_timeout_ms=values.int_of("offsets.commit.timeout.ms"),
        offset_metadata_max_bytes=values.int_of("offset.metadata.max.bytes"),
        group_initial_rebalance_delay_ms=values.int_of("group.initial.rebalance.delay.ms"),
        group_min_session_timeout_ms=values.int_of("group.min.session.timeout.ms"),
        group_max_session_timeout_ms=values.int_of("group.max.session.timeout.ms"),
        group_max_size=values.int_of("group.max.size"),
        group_consumer_session_timeout_ms=values.int_of("group.consumer.session.timeout.ms"),
        group_consumer_min_session_timeout_ms=values.int_of("group.consumer.min.session.timeout.ms"),
        group_consumer_max_session_timeout_ms=values.int_of("group.consumer.max.session.timeout.ms"),
        group_consumer_heartbeat_interval_ms=values.int_of("group.consumer.heartbeat.interval.ms"),
        group_consumer_min_heartbeat_interval_ms=values.int_of("group.consumer.min.heartbeat.interval.ms"),
        group_consumer_max_heartbeat_interval_ms=values.int_of("group.consumer.max.heartbeat.interval.ms"),
        group_consumer_max_size=values.int_of("group.consumer.max.size"),
        group_consumer_assignors=tuple(dict.fromkeys(
            CONSUMER_GROUP_ASSIGNOR_CLASSES.get(a, a) for a in values.list_of("group.consumer.assignors"))),
        group_consumer_migration_policy=values.str_of("group.consumer.migration.policy"),
        group_share_session_timeout_ms=values.int_of("group.share.session.timeout.ms"),
        group_share_heartbeat_interval_ms=values.int_of("group.share.heartbeat.interval.ms"),
        group_share_record_lock_duration_ms=values.int_of("group.share.record.lock.duration.ms"),
        group_share_delivery_count_limit=values.int_of("group.share.delivery.count.limit"),
        group_share_partition_max_record_locks=values.int_of("group.share.partition.max.record.locks"),
        group_share_max_size=values.int_of("group.share.max.size"),
        share_coordinator_state_topic_num_partitions=values.int_of("share.coordinator.state.topic.num.partitions"),
        share_coordinator_state_topic_replication_factor=values.int_of(
            "share.coordinator.state.topic.replication.factor"),
        share_coordinator_state_topic_min_isr=values.int_of("share.coordinator.state.topic.min.isr"),
        share_coordinator_state_topic_segment_bytes=values.int_of("share.coordinator.state.topic.segment.bytes"),
        transaction_state_log_num_partitions=values.int_of("transaction.state.log.num.partitions"),
        transaction_state_log_replication_factor=values.int_of(
            "transaction.state.log.replication.factor"
        ),
        transaction_state_log_min_isr=values.int_of("transaction.state.log.min.isr"),
        transaction_state_log_segment_bytes=values.int_of("transaction.state.log.segment.bytes"),
        transaction_max_timeout_ms=values.int_of("transaction.max.timeout.ms"),
        transactional_id_expiration_ms=values.int_of("transactional.id.expiration.ms"),
        transaction_abort_timed_out_transaction_cleanup_interval_ms=values.int_of(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms"
        ),
        transaction_remove_expired_transaction_cleanup_interval_ms=values.int_of(
            "transaction.remove.expired.transaction.cleanup.interval.ms"
        ),
        producer_id_expiration_ms=values.int_of("producer.id.expiration.ms"),
        producer_id_expiration_check_interval_ms=values.int_of(
            "producer.id.expiration.check.interval.ms"
        ),
        metrics_listener=_parse_host_port("metrics.listener", values.str_of("metrics.listener")),
        log_format=values.str_of("log.format"),
        metrics_enabled=values.bool_of("metrics.enabled"),
        max_partitions_per_request=values.int_of("max.partitions.per.request"),
        max_partitions_per_broker=values.int_of("max.partitions.per.broker"),
        event_loop_slow_step_ms=values.int_of("event.loop.slow.step.ms"),
        event_loop_stall_abort_ms=values.int_of("event.loop.stall.abort.ms"),
        tracing_sampling_ratio=values.float_of("tracing.sampling.ratio"),
        raw=MappingProxyType(dict(raw)),
        values=MappingProxyType(parsed),
    )
    return config, warnings


def _retention_ms(values: _Values) -> tuple[str, int]:
    # Kafka: log.retention.ms beats log.retention.minutes beats log.retention.hours;
    # any negative result means unlimited (-1). Also returns the key that decided.
    millis = values.opt_int_of("log.retention.ms")
    key = "log.retention.ms"
    if millis is None:
        minutes = values.opt_int_of("log.retention.minutes")
        if minutes is not None:
            millis, key = minutes * _MS_PER_MINUTE, "log.retention.minutes"
        else:
            millis, key = values.int_of("log.retention.hours") * _MS_PER_HOUR, "log.retention.hours"
    return key, -1 if millis < 0 else millis


def _ms_or_hours(values: _Values, ms_key: str, hours_key: str) -> int:
    millis = values.opt_int_of(ms_key)
    return millis if millis is not None else values.int_of(hours_key) * _MS_PER_HOUR


def load_config(
    properties_path: Path | None, overrides: list[str]
) -> tuple[BrokerConfig, list[str]]:
    """Read ``properties_path`` (if any), apply ``--override key=value`` items on top, validate.

    Returns the configuration and one warning per accepted-but-unimplemented Kafka
    setting. Raises ConfigError for an unknown key, a bad value or an inconsistent
    combination, and OSError if the file cannot be read.
    """
    raw: dict[str, str] = {}
    if properties_path is not None:
        raw.update(read_properties_file(properties_path))
    raw.update(parse_overrides(overrides))
    return build_config(raw)


def default_config() -> BrokerConfig:
    """The configuration with every setting at its default."""
    return build_config({})[0]


# --- topic configuration ----------------------------------------------------------------------


def _topic_default(broker: BrokerConfig, config_key: ConfigKey) -> ConfigValue:
    # As Kafka's KafkaConfig.extractLogConfigMap: derived broker values for the
    # settings with synonyms, the broker setting itself otherwise.
    synonym = config_key.broker_synonym
    if synonym is None:
        return config_key.default_value
    derived: dict[str, int] = {
        "log.retention.ms": broker.log_retention_ms,
        "log.roll.ms": broker.log_roll_ms,
        "log.roll.jitter.ms": broker.log_roll_jitter_ms,
        "log.flush.interval.ms": broker.log_flush_interval_ms,
    }
    if synonym in derived:
        return derived[synonym]
    return broker.get(synonym)


def validate_topic_overrides(overrides: Mapping[str, str | None]) -> dict[str, ConfigValue]:
    """Check names and values of topic-level overrides; returns them typed.

    Raises ConfigError (Kafka answers INVALID_CONFIG) for a null value, an unknown
    name or an invalid value. Checks that involve several settings need the broker
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
    """One topic's effective settings: its overrides on top of the broker's defaults.

    Attributes are the topic settings with dots as underscores, as configured;
    the properties below give the values Kafka derives from them.
    """

    cleanup_policy: tuple[str, ...]
    compression_gzip_level: int
    compression_lz4_level: int
    compression_type: str
    compression_zstd_level: int
    delete_retention_ms: int
    file_delete_delay_ms: int
    flush_messages: int
    flush_ms: int
    follower_replication_throttled_replicas: tuple[str, ...]
    index_interval_bytes: int
    leader_replication_throttled_replicas: tuple[str, ...]
    local_retention_bytes: int
    local_retention_ms: int
    max_compaction_lag_ms: int
    max_message_bytes: int
    message_downconversion_enable: bool
    message_format_version: str
    message_timestamp_after_max_ms: int
    message_timestamp_before_max_ms: int
    message_timestamp_difference_max_ms: int
    message_timestamp_type: str
    min_cleanable_dirty_ratio: float
    min_compaction_lag_ms: int
    min_insync_replicas: int
    preallocate: bool
    remote_log_copy_disable: bool
    remote_log_delete_on_disable: bool
    remote_storage_enable: bool
    retention_bytes: int
    retention_ms: int
    segment_bytes: int
    segment_index_bytes: int
    segment_jitter_ms: int
    segment_ms: int
    unclean_leader_election_enable: bool

    overrides: Mapping[str, str] = field(hash=False)
    """The topic-level settings given, as strings."""
    values: Mapping[str, ConfigValue] = field(hash=False, repr=False)
    """Effective typed value of every topic setting."""
    broker: BrokerConfig = field(hash=False, repr=False, compare=False)

    @classmethod
    def resolve(cls, broker: BrokerConfig, overrides: Mapping[str, str | None]) -> TopicConfig:
        """Validate ``overrides`` and combine them with ``broker``'s defaults; raises ConfigError."""
        typed = validate_topic_overrides(overrides)
        values: dict[str, ConfigValue] = {
            name: typed[name] if name in typed else _topic_default(broker, config_key)
            for name, config_key in TOPIC_CONFIGS.items()
        }
        read = _Values(values)
        min_lag = read.int_of("min.compaction.lag.ms")
        max_lag = read.int_of("max.compaction.lag.ms")
        _require(
            min_lag <= max_lag,
            "min.compaction.lag.ms",
            f"conflict topic config setting min.compaction.lag.ms ({min_lag}) > max.compaction.lag.ms ({max_lag})",
        )
        _require(
            not read.bool_of("remote.storage.enable"),
            "remote.storage.enable",
            "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote "
            "log storage.",
        )
        strings = {name: str(value) for name, value in overrides.items() if value is not None}
        return cls(
            cleanup_policy=read.list_of("cleanup.policy"),
            compression_gzip_level=read.int_of("compression.gzip.level"),
            compression_lz4_level=read.int_of("compression.lz4.level"),
            compression_type=read.str_of("compression.type"),
            compression_zstd_level=read.int_of("compression.zstd.level"),
            delete_retention_ms=read.int_of("delete.retention.ms"),
            file_delete_delay_ms=read.int_of("file.delete.delay.ms"),
            flush_messages=read.int_of("flush.messages"),
            flush_ms=read.int_of("flush.ms"),
            follower_replication_throttled_replicas=read.list_of(
                "follower.replication.throttled.replicas"
            ),
            index_interval_bytes=read.int_of("index.interval.bytes"),
            leader_replication_throttled_replicas=read.list_of(
                "leader.replication.throttled.replicas"
            ),
            local_retention_bytes=read.int_of("local.retention.bytes"),
            local_retention_ms=read.int_of("local.retention.ms"),
            max_compaction_lag_ms=max_lag,
            max_message_bytes=read.int_of("max.message.bytes"),
            message_downconversion_enable=read.bool_of("message.downconversion.enable"),
            message_format_version=read.str_of("message.format.version"),
            message_timestamp_after_max_ms=read.int_of("message.timestamp.after.max.ms"),
            message_timestamp_before_max_ms=read.int_of("message.timestamp.before.max.ms"),
            message_timestamp_difference_max_ms=read.int_of("message.timestamp.difference.max.ms"),
            message_timestamp_type=read.str_of("message.timestamp.type"),
            min_cleanable_dirty_ratio=read.float_of("min.cleanable.dirty.ratio"),
            min_compaction_lag_ms=min_lag,
            min_insync_replicas=read.int_of("min.insync.replicas"),
            preallocate=read.bool_of("preallocate"),
            remote_log_copy_disable=read.bool_of("remote.log.copy.disable"),
            remote_log_delete_on_disable=read.bool_of("remote.log.delete.on.disable"),
            remote_storage_enable=read.bool_of("remote.storage.enable"),
            retention_bytes=read.int_of("retention.bytes"),
            retention_ms=read.int_of("retention.ms"),
            segment_bytes=read.int_of("segment.bytes"),
            segment_index_bytes=read.int_of("segment.index.bytes"),
            segment_jitter_ms=read.int_of("segment.jitter.ms"),
            segment_ms=read.int_of("segment.ms"),
            unclean_leader_election_enable=read.bool_of("unclean.leader.election.enable"),
            overrides=MappingProxyType(strings),
            values=MappingProxyType(values),
            broker=broker,
        )

    @property
    def compact(self) -> bool:
        """Whether the cleaner compacts this topic."""
        return "compact" in (policy.lower() for policy in self.cleanup_policy)

    @property
    def delete(self) -> bool:
        """Whether old segments are deleted by time or size."""
        return "delete" in (policy.lower() for policy in self.cleanup_policy)

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
        """How long a segment may stay active: compaction lag bounds it on compacted topics."""
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms

    def get(self, key: str) -> ConfigValue:
        """The effective typed value of a topic setting by its Kafka name."""
        if key not in TOPIC_CONFIGS:
            raise KeyError(key)
        return self.values[key]

    def source(self, key: str) -> ConfigSource:
        """Where the value of a topic setting comes from."""
        return self.describe_entry(key).source

    def describe_entry(
        self, key: str, broker_synonyms_of: Callable[[str], list[ConfigSynonym]] | None = None
    ) -> ConfigEntry:
        """A topic setting as DescribeConfigs reports it.

        ``broker_synonyms_of`` gives the broker setting's synonym chain when dynamic
        broker settings are in play (default: the broker configuration's own).
        """
        config_key = TOPIC_CONFIGS[key]
        synonyms: list[ConfigSynonym] = []
        value = format_value(config_key.type, self.values[key])
        if key in self.overrides:
            synonyms.append(ConfigSynonym(key, value, ConfigSource.DYNAMIC_TOPIC_CONFIG))
        if config_key.broker_synonym is not None:
            chain = broker_synonyms_of or self.broker.synonyms
            synonyms.extend(chain(config_key.broker_synonym))
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
        self,
        keys: Iterable[str] | None = None,
        broker_synonyms_of: Callable[[str], list[ConfigSynonym]] | None = None,
    ) -> list[ConfigEntry]:
        """DescribeConfigs entries for ``keys`` (default: every topic setting, by name)."""
        return [
            self.describe_entry(key, broker_synonyms_of)
            for key in (sorted(TOPIC_CONFIGS) if keys is None else keys)
        ]


# --- documentation ----------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default_cell(config_key: ConfigKey) -> str:
    if config_key.default is None:
        shown = "(unset)"
    elif config_key.default == "":
        shown = '""'
    else:
        shown = f"`{config_key.default}`"
    if config_key.kafka_default is not None:
        shown += f" (Kafka: `{config_key.kafka_default}`)"
    return shown


def render_configuration_markdown() -> str:
    """docs/configuration.md, generated from the catalogs so it cannot drift from them."""
    lines: list[str] = [
        "# Configuration",
        "",
        "<!-- Generated by scripts/gen_config_docs.py from broker/config.py; do not edit. -->",
        "",
        "`cormorant serve [server.properties] [--override key=value ...]` reads Apache Kafka's",
        "broker settings, with Kafka 3.9's names, types, defaults and validation, so a",
        "`server.properties` written for Kafka works unchanged. The file uses Java",
        "properties syntax (`#`/`!` comments, `key=value`, `key: value` or `key value`,",
        "backslash continuations and escapes). Each `--override` is applied on top of the",
        "file, in order; `--override key` alone sets an empty value.",
        "",
        "* A setting listed below is validated and used.",
        "* A Kafka setting Cormorant does not implement (last section) is accepted, with",
        "  one warning naming it, and has no effect.",
        "* Any other key stops startup with an error that names the closest known key.",
        "",
        "Defaults are Kafka's unless marked; \"(unset)\" is Kafka's null. Update mode is",
        "Kafka's: DescribeConfigs reports a setting as read-only only when it is `read-only`.",
        "",
        "## Broker settings",
    ]
    current_group = None
    for config_key in BROKER_CONFIGS.values():
        if config_key.group != current_group:
            current_group = config_key.group
            lines += [
                "",
                f"### {current_group}",
                "",
                "| Name | Type | Default | Valid values | Update mode | Description |",
                "| --- | --- | --- | --- | --- | --- |",
            ]
        valid = config_key.validator.describe() if config_key.validator is not None else ""
        description = config_key.doc + (" (Cormorant only.)" if config_key.cormorant_only else "")
        lines.append(
            f"| `{config_key.name}` | {config_key.type.type_name} | {_cell(_default_cell(config_key))} "
            f"| {_cell(valid)} | {config_key.update_mode.value} | {_cell(description)} |"
        )
    lines += [
        "",
        "Derived values, as in Kafka: `log.retention.ms` beats `log.retention.minutes`, which",
        "beats `log.retention.hours`, and any negative result means keep forever (-1);",
        "`log.roll.ms` beats `log.roll.hours` and `log.roll.jitter.ms` beats",
        "`log.roll.jitter.hours`; an unset `log.flush.interval.ms` means",
        "`log.flush.scheduler.interval.ms`; an unset `log.dirs` means `log.dir`; `node.id`",
        "and `broker.id` must agree, and either supplies the other. With",
        "`listener.security.protocol.map` unset, the names in `controller.listener.names` map",
        "to PLAINTEXT unless a listener uses TLS or SASL. An empty `controller.quorum.voters`",
        "on a node that runs the controller role means a quorum of that node alone.",
        "",
        "## Topic settings",
        "",
        "Set per topic with CreateTopics or AlterConfigs. A topic setting that is not set",
        "takes its value from the broker setting named in the second column (or, without",
        "one, the default shown). Those broker settings can also be changed at run time",
        "with AlterConfigs or IncrementalAlterConfigs on the broker resource, for one broker",
        "(its id) or for all (\"\", the cluster default; `kafka-configs --entity-default`):",
        "running logs and new topics take the new value at once, one broker's own setting",
        "beating the cluster default, which beats the file. DescribeConfigs reports each",
        "topic setting with its source: the topic (DYNAMIC_TOPIC_CONFIG), this broker's",
        "dynamic setting (DYNAMIC_BROKER_CONFIG), the cluster default",
        "(DYNAMIC_DEFAULT_BROKER_CONFIG), the broker's file or overrides",
        "(STATIC_BROKER_CONFIG) or the default (DEFAULT_CONFIG).",
        "",
        "| Name | Broker default from | Type | Default | Valid values | Description |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for config_key in TOPIC_CONFIGS.values():
        valid = config_key.validator.describe() if config_key.validator is not None else ""
        synonym = f"`{config_key.broker_synonym}`" if config_key.broker_synonym else ""
        description = config_key.doc + (
            "" if config_key.implemented else " (No effect in Cormorant.)"
        )
        lines.append(
            f"| `{config_key.name}` | {synonym} | {config_key.type.type_name} | {_cell(_default_cell(config_key))} "
            f"| {_cell(valid)} | {_cell(description)} |"
        )
    lines += [
        "",
        "## Kafka settings accepted but not implemented",
        "",
        "These Kafka 3.9 broker settings are accepted so that existing files keep working;",
        "each one given produces a single warning and has no effect. So do keys starting with",
        ", ".join(f"`{prefix}`" for prefix in UNIMPLEMENTED_KAFKA_PREFIXES) + ".",
        "",
    ]
    lines += [f"- `{name}`" for name in sorted(UNIMPLEMENTED_KAFKA_CONFIGS)]
    lines.append("")
    return "\n".join(lines)
