"""Tests for wire.records: v2 batches, in-place rewrites, control and legacy messages."""

from __future__ import annotations

import json
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import crc32c
import lz4.frame  # type: ignore[import-untyped]
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

import wire.compression
import wire.records
from wire.batch_builder import RecordBatchBuilder, build_batch, build_control_batch
from wire.compression import Compression, UnsupportedCompressionError, compress
from wire.exceptions import CorruptRecordError, DecodeError, DecompressionLimitError
from wire.legacy_records import LegacyMessage, iter_legacy_messages, upconvert_legacy
from wire.records import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    BASE_SEQUENCE_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    BATCH_HEADER_SIZE,
    CRC_OFFSET,
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    MAX_TIMESTAMP_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET,
    PRODUCER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET,
    RECORDS_COUNT_OFFSET,
    ControlRecordType,
    NewRecord,
    Record,
    TimestampType,
    batch_size_at,
    compute_crc,
    crc_is_valid,
    increment_sequence,
    iter_batch_headers,
    iter_records,
    parse_control_record,
    peek_magic,
    read_batch_header,
    set_base_offset,
    set_max_timestamp_and_type,
    set_partition_leader_epoch,
    validate_batch,
    validate_batches,
)

CODECS = list(Compression)
MiB = 1024 * 1024
INT32_MAX = 2**31 - 1


# --- hand encoding, independent of the module under test ----------------------


def varint(value: int) -> bytes:
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        if raw < 0x80:
            out.append(raw)
            return bytes(out)
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7


def blob(value: bytes | None) -> bytes:
    return varint(-1) if value is None else varint(len(value)) + value


def raw_record(
    offset_delta: int,
    timestamp_delta: int = 0,
    key: bytes | None = None,
    value: bytes | None = b"v",
    headers: list[tuple[bytes | None, bytes | None]] | None = None,
) -> bytes:
    body = b"\x00" + varint(timestamp_delta) + varint(offset_delta) + blob(key) + blob(value)
    body += varint(len(headers or []))
    for name, header_value in headers or []:
        body += blob(name) + blob(header_value)
    return varint(len(body)) + body


