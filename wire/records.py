"""Kafka record batches (magic 2) and control records: reading, checking, rewriting in place.

Batches are kept and forwarded as the bytes the producer sent; this module
reads their headers in place, checks them, rewrites the few fields the broker
owns (base offset, leader epoch, LogAppendTime) and decodes records only when
something needs to look inside. Batches are built in :mod:`wire.batch_builder`;
legacy message sets (magic 0 and 1) are read in :mod:`wire.legacy_records`.

Every decoder raises :class:`CorruptRecordError` (or a subclass) for malformed
input, never IndexError, struct.error or a codec library's own exception.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

import crc32c

from wire.compression import (
    Compression,
    decompress,
)
from wire.exceptions import CorruptRecordError

BytesLike: TypeAlias = bytes | bytearray | memoryview
WritableBuffer: TypeAlias = bytearray | memoryview


# ---------------------------------------------------------------------------
# Layout

MAGIC_V0 = 0
MAGIC_V1 = 1
MAGIC_V2 = 2

BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORDS_OFFSET = 61
BATCH_HEADER_SIZE = 61

#: Base offset and length: the bytes of a batch not counted by its length field.
LOG_OVERHEAD = 12
#: The smallest legal length field: a header with no records.
MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

DEFAULT_MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024

INT32_MAX = 2**31 - 1
_INT32_MIN = -(2**31)
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

_HEADER = struct.Struct(">qiibIhiqqqhii")
# Everything after the CRC field: what the CRC covers, up to the records.
CRC_COVERED_HEADER = struct.Struct(">hiqqqhii")
HEADER_PREFIX = struct.Struct(">qiibI")
_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")

assert _HEADER.size == BATCH_HEADER_SIZE


class TimestampType(enum.IntEnum):
    NO_TIMESTAMP = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlRecordType(enum.IntEnum):
    ABORT = 0
    COMMIT = 1


def increment_sequence(sequence: int, increment: int) -> int:
    """Add to a producer sequence number, wrapping past int32 max to 0 as Kafka does."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


# ---------------------------------------------------------------------------
# Batch header


@dataclass(slots=True)
class RecordBatchHeader:
    """The 61-byte header of a magic 2 record batch."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def codec_id(self) -> int:
        """The raw codec bits, which may name a codec Kafka does not define."""
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def compression(self) -> Compression:
        """The codec; raises :class:`UnsupportedCompressionError` for an unknown id."""
        return Compression.from_id(self.codec_id)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_FLAG_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """Compaction's delete horizon, kept in the base timestamp when the flag is set."""
        return self.base_timestamp if self.has_delete_horizon else None

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def size_in_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id != NO_PRODUCER_ID


def read_batch_header(buf: BytesLike, pos: int = 0) -> RecordBatchHeader:
    """Parse the header of the batch at ``pos``, touching only its first 61 bytes."""
    if pos < 0 or len(buf) - pos < BATCH_HEADER_SIZE:
        raise CorruptRecordError(
            f"truncated batch header: {max(len(buf) - pos, 0)} of {BATCH_HEADER_SIZE} bytes",
            offset=pos,
        )
    header = RecordBatchHeader(*_HEADER.unpack_from(buf, pos))
    if header.magic != MAGIC_V2:
        raise CorruptRecordError(
            f"unsupported magic {header.magic} (expected {MAGIC_V2})", offset=pos
        )
    if header.batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"batch length {header.batch_length} below the minimum {MIN_BATCH_LENGTH}",
            offset=pos,
        )
    return header


def peek_magic(buf: BytesLike, pos: int = 0) -> int | None:
    """The magic byte of the batch or legacy message at ``pos`` (the same place in
    every format), or None if the buffer ends first."""
    at = pos + MAGIC_OFFSET
    if pos < 0 or at >= len(buf):
        return None
    value = buf[at]
    return value - 256 if value > 127 else value


def batch_size_at(buf: BytesLike, pos: int = 0) -> int | None:
    """Total size of the batch (or legacy message) at ``pos`` from its length
    field, or None if fewer than 12 bytes remain."""
    if pos < 0 or len(buf) - pos < LOG_OVERHEAD:
        return None
    (length,) = INT32.unpack_from(buf, pos + LENGTH_OFFSET)
    if length < 0:
        raise CorruptRecordError(f"negative batch length {length}", offset=pos)
    return int(length) + LOG_OVERHEAD


