"""Legacy message sets (magic 0 and 1): read, with their compressed wrappers opened, and
converted to magic 2 batches (:func:`upconvert_legacy`). They are only ever decoded."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

from wire.batch_builder import RecordBatchBuilder
from wire.compression import (
    Compression,
    UnsupportedCompressionError,
    decompress,
    fix_legacy_lz4_header,
)
from wire.exceptions import CorruptRecordError
from wire.records import (
    COMPRESSION_CODEC_MASK,
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    INT32,
    INT32_MAX,
    INT64,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_V0,
    MAGIC_V1,
    NO_PARTITION_LEADER_EPOCH,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    BytesLike,
    TimestampType,
    corrupt_at,
)

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
            raise corrupt_at(f"truncated legacy message: {end - pos} trailing bytes", where)
        (size,) = INT32.unpack_from(data, pos + LENGTH_OFFSET)
        if size < _LEGACY_MIN_SIZE[MAGIC_V0]:
            raise corrupt_at(f"legacy message size {size} too small", where)
        entry_end = pos + LOG_OVERHEAD + size
        if entry_end > end:
            raise corrupt_at(
                f"truncated legacy message: {size} bytes declared, {end - pos - 12} present",
                where,
            )
        offset, _, stored_crc, magic, attributes = _LEGACY_PREFIX.unpack_from(data, pos)
        if magic not in (MAGIC_V0, MAGIC_V1):
            raise corrupt_at(f"unsupported magic {magic} in a legacy message set", where)
        if size < _LEGACY_MIN_SIZE[magic]:
            raise corrupt_at(f"legacy message size {size} too small for magic {magic}", where)
        with memoryview(data)[pos + _LEGACY_CRC_START : entry_end] as covered:
            actual = zlib.crc32(covered)
        if actual != stored_crc:
            raise corrupt_at(
                f"crc mismatch: stored {stored_crc:#010x}, computed {actual:#010x}", where
            )
        at = pos + _LEGACY_PREFIX.size
        timestamp = NO_TIMESTAMP
        if magic == MAGIC_V1:
            (timestamp,) = INT64.unpack_from(data, at)
            at += 8
        key, at = _legacy_bytes(data, at, entry_end, "key", where)
        value, at = _legacy_bytes(data, at, entry_end, "value", where)
        if at != entry_end:
            raise corrupt_at(f"legacy message length mismatch: {entry_end - at} bytes unread", where)
        yield _RawLegacy(where, offset, magic, attributes, timestamp, key, value)
        pos = entry_end


def _legacy_bytes(
    data: BytesLike, pos: int, end: int, what: str, where: int
) -> tuple[bytes | None, int]:
    if end - pos < 4:
        raise corrupt_at(f"truncated legacy {what} length", where)
    (length,) = INT32.unpack_from(data, pos)
    pos += 4
    if length == -1:
        return None, pos
    if length < 0 or length > end - pos:
        raise corrupt_at(f"legacy {what} length {length} out of range", where)
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
            raise corrupt_at("compressed wrapper message has no value", where)
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
            raise corrupt_at("compressed wrapper message holds no messages", where)
        # From magic 1 on, inner offsets are relative and the wrapper carries
        # the absolute offset of the last one.
        shift = entry.offset - inner[-1].offset if entry.magic == MAGIC_V1 else 0
        for message in inner:
            if message.magic != entry.magic:
                raise corrupt_at(
                    f"inner message magic {message.magic} differs from its wrapper's {entry.magic}",
                    where,
                )
            if message.attributes & COMPRESSION_CODEC_MASK:
                raise corrupt_at("compressed message nested in a compressed message", where)
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
            or offset - builder.base_offset > INT32_MAX
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

