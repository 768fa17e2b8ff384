"""Kafka-format log storage: segments, indexes, checkpoints, recovery and retention.

The on-disk layout is Apache Kafka's, file for file, so a log directory can be
inspected with Kafka's own tools. :class:`LogManager` owns the log
directories; :class:`PartitionLog` owns one partition's offsets.
"""

from broker.log.checkpoint import OffsetCheckpointFile
from broker.log.config import LogConfig
from broker.log.errors import (
    CheckpointError,
    LogDirLockedError,
    LogError,
    OffsetOutOfRangeError,
    OffsetsOutOfOrderError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
)
from broker.log.files import TopicPartition
from broker.log.leader_epoch import LeaderEpochCache
from broker.log.manager import LogManager
from broker.log.partition_log import AppendInfo, FetchData, PartitionLog
from broker.log.segment import TimestampAndOffset

__all__ = [
    "AppendInfo",
    "CheckpointError",
    "FetchData",
    "LeaderEpochCache",
    "LogConfig",
    "LogDirLockedError",
    "LogError",
    "LogManager",
    "OffsetCheckpointFile",
    "OffsetOutOfRangeError",
    "OffsetsOutOfOrderError",
    "PartitionLog",
    "RecordBatchTooLargeError",
    "RecordTooLargeError",
    "TimestampAndOffset",
    "TopicPartition",
    "UnexpectedAppendOffsetError",
]
