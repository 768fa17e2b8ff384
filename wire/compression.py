"""Compression codecs of Kafka record batches and legacy message sets.

Every decompressor is bounded: output stops at ``max_size`` and
:class:`DecompressionLimitError` is raised as soon as more output would follow,
so a small hostile payload cannot make the broker allocate gigabytes. Any other
malformed input raises :class:`CorruptRecordError`.

Packages: ``zlib`` (stdlib) for gzip; ``lz4`` for the LZ4 frame format and
``zstandard`` for zstd, because both decompress incrementally with a bounded
output; ``cramjam`` for raw snappy blocks, because it is maintained, ships
wheels and type stubs, and exposes the declared length of a block so it can be
checked before the block is inflated (its streaming decompressors have no
output bound, hence the other two packages).
"""

from __future__ import annotations

import enum
import struct
import threading
import zlib
from typing import TypeAlias

import cramjam
import lz4.frame  # type: ignore[import-untyped]
import zstandard

from wire.exceptions import CorruptRecordError, DecompressionLimitError

BytesLike: TypeAlias = bytes | bytearray | memoryview

#: Bits 0-2 of the attributes of a batch (v2) or message (v0/v1) hold the codec.
CODEC_MASK = 0x07


class UnsupportedCompressionError(CorruptRecordError):
    """A codec id Kafka does not define (the broker answers UNSUPPORTED_COMPRESSION_TYPE)."""


