"""A loopback TCP proxy that can lose or hold back responses, for fault scenarios.

It also records which (api key, api version) each request used (``requests``).

Clients talk to the proxy; the broker advertises the proxy's address (the test starts it
with ``advertised.listeners``), so every connection a client opens goes through it. The
proxy reads Kafka frames in both directions: it remembers each request's api key by
correlation id, and for a response ``drop(api_key)`` says to lose, it closes both sides of
the connection instead of forwarding it — the request was handled, its answer never
arrives, and the client retries on a new connection. A response for which
``delay(api_key)`` gives seconds is forwarded that much later, and the responses behind it
on its connection with it (as from a slow broker or network). ``rewrite(frame)`` may
replace a request frame (size prefix included) on its way to the broker (the stateful fuzz
test changes requests so). Each connection uses two daemon threads; ``close()`` stops
everything.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable

_SIZE = struct.Struct(">i")
_REQUEST_HEAD = struct.Struct(">hhi")  # api key, api version, correlation id


def _read_exactly(sock: socket.socket, n: int) -> bytes | None:
    out = bytearray()
    while len(out) < n:
        try:
            chunk = sock.recv(n - len(out))
        except OSError:
            return None
        if not chunk:
            return None
        out += chunk
    return bytes(out)


def _read_frame(sock: socket.socket) -> bytes | None:
    head = _read_exactly(sock, 4)
    if head is None:
        return None
    (size,) = _SIZE.unpack(head)
    if size < 0 or size > 200 * 1024 * 1024:
        return None
    body = _read_exactly(sock, size)
    return None if body is None else head + body


class FaultProxy:
    def __init__(self, drop: Callable[[int], bool] | None = None,
                 delay: Callable[[int], float] | None = None,
                 rewrite: Callable[[bytes], bytes] | None = None) -> None:
        """``drop(api_key)`` is asked for each response; True loses it (and the connection).
        ``delay(api_key)``: seconds to hold the response back before forwarding it.
        ``rewrite(frame)``: the request frame to send instead of ``frame``."""
        self.drop = drop or (lambda api_key: False)
        self.delay = delay or (lambda api_key: 0.0)
        self.rewrite = rewrite
        self.upstream_port: int | None = None
        self.dropped: list[int] = []
        #: (api key, api version) of every request that went through.
        self.requests: set[tuple[int, int]] = set()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.upstream_port is None:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=10)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._closed:
                    client.close()
                    upstream.close()
                    return
                self._sockets.update((client, upstream))
            api_keys: dict[int, int] = {}
            threading.Thread(target=self._requests, args=(client, upstream, api_keys), daemon=True).start()
            threading.Thread(target=self._responses, args=(upstream, client, api_keys), daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket, api_keys: dict[int, int]) -> None:
        while True:
            frame = _read_frame(client)
            if frame is None or len(frame) < 4 + _REQUEST_HEAD.size:
                break
            api_key, api_version, correlation_id = _REQUEST_HEAD.unpack_from(frame, 4)
            api_keys[correlation_id] = api_key
            self.requests.add((api_key, api_version))
            if self.rewrite is not None:
                frame = self.rewrite(frame)
            try:
                upstream.sendall(frame)
            except OSError:
                break
        self._close_pair(client, upstream)

    def _responses(self, upstream: socket.socket, client: socket.socket, api_keys: dict[int, int]) -> None:
        while True:
            frame = _read_frame(upstream)
            if frame is None or len(frame) < 8:
                break
            (correlation_id,) = _SIZE.unpack_from(frame, 4)
            api_key = api_keys.pop(correlation_id, -1)
            if self.drop(api_key):
                self.dropped.append(api_key)
                break
            held_s = self.delay(api_key)
            if held_s > 0:
                time.sleep(held_s)
            try:
                client.sendall(frame)
            except OSError:
                break
        self._close_pair(client, upstream)

    def _close_pair(self, a: socket.socket, b: socket.socket) -> None:
        for sock in (a, b):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
            with self._lock:
                self._sockets.discard(sock)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sockets = list(self._sockets)
            self._sockets.clear()
        with contextlib.suppress(OSError):
            self._listener.close()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