def raw_batch(
    payload: bytes,
    *,
    count: int,
    last_offset_delta: int,
    attributes: int = 0,
    base_offset: int = 0,
    base_timestamp: int = 1_000,
    max_timestamp: int = 1_000,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    magic: int = 2,
) -> bytes:
    covered = (
        struct.pack(
            ">hiqqqhii",
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
        + payload
    )
    prefix = struct.pack(
        ">qiibI",
        base_offset,
        len(covered) + 9,
        partition_leader_epoch,
        magic,
        crc32c.crc32c(covered),
    )
    return prefix + covered


def sample_records(n: int = 5, start_ts: int = 1_700_000_000_000) -> list[NewRecord]:
    return [
        NewRecord(
            key=None if i == 2 else f"k{i}".encode(),
            value=None if i == 3 else b"value-%d-" % i * 7,
            headers=[("trace", b"t%d" % i), ("empty", None)] if i % 2 else [],
            timestamp=start_ts + 10 * i,
        )
        for i in range(n)
    ]


# --- layout and header ------------------------------------------------------------


def test_layout_offsets() -> None:
    batch = build_batch(
        [NewRecord(b"k", b"v", timestamp=5_000), NewRecord(b"k", b"v", timestamp=7_000)],
        base_offset=0x0102030405060708,
        producer_id=0x1112131415161718,
        producer_epoch=0x2122,
        base_sequence=0x31323334,
        partition_leader_epoch=0x41424344,
        is_transactional=True,
    )
    assert BATCH_HEADER_SIZE == 61 and LOG_OVERHEAD == 12 and MAGIC_V2 == 2
    fields = [
        (BASE_OFFSET_OFFSET, ">q", 0x0102030405060708),
        (LENGTH_OFFSET, ">i", len(batch) - 12),
        (PARTITION_LEADER_EPOCH_OFFSET, ">i", 0x41424344),
        (MAGIC_OFFSET, ">b", 2),
        (CRC_OFFSET, ">I", crc32c.crc32c(batch[ATTRIBUTES_OFFSET:])),
        (ATTRIBUTES_OFFSET, ">h", 0x10),
        (LAST_OFFSET_DELTA_OFFSET, ">i", 1),
        (BASE_TIMESTAMP_OFFSET, ">q", 5_000),
        (MAX_TIMESTAMP_OFFSET, ">q", 7_000),
        (PRODUCER_ID_OFFSET, ">q", 0x1112131415161718),
        (PRODUCER_EPOCH_OFFSET, ">h", 0x2122),
        (BASE_SEQUENCE_OFFSET, ">i", 0x31323334),
        (RECORDS_COUNT_OFFSET, ">i", 2),
    ]
    for offset, fmt, expected in fields:
        assert struct.unpack_from(fmt, batch, offset)[0] == expected, offset


def test_builder_matches_hand_encoding() -> None:
    records = [
        NewRecord(b"key", b"value", [("h1", b"x"), ("h2", None)], timestamp=1_000),
        NewRecord(None, None, timestamp=990, offset_delta=3),
        NewRecord(b"", b"", timestamp=1_300_000),
    ]
    payload = (
        raw_record(0, 0, b"key", b"value", [(b"h1", b"x"), (b"h2", None)])
        + raw_record(3, -10, None, None)
        + raw_record(4, 1_299_000, b"", b"")
    )
    expected = raw_batch(
        payload, count=3, last_offset_delta=4, base_offset=7, max_timestamp=1_300_000
    )
    assert build_batch(records, base_offset=7) == expected


def test_header_properties() -> None:
    batch = build_batch(
        sample_records(3),
        base_offset=100,
        compression=Compression.LZ4,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        producer_id=42,
        producer_epoch=3,
        base_sequence=10,
        is_transactional=True,
        partition_leader_epoch=9,
    )
    header = read_batch_header(batch)
    assert header.magic == 2
    assert header.compression is Compression.LZ4
    assert header.codec_id == 3
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.is_transactional and not header.is_control
    assert not header.has_delete_horizon and header.delete_horizon_ms is None
    assert header.base_offset == 100 and header.last_offset_delta == 2
    assert header.last_offset == 102 and header.next_offset == 103
    assert header.size_in_bytes == len(batch) == header.batch_length + 12
    assert header.records_count == 3
    assert header.last_sequence == 12
    assert header.partition_leader_epoch == 9
    assert header.producer_id == 42 and header.producer_epoch == 3
    assert header.crc == compute_crc(batch, 0, header) == compute_crc(batch, 0, len(batch))

    plain = read_batch_header(build_batch(sample_records(1)))
    assert plain.timestamp_type is TimestampType.CREATE_TIME
    assert plain.last_sequence == -1
    assert not plain.is_transactional and not plain.has_producer_id


def test_sequence_wraps_like_kafka() -> None:
    assert increment_sequence(5, 3) == 8
    assert increment_sequence(INT32_MAX, 1) == 0
    assert increment_sequence(INT32_MAX - 1, 2) == 0
    assert increment_sequence(INT32_MAX - 1, 4) == 2
    batch = build_batch(sample_records(3), base_sequence=INT32_MAX - 1, producer_id=1)
    assert read_batch_header(batch).last_sequence == 0


def test_delete_horizon_flag() -> None:
    batch = raw_batch(
        raw_record(0), count=1, last_offset_delta=0, attributes=0x40, base_timestamp=77
    )
    header = validate_batch(batch)
    assert header.has_delete_horizon and header.delete_horizon_ms == 77


def test_read_batch_header_errors() -> None:
    batch = build_batch(sample_records(1))
    padded = b"\x00" * 5 + batch
    assert read_batch_header(padded, 5) == read_batch_header(batch)
    with pytest.raises(CorruptRecordError, match="truncated") as info:
        read_batch_header(padded[:65], 5)
    assert info.value.offset == 5
    wrong_magic = bytearray(batch)
    wrong_magic[MAGIC_OFFSET] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        read_batch_header(wrong_magic)
    short = bytearray(batch)
    struct.pack_into(">i", short, LENGTH_OFFSET, 48)
    with pytest.raises(CorruptRecordError, match="below the minimum"):
        read_batch_header(short)
    with pytest.raises(CorruptRecordError):
        read_batch_header(batch, -1)


def test_read_batch_header_does_not_need_the_payload() -> None:
    batch = build_batch([NewRecord(None, bytes(10_000))])
    header = read_batch_header(memoryview(batch)[:BATCH_HEADER_SIZE])
    assert header.size_in_bytes == len(batch)


def test_peek_magic_and_batch_size_at() -> None:
    batch = build_batch(sample_records(2))
    buf = b"xx" + batch
    assert peek_magic(buf, 2) == 2
    assert peek_magic(buf[:18], 2) is None
    assert peek_magic(b"\x00" * 16 + b"\xff") == -1
    assert batch_size_at(buf, 2) == len(batch)
    assert batch_size_at(buf[:13], 2) is None
    assert batch_size_at(buf[:14], 2) == len(batch)
    with pytest.raises(CorruptRecordError, match="negative"):
        batch_size_at(b"\x00" * 8 + struct.pack(">i", -5))


# --- walking and validating ------------------------------------------------------


def three_batches() -> tuple[bytes, list[int]]:
    batches = [
        build_batch(sample_records(2), base_offset=0),
        build_batch(sample_records(3), base_offset=2, compression=Compression.GZIP),
        build_batch(sample_records(1), base_offset=5, compression=Compression.ZSTD),
    ]
    positions = [0, len(batches[0]), len(batches[0]) + len(batches[1])]
    return b"".join(batches), positions


def test_iter_batch_headers_stops_at_torn_tail() -> None:
    buf, positions = three_batches()
    found = list(iter_batch_headers(buf))
    assert [pos for pos, _ in found] == positions
    assert [h.base_offset for _, h in found] == [0, 2, 5]
    for cut in (len(buf) - 1, positions[2] + 11, positions[2] + 12, positions[2] + 60):
        walked = list(iter_batch_headers(buf[:cut]))
        assert [pos for pos, _ in walked] == positions[:2]
        end = walked[-1][0] + walked[-1][1].size_in_bytes
        assert end == positions[2] < cut
    assert [pos for pos, _ in iter_batch_headers(buf, positions[1])] == positions[1:]
    assert list(iter_batch_headers(b"")) == []


def test_validate_batches() -> None:
    buf, positions = three_batches()
    headers = validate_batches(buf)
    assert [h.records_count for h in headers] == [2, 3, 1]
    assert validate_batches(b"") == []
    assert validate_batches(memoryview(buf)) == headers
    assert [validate_batch(buf, pos) for pos in positions] == headers

    with pytest.raises(CorruptRecordError, match="batch length mismatch") as info:
        validate_batches(buf[:-1])
    assert info.value.offset == positions[2]
    with pytest.raises(CorruptRecordError, match="batch length mismatch"):
        validate_batches(buf + b"\x00" * 5)
    with pytest.raises(CorruptRecordError, match="below the minimum"):
        validate_batches(buf + b"\x00" * 20)

    flipped = bytearray(buf)
    flipped[positions[1] + 70] ^= 0x01
    with pytest.raises(CorruptRecordError, match="crc mismatch") as info:
        validate_batches(flipped)
    assert info.value.offset == positions[1]

    old_magic = bytearray(buf)
    old_magic[positions[2] + MAGIC_OFFSET] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        validate_batches(old_magic)


def test_every_truncation_fails_validation() -> None:
    buf, positions = three_batches()
    for cut in range(len(buf)):
        if cut in positions:
            assert len(validate_batches(buf[:cut])) == positions.index(cut)
            continue
        with pytest.raises(CorruptRecordError):
            validate_batches(buf[:cut])


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_crc_catches_every_single_bit_flip(codec: Compression) -> None:
    batch = build_batch(sample_records(3), compression=codec, producer_id=7, base_sequence=0)
    assert crc_is_valid(batch)
    buf = bytearray(batch)
    for byte in range(len(buf)):
        for bit in range(8):
            buf[byte] ^= 1 << bit
            if byte < MAGIC_OFFSET:
                # Base offset, length and leader epoch are outside the CRC; a
                # changed length shows up as a size mismatch instead.
                if LENGTH_OFFSET <= byte < PARTITION_LEADER_EPOCH_OFFSET:
                    with pytest.raises(CorruptRecordError):
                        validate_batches(buf)
                else:
                    assert crc_is_valid(buf)
            else:
                assert not crc_is_valid(buf), (byte, bit)
                with pytest.raises(CorruptRecordError):
                    validate_batches(buf)
            buf[byte] ^= 1 << bit
    assert bytes(buf) == batch


def test_crc_is_valid_never_raises() -> None:
    batch = build_batch(sample_records(2))
    assert crc_is_valid(b"xyz" + batch, 3)
    assert not crc_is_valid(batch[:-1])
    assert not crc_is_valid(b"")
    assert not crc_is_valid(b"\xff" * 100)
    assert not crc_is_valid(batch, 1)


# --- in-place rewrites --------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_in_place_rewrites_keep_batch_valid(
    codec: Compression, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = sample_records(4)
    batch = build_batch(records, compression=codec)
    buf = bytearray(b"\xaa" * 9 + batch + b"\xbb" * 4)
    view = memoryview(buf)[9 : 9 + len(batch)]

    def no_decompress(*args: object, **kwargs: object) -> bytes:
        raise AssertionError("rewrites must not decompress")

    monkeypatch.setattr(wire.records, "decompress", no_decompress)
    monkeypatch.setattr(wire.compression, "decompress", no_decompress)
    set_base_offset(buf, 9, 1_000)
    set_partition_leader_epoch(view, 0, 17)
    set_max_timestamp_and_type(buf, 9, 1_800_000_000_000, TimestampType.LOG_APPEND_TIME)
    monkeypatch.undo()

    assert buf[:9] == b"\xaa" * 9 and buf[-4:] == b"\xbb" * 4
    header = validate_batch(buf, 9)
    assert header.base_offset == 1_000
    assert header.partition_leader_epoch == 17
    assert header.max_timestamp == 1_800_000_000_000
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.compression is codec
    decoded = list(iter_records(buf, 9))
    assert [r.offset for r in decoded] == [1_000, 1_001, 1_002, 1_003]
    assert {r.timestamp for r in decoded} == {1_800_000_000_000}
    assert [r.value for r in decoded] == [r.value for r in records]

    # Back to CreateTime: the records' own timestamps show again.
    max_create = max(r.timestamp for r in records if r.timestamp is not None)
    set_max_timestamp_and_type(view, 0, max_create, TimestampType.CREATE_TIME)
    validate_batch(view)
    assert [r.timestamp for r in iter_records(view)] == [r.timestamp for r in records]


def test_set_max_timestamp_without_change_leaves_bytes() -> None:
    batch = build_batch(sample_records(2))
    header = read_batch_header(batch)
    buf = bytearray(batch)
    set_max_timestamp_and_type(buf, 0, header.max_timestamp, TimestampType.CREATE_TIME)
    assert bytes(buf) == batch
    with pytest.raises(ValueError):
        set_max_timestamp_and_type(buf, 0, 1, TimestampType.NO_TIMESTAMP)


def test_rewrites_reject_short_buffers() -> None:
    batch = bytearray(build_batch(sample_records(2)))
    with pytest.raises(CorruptRecordError):
        set_base_offset(batch[:40], 0, 1)
    with pytest.raises(CorruptRecordError):
        set_partition_leader_epoch(batch, len(batch) - 10, 1)
    with pytest.raises(CorruptRecordError):
        set_max_timestamp_and_type(batch[:-1], 0, 5, TimestampType.LOG_APPEND_TIME)


# --- records ------------------------------------------------------------------------------

header_names = st.text(max_size=8)
optional_bytes = st.none() | st.binary(max_size=64)
new_records = st.lists(
    st.tuples(
        optional_bytes,
        optional_bytes,
        st.lists(st.tuples(header_names, optional_bytes), max_size=3),
        st.integers(-1, 2**45),
        st.integers(1, 4),
    ),
    max_size=12,
)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@settings(max_examples=30, deadline=None)
@given(spec=new_records, base_offset=st.integers(0, 2**40))
def test_round_trip(
    codec: Compression,
    spec: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int, int]],
    base_offset: int,
) -> None:
    builder = RecordBatchBuilder(base_offset=base_offset, compression=codec)
    expected = []
    delta = -1
    for key, value, headers, timestamp, gap in spec:
        delta += gap
        builder.append(value, key, headers, timestamp, delta)
        expected.append(Record(base_offset + delta, timestamp, key, value, headers))
    assert len(builder) == len(spec)
    batch = builder.build()
    header = validate_batches(batch)[0]
    assert header.compression is codec
    assert header.records_count == len(spec)
    assert header.last_offset_delta == max(delta, 0)
    if spec:
        assert header.max_timestamp == max(s[3] for s in spec)
    assert list(iter_records(batch)) == expected


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_round_trip_of_decoded_records(codec: Compression) -> None:
    original = build_batch(sample_records(5), base_offset=50, compression=codec)
    decoded = list(iter_records(original))
    # Records keep their absolute offsets when rebuilt at the same base.
    assert build_batch(decoded, base_offset=50, compression=codec) == original
    assert [r.offset for r in iter_records(build_batch(decoded, base_offset=48))] == [
        50,
        51,
        52,
        53,
        54,
    ]


