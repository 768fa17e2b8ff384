"""The vocabulary of settings: types, sources, values, one key of the catalog.

Parsing and formatting follow Kafka's ``ConfigDef`` (``parseType`` and
``convertToString``), so values read and print as Kafka's do.
"""

from __future__ import annotations

import decimal
import enum
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Protocol

INT_MAX: Final = 2**31 - 1
LONG_MAX: Final = 2**63 - 1
DOUBLE_MAX: Final = 1.7976931348623157e308


class ConfigError(ValueError):
    """A setting that cannot be accepted; ``key`` names it."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key
        self.message = message


def invalid(key: str, value: object, reason: str) -> ConfigError:
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


@dataclass(frozen=True, slots=True)
class Password:
    """A secret setting; its repr never shows the value, so it cannot leak into logs."""

    value: str

    def __repr__(self) -> str:
        return "[hidden]"

    __str__ = __repr__


ConfigValue = bool | int | float | str | tuple[str, ...] | Password | None


class Validator(Protocol):
    """Checks a parsed, non-null value; ``describe`` is the "valid values" text for docs."""

    def check(self, key: str, value: ConfigValue) -> None: ...

    def describe(self) -> str: ...


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
        value = parse_typed(self.name, self.type, raw)
        if self.validator is not None and value is not None:
            self.validator.check(self.name, value)
        return value

    @property
    def default_value(self) -> ConfigValue:
        """The typed default."""
        return self.parse(self.default)


INTEGER_RE: Final = re.compile(r"[+-]?[0-9]+")
_DOUBLE_RE: Final = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)"
)
LIST_SEPARATOR_RE: Final = re.compile(r"\s*,\s*")
INTEGER_BITS: Final = {ConfigType.SHORT: 16, ConfigType.INT: 32, ConfigType.LONG: 64}


def parse_typed(key: str, config_type: ConfigType, raw: str) -> ConfigValue:
    # Mirrors ConfigDef.parseType: values are trimmed, numbers are Java-style and range-checked.
    text = raw.strip()
    if config_type is ConfigType.BOOLEAN:
        lowered = text.lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        raise invalid(key, raw, "Expected value to be either true or false")
    if config_type in INTEGER_BITS:
        bits = INTEGER_BITS[config_type]
        if INTEGER_RE.fullmatch(text):
            number = int(text)
            if -(2 ** (bits - 1)) <= number < 2 ** (bits - 1):
                return number
        raise invalid(key, raw, f"Not a number of type {config_type.name}")
    if config_type is ConfigType.DOUBLE:
        if _DOUBLE_RE.fullmatch(text):
            # Java allows a trailing type letter ("1.5d"); Python's float does not.
            return float(text[:-1] if text[-1] in "fFdD" else text)
        raise invalid(key, raw, "Not a number of type DOUBLE")
    if config_type is ConfigType.LIST:
        return () if not text else tuple(LIST_SEPARATOR_RE.split(text))
    if config_type is ConfigType.PASSWORD:
        return Password(text)
    return text


def java_double(value: float) -> str:
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
        return java_double(float(value))
    return str(value)



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


class TypedValues:
    """Typed reads of parsed values, so derived settings type-check."""

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
