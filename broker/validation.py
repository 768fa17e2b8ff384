"""Validation of produced record data before it is appended (Kafka's LogValidator).

Checks are on the batch header and CRC; record-level checks walk uncompressed
batches only, so compressed data is never inflated on the produce path. Every
failure is a :class:`RecordValidationError` carrying the Kafka error code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from broker.log.config import LogConfig
from wire.compression import Compression
from wire.errors import ErrorCode
from wire.exceptions import CorruptRecordError, DecodeError
from wire.records import (
    MAGIC_V2,
    RecordBatchHeader,
    TimestampType,
    iter_records,
    peek_magic,
    set_max_timestamp_and_type,
    upconvert_legacy,
    validate_batch,
)

_KNOWN_CODECS = frozenset(int(c) for c in Compression)

#: Kafka 3.9 defaults of message.timestamp.before.max.ms / after.max.ms.
LONG_MAX = 2**63 - 1


class RecordValidationError(Exception):
    """``record_errors`` are Produce's per-record errors: (index of the record in its batch, message)."""

    def __init__(
        self, code: ErrorCode, message: str, record_errors: Sequence[tuple[int, str]] = ()
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.record_errors = list(record_errors)


@dataclass(slots=True)
class ValidatedRecords:
    #: The batches as they will be appended (a private, writable copy).
    data: bytearray
    batches: list[tuple[int, RecordBatchHeader]]
    record_count: int
    #: LogAppendTime stamped on the batches, or -1.
    log_append_time_ms: int


@dataclass(frozen=True, slots=True)
class TimestampPolicy:
    before_max_ms: int = LONG_MAX
    after_max_ms: int = 3_600_000


def validate_produce(
    records: bytes | bytearray | memoryview,
    api_version: int,
    config: LogConfig,
    now_ms: int,
    timestamps: TimestampPolicy,
    max_decompressed_bytes: int = 64 * 1024 * 1024,
    topic_partition: str = "",
) -> ValidatedRecords:
    """Validates one partition's record data from a Produce request.

    ``topic_partition`` names the partition in per-record error messages."""
    data = bytearray(records)
    if not data:
        raise RecordValidationError(ErrorCode.INVALID_RECORD, "Produce request carries no record batch")
    magic = peek_magic(data, 0)
    if magic is None:
        raise RecordValidationError(ErrorCode.CORRUPT_MESSAGE, "record data shorter than a batch header")
    if magic != MAGIC_V2:
        if api_version >= 3:
            raise RecordValidationError(
                ErrorCode.INVALID_RECORD, f"Produce v{api_version} requires magic 2 batches, got magic {magic}"
            )
        try:
            data = bytearray(upconvert_legacy(data, max_decompressed_bytes=max_decompressed_bytes))
        except DecodeError as ex:
            raise RecordValidationError(ErrorCode.CORRUPT_MESSAGE, str(ex)) from ex
    batches: list[tuple[int, RecordBatchHeader]] = []
    pos = 0
    while pos < len(data):
        try:
            header = validate_batch(data, pos)
        except CorruptRecordError as ex:
            raise RecordValidationError(ErrorCode.CORRUPT_MESSAGE, str(ex)) from ex
        batches.append((pos, header))
        pos += header.size_in_bytes
    if api_version >= 3 and len(batches) != 1:
        raise RecordValidationError(
            ErrorCode.INVALID_RECORD,
            f"Compressed outer record has more than one batch: Produce v{api_version} allows exactly one batch per partition",
        )
    total = 0
    for pos, header in batches:
        size = header.size_in_bytes
        if size > config.max_message_bytes:
            raise RecordValidationError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"The record batch size {size} is larger than max.message.bytes {config.max_message_bytes}",
            )
        if size > config.segment_bytes:
            raise RecordValidationError(
                ErrorCode.RECORD_LIST_TOO_LARGE,
                f"The record batch size {size} is larger than segment.bytes {config.segment_bytes}",
            )
        if header.is_control:
            raise RecordValidationError(ErrorCode.INVALID_RECORD, "Clients may not write control batches")
        if header.producer_id >= 0 and header.base_sequence < 0:
            raise RecordValidationError(
                ErrorCode.INVALID_RECORD,
                f"Invalid sequence number {header.base_sequence} in record batch with producerId {header.producer_id}",
            )
        if header.codec_id not in _KNOWN_CODECS:
            raise RecordValidationError(
                ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {header.codec_id}"
            )
        if header.records_count != header.last_offset_delta + 1:
            raise RecordValidationError(
                ErrorCode.INVALID_RECORD,
                f"record count {header.records_count} does not match last offset delta {header.last_offset_delta}",
            )
        if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
            raise RecordValidationError(
                ErrorCode.INVALID_TIMESTAMP, "Producers may not set the LogAppendTime timestamp type"
            )
        if header.compression == Compression.NONE:
            _check_records(data, pos, header)
        if config.compact_enabled:
            _check_keys(data, pos, topic_partition, max_decompressed_bytes)
        if not config.log_append_time:
            _check_timestamp(header.max_timestamp, now_ms, timestamps)
        total += header.records_count
    append_time = -1
    if config.log_append_time:
        append_time = now_ms
        for pos, _ in batches:
            set_max_timestamp_and_type(data, pos, now_ms, TimestampType.LOG_APPEND_TIME)
    return ValidatedRecords(data, batches, total, append_time)


def _check_records(data: bytearray, pos: int, header: RecordBatchHeader) -> None:
    """Walks an uncompressed batch: lengths, varints and offset deltas must add up."""
    count = 0
    try:
        for i, record in enumerate(iter_records(data, pos, verify_crc=False)):
            if record.offset - header.base_offset != i:
                raise RecordValidationError(ErrorCode.INVALID_RECORD, f"record {i} has offset delta {record.offset - header.base_offset}")
            count += 1
    except DecodeError as ex:
        raise RecordValidationError(ErrorCode.INVALID_RECORD, str(ex)) from ex
    if count != header.records_count:
        raise RecordValidationError(
            ErrorCode.INVALID_RECORD, f"batch declares {header.records_count} records but holds {count}"
        )


def _check_keys(data: bytearray, pos: int, topic_partition: str, max_decompressed_bytes: int) -> None:
    """Compaction keeps the latest record per key, so a compacted topic refuses keyless
    records (Kafka's LogValidator.validateKey); compressed batches are inflated for it."""
    errors = []
    try:
        for index, record in enumerate(iter_records(data, pos, max_decompressed_bytes, verify_crc=False)):
            if record.key is None:
                errors.append(
                    (index, f"Compacted topic cannot accept message without key in topic partition {topic_partition}.")
                )
    except DecodeError as ex:
        raise RecordValidationError(ErrorCode.CORRUPT_MESSAGE, str(ex)) from ex
    if errors:
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
        raise RecordValidationError(
            ErrorCode.INVALID_RECORD,
            f"One or more records have been rejected due to {len(errors)} record errors in total, "
            f"and only showing the first three errors at most: [{shown}]",
            errors,
        )


def _check_timestamp(timestamp: int, now_ms: int, policy: TimestampPolicy) -> None:
    if timestamp < 0:
        return  # NO_TIMESTAMP
    if now_ms - timestamp > policy.before_max_ms or timestamp - now_ms > policy.after_max_ms:
        raise RecordValidationError(
            ErrorCode.INVALID_TIMESTAMP,
            f"Timestamp {timestamp} of message is out of range. The timestamp should be within "
            f"[{now_ms - policy.before_max_ms}, {now_ms + policy.after_max_ms}]",
        )
