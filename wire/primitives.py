"""Kafka's primitive types, read from a bounded buffer and written to a bytearray.

Readers take ``(buf, pos, end)`` and return ``(value, new_pos)``; they never read
past ``end`` and check every length the peer sent against the bytes left (and a
configured maximum) before slicing or allocating. Writers append to a
``bytearray``. The generated message code calls these helpers; it keeps the
position in a local variable because that is markedly faster in CPython than a
reader object with attribute updates.

Strings are UTF-8; ``bytes`` fields are copied out, ``records`` fields are
returned as zero-copy memoryview slices of the frame.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from wire.exceptions import DecodeError, UnsupportedVersionError
from wire.regions import EncodedParts, FileRegion, Region, split_parts

I8 = struct.Struct(">b")
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
U16 = struct.Struct(">H")
U32 = struct.Struct(">I")
F64 = struct.Struct(">d")

ZERO_UUID = uuid.UUID(int=0)

#: Record data as the codec accepts it: bytes-like, or a file region for sendfile.
RecordsData = bytes | bytearray | memoryview | FileRegion

#: Tagged fields this codec does not know: (tag, raw value bytes), kept for re-encoding.
UnknownTags = list[tuple[int, bytes]]

#: Where regions sit in an encoded buffer: (byte position in the buffer, region).
Regions = list[tuple[int, Region]]

#: Record data of at least this many bytes is referenced, not copied, by
#: :meth:`Message.encode_parts` and the frame encoders. Below it a copy costs less
#: than sending one more buffer.
REFERENCE_FROM = 128 * 1024


class ReferencingRegions(list[tuple[int, Region]]):
    """A region list that also takes record buffers of ``reference_from`` bytes or more."""

    __slots__ = ("reference_from",)

    def __init__(self, reference_from: int) -> None:
        super().__init__()
        self.reference_from = reference_from


@dataclass(frozen=True, slots=True)
class DecodeLimits:
    """Maximums applied while decoding, on top of "never more than the bytes left".

    The array and tagged-field maximums are Kafka 4.4's: a request naming more than a
    million topics or partitions, or carrying more than 10,000 tagged fields in one
    section, is refused before anything is allocated for it.
    """

    max_array_length: int = 1_000_000
    max_string_length: int = 32_767
    max_bytes_length: int = 1 << 31
    max_tagged_fields: int = 10_000


DEFAULT_LIMITS = DecodeLimits()


def short(pos: int, need: int) -> DecodeError:
    return DecodeError(f"need {need} bytes, buffer ends", pos)


# ---------------------------------------------------------------- varints


def read_uvarint(b: memoryview, p: int, e: int) -> tuple[int, int]:
    """Unsigned varint of at most 5 bytes (32 bits), as Kafka's ByteUtils.readUnsignedVarint."""
    if p >= e:
        raise short(p, 1)
    x = b[p]
    if x < 0x80:
        return x, p + 1
    value = x & 0x7F
    shift = 7
    q = p + 1
    while True:
        if q >= e:
            raise short(q, 1)
        x = b[q]
        q += 1
        value |= (x & 0x7F) << shift
        if x < 0x80:
            if value > 0xFFFFFFFF:
                raise DecodeError("unsigned varint exceeds 32 bits", p)
            return value, q
        shift += 7
        if shift > 28:
            raise DecodeError("unsigned varint longer than 5 bytes", p)


def read_uvarlong(b: memoryview, p: int, e: int) -> tuple[int, int]:
    """Unsigned varint of at most 10 bytes (64 bits)."""
    value = 0
    shift = 0
    q = p
    while True:
        if q >= e:
            raise short(q, 1)
        x = b[q]
        q += 1
        value |= (x & 0x7F) << shift
        if x < 0x80:
            if value >> 64:
                raise DecodeError("unsigned varlong exceeds 64 bits", p)
            return value, q
        shift += 7
        if shift > 63:
            raise DecodeError("varlong longer than 10 bytes", p)


def read_varint(b: memoryview, p: int, e: int) -> tuple[int, int]:
    """Zig-zag signed 32-bit varint."""
    v, q = read_uvarint(b, p, e)
    return (v >> 1) ^ -(v & 1), q