def test_builder_defaults_and_checks() -> None:
    before = time.time_ns() // 1_000_000
    batch = build_batch([NewRecord(None, b"now")])
    after = time.time_ns() // 1_000_000
    (record,) = iter_records(batch)
    assert before <= record.timestamp <= after
    builder = RecordBatchBuilder()
    assert builder.last_offset is None
    builder.append(b"a", offset_delta=5)
    assert builder.last_offset == 5
    with pytest.raises(ValueError):
        builder.append(b"b", offset_delta=5)
    with pytest.raises(ValueError):
        builder.append(b"b", offset_delta=2**31)
    with pytest.raises(ValueError):
        RecordBatchBuilder(timestamp_type=TimestampType.NO_TIMESTAMP)
    far_apart = RecordBatchBuilder()
    far_apart.append(b"a", timestamp=-(2**63))
    far_apart.append(b"b", timestamp=2**63 - 1)
    with pytest.raises(ValueError):
        far_apart.build()


def test_empty_batch() -> None:
    batch = RecordBatchBuilder(base_offset=9).build()
    header = validate_batch(batch)
    assert header.records_count == 0 and len(batch) == BATCH_HEADER_SIZE
    assert header.base_timestamp == header.max_timestamp == -1
    assert list(iter_records(batch)) == []


