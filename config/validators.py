"""Validators of setting values, as Kafka's ``ConfigDef`` validators check them.

Each names the setting and the value in Kafka's ``ConfigException`` wording, which
clients show to users verbatim.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from config.listeners import parse_host_port, parse_voters
from config.types import ConfigError, ConfigValue, invalid


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
            raise invalid(key, value, f"Value must be at least {self.min}")
        if self.max is not None and number > self.max:
            raise invalid(key, value, f"Value must be no more than {self.max}")

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
            raise invalid(key, value, reason) from None

    def describe(self) -> str:
        return f"{self.range.describe()} or {self.value}"


@dataclass(frozen=True, slots=True)
class OneOf:
    """A string that must be one of ``choices``, case-sensitively (``ValidString``)."""

    choices: tuple[str, ...]

    def check(self, key: str, value: ConfigValue) -> None:
        if value not in self.choices:
            raise invalid(key, value, f"String must be one of: {', '.join(self.choices)}")

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
                raise invalid(key, item, f"String must be one of: {', '.join(self.choices)}")

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
        raise invalid(key, text, f"Version {text} is not a valid version")


METADATA_VERSION_VALIDATOR: Final = Check(
    _check_metadata_version,
    f"a Kafka version from {METADATA_VERSIONS[0]} to {METADATA_VERSIONS[-1]}, such as 2.8 or 3.0-IV1",
)

_THROTTLED_REPLICA_RE: Final = re.compile(r"([0-9]+:[0-9]+)?")


def _check_throttled_replicas(key: str, value: ConfigValue) -> None:
    items = [item.strip() for item in value] if isinstance(value, tuple) else []
    if "".join(items) == "*" or all(_THROTTLED_REPLICA_RE.fullmatch(item) for item in items):
        return
    raise invalid(
        key,
        ",".join(items),
        f"{key} must be the literal '*' or a list of replicas in the following format: "
        "[partitionId]:[brokerId],[partitionId]:[brokerId],...",
    )


THROTTLED_REPLICAS_VALIDATOR: Final = Check(
    _check_throttled_replicas, "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
)


# Kafka's Uuid string form: 16 bytes as URL-safe base64, normally without padding.
_UUID_RE: Final = re.compile(r"[A-Za-z0-9_-]{22}(?:==)?")


def check_cluster_id(key: str, value: ConfigValue) -> None:
    if not _UUID_RE.fullmatch(str(value)):
        raise invalid(
            key, value, "expected a 22-character base64 UUID, as kafka-storage random-uuid prints"
        )


def check_voters(key: str, value: ConfigValue) -> None:
    if isinstance(value, tuple):
        parse_voters(value)


def check_host_port(key: str, value: ConfigValue) -> None:
    parse_host_port(key, str(value))
