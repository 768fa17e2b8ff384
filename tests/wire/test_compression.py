"""Tests for wire.compression: round trips, both snappy framings, bounded output."""

from __future__ import annotations

import functools
import os
import struct
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable

import cramjam
import lz4.frame  # type: ignore[import-untyped]
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from wire.compression import (
    SCRATCH_BYTES,
    BytesLike,
    Compression,
    UnsupportedCompressionError,
    compress,
    decompress,
    decompress_to_read,
    fix_legacy_lz4_header,
)
from wire.exceptions import CorruptRecordError, DecodeError, DecompressionLimitError

CODECS = list(Compression)
COMPRESSED = [c for c in Compression if c is not Compression.NONE]

XERIAL_MAGIC = b"\x82SNAPPY\x00"
MiB = 1024 * 1024
GiB = 1024 * MiB


def decompress_to_read_bytes(codec: Compression | int, data: BytesLike, max_size: int) -> bytes:
    """decompress_to_read, its answer copied before the next call can overwrite it."""
    return bytes(decompress_to_read(codec, data, max_size))


#: Both ways to inflate must agree on every input: the same output, the same errors.
Inflate = Callable[[Compression | int, BytesLike, int], bytes]
INFLATERS = [decompress, decompress_to_read_bytes]
inflaters = pytest.mark.parametrize("inflate", INFLATERS, ids=["decompress", "to_read"])

SAMPLES = {
    "empty": b"",
    "one byte": b"x",
    "text": b"the quick brown fox jumps over the lazy dog " * 50,
    "random": os.urandom(3000),
    # Spans several xerial (32 KiB) and lz4 (64 KiB) blocks.
    "multi-block": (os.urandom(997) + bytes(2000)) * 100,
}


@inflaters
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("sample", list(SAMPLES), ids=str)
def test_round_trip(inflate: Inflate, codec: Compression, sample: str) -> None:
    data = SAMPLES[sample]
    packed = compress(codec, data)
    assert inflate(codec, packed, len(data)) == data
    # Any bytes-like input works, and int codec ids too.
    assert inflate(int(codec), memoryview(bytearray(packed)), len(data)) == data


@inflaters
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=5000))
def test_round_trip_hypothesis(inflate: Inflate, codec: Compression, data: bytes) -> None:
    assert inflate(codec, compress(codec, data), len(data)) == data


@pytest.mark.parametrize(
    ("codec", "levels"),
    [
        (Compression.GZIP, [1, 9]),
        (Compression.LZ4, [0, 9, 16]),
        (Compression.ZSTD, [-5, 1, 19]),
        (Compression.SNAPPY, [1]),
    ],
    ids=lambda v: v.name if isinstance(v, Compression) else None,
)
def test_levels(codec: Compression, levels: list[int]) -> None:
    data = SAMPLES["multi-block"]
    for level in levels:
        assert decompress(codec, compress(codec, data, level), len(data)) == data


@pytest.mark.parametrize(
    ("codec", "level"),
    [(Compression.GZIP, 0), (Compression.GZIP, 10), (Compression.LZ4, 17), (Compression.ZSTD, 23)],
)
def test_bad_level(codec: Compression, level: int) -> None:
    with pytest.raises(ValueError):
        compress(codec, b"abc", level)


@inflaters
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_limit_is_exact(inflate: Inflate, codec: Compression) -> None:
    data = SAMPLES["multi-block"]
    packed = compress(codec, data)
    assert inflate(codec, packed, len(data)) == data
    with pytest.raises(DecompressionLimitError):
        inflate(codec, packed, len(data) - 1)
    with pytest.raises(DecompressionLimitError):
        inflate(codec, compress(codec, b"x"), 0)


@inflaters
@pytest.mark.parametrize("codec_id", [5, 6, 7, 8, -1])
def test_unknown_codec(inflate: Inflate, codec_id: int) -> None:
    with pytest.raises(UnsupportedCompressionError, match=f"codec {codec_id}") as info:
        inflate(codec_id, b"whatever", 100)
    assert isinstance(info.value, CorruptRecordError)
    with pytest.raises(UnsupportedCompressionError):
        compress(codec_id, b"whatever")