def test_iter_records_is_lazy() -> None:
    good = raw_record(0, key=b"a") + raw_record(1, key=b"b")
    batch = raw_batch(good + b"\xff", count=3, last_offset_delta=2)
    records = iter_records(batch)
    assert next(records).key == b"a"
    assert next(records).key == b"b"
    with pytest.raises(CorruptRecordError):
        next(records)
    # Nothing is checked until iteration starts.
    lazy = iter_records(b"garbage")
    with pytest.raises(CorruptRecordError):
        next(lazy)


def test_log_append_time_applies_to_every_record() -> None:
    payload = raw_record(0, 5) + raw_record(1, 9)
    batch = raw_batch(payload, count=2, last_offset_delta=1, attributes=0x08, max_timestamp=123)
    assert [r.timestamp for r in iter_records(batch)] == [123, 123]


CORRUPT_PAYLOADS = {
    "over-long varint": (b"\xff\xff\xff\xff\xff\x01" + b"\x00" * 10, 1, 0, "too long"),
    "varint beyond 32 bits": (b"\xff\xff\xff\xff\x7f" + b"\x00" * 10, 1, 0, "out of range"),
    "over-long varlong": (
        varint(13) + b"\x00" + b"\xff" * 10 + b"\x01" + b"\x00",
        1,
        0,
        "too long",
    ),
    "record past the end": (varint(50) + b"\x00" * 10, 1, 0, "out of range"),
    "negative record length": (varint(-3) + b"\x00" * 10, 1, 0, "out of range"),
    "truncated varint": (varint(3) + b"\x00\x00\x80", 1, 0, "truncated varint"),
    "key past the record": (varint(5) + b"\x00\x00\x00" + varint(40) + b"k", 1, 0, "key length"),
    "key length -2": (varint(6) + b"\x00\x00\x00" + varint(-2) + b"\x00\x00", 1, 0, "negative key"),
    "negative header count": (
        varint(6) + b"\x00\x00\x00" + blob(None) + blob(None) + varint(-1),
        1,
        0,
        "header count",
    ),
    "null header key": (raw_record(0, headers=[(None, b"x")]), 1, 0, "null header key"),
    "header key not utf-8": (raw_record(0, headers=[(b"\xff\xfe", b"x")]), 1, 0, "UTF-8"),
    "record longer than its fields": (
        varint(8) + b"\x00\x00\x00" + blob(None) + blob(None) + varint(0) + b"\x00\x00",
        1,
        0,
        "record length mismatch",
    ),
    "fewer records than counted": (raw_record(0) + raw_record(1), 3, 2, "count is 3"),
    "more records than counted": (raw_record(0) + raw_record(1), 1, 1, "after the last"),
    "offset deltas going back": (raw_record(1) + raw_record(0), 2, 1, "out of order"),
    "repeated offset delta": (raw_record(0) + raw_record(0), 2, 0, "out of order"),
    "offset delta past last": (raw_record(0) + raw_record(5), 2, 3, "out of order"),
    "negative offset delta": (raw_record(-1), 1, 0, "out of order"),
    "negative count": (b"", -1, 0, "negative record count"),
    "empty record": (varint(0), 1, 0, "empty record"),
}


