"""Validation of produced record data before it is appended (Kafka's LogValidator).

Every batch is checked as Kafka checks it, whatever its codec: the header and CRC,
then its records, inflated first if the batch is compressed (with a bound, so a
decompression bomb is an error, not the broker's memory). Every record is walked
(:func:`wire.record_walk.walk_records`: lengths, varints, offset deltas, header
counts, the batch's record count), keys are required on compacted topics and
record timestamps must lie within ``message.timestamp.before.max.ms`` /
``after.max.ms`` of now. A failure raises :class:`RecordValidationError` with
Kafka's error code and nothing of the partition's data is appended.

Compressed batches are stored as they came, unless the topic's
``compression.type`` names another codec than the producer's; then they are
rebuilt with the topic's codec, as Kafka does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from broker.log.config import LogConfig
from config import TopicConfig
from wire.batch_builder import RecordBatchBuilder
from wire.compression import Compression, decompress_to_read
from wire.errors import ErrorCode
from wire.exceptions import CorruptRecordError, DecodeError
from wire.legacy_records import upconvert_legacy
from wire.record_walk import INT64_MAX, INT64_MIN, walk_records
from wire.records import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    MAGIC_V2,
    RECORDS_OFFSET,
    RecordBatchHeader,
    TimestampType,
    iter_records,
    peek_magic,
    read_batch_header,
    set_max_timestamp_and_type,
    validate_batch,
)

_KNOWN_CODECS = frozenset(int(c) for c in Compression)
#: Read-only record data larger than this is copied a chunk at a time. Large batches are validated in
#: a worker thread (broker.eventloop.pacing), but one copy of 100 MB holds the GIL, and so the event
#: loop, for tens of milliseconds; between chunks the loop gets it back.
COPY_CHUNK = 1 << 20

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
    #: The batches as they will be appended, written in place (offsets, timestamps): the record
    #: data given when it is writable (a Produce request's records are a view of its own frame,
    #: which nothing else reads), else a private copy.
    data: bytearray | memoryview
    batches: list[tuple[int, RecordBatchHeader]]
    record_count: int
    #: LogAppendTime stamped on the batches, or -1.
    log_append_time_ms: int


@dataclass(frozen=True, slots=True)
class TimestampPolicy:
    before_max_ms: int = LONG_MAX
    after_max_ms: int = 3_600_000


@dataclass(frozen=True, slots=True)
class TargetCompression:
    """The topic's ``compression.type``: None keeps the producer's codec ("producer")."""

    codec: Compression | None = None
    level: int | None = None


def target_compression(config: TopicConfig) -> TargetCompression:
    """Kafka's BrokerCompressionType: "producer" keeps the batch's codec, any other names the topic's."""
    name = config.compression_type
    if name == "producer":
        return TargetCompression()
    if name == "uncompressed":
        return TargetCompression(Compression.NONE)
    codec = Compression[name.upper()]
    level = {
        Compression.GZIP: config.compression_gzip_level,
        Compression.LZ4: config.compression_lz4_level,
        Compression.ZSTD: config.compression_zstd_level,
    }.get(codec)
    return TargetCompression(codec, None if level is None or level == -1 else level)


def validate_produce(
    records: bytes | bytearray | memoryview,
    api_version: int,
    config: LogConfig,
    now_ms: int,
    timestamps: TimestampPolicy,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    topic_partition: str = "",
    target: TargetCompression = TargetCompression(),
) -> ValidatedRecords:
    """Validates one partition's record data from a Produce request.

    Writable ``records`` are checked and stamped in place, and are what is appended: the
    caller hands them over. ``topic_partition`` names the partition in per-record error
    messages."""
    data = writable(records)
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
            # Numbered afresh: old clients write inner offsets Kafka does not trust either.
            data = bytearray(upconvert_legacy(data, base_offset=0, max_decompressed_bytes=max_decompressed_bytes))
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
    rebuild = False
    for i, (pos, header) in enumerate(batches):
        _check_batch(header, config)
        max_timestamp = _check_records(data, pos, header, config, now_ms, timestamps, max_decompressed_bytes,
                                       topic_partition)
        if not config.log_append_time and max_timestamp != header.max_timestamp:
            # Kafka sets the batch's max timestamp from its records.
            set_max_timestamp_and_type(data, pos, max_timestamp, TimestampType.CREATE_TIME)
            batches[i] = (pos, read_batch_header(data, pos))
        if target.codec is not None and target.codec != header.compression:
            rebuild = True
        total += header.records_count
    if rebuild:
        assert target.codec is not None
        data, batches = _recompress(data, batches, target.codec, target.level, max_decompressed_bytes)
        for _, header in batches:
            _check_size(header.size_in_bytes, config)
    append_time = -1
    if config.log_append_time:
        append_time = now_ms
        for i, (pos, _) in enumerate(batches):
            set_max_timestamp_and_type(data, pos, now_ms, TimestampType.LOG_APPEND_TIME)
            batches[i] = (pos, read_batch_header(data, pos))
    return ValidatedRecords(data, batches, total, append_time)


