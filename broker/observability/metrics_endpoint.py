"""The Prometheus scrape endpoint: ``GET /metrics`` on ``metrics.listener``.

A few lines of HTTP/1.1 on Trio rather than a server thread: the instruments
read partitions, groups and connections on the broker's own thread, without
racing the code that changes them; the costly aggregation and text then run in
a worker thread (``Telemetry.render_off_loop``). One
response per connection (``Connection: close``); request heads are bounded in
size and time, so a slow or hostile client cannot hold resources.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog
import trio

log = structlog.get_logger(__name__)

#: Longest request head read (request line and headers).
MAX_HEAD_BYTES = 8192
#: Time a client has to send its request head.
HEAD_TIMEOUT_S = 10.0
#: At most this many scrapes are answered at once; more connections wait for a slot.
MAX_CONCURRENT = 16
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class MetricsEndpoint:
    def __init__(self, host: str, port: int, render: Callable[[], Awaitable[bytes]]) -> None:
        self.host = host
        self.port = port
        self.render = render
        self.bound_port = 0
        self._listeners: list[trio.SocketListener] = []
        self._slots = trio.Semaphore(MAX_CONCURRENT)

    @property
    def url(self) -> str:
        host = self.host if self.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.bound_port}/metrics"

    async def bind(self) -> int:
        self._listeners = await trio.open_tcp_listeners(self.port, host=self.host or None)
        self.bound_port = self._listeners[0].socket.getsockname()[1]
        return self.bound_port

    async def serve(self) -> None:
        if not self._listeners:
            await self.bind()
        await trio.serve_listeners(self._handle, self._listeners)

    async def _handle(self, stream: trio.SocketStream) -> None:
        async with self._slots:
            try:
                with trio.move_on_after(HEAD_TIMEOUT_S) as scope:
                    head = await _read_head(stream)
                if scope.cancelled_caught or head is None:
                    return
                await stream.send_all(await self._respond(head))
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
            finally:
                with trio.CancelScope(shield=True):
                    await stream.aclose()

    async def _respond(self, head: bytes) -> bytes:
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return _response(400, "text/plain", b"bad request\n")
        method, target = parts[0], parts[1].split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            return _response(405, "text/plain", b"method not allowed\n", extra="Allow: GET, HEAD\r\n")
        if target == "/metrics":
            try:
                body = await self.render()
            except Exception:
                log.exception("metrics_render_failed")
                return _response(500, "text/plain", b"metrics collection failed\n")
            return _response(200, CONTENT_TYPE, body, head_only=method == "HEAD")
        if target == "/":
            return _response(200, "text/plain", b"cormorant: metrics at /metrics\n", head_only=method == "HEAD")
        return _response(404, "text/plain", b"not found\n")


async def _read_head(stream: trio.SocketStream) -> bytes | None:
    buf = bytearray()
    while b"\r\n\r\n" not in buf:
        if len(buf) > MAX_HEAD_BYTES:
            return None
        chunk = await stream.receive_some(4096)
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 500: "Internal Server Error"}


def _response(status: int, content_type: str, body: bytes, *, head_only: bool = False, extra: str = "") -> bytes:
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
        f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        f"Connection: close\r\n{extra}\r\n"
    ).encode("latin-1")
    return head if head_only else head + body