def test_from_attributes() -> None:
    assert Compression.from_attributes(0x13) is Compression.LZ4
    assert Compression.from_attributes(0x08) is Compression.NONE
    with pytest.raises(UnsupportedCompressionError, match="codec 6"):
        Compression.from_attributes(0x0E)


# --- corrupt and truncated input ---------------------------------------------


@inflaters
@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_every_truncation_is_corrupt(inflate: Inflate, codec: Compression) -> None:
    data = SAMPLES["text"] + os.urandom(200)
    packed = compress(codec, data)
    for cut in range(len(packed)):
        if codec is Compression.SNAPPY and cut == len(XERIAL_MAGIC) + 8:
            continue  # xerial has no end marker: the bare header is a valid empty stream
        with pytest.raises(CorruptRecordError):
            inflate(codec, packed[:cut], 10 * MiB)


@inflaters
@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_trailing_garbage_is_corrupt(inflate: Inflate, codec: Compression) -> None:
    packed = compress(codec, SAMPLES["text"])
    with pytest.raises(CorruptRecordError):
        inflate(codec, packed + b"\x07garbage", 10 * MiB)


@inflaters
@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_mutations_raise_only_decode_errors(inflate: Inflate, codec: Compression, data: st.DataObject) -> None:
    packed = bytearray(compress(codec, SAMPLES["text"][:600] + b"\x00\x01" * 50))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(packed) - 1))
        packed[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(packed)))
    try:
        out = inflate(codec, bytes(packed[:cut]), 4096)
    except DecodeError:
        return
    assert len(out) <= 4096


@inflaters
@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
@settings(max_examples=60, deadline=None)
@given(junk=st.binary(max_size=300))
def test_garbage_raises_only_decode_errors(inflate: Inflate, codec: Compression, junk: bytes) -> None:
    try:
        out = inflate(codec, junk, 4096)
    except DecodeError:
        return
    assert len(out) <= 4096


# --- snappy framings ----------------------------------------------------------


def test_snappy_compress_writes_xerial() -> None:
    data = SAMPLES["multi-block"]
    packed = compress(Compression.SNAPPY, data)
    assert packed[:8] == XERIAL_MAGIC
    assert struct.unpack_from(">ii", packed, 8) == (1, 1)
    # Blocks of at most 32 KiB of input, each length-prefixed raw snappy.
    pos, blocks = 16, []
    while pos < len(packed):
        (length,) = struct.unpack_from(">i", packed, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(packed[pos + 4 : pos + 4 + length])))
        pos += 4 + length
    assert pos == len(packed)
    assert all(len(b) <= 32 * 1024 for b in blocks)
    assert b"".join(blocks) == data


def test_raw_snappy_decodes() -> None:
    data = SAMPLES["multi-block"]
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert raw[:8] != XERIAL_MAGIC
    assert decompress(Compression.SNAPPY, raw, len(data)) == data
    with pytest.raises(DecompressionLimitError):
        decompress(Compression.SNAPPY, raw, len(data) - 1)


def test_concatenated_xerial_streams() -> None:
    a, b = b"first " * 100, b"second " * 100
    packed = compress(Compression.SNAPPY, a) + compress(Compression.SNAPPY, b)
    assert decompress(Compression.SNAPPY, packed, 10_000) == a + b


