"""The typed exceptions of the log layer.

Domain code raises these; only the dispatcher turns them into Kafka error
codes. Each class names the code it stands for. A malformed batch raises
``wire.exceptions.CorruptRecordError`` (CORRUPT_MESSAGE), shared with the codec.
"""

from __future__ import annotations


class LogError(Exception):
    """Base class of the log layer's errors."""


class OffsetOutOfRangeError(LogError):
    """An offset outside ``[log_start_offset, log_end_offset]`` (OFFSET_OUT_OF_RANGE)."""

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(
            f"offset {offset} is outside the log [{log_start_offset}, {log_end_offset}]"
        )
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class RecordTooLargeError(LogError):
    """A batch larger than ``max.message.bytes`` (MESSAGE_TOO_LARGE)."""


class RecordBatchTooLargeError(LogError):
    """A batch larger than ``segment.bytes``: it can never fit a segment (RECORD_LIST_TOO_LARGE)."""


class UnexpectedAppendOffsetError(LogError):
    """A follower append that starts below the log end offset.

    Kafka's UnexpectedAppendOffsetException: the replica fetcher treats it as
    fatal for the partition (the follower must truncate first).
    """

    def __init__(self, first_offset: int, log_end_offset: int) -> None:
        super().__init__(
            f"append starting at offset {first_offset} is below the log end offset {log_end_offset}"
        )
        self.first_offset = first_offset
        self.log_end_offset = log_end_offset


class OffsetsOutOfOrderError(LogError):
    """Batches of one follower append whose offsets do not increase (Kafka's OffsetsOutOfOrderException)."""


class CorruptIndexError(LogError):
    """An index file that fails its sanity check; the segment rebuilds it from the log."""


class CheckpointError(LogError):
    """A checkpoint file that cannot be parsed (Kafka treats it as a failed log dir)."""


class LogDirLockedError(LogError):
    """Another process (or another manager in this one) holds the log directory's lock."""