def iter_batch_headers(buf: BytesLike, start: int = 0) -> Iterator[tuple[int, RecordBatchHeader]]:
    """Yield ``(position, header)`` for each complete batch from ``start`` on.

    Stops at the first batch that is not wholly in ``buf``: a caller compares
    the end of the last batch with ``len(buf)`` to find a torn tail. Headers
    are checked but CRCs are not.
    """
    pos = start
    end = len(buf)
    while True:
        size = batch_size_at(buf, pos)
        if size is None or size > end - pos:
            return
        if size < BATCH_HEADER_SIZE:
            raise CorruptRecordError(
                f"batch length {size - LOG_OVERHEAD} below the minimum {MIN_BATCH_LENGTH}",
                offset=pos,
            )
        yield pos, read_batch_header(buf, pos)
        pos += size


def compute_crc(buf: BytesLike, pos: int, header_or_size: RecordBatchHeader | int) -> int:
    """CRC-32C of the batch at ``pos`` over attributes through the last record."""
    size = (
        header_or_size.size_in_bytes
        if isinstance(header_or_size, RecordBatchHeader)
        else header_or_size
    )
    if size < BATCH_HEADER_SIZE or pos < 0 or size > len(buf) - pos:
        raise CorruptRecordError(f"batch of {size} bytes does not fit the buffer", offset=pos)
    view = memoryview(buf)
    with view[pos + ATTRIBUTES_OFFSET : pos + size] as covered:
        return int(crc32c.crc32c(covered))


def crc_is_valid(buf: BytesLike, pos: int = 0) -> bool:
    """Whether a whole v2 batch starts at ``pos`` and its CRC matches. Never raises."""
    try:
        header = read_batch_header(buf, pos)
        if header.size_in_bytes > len(buf) - pos:
            return False
        return compute_crc(buf, pos, header) == header.crc
    except CorruptRecordError:
        return False


def validate_batch(buf: BytesLike, pos: int = 0) -> RecordBatchHeader:
    """Check the batch at ``pos`` is whole, v2, sane and CRC-valid; return its header."""
    remaining = len(buf) - pos
    if remaining < LOG_OVERHEAD:
        raise CorruptRecordError(
            f"batch length mismatch: {remaining} trailing bytes are not a batch", offset=pos
        )
    size = batch_size_at(buf, pos)
    assert size is not None
    if size < BATCH_HEADER_SIZE:
        raise CorruptRecordError(
            f"batch length {size - LOG_OVERHEAD} below the minimum {MIN_BATCH_LENGTH}",
            offset=pos,
        )
    if size > remaining:
        raise CorruptRecordError(
            f"batch length mismatch: batch declares {size} bytes but {remaining} remain",
            offset=pos,
        )
    magic = peek_magic(buf, pos)
    if magic is not None and magic != MAGIC_V2:
        raise CorruptRecordError(f"unsupported magic {magic} (expected {MAGIC_V2})", offset=pos)
    header = read_batch_header(buf, pos)
    if header.records_count < 0:
        raise CorruptRecordError(f"negative record count {header.records_count}", offset=pos)
    if header.last_offset_delta < 0:
        raise CorruptRecordError(
            f"negative last offset delta {header.last_offset_delta}", offset=pos
        )
    actual = compute_crc(buf, pos, header)
    if actual != header.crc:
        raise CorruptRecordError(
            f"crc mismatch: stored {header.crc:#010x}, computed {actual:#010x}", offset=pos
        )
    return header


def validate_batches(buf: BytesLike) -> list[RecordBatchHeader]:
    """Check ``buf`` is exactly a sequence of whole, CRC-valid v2 batches."""
    headers = []
    pos = 0
    end = len(buf)
    while pos < end:
        header = validate_batch(buf, pos)
        headers.append(header)
        pos += header.size_in_bytes
    return headers


# ---------------------------------------------------------------------------
# In-place rewrites


def _require_header(buf: BytesLike, pos: int) -> None:
    if pos < 0 or len(buf) - pos < BATCH_HEADER_SIZE:
        raise CorruptRecordError("truncated batch header", offset=pos)