@pytest.mark.parametrize(
    "body",
    [struct.pack(">i", -1), struct.pack(">i", 100) + b"short", b"\x00\x00"],
    ids=["negative length", "length past end", "torn length"],
)
def test_bad_xerial_block(body: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decompress(Compression.SNAPPY, XERIAL_MAGIC + struct.pack(">ii", 1, 1) + body, MiB)


def test_snappy_declared_length_is_checked_before_inflating() -> None:
    # A raw block that claims 4 GiB: the header alone must be enough to refuse it.
    claim = bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x0F]) + b"\x00" * 10
    started = time.perf_counter()
    with pytest.raises(DecompressionLimitError):
        decompress(Compression.SNAPPY, claim, 64 * MiB)
    framed = XERIAL_MAGIC + struct.pack(">iii", 1, 1, len(claim)) + claim
    with pytest.raises(DecompressionLimitError):
        decompress(Compression.SNAPPY, framed, 64 * MiB)
    assert time.perf_counter() - started < 0.5


# --- gzip, lz4 and zstd details -----------------------------------------------


def test_gzip_writes_gzip_and_reads_zlib_and_members() -> None:
    data = SAMPLES["text"]
    assert compress(Compression.GZIP, data)[:2] == b"\x1f\x8b"
    assert decompress(Compression.GZIP, zlib.compress(data), len(data)) == data
    two = compress(Compression.GZIP, b"one ") + compress(Compression.GZIP, b"two")
    assert decompress(Compression.GZIP, two, 100) == b"one two"
    with pytest.raises(DecompressionLimitError):
        decompress(Compression.GZIP, two, 6)


def test_lz4_frame_matches_java_writer() -> None:
    packed = compress(Compression.LZ4, SAMPLES["multi-block"])
    assert packed[:4] == b"\x04\x22\x4d\x18"
    flags, block_descriptor = packed[4], packed[5]
    assert flags >> 6 == 0b01  # version
    assert flags & 0x20  # independent blocks: Java inflates each block alone
    assert not flags & 0x08  # no content size
    assert not flags & 0x10  # no block checksums
    assert block_descriptor == 0x40  # 64 KiB blocks


def test_lz4_concatenated_frames() -> None:
    packed = compress(Compression.LZ4, b"a" * 1000) + compress(Compression.LZ4, b"b" * 1000)
    assert decompress(Compression.LZ4, packed, 2000) == b"a" * 1000 + b"b" * 1000


@pytest.mark.parametrize(
    "options",
    [
        {"store_size": False},
        {"store_size": True},
        {"store_size": True, "content_checksum": True},
        {"block_linked": True, "block_checksum": True},
    ],
)
def test_legacy_lz4_header_fix(options: dict[str, bool]) -> None:
    data = SAMPLES["text"]
    frame = lz4.frame.compress(data, **options)
    # Recomputing a correct checksum leaves the frame as it was.
    assert fix_legacy_lz4_header(frame) == frame
    checksum_at = 6 + (8 if frame[4] & 0x08 else 0)
    broken = bytearray(frame)
    broken[checksum_at] ^= 0x5A
    with pytest.raises(CorruptRecordError):
        decompress(Compression.LZ4, bytes(broken), len(data))
    assert decompress(Compression.LZ4, fix_legacy_lz4_header(broken), len(data)) == data
    assert fix_legacy_lz4_header(b"not a frame") == b"not a frame"


@inflaters
def test_zstd_streamed_frames_and_skippable_frames(inflate: Inflate) -> None:
    data = SAMPLES["multi-block"]
    streamer = zstandard.ZstdCompressor(level=3).compressobj()
    unsized = streamer.compress(data) + streamer.flush()
    assert zstandard.frame_content_size(unsized) == -1
    assert inflate(Compression.ZSTD, unsized, len(data)) == data
    with pytest.raises(DecompressionLimitError):
        inflate(Compression.ZSTD, unsized, len(data) - 1)
    skippable = struct.pack("<II", 0x184D2A53, 3) + b"abc"
    checksummed = zstandard.ZstdCompressor(write_checksum=True).compress(b"tail")
    joined = unsized + skippable + checksummed
    assert inflate(Compression.ZSTD, joined, len(data) + 4) == data + b"tail"


