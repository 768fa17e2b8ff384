"""A loopback TCP proxy that strips the tagged fields from ApiVersions v3+ responses.

Used only in front of Tansu. Tansu 0.6.0 puts four default-valued tagged fields into its
ApiVersions v3+ response; librdkafka before 2.2.0 (Debian bookworm's kcat, librdkafka 2.0.2)
mis-skips tagged fields and fails with "Read underflow" (captures README, broker quirk 1).
Real Kafka omits default-valued tags, so removing them makes Tansu look like Kafka here, exactly
as the proxy that made the shared captures did (``--strip-apiversions-tags``). Every other byte
is forwarded unchanged.

The ApiVersions response always uses response header v0: correlation id, then the body
ErrorCode int16, ApiKeys compact array of (ApiKey, MinVersion, MaxVersion, tags),
ThrottleTimeMs int32, then the top-level tagged fields, which are what this drops.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable

API_VERSIONS_KEY = 18
FIRST_FLEXIBLE_API_VERSIONS = 3
MAX_FRAME_BYTES = 200 * 1024 * 1024


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise ValueError("uvarint too long")


def _skip_tagged_fields(buf: bytes, pos: int) -> int:
    count, pos = _read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = _read_uvarint(buf, pos)
        size, pos = _read_uvarint(buf, pos)
        pos += size
    return pos


def strip_api_versions_tags(frame: bytes) -> bytes:
    """Return an ApiVersions v3+ response frame (size prefix included) without top-level tags.

    Responses that are not successful flexible bodies (e.g. error 35 with a v0 body) are
    returned unchanged.
    """
    body_start = 4 + 4  # size prefix, correlation id
    (error_code,) = struct.unpack_from(">h", frame, body_start)
    if error_code != 0:
        return frame
    pos = body_start + 2
    count_plus_one, pos = _read_uvarint(frame, pos)
    for _ in range(max(count_plus_one - 1, 0)):
        pos += 6
        pos = _skip_tagged_fields(frame, pos)
    pos += 4  # ThrottleTimeMs
    if pos >= len(frame):
        return frame
    stripped = frame[4:pos] + b"\x00"
    return struct.pack(">i", len(stripped)) + stripped


def _recv_exact(sock: socket.socket, size: int) -> bytes | None:
    chunks = []
    remaining = size
    while remaining:
        chunk = sock.recv(min(remaining, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _recv_frame(sock: socket.socket) -> bytes | None:
    prefix = _recv_exact(sock, 4)
    if prefix is None:
        return None
    (size,) = struct.unpack(">i", prefix)
    if size < 0 or size > MAX_FRAME_BYTES:
        return None
    rest = _recv_exact(sock, size)
    return None if rest is None else prefix + rest


class ApiVersionsShim:
    """Listens on 127.0.0.1 (ephemeral port unless given) and forwards to ``upstream_port``."""

    def __init__(self, upstream_port: int, listen_port: int = 0) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", listen_port), reuse_port=False)
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._spawn(self._accept_loop, "shim-accept")

    def _spawn(self, target: Callable[..., None], name: str, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            client.settimeout(None)
            with self._lock:
                self._sockets.update((client, upstream))
            pending: set[int] = set()
            self._spawn(self._pump_requests, "shim-c2s", client, upstream, pending)
            self._spawn(self._pump_responses, "shim-s2c", upstream, client, pending)

    def _close_pair(self, a: socket.socket, b: socket.socket) -> None:
        for sock in (a, b):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
            with self._lock:
                self._sockets.discard(sock)

    def _pump_requests(
        self, client: socket.socket, upstream: socket.socket, pending: set[int]
    ) -> None:
        try:
            while (frame := _recv_frame(client)) is not None:
                if len(frame) >= 12:
                    api_key, api_version, correlation_id = struct.unpack_from(">hhi", frame, 4)
                    if api_key == API_VERSIONS_KEY and api_version >= FIRST_FLEXIBLE_API_VERSIONS:
                        pending.add(correlation_id)
                upstream.sendall(frame)
        except OSError:
            pass
        finally:
            self._close_pair(client, upstream)

    def _pump_responses(
        self, upstream: socket.socket, client: socket.socket, pending: set[int]
    ) -> None:
        try:
            while (frame := _recv_frame(upstream)) is not None:
                if len(frame) >= 10:
                    (correlation_id,) = struct.unpack_from(">i", frame, 4)
                    if correlation_id in pending:
                        pending.discard(correlation_id)
                        frame = strip_api_versions_tags(frame)
                client.sendall(frame)
        except (OSError, ValueError, IndexError, struct.error):
            pass
        finally:
            self._close_pair(upstream, client)

    def close_connections(self) -> None:
        """Drop every proxied connection (as a dying broker would) but keep listening."""
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def stop(self) -> None:
        self._stopping.set()
        self._listener.close()
        self.close_connections()
        for thread in self._threads:
            thread.join(timeout=2)