def set_base_offset(buf: WritableBuffer, pos: int, base_offset: int) -> None:
    """Assign the batch's offsets (not covered by the CRC)."""
    _require_header(buf, pos)
    INT64.pack_into(buf, pos + BASE_OFFSET_OFFSET, base_offset)


def set_partition_leader_epoch(buf: WritableBuffer, pos: int, epoch: int) -> None:
    """Stamp the leader epoch (not covered by the CRC)."""
    _require_header(buf, pos)
    INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_max_timestamp_and_type(
    buf: WritableBuffer, pos: int, max_timestamp: int, timestamp_type: TimestampType
) -> None:
    """Set the max timestamp and timestamp type, then rewrite the CRC.

    With LOG_APPEND_TIME every record reads as ``max_timestamp``, so this is
    how the broker applies LogAppendTime without touching (or decompressing)
    the records. The CRC is recomputed from the bytes as they are: validate
    the batch first.
    """
    if timestamp_type is TimestampType.NO_TIMESTAMP:
        raise ValueError("a v2 batch needs CREATE_TIME or LOG_APPEND_TIME")
    header = read_batch_header(buf, pos)
    attributes = header.attributes & ~TIMESTAMP_TYPE_MASK
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if attributes == header.attributes and max_timestamp == header.max_timestamp:
        return
    if header.size_in_bytes > len(buf) - pos:
        raise CorruptRecordError("truncated batch", offset=pos)
    _INT16.pack_into(buf, pos + ATTRIBUTES_OFFSET, attributes)
    INT64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, max_timestamp)
    _UINT32.pack_into(buf, pos + CRC_OFFSET, compute_crc(buf, pos, header))


# ---------------------------------------------------------------------------
# Records