@inflaters
def test_zstd_declared_size_rejects_before_inflating(inflate: Inflate) -> None:
    # A frame whose header declares far more than the limit is refused outright.
    packed = zstandard.ZstdCompressor().compress(bytes(8 * MiB))
    assert zstandard.frame_content_size(packed) == 8 * MiB
    tracemalloc.start()
    try:
        with pytest.raises(DecompressionLimitError):
            inflate(Compression.ZSTD, packed, MiB)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < MiB


@inflaters
def test_zstd_checksum_mismatch_is_corrupt(inflate: Inflate) -> None:
    packed = bytearray(zstandard.ZstdCompressor(write_checksum=True).compress(b"data" * 100))
    packed[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        inflate(Compression.ZSTD, bytes(packed), MiB)


# --- decompression bombs --------------------------------------------------------
#
# Each bomb inflates to 1 GiB of zeros (snappy: 64 MiB) but is built without
# ever holding the output, so the test itself stays small.


def _gzip_bomb(mib: int) -> bytes:
    chunk = bytes(MiB)
    # After a full flush the deflater starts afresh, so every further MiB of
    # zeros compresses to the same bytes and can be repeated.
    deflater = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    first = deflater.compress(chunk) + deflater.flush(zlib.Z_FULL_FLUSH)
    again = deflater.compress(chunk) + deflater.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(mib):
        crc = zlib.crc32(chunk, crc)
    body = first + again * (mib - 1) + deflater.flush()
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    return header + body + struct.pack("<II", crc, (mib * MiB) & 0xFFFFFFFF)


def _lz4_bomb(mib: int) -> bytes:
    chunk = bytes(MiB)
    writer = lz4.frame.LZ4FrameCompressor(
        block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False
    )
    parts = [writer.begin()]
    parts.extend(writer.compress(chunk) for _ in range(mib))
    parts.append(writer.flush())
    return b"".join(parts)


def _zstd_bomb(mib: int) -> bytes:
    chunk = bytes(MiB)
    writer = zstandard.ZstdCompressor(level=1).compressobj()
    parts = [writer.compress(chunk) for _ in range(mib)]
    parts.append(writer.flush())
    return b"".join(parts)


def _snappy_bomb(mib: int) -> bytes:
    block = bytes(cramjam.snappy.compress_raw(bytes(32 * 1024)))
    framed = struct.pack(">i", len(block)) + block
    return XERIAL_MAGIC + struct.pack(">ii", 1, 1) + framed * (32 * mib)


BOMBS: dict[Compression, Callable[[int], bytes]] = {
    Compression.GZIP: _gzip_bomb,
    Compression.LZ4: _lz4_bomb,
    Compression.ZSTD: _zstd_bomb,
    Compression.SNAPPY: _snappy_bomb,
}
# Snappy's best ratio is about 20:1, so 1 GiB of it would weigh 50 MB.
BOMB_MIB = {Compression.SNAPPY: 64}


@functools.cache
def bomb(codec: Compression) -> bytes:
    return BOMBS[codec](BOMB_MIB.get(codec, 1024))


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_bomb_builders_make_valid_streams(codec: Compression) -> None:
    # The same construction at a size that is cheap to inflate in full, so the
    # big bombs are known to be real streams of the stated size.
    assert decompress(codec, BOMBS[codec](5), 5 * MiB) == bytes(5 * MiB)


@inflaters
@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_decompression_bomb(inflate: Inflate, codec: Compression) -> None:
    packed = bomb(codec)
    assert len(packed) < 8 * MiB
    limit = 4 * MiB
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(DecompressionLimitError):
            inflate(codec, packed, limit)
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Output stops just past the limit: memory is a few times the limit, not 1 GiB.
    assert peak < 3 * limit + len(packed), peak
    assert elapsed < 2.0


def test_lz4_frames_inflate_in_one_call_only_when_they_cannot_pass_the_limit() -> None:
    data = bytes(1 << 20)  # zeros: lz4's best ratio, close to 255
    frame = compress(Compression.LZ4, data)
    assert len(frame) * 240 < len(data)
    # A limit above 255 times the frame's size allows the single call; below, the
    # bounded loop inflates exactly up to the limit, and no further.
    for limit in (len(frame) * 255, len(data), len(data) + 1):
        assert decompress(Compression.LZ4, frame, limit) == data
    with pytest.raises(DecompressionLimitError):
        decompress(Compression.LZ4, frame, len(data) - 1)
    # Frames with checksums and a stored content size, and two frames in a row.
    checked = lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_checksum=True,
                                 content_checksum=True, store_size=True)
    assert decompress(Compression.LZ4, checked, 1 << 30) == data
    assert decompress(Compression.LZ4, frame + frame, 1 << 30) == data + data