def read_varlong(b: memoryview, p: int, e: int) -> tuple[int, int]:
    """Zig-zag signed 64-bit varint."""
    v, q = read_uvarlong(b, p, e)
    return (v >> 1) ^ -(v & 1), q


def write_uvarint(w: bytearray, v: int) -> None:
    if v < 0x80:
        w.append(v)
        return
    while v >= 0x80:
        w.append((v & 0x7F) | 0x80)
        v >>= 7
    w.append(v)


def write_varint(w: bytearray, v: int) -> None:
    write_uvarint(w, ((v << 1) ^ (v >> 31)) & 0xFFFFFFFF)


def write_varlong(w: bytearray, v: int) -> None:
    write_uvarint(w, ((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF)


def uvarint_size(v: int) -> int:
    n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


# ---------------------------------------------------------------- lengths


def _checked_length(n: int, p: int, e: int, maximum: int, what: str) -> None:
    if n > e - p:
        raise DecodeError(f"{what} length {n} exceeds the {e - p} bytes left", p)
    if n > maximum:
        raise DecodeError(f"{what} length {n} exceeds the limit {maximum}", p)


def read_array_length(
    b: memoryview, p: int, e: int, compact: bool, nullable: bool, lim: DecodeLimits
) -> tuple[int, int]:
    """Element count of an array; -1 for null. Bounded by the bytes left (each element
    takes at least one byte on the wire) and by ``lim.max_array_length``."""
    if compact:
        n, p = read_uvarint(b, p, e)
        n -= 1
    else:
        if p + 4 > e:
            raise short(p, 4)
        n = I32.unpack_from(b, p)[0]
        p += 4
    if n < 0:
        if n == -1 and nullable:
            return -1, p
        raise DecodeError(f"invalid array length {n}", p)
    _checked_length(n, p, e, lim.max_array_length, "array")
    return n, p


def _read_len(b: memoryview, p: int, e: int, compact: bool, wide: bool) -> tuple[int, int]:
    if compact:
        n, p = read_uvarint(b, p, e)
        return n - 1, p
    if wide:
        if p + 4 > e:
            raise short(p, 4)
        return I32.unpack_from(b, p)[0], p + 4
    if p + 2 > e:
        raise short(p, 2)
    return I16.unpack_from(b, p)[0], p + 2


# ---------------------------------------------------------------- strings


def read_string(b: memoryview, p: int, e: int) -> tuple[str, int]:
    if p + 2 > e:
        raise short(p, 2)
    n = I16.unpack_from(b, p)[0]
    p += 2
    if n < 0:
        raise DecodeError(f"non-nullable string has length {n}", p - 2)
    if n > e - p:
        raise DecodeError(f"string length {n} exceeds the {e - p} bytes left", p)
    return str(b[p : p + n], "utf-8"), p + n


def read_nullable_string(b: memoryview, p: int, e: int) -> tuple[str | None, int]:
    if p + 2 > e:
        raise short(p, 2)
    n = I16.unpack_from(b, p)[0]
    p += 2
    if n < 0:
        if n == -1:
            return None, p
        raise DecodeError(f"invalid string length {n}", p - 2)
    if n > e - p:
        raise DecodeError(f"string length {n} exceeds the {e - p} bytes left", p)
    return str(b[p : p + n], "utf-8"), p + n


def read_compact_string(b: memoryview, p: int, e: int) -> tuple[str, int]:
    n, q = read_uvarint(b, p, e)
    if n == 0:
        raise DecodeError("non-nullable compact string is null", p)
    n -= 1
    if n > e - q:
        raise DecodeError(f"string length {n} exceeds the {e - q} bytes left", q)
    if n > 0x7FFF:
        raise DecodeError(f"string length {n} exceeds 32767", q)
    return str(b[q : q + n], "utf-8"), q + n


def read_compact_nullable_string(b: memoryview, p: int, e: int) -> tuple[str | None, int]:
    n, q = read_uvarint(b, p, e)
    if n == 0:
        return None, q
    n -= 1
    if n > e - q:
        raise DecodeError(f"string length {n} exceeds the {e - q} bytes left", q)
    if n > 0x7FFF:
        raise DecodeError(f"string length {n} exceeds 32767", q)
    return str(b[q : q + n], "utf-8"), q + n


def _encode_str(s: str) -> bytes:
    data = s.encode("utf-8")
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes is longer than 32767")
    return data


def write_string(w: bytearray, s: str) -> None:
    data = _encode_str(s)
    w += I16.pack(len(data))
    w += data


def write_nullable_string(w: bytearray, s: str | None) -> None:
    if s is None:
        w += b"\xff\xff"
    else:
        write_string(w, s)


def write_compact_string(w: bytearray, s: str) -> None:
    data = _encode_str(s)
    write_uvarint(w, len(data) + 1)
    w += data


def write_compact_nullable_string(w: bytearray, s: str | None) -> None:
    if s is None:
        w.append(0)
    else:
        write_compact_string(w, s)


# ---------------------------------------------------------------- bytes and records


def read_bytes(
    b: memoryview, p: int, e: int, compact: bool, nullable: bool, lim: DecodeLimits
) -> tuple[bytes | None, int]:
    start = p
    n, p = _read_len(b, p, e, compact, True)
    if n < 0:
        if n == -1 and nullable:
            return None, p
        raise DecodeError(f"invalid bytes length {n}", start)
    _checked_length(n, p, e, lim.max_bytes_length, "bytes")
    return bytes(b[p : p + n]), p + n


def read_bytes_nn(
    b: memoryview, p: int, e: int, compact: bool, lim: DecodeLimits
) -> tuple[bytes, int]:
    start = p
    n, p = _read_len(b, p, e, compact, True)
    if n < 0:
        raise DecodeError(f"invalid bytes length {n}", start)
    _checked_length(n, p, e, lim.max_bytes_length, "bytes")
    return bytes(b[p : p + n]), p + n


def read_records(
    b: memoryview, p: int, e: int, compact: bool, nullable: bool, lim: DecodeLimits
) -> tuple[memoryview | None, int]:
    """Record data is not copied: the caller gets a slice of the frame."""
    start = p
    n, p = _read_len(b, p, e, compact, True)
    if n < 0:
        if n == -1 and nullable:
            return None, p
        raise DecodeError(f"invalid records length {n}", start)
    _checked_length(n, p, e, lim.max_bytes_length, "records")
    return b[p : p + n], p + n


def write_bytes(w: bytearray, v: bytes | bytearray | memoryview | None, compact: bool) -> None:
    if v is None:
        if compact:
            w.append(0)
        else:
            w += b"\xff\xff\xff\xff"
        return
    if compact:
        write_uvarint(w, len(v) + 1)
    else:
        w += I32.pack(len(v))
    w += v


def write_records(w: bytearray, v: RecordsData | None, compact: bool, rg: Regions) -> None:
    if isinstance(v, FileRegion):
        if compact:
            write_uvarint(w, v.length + 1)
        else:
            w += I32.pack(v.length)
        rg.append((len(w), v))
        return
    if isinstance(v, memoryview) and (v.ndim != 1 or v.itemsize != 1):
        v = v.cast("B")
    if v is not None and type(rg) is ReferencingRegions and len(v) >= rg.reference_from:
        if compact:
            write_uvarint(w, len(v) + 1)
        else:
            w += I32.pack(len(v))
        rg.append((len(w), v))
        return
    write_bytes(w, v, compact)


# ---------------------------------------------------------------- uuid and tagged fields


def uuid_from(raw: bytes) -> uuid.UUID:
    return uuid.UUID(bytes=bytes(raw))


def read_uuid(b: memoryview, p: int, e: int) -> tuple[uuid.UUID, int]:
    if p + 16 > e:
        raise short(p, 16)
    return uuid.UUID(bytes=bytes(b[p : p + 16])), p + 16


def read_unknown_tag(
    b: memoryview, p: int, q: int, unknown: UnknownTags | None, tag: int
) -> UnknownTags:
    if unknown is None:
        unknown = []
    unknown.append((tag, bytes(b[p:q])))
    return unknown


def read_tag_header(b: memoryview, p: int, e: int) -> tuple[int, int, int]:
    """Returns (tag, end of its value, start of its value)."""
    tag, p = read_uvarint(b, p, e)
    size, p = read_uvarint(b, p, e)
    if size > e - p:
        raise DecodeError(f"tagged field {tag} size {size} exceeds the {e - p} bytes left", p)
    return tag, p + size, p


def read_tag_count(b: memoryview, p: int, e: int, lim: DecodeLimits) -> tuple[int, int]:
    n, q = read_uvarint(b, p, e)
    # Each tagged field takes at least two bytes (tag and size).
    if n * 2 > e - q or n > lim.max_tagged_fields:
        raise DecodeError(f"tagged field count {n} exceeds the bytes left", p)
    return n, q


def skip_tagged_fields(b: memoryview, p: int, e: int, lim: DecodeLimits) -> tuple[UnknownTags | None, int]:
    """A tagged-field section with no known tags: every field is kept as unknown."""
    n, p = read_tag_count(b, p, e, lim)
    if n == 0:
        return None, p
    unknown: UnknownTags = []
    for _ in range(n):
        tag, q, p = read_tag_header(b, p, e)
        unknown.append((tag, bytes(b[p:q])))
        p = q
    return unknown, p


def write_tagged_fields(w: bytearray, known: list[tuple[int, bytes]], unknown: UnknownTags | None) -> None:
    """Writes a tagged-field section: ``known`` holds the non-default known fields, encoded."""
    if unknown:
        known = sorted(known + unknown, key=lambda t: t[0])
    write_uvarint(w, len(known))
    for tag, data in known:
        write_uvarint(w, tag)
        write_uvarint(w, len(data))
        w += data


def check_end(p: int, q: int, what: str) -> None:
    if p != q:
        raise DecodeError(f"tagged field {what} did not fill its declared size", p)


# ---------------------------------------------------------------- arrays of primitives

#: Arrays of fixed-width primitives shorter than this are read with a precompiled Struct.
SMALL_ARRAY = 32
FIXED_ARRAYS: dict[str, tuple[struct.Struct, ...]] = {
    code: tuple(struct.Struct(f">{n}{code}") for n in range(SMALL_ARRAY))
    for code in ("?", "b", "h", "H", "i", "I", "q", "d")
}

_S = TypeVar("_S")


def read_fixed_array(
    b: memoryview, p: int, e: int, n: int, code: str, size: int
) -> tuple[list[Any], int]:
    need = n * size
    if need > e - p:
        raise DecodeError(f"array of {n} needs {need} bytes, {e - p} left", p)
    return list(struct.unpack_from(f">{n}{code}", b, p)), p + need


def write_fixed_array(w: bytearray, items: Sequence[Any], code: str) -> None:
    w += struct.pack(f">{len(items)}{code}", *items)


def read_uuid_array(b: memoryview, p: int, e: int, n: int) -> tuple[list[uuid.UUID], int]:
    need = n * 16
    if need > e - p:
        raise DecodeError(f"array of {n} uuids needs {need} bytes, {e - p} left", p)
    out = [uuid.UUID(bytes=bytes(b[i : i + 16])) for i in range(p, p + need, 16)]
    return out, p + need


def write_array_length(w: bytearray, items: Sequence[Any] | None, compact: bool) -> None:
    if items is None:
        if compact:
            w.append(0)
        else:
            w += b"\xff\xff\xff\xff"
    elif compact:
        write_uvarint(w, len(items) + 1)
    else:
        w += I32.pack(len(items))


# ---------------------------------------------------------------- message base classes

Decoder = Callable[[memoryview, int, int, DecodeLimits], tuple[Any, int]]
Encoder = Callable[[Any, bytearray, Regions], None]

_M = TypeVar("_M", bound="Message")


def as_memoryview(data: bytes | bytearray | memoryview) -> memoryview:
    mv = data if isinstance(data, memoryview) else memoryview(data)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    return mv


class Message:
    """Base of every generated top-level message, header and record struct.

    One class covers every version; ``decode``/``encode`` pick the layout for the
    version asked for.
    """

    __slots__ = ()

    NAME: ClassVar[str] = ""
    API_KEY: ClassVar[int] = -1
    MIN_VERSION: ClassVar[int] = 0
    MAX_VERSION: ClassVar[int] = 0
    #: Lowest flexible version, or a number above MAX_VERSION when none are.
    FLEXIBLE_MIN_VERSION: ClassVar[int] = 1 << 15
    _decoders: ClassVar[dict[int, Decoder]] = {}
    _encoders: ClassVar[dict[int, Encoder]] = {}

    @classmethod
    def decode(
        cls: type[_M],
        data: bytes | bytearray | memoryview,
        version: int,
        limits: DecodeLimits = DEFAULT_LIMITS,
    ) -> _M:
        """Decodes one message; bytes after it are ignored (some clients send some)."""
        obj, _ = cls.decode_at(as_memoryview(data), 0, version, limits)
        return obj

    @classmethod
    def decode_at(
        cls: type[_M],
        buf: memoryview,
        pos: int,
        version: int,
        limits: DecodeLimits = DEFAULT_LIMITS,
        end: int | None = None,
    ) -> tuple[_M, int]:
        """Decodes at ``pos`` in ``buf`` and returns the message and its end position."""
        fn = cls._decoders.get(version)
        if fn is None:
            raise DecodeError(
                f"{cls.NAME} has no version {version}", pos, cls.API_KEY, version
            )
        stop = len(buf) if end is None else end
        try:
            obj, p = fn(buf, pos, stop, limits)
        except DecodeError as ex:
            raise ex.with_context(cls.API_KEY, version) from None
        except (struct.error, UnicodeDecodeError, ValueError, IndexError, OverflowError) as ex:
            raise DecodeError(
                f"malformed {cls.NAME}: {ex}", -1, cls.API_KEY, version
            ) from ex
        return obj, p

    #: The pure-Python decoder even when the accelerator is enabled (it replaces only
    #: ``decode``/``decode_at``): it lets other threads take the GIL every switch
    #: interval, where a C call holds it until it returns.
    decode_at_python = decode_at

    def encode(self, version: int) -> bytes:
        """The message body at ``version``, copied into one ``bytes``.

        File regions are not allowed here: use :meth:`encode_parts`.
        """
        w = bytearray()
        regions: Regions = []
        self.encode_into(w, version, regions)
        if regions:
            raise ValueError("message holds file regions: use encode_parts")
        return bytes(w)

    def encode_parts(self, version: int, reference_from: int = REFERENCE_FROM) -> EncodedParts:
        """The message body at ``version`` as parts to send in order.

        Record data given as a :class:`FileRegion`, or as a buffer of at least
        ``reference_from`` bytes, is a part of its own and is not copied, so a
        message carrying a 1 MiB batch costs what one carrying 1 KiB does.
        """
        w = bytearray()
        regions: Regions = []
        self.encode_into(w, version, regions, reference_from)
        return split_parts(w, regions)

    def encode_into(
        self, w: bytearray, version: int, regions: Regions, reference_from: int = -1
    ) -> None:
        """Appends the message to ``w``; file regions go to ``regions`` (position in ``w``).

        With ``reference_from`` >= 0, record buffers of at least that many bytes go
        to ``regions`` too instead of being copied into ``w``.
        """
        fn = self._encoders.get(version)
        if fn is None:
            raise UnsupportedVersionError(f"{self.NAME} has no version {version}")
        rg = regions if reference_from < 0 else ReferencingRegions(reference_from)
        try:
            fn(self, w, rg)
        except UnsupportedVersionError as ex:
            raise UnsupportedVersionError(f"{ex} (writing {self.NAME} v{version})") from None
        if rg is not regions:
            regions.extend(rg)

    #: The pure-Python encoder even when the accelerator is enabled (see decode_at_python).
    encode_into_python = encode_into


def absent_field_error(message: str, field: str) -> UnsupportedVersionError:
    return UnsupportedVersionError(
        f"{message}.{field} holds a non-default value but this version lacks it"
    )


@dataclass(frozen=True, slots=True)
class ApiSpec:
    """One API key: its messages and the versions Kafka's schemas define."""

    api_key: int
    name: str
    request: type[Message]
    response: type[Message]
    min_version: int
    max_version: int
    #: Lowest flexible version, -1 when none is.
    flexible_min_version: int
    listeners: tuple[str, ...]
    latest_version_unstable: bool
    deprecated_versions: tuple[int, int] | None

    def is_flexible(self, version: int) -> bool:
        return 0 <= self.flexible_min_version <= version