class Compression(enum.IntEnum):
    """Kafka's compression codec ids."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_id(cls, codec_id: int) -> Compression:
        """The codec for ``codec_id``, or :class:`UnsupportedCompressionError`."""
        try:
            return cls(codec_id)
        except ValueError:
            raise UnsupportedCompressionError(f"unsupported compression codec {codec_id}") from None

    @classmethod
    def from_attributes(cls, attributes: int) -> Compression:
        """The codec named by the low three bits of batch or message attributes."""
        return cls.from_id(attributes & CODEC_MASK)


# The first read asks for a modest amount and later reads grow, so small
# payloads do not reserve ``max_size`` bytes up front and large ones need few calls.
_FIRST_STEP = 64 * 1024
_MAX_STEP = 8 * 1024 * 1024

_GZIP_MAGIC = b"\x1f\x8b"
# wbits 47 = 32 + 15: zlib accepts both gzip and zlib headers.
_GZIP_READ_WBITS = 32 + zlib.MAX_WBITS
_GZIP_WRITE_WBITS = 16 + zlib.MAX_WBITS

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_HEADER_SIZE = len(_XERIAL_HEADER)
# The block size of xerial's SnappyOutputStream, which Kafka's Java client uses.
_XERIAL_BLOCK_SIZE = 32 * 1024

_LZ4_MAGIC = b"\x04\x22\x4d\x18"
#: No LZ4 block inflates to more than 255 times its size: beyond the first few bytes
#: of a sequence, each byte of a match length adds at most 255 bytes of output.
_LZ4_MAX_RATIO = 255

_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_SKIPPABLE_MASK = 0xFFFFFFF0
_ZSTD_SKIPPABLE_MAGIC = 0x184D2A50

_INT32 = struct.Struct(">i")
_LE_U32 = struct.Struct("<I")


def _codec(codec: Compression | int) -> Compression:
    return codec if isinstance(codec, Compression) else Compression.from_id(codec)


def _limit_error(codec: Compression, max_size: int) -> DecompressionLimitError:
    return DecompressionLimitError(
        f"{codec.name.lower()} data decompresses to more than {max_size} bytes"
    )


def _corrupt(codec: Compression, detail: object) -> CorruptRecordError:
    return CorruptRecordError(f"corrupt {codec.name.lower()} data: {detail}")


# ---------------------------------------------------------------------------
# compress


def compress(codec: Compression | int, data: BytesLike, level: int | None = None) -> bytes:
    """Compress ``data`` the way Kafka's Java client would for ``codec``.

    ``level`` is the codec's own level (gzip 1-9, lz4 0-16, zstd -131072..22);
    None picks the codec default. Snappy has no levels and ignores it.
    """
    kind = _codec(codec)
    if kind is Compression.NONE:
        return bytes(data)
    if kind is Compression.GZIP:
        if level is not None and not 1 <= level <= 9:
            raise ValueError(f"gzip level {level} outside 1..9")
        gz = zlib.compressobj(
            zlib.Z_DEFAULT_COMPRESSION if level is None else level,
            zlib.DEFLATED,
            _GZIP_WRITE_WBITS,
        )
        return gz.compress(data) + gz.flush()
    if kind is Compression.SNAPPY:
        return _xerial_compress(data)
    if kind is Compression.LZ4:
        if level is not None and not 0 <= level <= 16:
            raise ValueError(f"lz4 level {level} outside 0..16")
        # Java's reader inflates each block on its own and expects 64 KiB
        # blocks, so blocks must be independent; no content size or checksums,
        # matching what the Java client writes.
        out: bytes = lz4.frame.compress(
            data,
            compression_level=0 if level is None else level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            block_checksum=False,
            store_size=False,
        )
        return out
    if level is not None and not -131072 <= level <= 22:
        raise ValueError(f"zstd level {level} outside -131072..22")
    return zstandard.ZstdCompressor(level=3 if level is None else level).compress(data)


def _xerial_compress(data: BytesLike) -> bytes:
    view = memoryview(data).cast("B")
    parts = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK_SIZE]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


# ---------------------------------------------------------------------------
# decompress


def decompress(codec: Compression | int, data: BytesLike, max_size: int) -> bytes:
    """Decompress ``data``; at most ``max_size`` bytes of output are ever produced.

    Raises :class:`DecompressionLimitError` if the output would be longer,
    :class:`UnsupportedCompressionError` for an unknown codec id and
    :class:`CorruptRecordError` for malformed or truncated input.
    """
    kind = _codec(codec)
    if max_size < 0:
        raise ValueError("max_size must not be negative")
    if kind is Compression.NONE:
        if len(data) > max_size:
            raise _limit_error(kind, max_size)
        return bytes(data)
    try:
        if kind is Compression.GZIP:
            return _gunzip(data, max_size)
        if kind is Compression.SNAPPY:
            return _unsnappy(data, max_size)
        if kind is Compression.LZ4:
            return _unlz4(data, max_size)
        return _unzstd(data, max_size)
    except CorruptRecordError:
        raise
    except _CODEC_ERRORS as exc:
        raise _corrupt(kind, exc) from exc


def decompress_to_read(codec: Compression | int, data: BytesLike, max_size: int) -> bytes | memoryview:
    """What :func:`decompress` answers, for reading once and dropping, as validation does.

    zstd output of up to ``SCRATCH_BYTES`` lands in a buffer that the calling thread reuses:
    the view is valid only until this thread's next call. A fresh megabyte for each batch
    costs an allocation, its page faults and, without a declared size, a join of chunks:
    about a third of what inflating it costs. Other codecs answer as :func:`decompress`.
    """
    kind = _codec(codec)
    if kind is not Compression.ZSTD:
        return decompress(kind, data, max_size)
    if max_size < 0:
        raise ValueError("max_size must not be negative")
    try:
        return _unzstd_to_scratch(data, max_size)
    except CorruptRecordError:
        raise
    except _CODEC_ERRORS as exc:
        raise _corrupt(kind, exc) from exc


_CODEC_ERRORS = (
    zlib.error,
    cramjam.DecompressionError,
    zstandard.ZstdError,
    RuntimeError,  # lz4.frame reports all errors as RuntimeError
    ValueError,
    OverflowError,
    struct.error,
)


class _Sink:
    """Collects output chunks and enforces the size limit."""

    __slots__ = ("chunks", "codec", "max_size", "size", "step")

    def __init__(self, codec: Compression, max_size: int) -> None:
        self.codec = codec
        self.max_size = max_size
        self.chunks: list[bytes] = []
        self.size = 0
        self.step = _FIRST_STEP

    def want(self) -> int:
        """How much to ask the decompressor for next: one byte past the limit at most."""
        ask = min(self.step, self.max_size - self.size + 1)
        self.step = min(self.step * 2, _MAX_STEP)
        return ask

    def add(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.max_size:
            raise _limit_error(self.codec, self.max_size)
        if chunk:
            self.chunks.append(chunk)

    def result(self) -> bytes:
        return self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)


def _gunzip(data: BytesLike, max_size: int) -> bytes:
    sink = _Sink(Compression.GZIP, max_size)
    pending: BytesLike = data
    # Java's GZIPInputStream reads concatenated members, so accept them too.
    while True:
        inflater = zlib.decompressobj(_GZIP_READ_WBITS)
        tail: BytesLike = pending
        while not inflater.eof:
            chunk = inflater.decompress(tail, sink.want())
            sink.add(chunk)
            tail = inflater.unconsumed_tail
            if not chunk and not tail and not inflater.eof:
                raise _corrupt(Compression.GZIP, "truncated stream")
        pending = inflater.unused_data
        if not pending:
            return sink.result()
        if pending[:2] != _GZIP_MAGIC:
            raise _corrupt(Compression.GZIP, f"{len(pending)} bytes after the end of the stream")


def _unsnappy(data: BytesLike, max_size: int) -> bytes:
    view = memoryview(data).cast("B")
    if view[:8] != _XERIAL_MAGIC or len(view) < _XERIAL_HEADER_SIZE:
        # Raw snappy: one block with its length up front.
        return _snappy_block(view, max_size, 0)
    sink = _Sink(Compression.SNAPPY, max_size)
    pos = _XERIAL_HEADER_SIZE
    end = len(view)
    while pos < end:
        # xerial's reader also accepts a second stream appended to the first.
        if view[pos : pos + 8] == _XERIAL_MAGIC and end - pos >= _XERIAL_HEADER_SIZE:
            pos += _XERIAL_HEADER_SIZE
            continue
        if end - pos < 4:
            raise _corrupt(Compression.SNAPPY, "truncated xerial block length")
        (length,) = _INT32.unpack_from(view, pos)
        pos += 4
        if length < 0 or length > end - pos:
            raise _corrupt(Compression.SNAPPY, f"xerial block length {length} out of range")
        sink.add(_snappy_block(view[pos : pos + length], max_size - sink.size, sink.size))
        pos += length
    return sink.result()


def _snappy_block(block: memoryview, budget: int, already: int) -> bytes:
    # The declared length comes from the block's varint header, read before
    # anything is inflated; snappy itself rejects output of any other length.
    declared = cramjam.snappy.decompress_raw_len(block)
    if declared > budget:
        raise _limit_error(Compression.SNAPPY, budget + already)
    return bytes(cramjam.snappy.decompress_raw(block))


def _unlz4(data: BytesLike, max_size: int) -> bytes:
    if len(data) * _LZ4_MAX_RATIO <= max_size or _lz4_blocks_fit(memoryview(data).cast("B"), max_size):
        # Cannot inflate past the limit: one call (the bounded loop below costs more).
        # Several frames or bytes after the frame take the loop, which reads or reports
        # them; so does any error.
        try:
            out, used = lz4.frame.decompress(data, return_bytes_read=True)
        except RuntimeError:
            pass
        else:
            if used == len(data):
                return bytes(out)
    sink = _Sink(Compression.LZ4, max_size)
    pending: BytesLike = data
    while True:
        inflater = lz4.frame.LZ4FrameDecompressor()
        chunk: bytes = inflater.decompress(pending, max_length=sink.want())
        sink.add(chunk)
        while not inflater.eof:
            if inflater.needs_input:
                raise _corrupt(Compression.LZ4, "truncated frame")
            chunk = inflater.decompress(b"", max_length=sink.want())
            sink.add(chunk)
        pending = inflater.unused_data
        if not pending:
            return sink.result()
        if pending[:4] != _LZ4_MAGIC:
            raise _corrupt(Compression.LZ4, f"{len(pending)} bytes after the end of the frame")


#: Largest block of each LZ4 block-size id (the frame descriptor's BD byte, bits 4-6).
_LZ4_BLOCK_MAX = {4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024}


def _lz4_blocks_fit(view: memoryview, max_size: int) -> bool:
    """Whether ``view`` starts with an LZ4 frame whose blocks, each at most the frame's
    block size, cannot add up to more than ``max_size``: a walk over the block headers
    (a 1 MB batch written in 64 KiB blocks has 16), stopped as soon as they could."""
    end = len(view)
    if end < 7 or bytes(view[:4]) != _LZ4_MAGIC:
        return False
    flags = view[4]
    block_max = _LZ4_BLOCK_MAX.get((view[5] >> 4) & 0x07)
    if flags >> 6 != 1 or block_max is None:
        return False
    pos = 7 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0)
    checksum = 4 if flags & 0x10 else 0
    total = 0
    while end - pos >= 4:
        (size,) = _LE_U32.unpack_from(view, pos)
        if size == 0:
            return True
        total += block_max
        if total > max_size:
            return False
        pos += 4 + (size & 0x7FFFFFFF) + checksum
    return False


def _unzstd(data: BytesLike, max_size: int) -> bytes:
    view = memoryview(data).cast("B")
    # zstandard's stream reader returns a silent short read on truncated
    # input, so check the frame structure first. That also sums the declared
    # content sizes, which rejects most bombs before any inflating.
    declared = _zstd_declared_size(view)
    if declared is not None and declared > max_size:
        raise _limit_error(Compression.ZSTD, max_size)
    if declared is not None:
        # Every frame declares its size and they fit: one call inflates a single
        # frame with one exact allocation. Anything else (several frames, or an error
        # to report) takes the streaming path below.
        try:
            out: bytes = _zstd_decompressor().decompress(view, allow_extra_data=False)
        except zstandard.ZstdError:
            pass
        else:
            if len(out) == declared:
                return out
    sink = _Sink(Compression.ZSTD, max_size)
    # Without declared sizes (streaming producers such as librdkafka write none), start
    # with room for a good ratio: every read is an allocation and every chunk a copy.
    sink.step = max(declared + 1, 1) if declared is not None else max(_FIRST_STEP, 16 * len(view))
    reader = _zstd_decompressor().stream_reader(view, read_across_frames=True)
    with reader:
        while True:
            chunk = reader.read(sink.want())
            if not chunk:
                return sink.result()
            sink.add(chunk)


def _unzstd_to_scratch(data: BytesLike, max_size: int) -> bytes | memoryview:
    view = memoryview(data).cast("B")
    # The frame walk catches truncation (the stream reader's silent short read) and
    # declared bombs, as in _unzstd.
    declared = _zstd_declared_size(view)
    if declared is not None and declared > max_size:
        raise _limit_error(Compression.ZSTD, max_size)
    scratch = _zstd_scratch()
    room = min(len(scratch), max_size + 1)
    filled = 0
    with _zstd_decompressor().stream_reader(view, read_across_frames=True) as reader, \
            memoryview(scratch) as out:
        while filled < room:
            got = reader.readinto(out[filled:room])
            if not got:
                break
            filled += got
    if filled > max_size:
        raise _limit_error(Compression.ZSTD, max_size)
    if filled == len(scratch):
        # The scratch is full and more may follow: inflate again into fresh memory.
        return _unzstd(view, max_size)
    return memoryview(scratch)[:filled]


#: The size of each thread's zstd scratch buffer: more than a batch of librdkafka's
#: (``batch.size`` 1,000,000) or Java's (16 KiB) inflates to.
SCRATCH_BYTES = 2 * 1024 * 1024

_zstd_local = threading.local()


def _zstd_scratch() -> bytearray:
    scratch: bytearray | None = getattr(_zstd_local, "scratch", None)
    if scratch is None:
        scratch = _zstd_local.scratch = bytearray(SCRATCH_BYTES)
    return scratch


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    """One decompression context per thread (making one costs more than inflating a
    small batch; a context must not be used by two threads at once)."""
    dctx: zstandard.ZstdDecompressor | None = getattr(_zstd_local, "dctx", None)
    if dctx is None:
        dctx = _zstd_local.dctx = zstandard.ZstdDecompressor()
    return dctx


def _zstd_declared_size(view: memoryview) -> int | None:
    """Walk the frames without inflating; the sum of declared sizes, None if any is unknown."""
    total: int | None = 0
    pos = 0
    end = len(view)
    if end == 0:
        raise _corrupt(Compression.ZSTD, "empty input")
    while pos < end:
        if end - pos < 4:
            raise _corrupt(Compression.ZSTD, "truncated frame magic")
        (magic,) = _LE_U32.unpack_from(view, pos)
        pos += 4
        if magic & _ZSTD_SKIPPABLE_MASK == _ZSTD_SKIPPABLE_MAGIC:
            if end - pos < 4:
                raise _corrupt(Compression.ZSTD, "truncated skippable frame")
            (skip,) = _LE_U32.unpack_from(view, pos)
            pos += 4 + skip
            if pos > end:
                raise _corrupt(Compression.ZSTD, "truncated skippable frame")
            continue
        if magic != _ZSTD_MAGIC:
            raise _corrupt(Compression.ZSTD, f"bad frame magic {magic:#x}")
        if pos >= end:
            raise _corrupt(Compression.ZSTD, "truncated frame header")
        descriptor = view[pos]
        pos += 1
        fcs_code = descriptor >> 6
        single_segment = descriptor & 0x20
        has_checksum = descriptor & 0x04
        dict_id_size = (0, 1, 2, 4)[descriptor & 0x03]
        if descriptor & 0x08:
            raise _corrupt(Compression.ZSTD, "reserved frame header bit set")
        fcs_size = (1 if single_segment else 0, 2, 4, 8)[fcs_code]
        pos += (0 if single_segment else 1) + dict_id_size
        if end - pos < fcs_size:
            raise _corrupt(Compression.ZSTD, "truncated frame header")
        if fcs_size == 0:
            total = None
        else:
            size = int.from_bytes(view[pos : pos + fcs_size], "little")
            if fcs_size == 2:
                size += 256
            if total is not None:
                total += size
        pos += fcs_size
        while True:
            if end - pos < 3:
                raise _corrupt(Compression.ZSTD, "truncated block header")
            block_header = int.from_bytes(view[pos : pos + 3], "little")
            pos += 3
            block_type = (block_header >> 1) & 0x03
            if block_type == 3:
                raise _corrupt(Compression.ZSTD, "reserved block type")
            pos += 1 if block_type == 1 else block_header >> 3
            if pos > end:
                raise _corrupt(Compression.ZSTD, "truncated block")
            if block_header & 1:
                break
        if has_checksum:
            pos += 4
            if pos > end:
                raise _corrupt(Compression.ZSTD, "truncated frame checksum")
    return total


# ---------------------------------------------------------------------------
# Legacy LZ4 (magic 0 message sets)


def fix_legacy_lz4_header(data: BytesLike) -> bytes:
    """Rewrite the frame descriptor checksum of an LZ4 frame written by an old Kafka client.

    Before message format v1, Kafka's LZ4 writer hashed the frame magic along
    with the descriptor, so the checksum byte is wrong. Kafka ignores that byte
    for magic 0; lz4 always checks it, so it is recomputed here instead.
    Input that is not an LZ4 frame is returned unchanged (decompress rejects it).
    """
    raw = bytes(data)
    if len(raw) < 7 or raw[:4] != _LZ4_MAGIC:
        return raw
    flags = raw[4]
    descriptor_size = 2 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0)
    checksum_at = 4 + descriptor_size
    if len(raw) <= checksum_at:
        return raw
    checksum = (_xxh32(raw[4:checksum_at]) >> 8) & 0xFF
    return raw[:checksum_at] + bytes((checksum,)) + raw[checksum_at + 1 :]


_P1 = 2654435761
_P2 = 2246822519
_P3 = 3266489917
_P4 = 668265263
_P5 = 374761393
_M32 = 0xFFFFFFFF


def _rotl32(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 of a short input (under 16 bytes: all a frame descriptor can be)."""
    if len(data) >= 16:
        raise ValueError("only short inputs are supported")
    h = (seed + _P5 + len(data)) & _M32
    pos = 0
    while pos + 4 <= len(data):
        (word,) = struct.unpack_from("<I", data, pos)
        h = (_rotl32((h + word * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    for byte in data[pos:]:
        h = (_rotl32((h + byte * _P5) & _M32, 11) * _P1) & _M32
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h