def writable(records: bytes | bytearray | memoryview) -> bytearray | memoryview:
    """``records`` themselves when they can be written in place, else a private copy: a Produce
    request's record data is a slice of the request's frame, and copying it (a megabyte per
    batch) cost as much CPU as checking its CRC."""
    if isinstance(records, bytearray):
        return records
    if isinstance(records, memoryview) and not records.readonly and records.c_contiguous and records.itemsize == 1:
        return records
    return private_copy(records)


def private_copy(records: bytes | bytearray | memoryview) -> bytearray:
    """A writable copy of ``records``, made a chunk at a time when large (see COPY_CHUNK)."""
    if len(records) <= COPY_CHUNK:
        return bytearray(records)
    view = memoryview(records)
    data = bytearray()
    for start in range(0, len(view), COPY_CHUNK):
        data += view[start:start + COPY_CHUNK]
    return data


def _check_size(size: int, config: LogConfig) -> None:
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


def _check_batch(header: RecordBatchHeader, config: LogConfig) -> None:
    """The header checks of Kafka's LogValidator.validateBatch, and the size limits."""
    _check_size(header.size_in_bytes, config)
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
    if header.records_count <= 0 or header.records_count != header.last_offset_delta + 1:
        raise RecordValidationError(
            ErrorCode.INVALID_RECORD,
            f"Inconsistent batch offset range [0, {header.last_offset_delta}] and count of records "
            f"{header.records_count}",
        )
    if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
        raise RecordValidationError(
            ErrorCode.INVALID_TIMESTAMP, "Producers may not set the LogAppendTime timestamp type"
        )


def _check_records(
    data: bytearray | memoryview,
    pos: int,
    header: RecordBatchHeader,
    config: LogConfig,
    now_ms: int,
    policy: TimestampPolicy,
    max_decompressed_bytes: int,
    topic_partition: str,
) -> int:
    """Inflates (if need be) and walks the batch's records; returns their largest timestamp."""
    with memoryview(data)[pos + RECORDS_OFFSET : pos + header.size_in_bytes] as payload:
        records: bytes | memoryview = payload
        codec_id = header.codec_id  # a known codec (_check_batch); the enum is made only to inflate
        if codec_id != Compression.NONE:
            try:
                records = decompress_to_read(codec_id, payload, max_decompressed_bytes)
            except CorruptRecordError as ex:
                raise RecordValidationError(ErrorCode.CORRUPT_MESSAGE, f"{topic_partition}: {ex.reason}") from ex
        try:
            walk = walk_records(
                records, header.records_count, header.base_timestamp,
                min_timestamp=now_ms - policy.before_max_ms, max_timestamp=now_ms + policy.after_max_ms,
                check_timestamps=not config.log_append_time, check_keys=config.compact_enabled,
            )
        except CorruptRecordError as ex:
            raise RecordValidationError(ErrorCode.INVALID_RECORD, f"{topic_partition}: {ex.reason}") from ex
    if walk.keyless or walk.bad_timestamps:
        _raise_record_errors(walk.keyless, walk.bad_timestamps, header, now_ms, policy, topic_partition)
    return walk.max_timestamp


def _raise_record_errors(
    keyless: list[int],
    bad_timestamps: list[tuple[int, int]],
    header: RecordBatchHeader,
    now_ms: int,
    policy: TimestampPolicy,
    topic_partition: str,
) -> None:
    """Kafka's processRecordErrors: INVALID_TIMESTAMP if any timestamp is out of range, else INVALID_RECORD."""
    errors = [
        (i, f"Compacted topic cannot accept message without key in topic partition {topic_partition}.")
        for i in keyless
    ]
    low = max(now_ms - policy.before_max_ms, INT64_MIN)
    high = min(now_ms + policy.after_max_ms, INT64_MAX)
    errors += [
        (i, f"Timestamp {ts} of message with offset {header.base_offset + i} is out of range. "
            f"The timestamp should be within [{low}, {high}]")
        for i, ts in bad_timestamps
    ]
    errors.sort()
    if bad_timestamps:
        raise RecordValidationError(
            ErrorCode.INVALID_TIMESTAMP, "One or more records have been rejected due to invalid timestamp", errors
        )
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    raise RecordValidationError(
        ErrorCode.INVALID_RECORD,
        f"One or more records have been rejected due to {len(errors)} record errors in total, "
        f"and only showing the first three errors at most: [{shown}]",
        errors,
    )


def _recompress(
    data: bytearray | memoryview,
    batches: list[tuple[int, RecordBatchHeader]],
    codec: Compression,
    level: int | None,
    max_decompressed_bytes: int,
) -> tuple[bytearray, list[tuple[int, RecordBatchHeader]]]:
    """Rebuilds the (validated) batches with the topic's codec (Kafka's buildRecordsAndAssignOffsets)."""
    out = bytearray()
    rebuilt: list[tuple[int, RecordBatchHeader]] = []
    for pos, header in batches:
        builder = RecordBatchBuilder(
            base_offset=header.base_offset,
            compression=codec,
            timestamp_type=TimestampType.CREATE_TIME,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            is_transactional=header.is_transactional,
            partition_leader_epoch=header.partition_leader_epoch,
            compression_level=level,
        )
        for record in iter_records(data, pos, max_decompressed_bytes, verify_crc=False):
            builder.append_record(record)
        start = len(out)
        out += builder.build()
        rebuilt.append((start, validate_batch(out, start)))
    return out, rebuilt
