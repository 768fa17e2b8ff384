"""Kafka record batches (magic 2), control records and legacy message sets.

Batches are kept and forwarded as the bytes the producer sent; this module
reads their headers in place, checks them, rewrites the few fields the broker
owns (base offset, leader epoch, LogAppendTime) and decodes records only when
something needs to look inside. Legacy message sets (magic 0 and 1) are only
decoded, to convert them to magic 2.

Every decoder raises :class:`CorruptRecordError` (or a subclass) for malformed
input, never IndexError, struct.error or a codec library's own exception.
"""

from __future__ import annotations

import enum
import struct
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

import crc32c

from wire.compression import (
    Compression,
    UnsupportedCompressionError,
    compress,
    decompress,
    fix_legacy_lz4_header,
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

_INT32_MAX = 2**31 - 1
_INT32_MIN = -(2**31)
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1

_HEADER = struct.Struct(">qiibIhiqqqhii")
# Everything after the CRC field: what the CRC covers, up to the records.
_CRC_COVERED_HEADER = struct.Struct(">hiqqqhii")
_HEADER_PREFIX = struct.Struct(">qiibI")
_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
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
    if sequence > _INT32_MAX - increment:
        return increment - (_INT32_MAX - sequence) - 1
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
    (length,) = _INT32.unpack_from(buf, pos + LENGTH_OFFSET)
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
    _INT64.pack_into(buf, pos + BASE_OFFSET_OFFSET, base_offset)


def set_partition_leader_epoch(buf: WritableBuffer, pos: int, epoch: int) -> None:
    """Stamp the leader epoch (not covered by the CRC)."""
    _require_header(buf, pos)
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


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
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, max_timestamp)
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


def _corrupt(reason: str, pos: int) -> CorruptRecordError:
    return CorruptRecordError(reason, offset=pos)


def _read_varint(data: bytes, pos: int, end: int, max_bytes: int, bits: int) -> tuple[int, int]:
    """Decode a zigzag varint of at most ``max_bytes`` bytes that fits ``bits`` bits."""
    raw = 0
    shift = 0
    start = pos
    while True:
        if pos >= end:
            raise _corrupt("truncated varint", start)
        byte = data[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if pos - start >= max_bytes:
            raise _corrupt("varint too long", start)
    if raw >> bits:
        raise _corrupt("varint out of range", start)
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
        raise _corrupt(f"negative {what} length {length}", pos)
    if length > end - pos:
        raise _corrupt(f"{what} length {length} exceeds the {end - pos} bytes left", pos)
    return data[pos : pos + length], pos + length


def _decode_record(
    data: bytes, pos: int, end: int
) -> tuple[int, int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]], int]:
    """One record: (attributes, timestamp delta, offset delta, key, value, headers, next pos)."""
    length, pos = _read_varint(data, pos, end, 5, 32)
    if length < 0 or length > end - pos:
        raise _corrupt(f"record length {length} out of range ({end - pos} bytes left)", pos)
    record_end = pos + length
    if pos >= record_end:
        raise _corrupt("empty record", pos)
    attributes = data[pos]
    pos += 1
    timestamp_delta, pos = _read_varint(data, pos, record_end, 10, 64)
    offset_delta, pos = _read_varint(data, pos, record_end, 5, 32)
    key, pos = _read_bytes(data, pos, record_end, "key")
    value, pos = _read_bytes(data, pos, record_end, "value")
    count, pos = _read_varint(data, pos, record_end, 5, 32)
    # Each header takes at least two bytes, which also bounds the loop below.
    if count < 0 or count > (record_end - pos) // 2:
        raise _corrupt(f"header count {count} out of range", pos)
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        header_key, pos = _read_bytes(data, pos, record_end, "header key")
        if header_key is None:
            raise _corrupt("null header key", pos)
        try:
            name = header_key.decode("utf-8")
        except UnicodeDecodeError:
            raise _corrupt("header key is not UTF-8", pos) from None
        header_value, pos = _read_bytes(data, pos, record_end, "header value")
        headers.append((name, header_value))
    if pos != record_end:
        raise _corrupt(f"record length mismatch: {record_end - pos} bytes unread", pos)
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
        raise _corrupt(f"truncated batch: {size} bytes declared, {len(buf) - pos} present", pos)
    if verify_crc and compute_crc(buf, pos, header) != header.crc:
        raise _corrupt("crc mismatch", pos)
    count = header.records_count
    if count < 0:
        raise _corrupt(f"negative record count {count}", pos)
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
            raise _corrupt(f"batch holds {index} records but its count is {count}", pos)
        try:
            attributes, ts_delta, offset_delta, key, value, headers, at = _decode_record(
                data, at, end
            )
        except CorruptRecordError as exc:
            raise _corrupt(f"record {index}: {exc.reason}", pos) from None
        if offset_delta <= previous_delta or offset_delta > last_offset_delta:
            raise _corrupt(
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
        raise _corrupt(f"{end - at} bytes after the last of {count} records", pos)


# ---------------------------------------------------------------------------
# Building batches


def _write_varint(out: bytearray, value: int) -> None:
    """Append a zigzag varint (or varlong: the encoding is the same)."""
    raw = (value << 1) ^ (value >> 63)
    while raw > 0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def _write_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        out.append(0x01)  # zigzag(-1)
    else:
        _write_varint(out, len(value))
        out += value


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


# offset delta, timestamp, key, value, headers, attributes
_PendingRecord: TypeAlias = tuple[
    int, int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]], int
]


