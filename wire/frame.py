"""Frames: the size prefix, request and response headers, and a frame splitter.

Request header versions: v0 (ControlledShutdown v0 only), v1 (int16-length client
id), v2 (v1 plus tagged fields) for flexible request versions. Response header v0 is
the correlation id; v1 adds tagged fields, for flexible versions — except that an
ApiVersions response always uses v0, because a client reads it before it knows
which versions the broker speaks.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from wire.exceptions import DecodeError
from wire.generated.header_request_header import RequestHeader
from wire.generated.header_response_header import ResponseHeader
from wire.generated.registry import API_SPECS
from wire.primitives import (
    DEFAULT_LIMITS,
    REFERENCE_FROM,
    DecodeLimits,
    Message,
    Regions,
    as_memoryview,
)
from wire.regions import EncodedParts, split_parts

#: A frame as parts to send in order, size prefix included.
EncodedFrame = EncodedParts

_SIZE = struct.Struct(">i")
_KEY_VERSION_CORR = struct.Struct(">hhi")
API_VERSIONS_KEY = 18
CONTROLLED_SHUTDOWN_KEY = 7


def request_header_version(api_key: int, api_version: int) -> int:
    spec = API_SPECS.get(api_key)
    if spec is not None and spec.is_flexible(api_version):
        return 2
    if api_key == CONTROLLED_SHUTDOWN_KEY and api_version == 0:
        return 0
    return 1


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == API_VERSIONS_KEY:
        return 0
    spec = API_SPECS.get(api_key)
    return 1 if spec is not None and spec.is_flexible(api_version) else 0


@dataclass(frozen=True, slots=True)
class RequestPreamble:
    """The first eight bytes of every request: enough to route or reject it."""

    api_key: int
    api_version: int
    correlation_id: int


def peek_request(frame: bytes | bytearray | memoryview) -> RequestPreamble:
    """API key, version and correlation id of a request frame body (no size prefix)."""
    if len(frame) < 8:
        raise DecodeError(f"request of {len(frame)} bytes is shorter than its header", 0)
    key, version, corr = _KEY_VERSION_CORR.unpack_from(frame, 0)
    return RequestPreamble(key, version, corr)


@dataclass(slots=True)
class Request:
    header: RequestHeader
    body: Message

    @property
    def api_key(self) -> int:
        return self.header.request_api_key

    @property
    def api_version(self) -> int:
        return self.header.request_api_version

    @property
    def correlation_id(self) -> int:
        return self.header.correlation_id


def decode_request(
    frame: bytes | bytearray | memoryview, limits: DecodeLimits = DEFAULT_LIMITS, python: bool = False
) -> Request:
    """Decodes a request frame body (without its size prefix).

    Bytes after the body are tolerated: librdkafka sends some after an all-topics
    Metadata request. An unknown API key or version raises DecodeError; callers
    that must answer those (ApiVersions) check :func:`peek_request` first.
    ``python`` decodes with the pure-Python codec even when the accelerator is on
    (for a worker thread that must let others take the GIL).
    """
    buf = as_memoryview(frame)
    pre = peek_request(buf)
    spec = API_SPECS.get(pre.api_key)
    if spec is None:
        raise DecodeError(f"unknown api key {pre.api_key}", 0, pre.api_key, pre.api_version)
    if not spec.min_version <= pre.api_version <= spec.max_version:
        raise DecodeError(
            f"unsupported version {pre.api_version} of {spec.name}", 2, pre.api_key, pre.api_version
        )
    hv = request_header_version(pre.api_key, pre.api_version)
    if python:
        header, pos = RequestHeader.decode_at_python(buf, 0, hv, limits)
        body, _ = spec.request.decode_at_python(buf, pos, pre.api_version, limits)
    else:
        header, pos = RequestHeader.decode_at(buf, 0, hv, limits)
        body, _ = spec.request.decode_at(buf, pos, pre.api_version, limits)
    return Request(header, body)


def encode_request(
    body: Message, api_version: int, correlation_id: int, client_id: str | None = "cormorant"
) -> bytes:
    """A complete request frame, size prefix included, in one ``bytes``."""
    w, regions = _request_frame(body, api_version, correlation_id, client_id, -1)
    if regions:
        raise ValueError("request holds file regions: use encode_request_parts")
    return bytes(w)


def encode_request_parts(
    body: Message,
    api_version: int,
    correlation_id: int,
    client_id: str | None = "cormorant",
    reference_from: int = REFERENCE_FROM,
) -> EncodedFrame:
    """A complete request frame as parts: record data of ``reference_from`` bytes or
    more (and file regions) is referenced, not copied."""
    w, regions = _request_frame(body, api_version, correlation_id, client_id, reference_from)
    return split_parts(w, regions)


def _request_frame(
    body: Message, api_version: int, correlation_id: int, client_id: str | None, reference_from: int
) -> tuple[bytearray, Regions]:
    api_key = body.API_KEY
    hv = request_header_version(api_key, api_version)
    w = bytearray(b"\0\0\0\0")
    header = RequestHeader(api_key, api_version, correlation_id, client_id if hv >= 1 else None)
    regions: Regions = []
    header.encode_into(w, hv, regions)
    body.encode_into(w, api_version, regions, reference_from)
    _SIZE.pack_into(w, 0, len(w) + sum(len(r) for _, r in regions) - 4)
    return w, regions


def encode_response(
    body: Message,
    api_version: int,
    correlation_id: int,
    api_key: int | None = None,
    reference_from: int = REFERENCE_FROM,
    python: bool = False,
) -> EncodedFrame:
    """A complete response frame, size prefix included (``python``: as decode_request's).

    Record data given as :class:`~wire.regions.FileRegion` is not read, and record
    buffers of ``reference_from`` bytes or more are not copied: the frame's parts hold
    the bytes around each region and the region itself, and ``size`` counts it.
    """
    key = body.API_KEY if api_key is None else api_key
    w = bytearray(b"\0\0\0\0")
    w += _SIZE.pack(correlation_id)
    if response_header_version(key, api_version) >= 1:
        w.append(0)  # no tagged fields in the header
    regions: Regions = []
    if python:
        body.encode_into_python(w, api_version, regions, reference_from)
    else:
        body.encode_into(w, api_version, regions, reference_from)
    frame = split_parts(w, regions)
    _SIZE.pack_into(w, 0, frame.size - 4)
    return frame


def encode_sasl_token(token: bytes) -> EncodedFrame:
    """A raw SASL token with its size prefix: what follows a SaslHandshake v0 (no Kafka header)."""
    w = bytearray(_SIZE.pack(len(token)))
    w += token
    return EncodedParts([w], len(w))


def decode_response(
    frame: bytes | bytearray | memoryview,
    response_type: type[Message],
    api_version: int,
    limits: DecodeLimits = DEFAULT_LIMITS,
) -> tuple[int, Message]:
    """Decodes a response frame body (no size prefix): (correlation id, body)."""
    buf = as_memoryview(frame)
    hv = response_header_version(response_type.API_KEY, api_version)
    header, pos = ResponseHeader.decode_at(buf, 0, hv, limits)
    body, _ = response_type.decode_at(buf, pos, api_version, limits)
    return header.correlation_id, body


class FrameTooLarge(DecodeError):
    """A size prefix over the limit (or negative): the connection must be closed."""


class FrameSplitter:
    """Splits a byte stream into frames without allocating from an unchecked size.

    ``feed`` bytes as they arrive; iterate :meth:`frames` for each complete frame
    body (size prefix removed). A size prefix that is negative or above
    ``max_frame_bytes`` raises :class:`FrameTooLarge` before anything is allocated.
    """

    def __init__(self, max_frame_bytes: int) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        self._buf += data

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def check_size(self, size: int) -> None:
        if size < 0 or size > self.max_frame_bytes:
            raise FrameTooLarge(
                f"frame size {size} outside 0..{self.max_frame_bytes}", 0
            )

    def pending_size(self) -> int | None:
        """Size of the next frame if its prefix has arrived (validated), else None."""
        if len(self._buf) < 4:
            return None
        size: int = _SIZE.unpack_from(self._buf, 0)[0]
        self.check_size(size)
        return size

    def frames(self) -> Iterator[bytes]:
        while True:
            size = self.pending_size()
            if size is None or len(self._buf) < 4 + size:
                return
            frame = bytes(self._buf[4 : 4 + size])
            del self._buf[: 4 + size]
            yield frame
