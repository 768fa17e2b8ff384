"""Listeners and connections: frames in, responses out, in request order.

One Trio task reads a connection's frames; each request runs in its own task so a
long-polling Fetch does not hold up the requests behind it, and one writer task
sends responses strictly in the order the requests arrived (Kafka clients rely
on that). At most ``max_in_flight`` requests of one connection run at once.
Record data given as file regions is sent with ``os.sendfile``.

No Kafka logic lives here: :class:`RequestHandler` decides what a frame means.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import structlog
import trio

from broker.principal import ANONYMOUS, KafkaPrincipal
from wire.frame import EncodedFrame
from wire.regions import FileRegion

if TYPE_CHECKING:
    from broker.security.sasl import SaslSession

log = structlog.get_logger(__name__)

_SIZE = struct.Struct(">i")
#: Frames up to this size get their whole buffer at once; larger ones grow as bytes arrive,
#: so a peer announcing a huge frame and sending nothing cannot make us allocate it.
PREALLOCATE_MAX = 1 << 20


_PEER_GONE = {errno.ECONNRESET, errno.EPIPE, errno.EBADF, errno.ENOTCONN, errno.ETIMEDOUT}


def _first(group: BaseExceptionGroup[CloseConnection], kind: type[CloseConnection]) -> CloseConnection:
    for ex in group.exceptions:
        if isinstance(ex, BaseExceptionGroup):
            return _first(ex, kind)
        if isinstance(ex, kind):
            return ex
    raise AssertionError("empty exception group")


class CloseConnection(Exception):
    """Raised by a handler to drop the connection without answering (Kafka's reaction to
    protocol violations)."""

    def __init__(self, reason: str, *, response: EncodedFrame | None = None, **context: object) -> None:
        super().__init__(reason)
        self.reason = reason
        self.context = context
        #: Sent before closing (Kafka answers a failed authentication, then closes).
        self.response = response


@dataclass(slots=True)
class ConnectionInfo:
    listener: str
    security_protocol: str
    peer_host: str
    peer_port: int
    local_port: int
    connection_id: int
    #: Kafka principal of the peer: ANONYMOUS until TLS or SASL says who it is.
    principal: KafkaPrincipal = ANONYMOUS
    #: SASL state of a connection on a SASL listener until it has authenticated.
    sasl: SaslSession | None = None
    #: Largest frame accepted now, when lower than the listener's (before authentication).
    frame_limit: int | None = None


class ConnectionSetup(Protocol):
    async def start(self, stream: trio.SocketStream, info: ConnectionInfo) -> trio.abc.Stream:
        """Runs when a connection opens, before its first frame (TLS handshake, SASL state):
        returns the stream frames are read from. Raise :class:`CloseConnection` to refuse."""
        ...


class RequestHandler(Protocol):
    async def handle(self, conn: ConnectionInfo, frame: bytearray) -> EncodedFrame | None:
        """Answers one request frame (size prefix removed). None means "no response"
        (acks=0 produce). Raise :class:`CloseConnection` to drop the connection."""
        ...


@dataclass(slots=True)
class _Slot:
    done: trio.Event = field(default_factory=trio.Event)
    response: EncodedFrame | None = None
    close: CloseConnection | None = None


@dataclass(slots=True)
class NetworkLimits:
    max_frame_bytes: int = 104_857_600
    idle_timeout_s: float = 600.0
    max_in_flight: int = 8
    max_connections: int = 20_000


class Listener:
    def __init__(
        self,
        name: str,
        security_protocol: str,
        host: str,
        port: int,
        handler: RequestHandler,
        limits: NetworkLimits,
        on_connection_change: Callable[[int], None] | None = None,
        on_protocol_error: Callable[[str], None] | None = None,
        setup: ConnectionSetup | None = None,
    ) -> None:
        self.setup = setup
        self.name = name
        self.security_protocol = security_protocol
        self.host = host
        self.port = port
        self.handler = handler
        self.limits = limits
        self.bound_port = 0
        self._next_id = 0
        self._open = 0
        self._cancel = trio.CancelScope()
        self._on_connection_change = on_connection_change
        self._on_protocol_error = on_protocol_error
        self._connections: set[trio.CancelScope] = set()
        self._draining = False
        self._sockets: list[trio.SocketListener] = []

    async def bind(self) -> int:
        """Binds the listening socket (so the port is known before serving); returns it."""
        self._sockets = await trio.open_tcp_listeners(self.port, host=self.host, backlog=1024)
        self.bound_port = self._sockets[0].socket.getsockname()[1]
        return self.bound_port

    async def serve(self) -> None:
        if not self._sockets:
            await self.bind()
        async with trio.open_nursery() as nursery:
            with self._cancel:
                await trio.serve_listeners(self._accept, self._sockets, handler_nursery=nursery)
            # Stopped accepting: open connections go on until close_connections().
            for sock in self._sockets:
                await sock.aclose()

    def stop_accepting(self) -> None:
        self._cancel.cancel()

    def close_connections(self) -> None:
        self._draining = True
        for scope in list(self._connections):
            scope.cancel()

    async def _accept(self, stream: trio.SocketStream) -> None:
        self._next_id += 1
        sock = stream.socket
        try:
            peer = sock.getpeername()
        except OSError:
            await stream.aclose()
            return
        if self._open >= self.limits.max_connections or self._draining:
            log.warning("connection_refused", listener=self.name, reason="connection limit")
            await stream.aclose()
            return
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        info = ConnectionInfo(self.name, self.security_protocol, peer[0], peer[1], self.bound_port, self._next_id)
        self._open += 1
        if self._on_connection_change:
            self._on_connection_change(1)
        scope = trio.CancelScope()
        self._connections.add(scope)
        try:
            with scope:
                served: trio.abc.Stream = stream
                if self.setup is not None:
                    try:
                        served = await self.setup.start(stream, info)
                    except CloseConnection as ex:
                        log.info("connection_closed", reason=ex.reason, listener=self.name,
                                 peer=f"{peer[0]}:{peer[1]}", **ex.context)
                        return
                await Connection(served, info, self.handler, self.limits, self._on_protocol_error).run()
        finally:
            self._connections.discard(scope)
            self._open -= 1
            if self._on_connection_change:
                self._on_connection_change(-1)
            with trio.CancelScope(shield=True):
                await stream.aclose()


class Connection:
    def __init__(
        self,
        stream: trio.abc.Stream,
        info: ConnectionInfo,
        handler: RequestHandler,
        limits: NetworkLimits,
        on_protocol_error: Callable[[str], None] | None = None,
    ) -> None:
        self.stream = stream
        self._on_protocol_error = on_protocol_error
        # A plain socket is read into buffers and sent files with sendfile; a TLS stream
        # (or any other) goes through the stream's own receive_some/send_all.
        self._socket_stream = stream if isinstance(stream, trio.SocketStream) else None
        self._pending = memoryview(b"")
        self.info = info
        self.handler = handler
        self.limits = limits
        self._in_flight = trio.Semaphore(limits.max_in_flight)
        self._send, self._receive = trio.open_memory_channel[_Slot](limits.max_in_flight)
        self._last_activity = trio.current_time()

    def _touch(self) -> None:
        self._last_activity = trio.current_time()

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._writer, nursery.cancel_scope)
                await self._reader(nursery)
                # Peer closed its side: let the writer flush what is in flight.
                await self._send.aclose()
        except* CloseConnection as group:
            ex = _first(group, CloseConnection)
            log.info("connection_closed", reason=ex.reason, listener=self.info.listener,
                     peer=f"{self.info.peer_host}:{self.info.peer_port}", **ex.context)
        except* (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except* OSError as group:
            _, rest = group.split(lambda e: isinstance(e, OSError) and e.errno in _PEER_GONE)
            if rest is not None:
                raise rest from None

    async def _read_exactly(self, buf: bytearray | memoryview, n: int) -> bool:
        """Fills ``buf[:n]``; False when the peer closed first (clean EOF only at 0 bytes)."""
        view = memoryview(buf)
        got = 0
        while got < n:
            k = await self._recv_into(view[got:n])
            if k == 0:
                if got == 0:
                    return False
                raise CloseConnection("peer closed mid-frame", received=got, expected=n)
            got += k
        return True

    async def _recv_into(self, view: memoryview) -> int:
        deadline = self._last_activity + self.limits.idle_timeout_s
        while True:
            with trio.move_on_at(deadline) as scope:
                return await self._receive_into(view)
            if scope.cancelled_caught:
                # Activity may have happened meanwhile (responses being sent).
                new_deadline = self._last_activity + self.limits.idle_timeout_s
                if new_deadline <= deadline:
                    raise CloseConnection("idle timeout", idle_s=self.limits.idle_timeout_s)
                deadline = new_deadline

    async def _receive_into(self, view: memoryview) -> int:
        if self._socket_stream is not None:
            k: int = await self._socket_stream.socket.recv_into(view)
            return k
        if not self._pending:
            self._pending = memoryview(await self.stream.receive_some(max(len(view), 65536)))
        k = min(len(view), len(self._pending))
        view[:k] = self._pending[:k]
        self._pending = self._pending[k:]  # a view: no copy of what is left
        return k

    async def _reader(self, nursery: trio.Nursery) -> None:
        head = bytearray(4)
        while True:
            if not await self._read_exactly(head, 4):
                return
            self._touch()
            (size,) = _SIZE.unpack(head)
            limit = self.info.frame_limit or self.limits.max_frame_bytes
            if size < 0 or size > limit:
                if self._on_protocol_error:
                    self._on_protocol_error("frame_size")
                if head[0] == 0x16 and head[1] == 0x03 and self._socket_stream is not None:
                    raise CloseConnection("TLS handshake on a plaintext listener")
                raise CloseConnection("frame size out of range", size=size, limit=limit)
            frame = await self._read_frame(size)
            self._touch()
            await self._in_flight.acquire()
            slot = _Slot()
            await self._send.send(slot)
            nursery.start_soon(self._run_request, frame, slot)

    async def _read_frame(self, size: int) -> bytearray:
        if size <= PREALLOCATE_MAX:
            frame = bytearray(size)
            if size and not await self._read_exactly(frame, size):
                raise CloseConnection("peer closed mid-frame", received=0, expected=size)
            return frame
        frame = bytearray()
        chunk = bytearray(PREALLOCATE_MAX)
        while len(frame) < size:
            want = min(PREALLOCATE_MAX, size - len(frame))
            if not await self._read_exactly(chunk, want):
                raise CloseConnection("peer closed mid-frame", received=len(frame), expected=size)
            frame += memoryview(chunk)[:want]
            self._touch()
        return frame

    async def _run_request(self, frame: bytearray, slot: _Slot) -> None:
        try:
            slot.response = await self.handler.handle(self.info, frame)
        except CloseConnection as ex:
            slot.close = ex
        finally:
            self._in_flight.release()
            slot.done.set()

    async def _writer(self, cancel: trio.CancelScope) -> None:
        async for slot in self._receive:
            await slot.done.wait()
            if slot.close is not None:
                if slot.close.response is not None:
                    await self._send_frame(slot.close.response)
                cancel.cancel()
                raise slot.close
            if slot.response is not None:
                await self._send_frame(slot.response)
                self._touch()
        cancel.cancel()

    async def _send_frame(self, frame: EncodedFrame) -> None:
        for part in frame.parts:
            if isinstance(part, FileRegion):
                await self._sendfile(part)
            else:
                await self.stream.send_all(part)

    async def _sendfile(self, region: FileRegion) -> None:
        if self._socket_stream is None:
            await self._send_region_copied(region)
            return
        sock = self._socket_stream.socket
        fd = sock.fileno()
        offset = region.position
        left = region.length
        while left > 0:
            try:
                sent = os.sendfile(fd, region.fd, offset, left)
            except BlockingIOError:
                await trio.lowlevel.wait_writable(sock)
                continue
            except OSError as ex:
                if ex.errno in (errno.EINVAL, errno.ENOSYS):
                    # No sendfile for this pair: fall back to reading the region.
                    await self.stream.send_all(os.pread(region.fd, left, offset))
                    return
                raise
            if sent == 0:
                raise CloseConnection("file region shorter than expected", offset=offset, left=left)
            offset += sent
            left -= sent

    async def _send_region_copied(self, region: FileRegion) -> None:
        # TLS encrypts in user space: the region is read in bounded chunks and sent.
        offset = region.position
        left = region.length
        while left > 0:
            chunk = os.pread(region.fd, min(left, PREALLOCATE_MAX), offset)
            if not chunk:
                raise CloseConnection("file region shorter than expected", offset=offset, left=left)
            await self.stream.send_all(chunk)
            offset += len(chunk)
            left -= len(chunk)