class RecordBatchBuilder:
    """Accumulates records and produces one complete magic 2 batch."""

    def __init__(
        self,
        base_offset: int = 0,
        compression: Compression = Compression.NONE,
        timestamp_type: TimestampType = TimestampType.CREATE_TIME,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        is_transactional: bool = False,
        is_control: bool = False,
        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
        compression_level: int | None = None,
        delete_horizon_ms: int | None = None,
    ) -> None:
        """``delete_horizon_ms`` sets compaction's delete horizon (KIP-534): it becomes
        the base timestamp, with the flag in the attributes."""
        if timestamp_type is TimestampType.NO_TIMESTAMP:
            raise ValueError("a v2 batch needs CREATE_TIME or LOG_APPEND_TIME")
        if delete_horizon_ms is not None and not 0 <= delete_horizon_ms <= _INT64_MAX:
            raise ValueError(f"delete horizon {delete_horizon_ms} is not a timestamp")
        self.base_offset = base_offset
        self.compression = Compression(compression)
        self.compression_level = compression_level
        self.timestamp_type = timestamp_type
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional
        self.is_control = is_control
        self.partition_leader_epoch = partition_leader_epoch
        self.delete_horizon_ms = delete_horizon_ms
        self._encoded: list[_PendingRecord] = []
        self._last_delta = -1
        self._last_offset_override: int | None = None

    def __len__(self) -> int:
        return len(self._encoded)

    @property
    def last_offset(self) -> int | None:
        """The absolute offset of the last record appended, None if there is none."""
        return self.base_offset + self._last_delta if self._encoded else None

    def append(
        self,
        value: bytes | None,
        key: bytes | None = None,
        headers: Iterable[tuple[str, bytes | None]] = (),
        timestamp: int | None = None,
        offset_delta: int | None = None,
        attributes: int = 0,
    ) -> int:
        """Add a record; returns its offset delta."""
        delta = self._last_delta + 1 if offset_delta is None else offset_delta
        if delta <= self._last_delta or delta > _INT32_MAX:
            raise ValueError(f"offset delta {delta} must increase and fit an int32")
        ts = _now_ms() if timestamp is None else timestamp
        if not _INT64_MIN <= ts <= _INT64_MAX:
            raise ValueError(f"timestamp {ts} does not fit an int64")
        self._encoded.append((delta, ts, key, value, tuple(headers), attributes))
        self._last_delta = delta
        return delta

    def append_record(self, record: Record | NewRecord) -> int:
        """Add a record; a :class:`Record` keeps its absolute offset."""
        if isinstance(record, Record):
            return self.append(
                record.value,
                record.key,
                record.headers,
                record.timestamp,
                record.offset - self.base_offset,
                record.attributes,
            )
        return self.append(
            record.value, record.key, record.headers, record.timestamp, record.offset_delta
        )

    def override_last_offset(self, last_offset: int) -> None:
        """End the batch at ``last_offset`` even if its last record comes earlier.

        Compaction keeps a batch's last offset when it removes the batch's last
        records, so the producer's last sequence (base sequence plus last offset
        delta) and the log's offsets stay as they were (Kafka's
        MemoryRecordsBuilder.overrideLastOffset). :meth:`build` checks that no
        record lies past it.
        """
        if not 0 <= last_offset - self.base_offset <= _INT32_MAX:
            raise ValueError(f"last offset {last_offset} does not fit a batch based at {self.base_offset}")
        self._last_offset_override = last_offset

    def build(self) -> bytes:
        """The complete batch, CRC included."""
        records = self._encoded
        if records:
            base_timestamp = records[0][1]
            max_timestamp = max(r[1] for r in records)
            last_offset_delta = self._last_delta
        else:
            base_timestamp = max_timestamp = NO_TIMESTAMP
            last_offset_delta = 0
        if self._last_offset_override is not None:
            override_delta = self._last_offset_override - self.base_offset
            if override_delta < self._last_delta:
                raise ValueError(
                    f"last offset {self._last_offset_override} precedes the last record's"
                    f" {self.base_offset + self._last_delta}"
                )
            last_offset_delta = override_delta
        if self.delete_horizon_ms is not None:
            # Record timestamps are stored as deltas from it, so they read back unchanged.
            base_timestamp = self.delete_horizon_ms
        payload = bytearray()
        body = bytearray()
        for delta, ts, key, value, headers, attributes in records:
            timestamp_delta = ts - base_timestamp
            if not _INT64_MIN <= timestamp_delta <= _INT64_MAX:
                raise ValueError(f"timestamp {ts} too far from the first record's")
            body.clear()
            body.append(attributes & 0xFF)
            _write_varint(body, timestamp_delta)
            _write_varint(body, delta)
            _write_bytes(body, key)
            _write_bytes(body, value)
            _write_varint(body, len(headers))
            for name, header_value in headers:
                _write_bytes(body, name.encode("utf-8"))
                _write_bytes(body, header_value)
            _write_varint(payload, len(body))
            payload += body
        attributes = int(self.compression)
        if self.timestamp_type is TimestampType.LOG_APPEND_TIME:
            attributes |= TIMESTAMP_TYPE_MASK
        if self.is_transactional:
            attributes |= TRANSACTIONAL_FLAG_MASK
        if self.is_control:
            attributes |= CONTROL_FLAG_MASK
        if self.delete_horizon_ms is not None:
            attributes |= DELETE_HORIZON_FLAG_MASK
        covered = _CRC_COVERED_HEADER.pack(
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            len(records),
        ) + compress(self.compression, payload, self.compression_level)
        crc = crc32c.crc32c(covered)
        batch_length = len(covered) + (ATTRIBUTES_OFFSET - PARTITION_LEADER_EPOCH_OFFSET)
        prefix = _HEADER_PREFIX.pack(
            self.base_offset, batch_length, self.partition_leader_epoch, MAGIC_V2, crc
        )
        return prefix + covered