@pytest.mark.parametrize("case", list(CORRUPT_PAYLOADS), ids=str)
@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD], ids=lambda c: c.name)
def test_corrupt_records(case: str, codec: Compression) -> None:
    payload, count, last_delta, reason = CORRUPT_PAYLOADS[case]
    batch = raw_batch(
        compress(codec, payload), count=count, last_offset_delta=last_delta, attributes=codec
    )
    with pytest.raises(CorruptRecordError, match=reason) as info:
        list(iter_records(b"\x00" * 3 + batch, 3))
    assert info.value.offset == 3


def test_batch_level_errors() -> None:
    batch = build_batch(sample_records(2), compression=Compression.GZIP)
    with pytest.raises(CorruptRecordError, match="truncated batch"):
        list(iter_records(batch[:-1]))
    flipped = bytearray(batch)
    flipped[-3] ^= 0x10
    with pytest.raises(CorruptRecordError, match="crc mismatch"):
        list(iter_records(flipped))
    with pytest.raises(CorruptRecordError, match="gzip"):
        list(iter_records(flipped, verify_crc=False))
    unknown = raw_batch(raw_record(0), count=1, last_offset_delta=0, attributes=6)
    with pytest.raises(UnsupportedCompressionError, match="codec 6") as info:
        list(iter_records(b"\x00" + unknown, 1))
    assert info.value.offset == 1
    assert validate_batch(unknown).codec_id == 6
    with pytest.raises(UnsupportedCompressionError):
        _ = validate_batch(unknown).compression


def test_compressed_batch_bomb() -> None:
    # 1 GiB of zero-valued records' worth of zstd, streamed so the test stays small.
    writer = zstandard.ZstdCompressor(level=1).compressobj()
    chunk = bytes(MiB)
    packed = b"".join(writer.compress(chunk) for _ in range(1024)) + writer.flush()
    batch = raw_batch(packed, count=1, last_offset_delta=0, attributes=Compression.ZSTD)
    started = time.perf_counter()
    with pytest.raises(DecompressionLimitError):
        list(iter_records(batch, max_decompressed_bytes=MiB))
    assert time.perf_counter() - started < 1.0


# --- fuzzing --------------------------------------------------------------------------


def fuzz_corpus() -> list[bytes]:
    corpus = [
        build_batch(sample_records(4), compression=codec, producer_id=3, base_sequence=0)
        for codec in CODECS
    ]
    corpus.append(build_control_batch(ControlRecordType.ABORT, 3, 1, 5, timestamp_ms=1))
    return corpus


FUZZ_CORPUS = fuzz_corpus()


def exercise(buf: bytes) -> None:
    """Run every decoder over ``buf``; only DecodeError subclasses may escape."""
    crc_is_valid(buf)
    for decode in (
        lambda: validate_batches(buf),
        lambda: list(iter_batch_headers(buf)),
        lambda: list(iter_records(buf, verify_crc=False, max_decompressed_bytes=MiB)),
        lambda: [
            parse_control_record(r)
            for r in iter_records(buf, verify_crc=False, max_decompressed_bytes=MiB)
        ],
        lambda: peek_magic(buf, 0),
        lambda: batch_size_at(buf, 0),
    ):
        try:
            decode()
        except DecodeError:
            pass


mutation = st.tuples(
    st.sampled_from(["set", "flip", "delete", "insert"]),
    st.integers(0, 10_000),
    st.integers(0, 255),
)


@settings(max_examples=300, deadline=None)
@given(
    index=st.integers(0, len(FUZZ_CORPUS) - 1),
    mutations=st.lists(mutation, min_size=1, max_size=4),
    cut=st.none() | st.integers(0, 400),
)
def test_fuzz_batches(index: int, mutations: list[tuple[str, int, int]], cut: int | None) -> None:
    buf = bytearray(FUZZ_CORPUS[index])
    for kind, at, value in mutations:
        at %= len(buf) + 1
        if kind == "insert":
            buf[at:at] = bytes([value])
        elif at < len(buf):
            if kind == "set":
                buf[at] = value
            elif kind == "flip":
                buf[at] ^= 1 << (value % 8)
            else:
                del buf[at]
    exercise(bytes(buf if cut is None else buf[:cut]))


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_fuzz_record_payloads(codec: Compression, data: st.DataObject) -> None:
    # Mutate the records before compressing, so the record decoder (not the
    # codec) sees the damage, behind a valid header and CRC.
    payload = bytearray(raw_record(0, 0, b"k", b"v" * 20, [(b"h", b"x")]) + raw_record(1, 7))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(payload) - 1))
        payload[at] = data.draw(st.integers(0, 255))
    count = data.draw(st.integers(0, 3))
    batch = raw_batch(compress(codec, payload), count=count, last_offset_delta=1, attributes=codec)
    try:
        records = list(iter_records(batch))
    except DecodeError:
        return
    assert len(records) == count