@dataclass(slots=True)
class Record:
    """A decoded record, with absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    attributes: int = 0


@dataclass(slots=True)
class NewRecord:
    """A record to append to a batch being built.

    ``timestamp`` None means now; ``offset_delta`` None means one past the
    previous record's.
    """

    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]] = ()
    timestamp: int | None = None
    offset_delta: int | None = None


def corrupt_at(reason: str, pos: int) -> CorruptRecordError:
    return CorruptRecordError(reason, offset=pos)


def _read_varint(data: bytes, pos: int, end: int, max_bytes: int, bits: int) -> tuple[int, int]:
    """Decode a zigzag varint of at most ``max_bytes`` bytes that fits ``bits`` bits."""
    raw = 0
    shift = 0
    start = pos
    while True:
        if pos >= end:
            raise corrupt_at("truncated varint", start)
        byte = data[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if pos - start >= max_bytes:
            raise corrupt_at("varint too long", start)
    if raw >> bits:
        raise corrupt_at("varint out of range", start)
    return (raw >> 1) ^ -(raw & 1), pos


def _read_bytes(data: bytes, pos: int, end: int, what: str) -> tuple[bytes | None, int]:
    byte = data[pos] if pos < end else 0x80
    if byte < 0x80:
        length = (byte >> 1) ^ -(byte & 1)
        pos += 1
    else:
        length, pos = _read_varint(data, pos, end, 5, 32)
    if length < 0:
        if length == -1:
            return None, pos
        raise corrupt_at(f"negative {what} length {length}", pos)
    if length > end - pos:
        raise corrupt_at(f"{what} length {length} exceeds the {end - pos} bytes left", pos)
    return data[pos : pos + length], pos + length


def _decode_record(
    data: bytes, pos: int, end: int
) -> tuple[int, int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]], int]:
    """One record: (attributes, timestamp delta, offset delta, key, value, headers, next pos)."""
    length, pos = _read_varint(data, pos, end, 5, 32)
    if length < 0 or length > end - pos:
        raise corrupt_at(f"record length {length} out of range ({end - pos} bytes left)", pos)
    record_end = pos + length
    if pos >= record_end:
        raise corrupt_at("empty record", pos)
    attributes = data[pos]
    pos += 1
    timestamp_delta, pos = _read_varint(data, pos, record_end, 10, 64)
    offset_delta, pos = _read_varint(data, pos, record_end, 5, 32)
    key, pos = _read_bytes(data, pos, record_end, "key")
    value, pos = _read_bytes(data, pos, record_end, "value")
    count, pos = _read_varint(data, pos, record_end, 5, 32)
    # Each header takes at least two bytes, which also bounds the loop below.
    if count < 0 or count > (record_end - pos) // 2:
        raise corrupt_at(f"header count {count} out of range", pos)
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        header_key, pos = _read_bytes(data, pos, record_end, "header key")
        if header_key is None:
            raise corrupt_at("null header key", pos)
        try:
            name = header_key.decode("utf-8")
        except UnicodeDecodeError:
            raise corrupt_at("header key is not UTF-8", pos) from None
        header_value, pos = _read_bytes(data, pos, record_end, "header value")
        headers.append((name, header_value))
    if pos != record_end:
        raise corrupt_at(f"record length mismatch: {record_end - pos} bytes unread", pos)
    return attributes, timestamp_delta, offset_delta, key, value, headers, pos


def iter_records(
    buf: BytesLike,
    pos: int = 0,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    *,
    verify_crc: bool = True,
) -> Iterator[Record]:
    """Decode the records of the batch at ``pos``, one at a time.

    A compressed batch is inflated once, up to ``max_decompressed_bytes``. All
    errors, including a bad header, surface while iterating.
    """
    header = read_batch_header(buf, pos)
    size = header.size_in_bytes
    if size > len(buf) - pos:
        raise corrupt_at(f"truncated batch: {size} bytes declared, {len(buf) - pos} present", pos)
    if verify_crc and compute_crc(buf, pos, header) != header.crc:
        raise corrupt_at("crc mismatch", pos)
    count = header.records_count
    if count < 0:
        raise corrupt_at(f"negative record count {count}", pos)
    try:
        codec = header.compression
    except CorruptRecordError as exc:
        exc.offset = pos
        raise
    with memoryview(buf)[pos + RECORDS_OFFSET : pos + size] as payload:
        if codec is Compression.NONE:
            data = bytes(payload)
        else:
            try:
                data = decompress(codec, payload, max_decompressed_bytes)
            except CorruptRecordError as exc:
                exc.offset = pos
                raise
    # LogAppendTime batches report the broker's time for every record.
    log_append_time = (
        header.max_timestamp if header.timestamp_type is TimestampType.LOG_APPEND_TIME else None
    )
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    last_offset_delta = header.last_offset_delta
    end = len(data)
    at = 0
    previous_delta = -1
    for index in range(count):
        if at >= end:
            raise corrupt_at(f"batch holds {index} records but its count is {count}", pos)
        try:
            attributes, ts_delta, offset_delta, key, value, headers, at = _decode_record(
                data, at, end
            )
        except CorruptRecordError as exc:
            raise corrupt_at(f"record {index}: {exc.reason}", pos) from None
        if offset_delta <= previous_delta or offset_delta > last_offset_delta:
            raise corrupt_at(
                f"record {index}: offset delta {offset_delta} out of order"
                f" (previous {previous_delta}, last {last_offset_delta})",
                pos,
            )
        previous_delta = offset_delta
        yield Record(
            base_offset + offset_delta,
            base_timestamp + ts_delta if log_append_time is None else log_append_time,
            key,
            value,
            headers,
            attributes,
        )
    if at != end:
        raise corrupt_at(f"{end - at} bytes after the last of {count} records", pos)


# ---------------------------------------------------------------------------
# Control records (transaction markers)

CONTROL_KEY = struct.Struct(">hh")
CONTROL_VALUE = struct.Struct(">hi")




def parse_control_record(record: Record) -> tuple[ControlRecordType, int]:
    """The marker type and coordinator epoch of a record from a control batch."""
    key = record.key
    if key is None or len(key) < CONTROL_KEY.size:
        raise CorruptRecordError("control record key too short", offset=record.offset)
    version, type_id = CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"control record key version {version}", offset=record.offset)
    try:
        control_type = ControlRecordType(type_id)
    except ValueError:
        raise CorruptRecordError(
            f"unknown control record type {type_id}", offset=record.offset
        ) from None
    value = record.value
    if value is None or len(value) < CONTROL_VALUE.size:
        raise CorruptRecordError("control record value too short", offset=record.offset)
    # Later versions may append fields; the leading ones keep their meaning.
    value_version, coordinator_epoch = CONTROL_VALUE.unpack_from(value)
    if value_version < 0:
        raise CorruptRecordError(
            f"control record value version {value_version}", offset=record.offset
        )
    return control_type, int(coordinator_epoch)