def build_batch(
    records: Iterable[Record | NewRecord],
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    compression_level: int | None = None,
) -> bytes:
    """One complete batch holding ``records`` (see :class:`RecordBatchBuilder`)."""
    builder = RecordBatchBuilder(
        base_offset=base_offset,
        compression=compression,
        timestamp_type=timestamp_type,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        is_control=is_control,
        partition_leader_epoch=partition_leader_epoch,
        compression_level=compression_level,
    )
    for record in records:
        builder.append_record(record)
    return builder.build()


def build_empty_batch(header: RecordBatchHeader) -> bytes:
    """A batch with ``header``'s offsets, producer fields, flags and max timestamp but no records.

    What compaction keeps of a batch whose records all went when the batch
    must stay, e.g. because it holds its producer's last sequence (Kafka's
    DefaultRecordBatch.writeEmptyHeader): uncompressed, base timestamp
    NO_TIMESTAMP, no delete horizon.
    """
    attributes = header.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK)
    covered = _CRC_COVERED_HEADER.pack(
        attributes,
        header.last_offset_delta,
        NO_TIMESTAMP,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        0,
    )
    batch_length = len(covered) + (ATTRIBUTES_OFFSET - PARTITION_LEADER_EPOCH_OFFSET)
    prefix = _HEADER_PREFIX.pack(
        header.base_offset,
        batch_length,
        header.partition_leader_epoch,
        MAGIC_V2,
        crc32c.crc32c(covered),
    )
    return prefix + covered


# ---------------------------------------------------------------------------
# Control records (transaction markers)

_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")