# --- control records ------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(ControlRecordType), ids=lambda k: k.name)
def test_control_batch(kind: ControlRecordType) -> None:
    batch = build_control_batch(
        kind,
        producer_id=77,
        producer_epoch=4,
        coordinator_epoch=12,
        base_offset=300,
        timestamp_ms=1_700_000_000_123,
        partition_leader_epoch=6,
    )
    header = validate_batch(batch)
    assert header.is_control and header.is_transactional
    assert header.compression is Compression.NONE
    assert (header.producer_id, header.producer_epoch) == (77, 4)
    assert header.base_sequence == -1 and header.partition_leader_epoch == 6
    (record,) = iter_records(batch)
    assert record.offset == 300 and record.timestamp == 1_700_000_000_123
    assert record.key == struct.pack(">hh", 0, kind)
    assert record.value == struct.pack(">hi", 0, 12)
    assert parse_control_record(record) == (kind, 12)


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (None, struct.pack(">hi", 0, 1), "key too short"),
        (b"\x00\x00\x00", struct.pack(">hi", 0, 1), "key too short"),
        (struct.pack(">hh", -1, 0), struct.pack(">hi", 0, 1), "key version"),
        (struct.pack(">hh", 0, 9), struct.pack(">hi", 0, 1), "unknown control record type 9"),
        (struct.pack(">hh", 0, 1), b"\x00\x00\x00", "value too short"),
        (struct.pack(">hh", 0, 1), None, "value too short"),
        (struct.pack(">hh", 0, 1), struct.pack(">hi", -1, 1), "value version"),
    ],
)
def test_bad_control_records(key: bytes | None, value: bytes | None, reason: str) -> None:
    with pytest.raises(CorruptRecordError, match=reason):
        parse_control_record(Record(0, 0, key, value, []))


def test_control_record_tolerates_newer_versions() -> None:
    record = Record(0, 0, struct.pack(">hh", 3, 0), struct.pack(">hi", 2, 8) + b"extra", [])
    assert parse_control_record(record) == (ControlRecordType.ABORT, 8)


# --- legacy message sets ------------------------------------------------------------


def legacy(
    offset: int,
    value: bytes | None,
    key: bytes | None = None,
    *,
    magic: int = 0,
    attributes: int = 0,
    timestamp: int = 0,
) -> bytes:
    """One legacy log entry: offset, size, then the message with its CRC-32."""
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for part in (key, value):
        body += struct.pack(">i", -1) if part is None else struct.pack(">i", len(part)) + part
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(message)) + message


def gzip(data: bytes) -> bytes:
    return compress(Compression.GZIP, data)


def test_legacy_v0_uncompressed() -> None:
    buf = legacy(0, b"a", b"k") + legacy(1, None) + legacy(2, b"", None)
    messages = list(iter_legacy_messages(buf))
    assert messages == [
        LegacyMessage(0, 0, 0, -1, TimestampType.NO_TIMESTAMP, b"k", b"a"),
        LegacyMessage(1, 0, 0, -1, TimestampType.NO_TIMESTAMP, None, None),
        LegacyMessage(2, 0, 0, -1, TimestampType.NO_TIMESTAMP, None, b""),
    ]


def test_legacy_v1_timestamps() -> None:
    buf = legacy(10, b"a", magic=1, timestamp=1_000) + legacy(
        11, b"b", magic=1, timestamp=2_000, attributes=0x08
    )
    first, second = iter_legacy_messages(buf)
    assert (first.offset, first.timestamp, first.timestamp_type) == (
        10,
        1_000,
        TimestampType.CREATE_TIME,
    )
    assert (second.timestamp, second.timestamp_type) == (2_000, TimestampType.LOG_APPEND_TIME)


@pytest.mark.parametrize(
    "codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4], ids=lambda c: c.name
)
def test_legacy_v1_wrapper_offsets_are_relative(codec: Compression) -> None:
    inner = b"".join(
        legacy(i, b"v%d" % i, b"k%d" % i, magic=1, timestamp=500 + i) for i in range(3)
    )
    # The wrapper carries the absolute offset of the last inner message.
    wrapper = legacy(102, compress(codec, inner), magic=1, attributes=codec, timestamp=502)
    messages = list(iter_legacy_messages(legacy(99, b"plain", magic=1, timestamp=1) + wrapper))
    assert [m.offset for m in messages] == [99, 100, 101, 102]
    assert [m.value for m in messages] == [b"plain", b"v0", b"v1", b"v2"]
    assert [m.timestamp for m in messages] == [1, 500, 501, 502]
    assert [m.compression for m in messages] == [Compression.NONE, codec, codec, codec]


def test_legacy_v1_log_append_time_wrapper() -> None:
    inner = legacy(0, b"a", magic=1, timestamp=5) + legacy(1, b"b", magic=1, timestamp=6)
    wrapper = legacy(1, gzip(inner), magic=1, attributes=0x08 | 1, timestamp=9_999)
    messages = list(iter_legacy_messages(wrapper))
    assert [m.timestamp for m in messages] == [9_999, 9_999]
    assert {m.timestamp_type for m in messages} == {TimestampType.LOG_APPEND_TIME}


def test_legacy_v0_wrapper_offsets_are_absolute() -> None:
    inner = legacy(40, b"a") + legacy(41, b"b")
    messages = list(iter_legacy_messages(legacy(41, gzip(inner), attributes=1)))
    assert [(m.offset, m.value) for m in messages] == [(40, b"a"), (41, b"b")]


def test_legacy_v0_lz4_with_old_kafka_checksum() -> None:
    inner = legacy(0, b"a" * 100) + legacy(1, b"b" * 100)
    frame = bytearray(lz4.frame.compress(inner, store_size=False))
    frame[6] ^= 0xFF  # old clients wrote a wrong descriptor checksum
    messages = list(iter_legacy_messages(legacy(1, bytes(frame), attributes=3)))
    assert [m.value for m in messages] == [b"a" * 100, b"b" * 100]
    # From magic 1 on the checksum must be right.
    inner_v1 = legacy(0, b"a", magic=1)
    frame_v1 = bytearray(lz4.frame.compress(inner_v1, store_size=False))
    frame_v1[6] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        list(iter_legacy_messages(legacy(0, bytes(frame_v1), magic=1, attributes=3)))


