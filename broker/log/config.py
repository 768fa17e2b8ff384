"""Per-topic log configuration: Kafka's LogConfig with its defaults.

Field names are the topic config names with dots turned into underscores
(``segment.bytes`` is ``segment_bytes``). Values are checked as Kafka's
ConfigDef checks them. A broker-level ``log.*`` setting becomes the default
LogConfig; topic overrides are applied with ``dataclasses.replace``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: Java's Long.MAX_VALUE, Kafka's "never" for flush.messages and flush.ms.
LONG_MAX = 2**63 - 1

_DAY_MS = 24 * 60 * 60 * 1000
#: The smallest segment.bytes Kafka accepts (a legacy v0 record's overhead).
_MIN_SEGMENT_BYTES = 14

TimestampTypeName = Literal["CreateTime", "LogAppendTime"]
_CLEANUP_POLICIES = frozenset({"delete", "compact"})


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Topic-level settings the log reads; defaults are Kafka's."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * _DAY_MS
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * _DAY_MS  # -1: keep forever
    retention_bytes: int = -1  # -1: no size limit
    file_delete_delay_ms: int = 60_000
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    max_message_bytes: int = 1024 * 1024 + 12
    message_timestamp_type: TimestampTypeName = "CreateTime"
    cleanup_policy: frozenset[str] = frozenset({"delete"})
    delete_retention_ms: int = _DAY_MS
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX

    def __post_init__(self) -> None:
        _at_least("segment.bytes", self.segment_bytes, _MIN_SEGMENT_BYTES)
        if self.segment_bytes > 2**31 - 1:
            # File positions in the offset index are int32.
            raise ValueError(f"segment.bytes must fit an int32, got {self.segment_bytes}")
        _at_least("segment.ms", self.segment_ms, 1)
        _at_least("segment.index.bytes", self.segment_index_bytes, 4)
        _at_least("index.interval.bytes", self.index_interval_bytes, 0)
        _at_least("retention.ms", self.retention_ms, -1)
        _at_least("file.delete.delay.ms", self.file_delete_delay_ms, 0)
        _at_least("flush.messages", self.flush_messages, 1)
        _at_least("flush.ms", self.flush_ms, 0)
        _at_least("max.message.bytes", self.max_message_bytes, 0)
        if self.message_timestamp_type not in ("CreateTime", "LogAppendTime"):
            raise ValueError(
                f"message.timestamp.type must be CreateTime or LogAppendTime,"
                f" got {self.message_timestamp_type!r}"
            )
        _at_least("delete.retention.ms", self.delete_retention_ms, 0)
        if not 0.0 <= self.min_cleanable_dirty_ratio <= 1.0:
            raise ValueError(
                f"min.cleanable.dirty.ratio must be in [0, 1], got {self.min_cleanable_dirty_ratio}"
            )
        _at_least("min.compaction.lag.ms", self.min_compaction_lag_ms, 0)
        _at_least("max.compaction.lag.ms", self.max_compaction_lag_ms, 1)
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise ValueError(
                f"min.compaction.lag.ms ({self.min_compaction_lag_ms}) must not exceed"
                f" max.compaction.lag.ms ({self.max_compaction_lag_ms})"
            )
        unknown = self.cleanup_policy - _CLEANUP_POLICIES
        if unknown or not self.cleanup_policy:
            raise ValueError(
                f"cleanup.policy must be delete and/or compact, got {sorted(self.cleanup_policy)}"
            )

    @property
    def delete_enabled(self) -> bool:
        """Whether retention by time and size applies (``cleanup.policy`` has ``delete``)."""
        return "delete" in self.cleanup_policy

    @property
    def compact_enabled(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def max_segment_ms(self) -> int:
        """How long the active segment may collect records before it rolls.

        On a compacted topic the active segment is never cleaned, so it rolls
        by ``max.compaction.lag.ms`` at the latest (Kafka's LogConfig.maxSegmentMs).
        """
        if self.compact_enabled and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms

    @property
    def log_append_time(self) -> bool:
        """Whether the leader stamps batches with its own clock (LogAppendTime)."""
        return self.message_timestamp_type == "LogAppendTime"


def _at_least(name: str, value: int, minimum: int) -> None:
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