def build_control_batch(
    control_type: ControlRecordType,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    base_offset: int = 0,
    timestamp_ms: int | None = None,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A transaction marker: a transactional control batch holding one control record."""
    builder = RecordBatchBuilder(
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )
    builder.append(
        _CONTROL_VALUE.pack(0, coordinator_epoch),
        key=_CONTROL_KEY.pack(0, int(control_type)),
        timestamp=timestamp_ms,
    )
    return builder.build()


def parse_control_record(record: Record) -> tuple[ControlRecordType, int]:
    """The marker type and coordinator epoch of a record from a control batch."""
    key = record.key
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptRecordError("control record key too short", offset=record.offset)
    version, type_id = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"control record key version {version}", offset=record.offset)
    try:
        control_type = ControlRecordType(type_id)
    except ValueError:
        raise CorruptRecordError(
            f"unknown control record type {type_id}", offset=record.offset
        ) from None
    value = record.value
    if value is None or len(value) < _CONTROL_VALUE.size:
        raise CorruptRecordError("control record value too short", offset=record.offset)
    # Later versions may append fields; the leading ones keep their meaning.
    value_version, coordinator_epoch = _CONTROL_VALUE.unpack_from(value)
    if value_version < 0:
        raise CorruptRecordError(
            f"control record value version {value_version}", offset=record.offset
        )
    return control_type, int(coordinator_epoch)


# ---------------------------------------------------------------------------
# Legacy message sets (magic 0 and 1)

# offset, message size, crc, magic, attributes
_LEGACY_PREFIX = struct.Struct(">qiIbb")
_LEGACY_CRC_START = 16  # from the entry start: magic onwards is covered
_LEGACY_MIN_SIZE = {MAGIC_V0: 14, MAGIC_V1: 22}


@dataclass(slots=True)
class LegacyMessage:
    """A message from a magic 0 or 1 message set, compressed wrappers already opened.

    ``offset`` is absolute; ``compression`` is the codec of the wrapper the
    message came out of (NONE if it was not compressed); ``timestamp`` is
    NO_TIMESTAMP for magic 0.
    """

    offset: int
    magic: int
    attributes: int
    timestamp: int
    timestamp_type: TimestampType
    key: bytes | None
    value: bytes | None
    compression: Compression = Compression.NONE


@dataclass(slots=True)
class _RawLegacy:
    position: int
    offset: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None


def _parse_legacy_set(data: BytesLike) -> Iterator[_RawLegacy]:
    """Parse a message set without opening wrappers."""
    pos = 0
    end = len(data)
    while pos < end:
        where = pos
        if end - pos < LOG_OVERHEAD:
            raise _corrupt(f"truncated legacy message: {end - pos} trailing bytes", where)
        (size,) = _INT32.unpack_from(data, pos + LENGTH_OFFSET)
        if size < _LEGACY_MIN_SIZE[MAGIC_V0]:
            raise _corrupt(f"legacy message size {size} too small", where)
        entry_end = pos + LOG_OVERHEAD + size
        if entry_end > end:
            raise _corrupt(
                f"truncated legacy message: {size} bytes declared, {end - pos - 12} present",
                where,
            )
        offset, _, stored_crc, magic, attributes = _LEGACY_PREFIX.unpack_from(data, pos)
        if magic not in (MAGIC_V0, MAGIC_V1):
            raise _corrupt(f"unsupported magic {magic} in a legacy message set", where)
        if size < _LEGACY_MIN_SIZE[magic]:
            raise _corrupt(f"legacy message size {size} too small for magic {magic}", where)
        with memoryview(data)[pos + _LEGACY_CRC_START : entry_end] as covered:
            actual = zlib.crc32(covered)
        if actual != stored_crc:
            raise _corrupt(
                f"crc mismatch: stored {stored_crc:#010x}, computed {actual:#010x}", where
            )
        at = pos + _LEGACY_PREFIX.size
        timestamp = NO_TIMESTAMP
        if magic == MAGIC_V1:
            (timestamp,) = _INT64.unpack_from(data, at)
            at += 8
        key, at = _legacy_bytes(data, at, entry_end, "key", where)
        value, at = _legacy_bytes(data, at, entry_end, "value", where)
        if at != entry_end:
            raise _corrupt(f"legacy message length mismatch: {entry_end - at} bytes unread", where)
        yield _RawLegacy(where, offset, magic, attributes, timestamp, key, value)
        pos = entry_end


def _legacy_bytes(
    data: BytesLike, pos: int, end: int, what: str, where: int
) -> tuple[bytes | None, int]:
    if end - pos < 4:
        raise _corrupt(f"truncated legacy {what} length", where)
    (length,) = _INT32.unpack_from(data, pos)
    pos += 4
    if length == -1:
        return None, pos
    if length < 0 or length > end - pos:
        raise _corrupt(f"legacy {what} length {length} out of range", where)
    return bytes(data[pos : pos + length]), pos + length


def _legacy_timestamp_type(magic: int, attributes: int) -> TimestampType:
    if magic == MAGIC_V0:
        return TimestampType.NO_TIMESTAMP
    if attributes & TIMESTAMP_TYPE_MASK:
        return TimestampType.LOG_APPEND_TIME
    return TimestampType.CREATE_TIME


def iter_legacy_messages(
    buf: BytesLike, max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
) -> Iterator[LegacyMessage]:
    """Decode a magic 0/1 message set, opening compressed wrapper messages.

    ``max_decompressed_bytes`` bounds the total inflated size of all wrappers.
    The whole of ``buf`` must be whole messages with valid CRCs.
    """
    budget = max_decompressed_bytes
    for entry in _parse_legacy_set(buf):
        where = entry.position
        try:
            codec = Compression.from_attributes(entry.attributes)
        except CorruptRecordError as exc:
            exc.offset = where
            raise
        timestamp_type = _legacy_timestamp_type(entry.magic, entry.attributes)
        if codec is Compression.NONE:
            yield LegacyMessage(
                entry.offset,
                entry.magic,
                entry.attributes,
                entry.timestamp,
                timestamp_type,
                entry.key,
                entry.value,
            )
            continue
        if codec is Compression.ZSTD:
            # Kafka only allows zstd from magic 2 on.
            raise UnsupportedCompressionError(
                f"zstd compression needs magic 2, not {entry.magic}", offset=where
            )
        if entry.value is None:
            raise _corrupt("compressed wrapper message has no value", where)
        compressed: bytes = entry.value
        if codec is Compression.LZ4 and entry.magic == MAGIC_V0:
            compressed = fix_legacy_lz4_header(compressed)
        try:
            inner_set = decompress(codec, compressed, budget)
            budget -= len(inner_set)
            inner = list(_parse_legacy_set(inner_set))
        except CorruptRecordError as exc:
            exc.offset = where
            exc.reason = f"inside compressed wrapper: {exc.reason}"
            exc.args = (exc.reason,)
            raise
        if not inner:
            raise _corrupt("compressed wrapper message holds no messages", where)
        # From magic 1 on, inner offsets are relative and the wrapper carries
        # the absolute offset of the last one.
        shift = entry.offset - inner[-1].offset if entry.magic == MAGIC_V1 else 0
        for message in inner:
            if message.magic != entry.magic:
                raise _corrupt(
                    f"inner message magic {message.magic} differs from its wrapper's {entry.magic}",
                    where,
                )
            if message.attributes & COMPRESSION_CODEC_MASK:
                raise _corrupt("compressed message nested in a compressed message", where)
            message_type: TimestampType
            if timestamp_type is TimestampType.LOG_APPEND_TIME:
                timestamp = entry.timestamp
                message_type = timestamp_type
            else:
                timestamp = message.timestamp
                message_type = _legacy_timestamp_type(message.magic, message.attributes)
            yield LegacyMessage(
                message.offset + shift,
                message.magic,
                message.attributes,
                timestamp,
                message_type,
                message.key,
                message.value,
                codec,
            )


def upconvert_legacy(
    buf: BytesLike,
    *,
    base_offset: int | None = None,
    compression: Compression | None = None,
    compression_level: int | None = None,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """Convert a magic 0/1 message set to magic 2 batches with the same content.

    Offsets are kept unless ``base_offset`` is given, in which case messages
    are numbered consecutively from it (what a produce path wants; the broker
    reassigns them anyway). ``compression`` None keeps each wrapper's codec.
    A new batch starts wherever one batch cannot carry the messages: offsets
    that do not increase, a change of codec or timestamp type, or LogAppendTime
    messages with different timestamps (a v2 batch holds one LogAppendTime).
    Magic 0 messages get timestamp NO_TIMESTAMP and CreateTime, as in Kafka.
    """
    out: list[bytes] = []
    builder: RecordBatchBuilder | None = None
    group_key: tuple[Compression, TimestampType, int] | None = None
    next_offset = base_offset
    for message in iter_legacy_messages(buf, max_decompressed_bytes):
        if next_offset is None:
            offset = message.offset
        else:
            offset = next_offset
            next_offset += 1
        codec = message.compression if compression is None else compression
        timestamp_type = (
            TimestampType.LOG_APPEND_TIME
            if message.timestamp_type is TimestampType.LOG_APPEND_TIME
            else TimestampType.CREATE_TIME
        )
        key = (
            codec,
            timestamp_type,
            message.timestamp if timestamp_type is TimestampType.LOG_APPEND_TIME else 0,
        )
        if (
            builder is None
            or key != group_key
            or offset <= (builder.last_offset if builder.last_offset is not None else -1)
            or offset - builder.base_offset > _INT32_MAX
        ):
            if builder is not None:
                out.append(builder.build())
            builder = RecordBatchBuilder(
                base_offset=offset,
                compression=codec,
                compression_level=compression_level,
                timestamp_type=timestamp_type,
                partition_leader_epoch=partition_leader_epoch,
            )
            group_key = key
        builder.append(
            message.value,
            message.key,
            timestamp=message.timestamp,
            offset_delta=offset - builder.base_offset,
        )
    if builder is not None:
        out.append(builder.build())
    return b"".join(out)