def with_bad_crc(entry: bytes) -> bytes:
    damaged = bytearray(entry)
    damaged[12] ^= 0xFF  # first byte of the CRC
    return bytes(damaged)


LEGACY_ERRORS: list[tuple[bytes, type[Exception], str]] = [
    (legacy(0, b"a")[:-1], CorruptRecordError, "truncated legacy message"),
    (legacy(0, b"a") + b"\x00" * 5, CorruptRecordError, "5 trailing bytes"),
    (with_bad_crc(legacy(0, b"abc")), CorruptRecordError, "crc mismatch"),
    (struct.pack(">qi", 0, 20) + b"\x00" * 20, CorruptRecordError, "crc mismatch"),
    (struct.pack(">qi", 0, 3) + b"\x00" * 3, CorruptRecordError, "too small"),
    (legacy(0, b"a", magic=2), CorruptRecordError, "magic 2"),
    (
        struct.pack(">qiIbb", 0, 14, 0, 1, 0) + b"\x00" * 8,
        CorruptRecordError,
        "too small for magic 1",
    ),
    (legacy(0, None, attributes=1), CorruptRecordError, "no value"),
    (legacy(0, gzip(b""), attributes=1), CorruptRecordError, "no messages"),
    (legacy(0, gzip(b"junk"), attributes=1), CorruptRecordError, "inside compressed"),
    (legacy(0, b"x", attributes=4, magic=1), UnsupportedCompressionError, "zstd"),
    (legacy(0, b"x", attributes=5), UnsupportedCompressionError, "codec 5"),
    (
        legacy(0, gzip(legacy(0, gzip(legacy(0, b"a")), attributes=1)), attributes=1),
        CorruptRecordError,
        "nested",
    ),
    (
        legacy(0, gzip(legacy(0, b"a", magic=1)), attributes=1),
        CorruptRecordError,
        "differs from its wrapper",
    ),
]


@pytest.mark.parametrize(
    ("buf", "error", "reason"), [pytest.param(*case, id=case[2]) for case in LEGACY_ERRORS]
)
def test_legacy_errors(buf: bytes, error: type[Exception], reason: str) -> None:
    with pytest.raises(error, match=reason):
        list(iter_legacy_messages(buf))


def test_legacy_bomb_budget_spans_wrappers() -> None:
    inner = legacy(0, bytes(600_000))
    wrapper = legacy(0, gzip(inner), attributes=1)
    assert len(list(iter_legacy_messages(wrapper + wrapper, max_decompressed_bytes=2 * MiB))) == 2
    with pytest.raises(DecompressionLimitError):
        list(iter_legacy_messages(wrapper + wrapper, max_decompressed_bytes=MiB))


@settings(max_examples=200, deadline=None)
@given(
    mutations=st.lists(st.tuples(st.integers(0, 500), st.integers(0, 255)), max_size=3),
    cut=st.integers(0, 500),
)
def test_fuzz_legacy(mutations: list[tuple[int, int]], cut: int) -> None:
    inner = legacy(0, b"a", magic=1, timestamp=1) + legacy(1, b"b", magic=1, timestamp=2)
    buf = bytearray(
        legacy(5, b"x", b"k", magic=1, timestamp=3)
        + legacy(7, gzip(inner), magic=1, attributes=1)
        + legacy(8, b"y")
    )
    for at, value in mutations:
        buf[at % len(buf)] = value
    try:
        list(iter_legacy_messages(bytes(buf[:cut]), max_decompressed_bytes=MiB))
        upconvert_legacy(bytes(buf))
    except DecodeError:
        pass


# --- up-conversion ------------------------------------------------------------------------


def test_upconvert_v0() -> None:
    buf = legacy(0, b"a", b"k0") + legacy(1, None, b"k1") + legacy(2, b"c")
    batches = upconvert_legacy(buf)
    (header,) = validate_batches(batches)
    assert header.base_offset == 0 and header.records_count == 3
    assert header.timestamp_type is TimestampType.CREATE_TIME
    assert [(r.offset, r.key, r.value, r.timestamp) for r in iter_records(batches)] == [
        (0, b"k0", b"a", -1),
        (1, b"k1", None, -1),
        (2, None, b"c", -1),
    ]


def test_upconvert_v1_keeps_codec_offsets_and_timestamps() -> None:
    inner = b"".join(legacy(i, b"v%d" % i, magic=1, timestamp=100 + i) for i in range(3))
    buf = legacy(12, gzip(inner), magic=1, attributes=1) + legacy(
        13, b"plain", magic=1, timestamp=200
    )
    batches = upconvert_legacy(buf)
    headers = validate_batches(batches)
    assert [h.compression for h in headers] == [Compression.GZIP, Compression.NONE]
    records = [r for pos, _ in iter_batch_headers(batches) for r in iter_records(batches, pos)]
    assert [(r.offset, r.value, r.timestamp) for r in records] == [
        (10, b"v0", 100),
        (11, b"v1", 101),
        (12, b"v2", 102),
        (13, b"plain", 200),
    ]
    # A codec can be forced, and offsets renumbered for the produce path.
    forced = upconvert_legacy(buf, compression=Compression.ZSTD, base_offset=0)
    (header,) = validate_batches(forced)
    assert header.compression is Compression.ZSTD
    assert [r.offset for r in iter_records(forced)] == [0, 1, 2, 3]


