"""Client metrics subscriptions (config resource type CLIENT_METRICS, 16; KIP-714), as Kafka's
ClientMetricsConfigs: what a subscription may set, how values are checked, and how its
``match`` selectors are read.

A subscription is a named set of ConfigRecords of type CLIENT_METRICS in the metadata log,
checked by the broker and again by the controller that writes them (like group configs):

- ``metrics``: metric-name prefixes the matched clients are asked to push (``*``: all of
  them; empty: none);
- ``interval.ms``: the push interval, 100 ... 3600000 (default 300000);
- ``match``: ``selector=regex`` items, all of which must match (a regex matches a whole
  value) for a client to be subscribed; none: every client. Selectors: client_instance_id,
  client_id, client_software_name, client_software_version, client_source_address,
  client_source_port. Regexes are RE2's, as KIP-848's topic regexes: the values they are
  matched against come from clients, and RE2 matches in linear time (backreferences and
  lookaround, which it refuses, are a bad match item).

Errors are Kafka's: an unknown key or an interval out of bounds is INVALID_REQUEST; a value
that does not parse, a list with an item twice or an empty item (KIP-1161) or a bad match
item is INVALID_CONFIG.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import re2

METRICS = "metrics"
INTERVAL_MS = "interval.ms"
MATCH = "match"
#: Every subscription config, in Kafka's definition order.
NAMES = (METRICS, INTERVAL_MS, MATCH)
#: ``metrics`` naming every metric.
ALL_METRICS = "*"
DEFAULT_INTERVAL_MS = 300_000
MIN_INTERVAL_MS = 100
MAX_INTERVAL_MS = 3_600_000
CLIENT_INSTANCE_ID = "client_instance_id"
CLIENT_ID = "client_id"
CLIENT_SOFTWARE_NAME = "client_software_name"
CLIENT_SOFTWARE_VERSION = "client_software_version"
CLIENT_SOURCE_ADDRESS = "client_source_address"
CLIENT_SOURCE_PORT = "client_source_port"
SELECTORS = frozenset({CLIENT_INSTANCE_ID, CLIENT_ID, CLIENT_SOFTWARE_NAME, CLIENT_SOFTWARE_VERSION,
                       CLIENT_SOURCE_ADDRESS, CLIENT_SOURCE_PORT})
#: Which settings are lists (APPEND and SUBTRACT apply to them).
LIST_NAMES = frozenset({METRICS, MATCH})
_LIST_SPLIT = re.compile(r"\s*,\s*")


class ClientMetricsConfigError(ValueError):
    """A refused subscription: ``invalid_request`` (else INVALID_CONFIG) and Kafka's message."""

    def __init__(self, message: str, invalid_request: bool) -> None:
        super().__init__(message)
        self.invalid_request = invalid_request


@dataclass(frozen=True, slots=True)
class Subscription:
    name: str
    metrics: frozenset[str]
    interval_ms: int
    #: selector -> compiled RE2 regex (the binding has no type hints); every one must match.
    match: Mapping[str, Any]

    def matches(self, attributes: Mapping[str, str | None]) -> bool:
        for selector, pattern in self.match.items():
            value = attributes.get(selector)
            if value is None or pattern.fullmatch(value) is None:
                return False
        return True


def parse_list(value: str) -> list[str]:
    """Kafka's ConfigDef LIST: trimmed, comma-separated; "" is the empty list."""
    value = value.strip()
    return [] if not value else _LIST_SPLIT.split(value)


def parse_match(items: Sequence[str]) -> dict[str, Any]:
    """``selector=regex`` items as Kafka's parseMatchingPatterns reads them (split at every '=')."""
    out: dict[str, Any] = {}
    for item in items:
        parts = item.split("=")
        while parts and parts[-1] == "":  # Java's String.split drops trailing empty strings
            parts.pop()
        if len(parts) != 2 or parts[0].strip() not in SELECTORS:
            raise ClientMetricsConfigError(f"Illegal client matching pattern: {item}", invalid_request=False)
        try:
            out[parts[0].strip()] = re2.compile(parts[1].strip())
        except re2.error:
            raise ClientMetricsConfigError(f"Illegal client matching pattern: {item}", invalid_request=False) from None
    return out


def _parse_interval(value: str) -> int:
    try:
        interval = int(value.strip())
    except ValueError:
        raise ClientMetricsConfigError(
            f"Invalid value {value} for configuration {INTERVAL_MS}: Not a number of type INT",
            invalid_request=False) from None
    if not -2**31 <= interval < 2**31:
        raise ClientMetricsConfigError(
            f"Invalid value {value} for configuration {INTERVAL_MS}: Not a number of type INT",
            invalid_request=False)
    return interval


def _check_list(key: str, values: Sequence[str]) -> None:
    """Kafka's ValidList.anyNonDuplicateValues (KIP-1161): no empty item, none twice."""
    if len(set(values)) != len(values):
        raise ClientMetricsConfigError(f"Configuration '{key}' values must not be duplicated.", invalid_request=False)
    if any(not v for v in values):
        raise ClientMetricsConfigError(f"Configuration '{key}' values must not be empty.", invalid_request=False)


def validate(name: str, configs: Mapping[str, str]) -> None:
    """Kafka's ClientMetricsConfigs.validate of a subscription's resulting configs."""
    if not name:
        raise ClientMetricsConfigError("Subscription name can't be empty", invalid_request=True)
    for key in configs:
        if key not in NAMES:
            raise ClientMetricsConfigError(f"Unknown client metrics configuration: {key}", invalid_request=True)
    for key in (METRICS, MATCH):
        if key in configs:
            _check_list(key, parse_list(configs[key]))
    if INTERVAL_MS in configs:
        interval = _parse_interval(configs[INTERVAL_MS])
        if not MIN_INTERVAL_MS <= interval <= MAX_INTERVAL_MS:
            raise ClientMetricsConfigError(
                f"Invalid value {interval} for {INTERVAL_MS}, interval must be between 100 and 3600000 (1 hour)",
                invalid_request=True)
    if MATCH in configs:
        parse_match(parse_list(configs[MATCH]))


def subscription(name: str, configs: Mapping[str, str]) -> Subscription:
    """A stored subscription (validated when it was written)."""
    validate(name, configs)
    interval = configs.get(INTERVAL_MS)
    return Subscription(
        name,
        frozenset(parse_list(configs.get(METRICS, ""))),
        DEFAULT_INTERVAL_MS if interval is None else _parse_interval(interval),
        parse_match(parse_list(configs.get(MATCH, ""))),
    )