# --- zstd into each thread's scratch buffer --------------------------------------


def _outcome(inflate: Inflate, data: bytes, limit: int) -> bytes | type[Exception]:
    try:
        return inflate(Compression.ZSTD, data, limit)
    except DecodeError as exc:
        return type(exc)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_zstd_to_read_answers_what_decompress_answers(data: st.DataObject) -> None:
    # Sized and unsized frames, with and without checksums, one or two of them, around the
    # scratch size and the limit; then a few bytes changed and a tail cut.
    size = data.draw(st.sampled_from([0, 1, 5000, SCRATCH_BYTES - 1, SCRATCH_BYTES, SCRATCH_BYTES + 1]))
    seed = data.draw(st.integers(0, 255))
    plain = bytes((seed + i // 7) & 0xFF for i in range(size))
    frames = []
    for _ in range(data.draw(st.integers(1, 2))):
        writer = zstandard.ZstdCompressor(write_content_size=data.draw(st.booleans()),
                                          write_checksum=data.draw(st.booleans()))
        frames.append(writer.compress(plain))
    packed = bytearray(b"".join(frames))
    for _ in range(data.draw(st.integers(0, 3))):
        at = data.draw(st.integers(0, len(packed) - 1))
        packed[at] = data.draw(st.integers(0, 255))
    cut = bytes(packed[: data.draw(st.integers(max(0, len(packed) - 8), len(packed)))])
    total = size * len(frames)
    limit = data.draw(st.sampled_from([total - 1, total, total + 1, SCRATCH_BYTES - 1, SCRATCH_BYTES, 4 * MiB]))
    limit = max(limit, 0)
    assert _outcome(decompress_to_read_bytes, cut, limit) == _outcome(decompress, cut, limit)


def test_zstd_to_read_reuses_one_buffer_per_thread() -> None:
    first = compress(Compression.ZSTD, b"first " * 1000)
    second = compress(Compression.ZSTD, b"second " * 1000)
    view = decompress_to_read(Compression.ZSTD, first, MiB)
    assert isinstance(view, memoryview) and view == b"first " * 1000
    again = decompress_to_read(Compression.ZSTD, second, MiB)
    assert isinstance(again, memoryview) and again.obj is view.obj
    # Output that does not fit the scratch buffer is a fresh object.
    large = bytes(range(256)) * (SCRATCH_BYTES // 256 + 1)
    assert decompress_to_read(Compression.ZSTD, compress(Compression.ZSTD, large), 8 * MiB) == large
    # Other codecs answer as decompress does.
    assert decompress_to_read(Compression.LZ4, compress(Compression.LZ4, b"lz4"), 10) == b"lz4"


def test_zstd_to_read_threads_do_not_share_a_buffer() -> None:
    payloads = [bytes([n]) * (100_000 + n) for n in range(8)]
    packed = [compress(Compression.ZSTD, p) for p in payloads]
    failures: list[int] = []

    def reader(n: int) -> None:
        for _ in range(300):
            out = decompress_to_read(Compression.ZSTD, packed[n], MiB)
            time.sleep(0)  # let another thread inflate between the call and the read
            if out != payloads[n]:
                failures.append(n)

    threads = [threading.Thread(target=reader, args=(n,)) for n in range(len(payloads))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    assert failures == []
