"""Group configs of share groups (config resource type GROUP, 32), as Kafka's GroupConfig.

``share.auto.offset.reset`` (latest | earliest; where a share-partition starts
when the group first reads it), ``share.record.lock.duration.ms`` and
``share.delivery.count.limit`` (override the broker's ``group.share.*``), and,
beyond Kafka 4.3, the dead-letter topic of KIP-1191:
``errors.deadletterqueue.topic.name`` (unset: off). Stored with the group in
``__share_group_state``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from broker.share.group import ShareGroupSettings

GROUP = 32
SET = 0
DELETE = 1

AUTO_OFFSET_RESET = "share.auto.offset.reset"
RECORD_LOCK_DURATION_MS = "share.record.lock.duration.ms"
DELIVERY_COUNT_LIMIT = "share.delivery.count.limit"
DEAD_LETTER_TOPIC = "errors.deadletterqueue.topic.name"
NAMES = (AUTO_OFFSET_RESET, RECORD_LOCK_DURATION_MS, DELIVERY_COUNT_LIMIT, DEAD_LETTER_TOPIC)


class GroupConfigError(ValueError):
    pass


def _int(name: str, value: str, low: int, high: int) -> int:
    try:
        n = int(value)
    except ValueError:
        raise GroupConfigError(f"Invalid value {value} for configuration {name}: Not a number of type INT") from None
    if not low <= n <= high:
        raise GroupConfigError(f"Invalid value {value} for configuration {name}: Value must be in [{low}, {high}]")
    return n


def apply(current: ShareGroupSettings, ops: Iterable[tuple[str, int, str | None]]) -> ShareGroupSettings:
    """``ops``: (name, operation, value) with Kafka's SET (0) / DELETE (1)."""
    out = dataclasses.replace(current)
    for name, op, value in ops:
        if name not in NAMES:
            raise GroupConfigError(f"Unknown group config name: {name}")
        if op not in (SET, DELETE):
            raise GroupConfigError(f"Operation {op} is not supported for group config {name}")
        if op == DELETE or value is None:
            value = None
        if name == AUTO_OFFSET_RESET:
            if value is not None and value not in ("latest", "earliest"):
                raise GroupConfigError(f"Invalid value {value} for configuration {name}: "
                                       "must be one of latest, earliest")
            out.auto_offset_reset = value or "latest"
        elif name == RECORD_LOCK_DURATION_MS:
            out.record_lock_duration_ms = None if value is None else _int(name, value, 1000, 3_600_000)
        elif name == DELIVERY_COUNT_LIMIT:
            out.delivery_count_limit = None if value is None else _int(name, value, 2, 10)
        else:
            out.dead_letter_topic = value or None
    return out


def describe(settings: ShareGroupSettings) -> dict[str, str | None]:
    return {
        AUTO_OFFSET_RESET: settings.auto_offset_reset,
        RECORD_LOCK_DURATION_MS: None if settings.record_lock_duration_ms is None
        else str(settings.record_lock_duration_ms),
        DELIVERY_COUNT_LIMIT: None if settings.delivery_count_limit is None else str(settings.delivery_count_limit),
        DEAD_LETTER_TOPIC: settings.dead_letter_topic,
    }