def test_upconvert_splits_where_one_batch_cannot_hold_the_messages() -> None:
    # Producers may send every message at offset 0; each keeps its offset.
    buf = legacy(0, b"a") + legacy(0, b"b") + legacy(0, b"c")
    batches = upconvert_legacy(buf)
    assert [h.base_offset for h in validate_batches(batches)] == [0, 0, 0]
    renumbered = upconvert_legacy(buf, base_offset=500, partition_leader_epoch=3)
    (header,) = validate_batches(renumbered)
    assert (header.base_offset, header.last_offset, header.partition_leader_epoch) == (500, 502, 3)

    log_append = legacy(
        1,
        gzip(legacy(0, b"a", magic=1) + legacy(1, b"b", magic=1)),
        magic=1,
        attributes=0x09,
        timestamp=777,
    )
    mixed = legacy(0, b"x", magic=1, timestamp=5) + log_append
    headers = validate_batches(upconvert_legacy(mixed))
    assert [h.timestamp_type for h in headers] == [
        TimestampType.CREATE_TIME,
        TimestampType.LOG_APPEND_TIME,
    ]
    assert headers[1].max_timestamp == 777


def test_upconvert_empty() -> None:
    assert upconvert_legacy(b"") == b""


# --- real client captures ---------------------------------------------------------------

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
CAPTURES = SHARED / "kafka-captures"
CLIENTS = [
    "aiokafka",
    "confluent-kafka",
    "java",
    "kafka-python-2",
    "kafka-python-3",
    "kafkajs",
    "kcat",
]
CAPTURE_CODECS = ["gzip", "snappy", "lz4", "zstd"]


def capture_frames(path: Path) -> Iterator[tuple[str, bytes]]:
    data = path.read_bytes()
    pos = 0
    while pos < len(data):
        direction = chr(data[pos])
        (size,) = struct.unpack_from(">I", data, pos + 1)
        yield direction, data[pos + 5 : pos + 5 + size]
        pos += 5 + size
    assert pos == len(data)


def find_batches(frame: bytes) -> list[int]:
    """Positions of v2 batches in a request frame: magic 2 at +16 and a CRC that verifies."""
    found = []
    pos = 0
    while pos <= len(frame) - BATCH_HEADER_SIZE:
        if frame[pos + MAGIC_OFFSET] == MAGIC_V2 and crc_is_valid(frame, pos):
            found.append(pos)
            size = batch_size_at(frame, pos)
            assert size is not None
            pos += size
        else:
            pos += 1
    return found


def load_produce_requests(client: str, codec: str) -> list[tuple[bytes, list[dict[str, object]]]]:
    if not SHARED.is_dir():
        pytest.skip("shared reference folder is absent")
    path = CAPTURES / client / f"produce_{codec}.bin"
    if not path.is_file():
        pytest.skip(f"no {codec} capture for {client}")
    frames = list(capture_frames(path))
    index = [json.loads(line) for line in path.with_suffix(".jsonl").read_text().splitlines()]
    requests = []
    for meta in index:
        direction, frame = frames[meta["frame_index"]]
        if direction != "C" or meta.get("api_key") != 0:
            continue
        expected = [
            batch
            for topic in meta["body"]["TopicData"]
            for partition in topic["PartitionData"]
            if partition["Records"]
            for batch in partition["Records"]["batches"]
        ]
        requests.append((frame, expected))
    if not requests:
        pytest.skip(f"{client} sent no {codec} Produce request")
    return requests


@pytest.mark.parametrize("codec", CAPTURE_CODECS)
@pytest.mark.parametrize("client", CLIENTS)
def test_captured_batches(client: str, codec: str) -> None:
    decoded: list[Record] = []
    for frame, expected in load_produce_requests(client, codec):
        positions = find_batches(frame)
        # Any batch whose CRC failed would be missing here.
        assert len(positions) == len(expected)
        for pos, summary in zip(positions, expected, strict=True):
            header = validate_batch(frame, pos)
            assert header.compression.name.lower() == summary["codec"] == codec
            assert header.records_count == summary["records"]
            assert header.last_offset_delta == summary["last_offset_delta"]
            assert header.producer_id == summary["producer_id"]
            assert header.base_sequence == summary["base_sequence"]
            assert header.max_timestamp == summary["max_timestamp"]
            records = list(iter_records(frame, pos))
            assert len(records) == header.records_count
            decoded.extend(records)
    # Every driver sends keys k0..k4 with values "value-<i>-" repeated.
    assert len(decoded) == 5
    for i, record in enumerate(decoded):
        assert record.key == b"k%d" % i
        assert record.value is not None
        assert record.value == b"value-%d-" % i * (len(record.value) // len(b"value-0-"))


def test_captures_cover_both_snappy_framings() -> None:
    if not SHARED.is_dir():
        pytest.skip("shared reference folder is absent")
    starts = set()
    for client in CLIENTS:
        path = CAPTURES / client / "produce_snappy.bin"
        for direction, frame in capture_frames(path):
            if direction == "C":
                for pos in find_batches(frame):
                    starts.add(frame[pos + BATCH_HEADER_SIZE : pos + BATCH_HEADER_SIZE + 8])
    assert b"\x82SNAPPY\x00" in starts
    assert len(starts) > 1  # and raw snappy from librdkafka-based clients
