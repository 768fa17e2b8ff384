"""Broker settings of client quotas (Kafka's ``QuotaConfigs``).

Each list is one section of docs/configuration.md, in the order shown there.
"""

from __future__ import annotations

from typing import Final

from config.catalog.define import (
    AT_LEAST_0,
    AT_LEAST_1,
    CLUSTER_WIDE,
    INT,
    LONG,
    STRING,
    group,
    key,
)
from config.types import INT_MAX, ConfigKey, ConfigValue, invalid
from config.validators import Check, Range


def connection_overrides(key: str, text: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides`` (``host:count,...``) as a map; ConfigError if malformed."""
    overrides: dict[str, int] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        host, sep, count = entry.rpartition(":")
        if not sep or not host or not count.strip().isdigit():
            raise invalid(key, text, f"Invalid connection override {entry}: expected host:count")
        overrides[host.strip().strip("[]")] = int(count)
    return overrides


def _check_connection_overrides(key: str, value: ConfigValue) -> None:
    connection_overrides(key, str(value))


QUOTAS: Final[list[ConfigKey]] = group("Quotas", [
    key("quota.window.num", INT, "11", "Samples a client quota's rate is measured over.", AT_LEAST_1),
    key("quota.window.size.seconds", INT, "1", "Length of each client quota sample.", AT_LEAST_1),
    key("controller.quota.window.num", INT, "11",
        "Samples a controller mutation quota's token bucket is sized by (its burst is num - 1 windows).",
        AT_LEAST_1),
    key("controller.quota.window.size.seconds", INT, "1",
        "Length of each controller mutation quota sample.", AT_LEAST_1),
    key("max.connections.per.ip.overrides", STRING, "",
        "Per-IP or hostname overrides of max.connections.per.ip, as host:count,host:count.",
        Check(_check_connection_overrides, "host:count,... (count at least 0)"), CLUSTER_WIDE),
    key("max.connection.creation.rate", INT, str(INT_MAX),
        "Most new connections the broker accepts per second (over quota.window.num windows); an "
        "acceptor over it waits before accepting more. listener.name.<l>.max.connection.creation.rate "
        "sets one listener's own bound; the inter-broker listener is bound only by its own.",
        AT_LEAST_0, CLUSTER_WIDE),
])  # fmt: skip

AUDIT: Final[list[ConfigKey]] = group("Audit", [
    key("authorizer.audit.log.file", STRING, "",
        "File the authorizer's decisions are written to as JSON lines (kafka.authorizer.logger: every "
        "denial, every allowed create, delete, alter and alter-configs); empty writes them to the "
        "broker's own log.", cormorant_only=True),
    key("authorizer.audit.log.max.bytes", LONG, "104857600",
        "Size at which the audit log file is rotated.", Range(min=1024), cormorant_only=True),
    key("authorizer.audit.log.backup.count", INT, "10",
        "Rotated audit log files kept (file.1 ... file.N); the oldest is deleted.", AT_LEAST_1,
        cormorant_only=True),
])  # fmt: skip
