"""Listeners and connections: frames in, responses out, in request order.

One Trio task reads a connection's frames. While no other request of the connection
is running, a request is handled in that task and its response sent by it: most
requests complete without waiting, and cost no task of their own. A handler that
waits (a long-polling Fetch, acks=all, a lock) keeps that task for itself and a new
task reads on, so the requests behind it are not held up; from then on a writer task
(made on first use) sends responses strictly in the order the requests arrived (Kafka
clients rely on that). At most ``max_in_flight`` requests of one connection run at
once: the reader stops reading (Kafka's muting) until one is answered.
Record data given as file regions is sent with ``os.sendfile``.

A client that pipelines requests (librdkafka keeps up to five in flight) is served in
batches: a plain socket is read with up to READ_AHEAD bytes past the frame being read,
and while the next request is already read, the answers of requests handled in the
reader's task are held back (at most COALESCE_RESPONSES, COALESCE_BYTES, COALESCE_S) and
go out together. On this project's 2-core test machines a send that wakes the peer costs
about as much CPU as handling a small request, so this cuts a pipelined request's cost by
a fifth to a half; a client that sends one request at a time is served as before.

Memory for requests is bounded across connections by :class:`NetworkMemory`
(``queued.max.request.bytes``): a frame's announced size is reserved before its
body is read, and a connection whose frame does not fit waits, unread, until
memory frees; waiting frames are admitted first fit. A frame once started must arrive within ``socket.request.read.timeout.ms``.

No Kafka logic lives here: :class:`RequestHandler` decides what a frame means.
"""

from __future__ import annotations

import errno
import math
import mmap
import os
import struct
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import structlog
import trio

from broker.security.kafka_principal import ANONYMOUS, KafkaPrincipal
from broker.server.connection_errors import CloseConnection as CloseConnection  # re-exported
from broker.server.connection_errors import first_close
from broker.server.frame_sending import in_memory_bytes, send_frame
from broker.server.network_memory import NetworkMemory as NetworkMemory  # re-exported
from broker.server.started_coroutine import resume
from wire.frame import EncodedFrame

if TYPE_CHECKING:
    from broker.security.sasl import SaslSession

log = structlog.get_logger(__name__)

_SIZE = struct.Struct(">i")
#: Frames up to this size get a bytearray at once; larger ones an anonymous memory map of
#: their announced size, whose pages the kernel provides as bytes arrive: a peer announcing
#: a huge frame and sending nothing costs no memory, and the buffer never grows or moves
#: (growing a bytearray copies it while it is below the allocator's mmap threshold: one
#: 30 MB copy is a 10-15 ms step).
PREALLOCATE_MAX = 1 << 20
#: Bytes read at a time into a large frame.
READ_CHUNK = 256 * 1024
#: A frame larger than PREALLOCATE_MAX must arrive at least this fast (bytes per second)
#: once FRAME_GRACE_S have passed, or the connection is closed.
MIN_FRAME_RATE = 256 * 1024
FRAME_GRACE_S = 5.0
#: Bytes of a plain socket read past the frame being read, in the same system call (the
#: next requests of a client that pipelines them); held in request memory while unread.
READ_AHEAD = 16 * 1024
#: Responses to a client's pipelined requests, all read already, go out in one send: at
#: most this many, of at most COALESCE_BYTES, for at most COALESCE_S of loop time (each
#: send is a system call and a wake-up of the peer, the largest part of a small request's
#: cost; the loop is not yielded while responses are held, hence the time bound).
COALESCE_RESPONSES = 16
COALESCE_BYTES = 64 * 1024
COALESCE_S = 0.002
#: The buffer a read-ahead lands in before its bytes are kept (one per event-loop thread).
_scratch = threading.local()


def _read_ahead_buffer() -> memoryview:
    buffer: memoryview | None = getattr(_scratch, "buffer", None)
    if buffer is None:
        buffer = _scratch.buffer = memoryview(bytearray(READ_AHEAD))
    return buffer


_NOTHING_PENDING = memoryview(b"")

_PEER_GONE = {errno.ECONNRESET, errno.EPIPE, errno.EBADF, errno.ENOTCONN, errno.ETIMEDOUT}


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
    #: The client's software name and version from ApiVersions v3+ (KIP-511).
    client_software: tuple[str, str] | None = None
    #: Called once the connection has closed (made on first use, as the locks below).
    on_close: list[Callable[[], None]] | None = None
    #: Largest frame accepted now, when lower than the listener's (before authentication).
    frame_limit: int | None = None
    #: Trio time until which no request is read from this connection (KIP-219 muting).
    muted_until: float = 0.0
    #: The tasks reading and writing this connection (the request quota counts their time, as
    #: Kafka counts network thread time).
    io_tasks: list[trio.lowlevel.Task] = field(default_factory=list)
    # Made on first use: most connections never need them (memory per idle connection).
    _append_lock: trio.Lock | None = None
    _throttle_lock: trio.Lock | None = None

    @property
    def append_lock(self) -> trio.Lock:
        """Held while a Produce appends: a connection's produces append in arrival order."""
        if self._append_lock is None:
            self._append_lock = trio.Lock()
        return self._append_lock

    @property
    def throttle_lock(self) -> trio.Lock:
        """Once throttled, a connection's requests are read and handled one at a time, each after the
        mute, as Kafka handles every connection's (requests read ahead cannot slip past a throttle)."""
        if self._throttle_lock is None:
            self._throttle_lock = trio.Lock()
        return self._throttle_lock

    def mute(self, throttle_ms: int) -> None:
        """Stops reading requests from this connection for ``throttle_ms`` from now (a quota's
        throttle, as Kafka's muted channel): clients that ignore ``throttle_time_ms`` wait too."""
        if throttle_ms > 0:
            self.muted_until = max(self.muted_until, trio.current_time() + throttle_ms / 1000)


class ConnectionSetup(Protocol):
    async def start(self, stream: trio.SocketStream, info: ConnectionInfo) -> trio.abc.Stream:
        """Runs when a connection opens, before its first frame (TLS handshake, SASL state):
        returns the stream frames are read from. Raise :class:`CloseConnection` to refuse."""
        ...


#: A request frame body: a bytearray, or for frames above PREALLOCATE_MAX a view of the
#: memory map it was read into.
RequestFrame = bytearray | memoryview


class RequestHandler(Protocol):
    async def handle(self, conn: ConnectionInfo, frame: RequestFrame) -> EncodedFrame | None:
        """Answers one request frame (size prefix removed). None means "no response"
        (acks=0 produce). Raise :class:`CloseConnection` to drop the connection."""
        ...


@dataclass(slots=True)
class _Slot:
    done: trio.Event = field(default_factory=trio.Event)
    response: EncodedFrame | None = None
    close: CloseConnection | None = None
    #: Trio time before which the response is not sent (a throttled pre-KIP-219 request).
    send_after: float = 0.0


#: Set by the request's handler (in the request's own task) to hold its response back.
_RESPONSE_DELAY_MS: ContextVar[int] = ContextVar("response_delay_ms", default=0)


def delay_response(throttle_ms: int) -> None:
    """Sends the current request's response only after ``throttle_ms``: Kafka's throttling of
    clients older than KIP-219, which do not wait by themselves. Only this connection waits."""
    _RESPONSE_DELAY_MS.set(throttle_ms)


@dataclass(slots=True)
class NetworkLimits:
    max_frame_bytes: int = 104_857_600
    idle_timeout_s: float = 600.0
    max_in_flight: int = 8
    max_connections: int = 20_000
    #: queued.max.request.bytes; -1 for no bound.
    max_request_memory: int = 536_870_912
    #: A started frame must be complete within this (socket.request.read.timeout.ms).
    frame_read_timeout_s: float = 60.0


class Connection:
    def __init__(
        self,
        stream: trio.abc.Stream,
        info: ConnectionInfo,
        handler: RequestHandler,
        limits: NetworkLimits,
        on_protocol_error: Callable[[str], None] | None = None,
        memory: NetworkMemory | None = None,
    ) -> None:
        self.stream = stream
        self.memory = memory if memory is not None else NetworkMemory(limits.max_request_memory)
        self._on_protocol_error = on_protocol_error
        # A plain socket is read into buffers and sent files with sendfile; a TLS stream
        # (or any other) goes through the stream's own receive_some/send_all.
        self._socket_stream = stream if isinstance(stream, trio.SocketStream) else None
        self._fd = self._socket_stream.socket.fileno() if self._socket_stream is not None else -1
        self._pending = _NOTHING_PENDING
        #: Request memory held for the read-ahead bytes in ``_pending`` (plain sockets).
        self._ahead_reserved = 0
        #: Parts of the responses held back to go out with the next (see COALESCE_RESPONSES),
        #: how many responses and bytes they are, and when the first was held.
        self._deferred: list[Any] = []
        self._deferred_count = 0
        self._deferred_bytes = 0
        self._deferred_since = 0.0
        self.info = info
        self.handler = handler
        self.limits = limits
        self._in_flight = trio.Semaphore(limits.max_in_flight)
        #: Responses handed to the writer task, in request order; the writer and its channel are
        #: made when first needed (requests answered in the reader's task are sent by it).
        self._send: trio.MemorySendChannel[_Slot] | None = None
        #: Slots given to the writer and not sent yet: responses answered in the reader's task
        #: are sent by it directly only when there is none (responses go out in request order).
        self._queued = 0
        self._last_activity = trio.current_time()
        #: Bytes of this connection's responses built and not sent yet.
        self._unsent = 0
        #: Requests of this connection being handled, and where the reader waits for them.
        self._running = 0
        self._handled = trio.lowlevel.ParkingLot()
        self._nursery: trio.Nursery | None = None

    def _touch(self) -> None:
        self._last_activity = trio.current_time()

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await self._reader()
        except* CloseConnection as group:
            ex = first_close(group, CloseConnection)
            log.info("connection_closed", reason=ex.reason, listener=self.info.listener,
                     peer=f"{self.info.peer_host}:{self.info.peer_port}", **ex.context)
        except* (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except* OSError as group:
            _, rest = group.split(lambda e: isinstance(e, OSError) and e.errno in _PEER_GONE)
            if rest is not None:
                raise rest from None
        finally:
            self._nursery = None
            self.memory.responses -= self._unsent  # answers the peer will never read
            self._unsent = 0
            self._deferred = []
            self._pending = _NOTHING_PENDING
            self._release_ahead()

    async def _read_exactly(self, buf: bytearray | memoryview, n: int, frame_deadline: float = math.inf) -> bool:
        """Fills ``buf[:n]``; False when the peer closed first (clean EOF only at 0 bytes)."""
        view = memoryview(buf)
        got = 0
        while got < n:
            k: int | None
            if self._pending:
                k = self._from_pending(view[got:n])
            else:
                k = self._receive_ready(view[got:n]) if self._fd >= 0 else None
            if k is None:
                k = await self._recv_into(view[got:n], frame_deadline)
            if k == 0:
                if got == 0:
                    return False
                raise CloseConnection("peer closed mid-frame", received=got, expected=n)
            got += k
        return True

    def _receive_ready(self, view: memoryview) -> int | None:
        """Reads what the socket holds already, without waiting (and without a trip through the
        scheduler); None when it holds nothing yet. A short read also takes up to READ_AHEAD
        bytes that follow (kept in ``_pending``) when request memory has room for them."""
        if len(view) >= READ_AHEAD or self._pending or not self.memory.take_if_room(READ_AHEAD):
            try:
                return os.readv(self._fd, [view])
            except (BlockingIOError, InterruptedError):
                return None
        ahead = _read_ahead_buffer()
        try:
            k = os.readv(self._fd, [view, ahead])
        except BaseException as ex:
            self.memory.release(READ_AHEAD)
            if isinstance(ex, (BlockingIOError, InterruptedError)):
                return None
            raise
        extra = k - len(view)
        if extra <= 0:
            self.memory.release(READ_AHEAD)
            return k
        self._pending = memoryview(bytes(ahead[:extra]))
        self._ahead_reserved = extra
        self.memory.release(READ_AHEAD - extra)
        return len(view)

    def _from_pending(self, view: memoryview) -> int:
        k = min(len(view), len(self._pending))
        view[:k] = self._pending[:k]
        self._pending = self._pending[k:]  # a view: no copy of what is left
        if not self._pending:
            self._pending = _NOTHING_PENDING
            self._release_ahead()
        return k

    def _release_ahead(self) -> None:
        if self._ahead_reserved:
            self.memory.release(self._ahead_reserved)
            self._ahead_reserved = 0

    async def _recv_into(self, view: memoryview, frame_deadline: float = math.inf) -> int:
        if self._pending:
            return self._from_pending(view)
        # About to wait for the peer: what was held back goes out first.
        await self._flush_deferred()
        deadline = min(self._last_activity + self.limits.idle_timeout_s, frame_deadline)
        while True:
            with trio.move_on_at(deadline) as scope:
                return await self._receive_into(view)
            if scope.cancelled_caught:
                if deadline >= frame_deadline:
                    raise CloseConnection("request frame not completed in time",
                                          timeout_s=self.limits.frame_read_timeout_s,
                                          min_rate_bytes_s=MIN_FRAME_RATE)
                # Activity may have happened meanwhile (responses being sent).
                new_deadline = min(self._last_activity + self.limits.idle_timeout_s, frame_deadline)
                if new_deadline <= deadline:
                    raise CloseConnection("idle timeout", idle_s=self.limits.idle_timeout_s)
                deadline = new_deadline

    async def _receive_into(self, view: memoryview) -> int:
        if self._socket_stream is not None:
            # The caller found the socket empty: wait, then read (fewer frames held while idle
            # than Trio's recv_into, which tries first).
            while True:
                await trio.lowlevel.wait_readable(self._socket_stream.socket)
                k = self._receive_ready(view)
                if k is not None:
                    return k
        if not self._pending:
            self._pending = memoryview(await self.stream.receive_some(max(len(view), 65536)))
        return self._from_pending(view)

    async def _wait_unmuted(self) -> None:
        # Muted by a throttled response: the next request stays in the socket buffer until
        # the throttle time is over. Only this connection's reader sleeps.
        while self.info.muted_until > trio.current_time():
            await trio.sleep_until(self.info.muted_until)
            self._touch()

    async def _reader(self) -> None:
        """Reads frames until the peer closes; then lets the writer flush what is in flight.

        A request is handled in the reader's own task while no other request of the connection
        is running (most requests complete without waiting: no task is started for them). If
        its handler has to wait, this task carries on with that request alone and a new task
        takes over reading (see :meth:`_handle_here`)."""
        assert self._nursery is not None
        me = trio.lowlevel.current_task()
        self.info.io_tasks.append(me)
        head = bytearray(4)
        while True:
            # A throttled connection is read as Kafka reads every connection: one request at a
            # time, the next once the last is answered and its throttle time is over.
            while self.info.muted_until and self._running:
                await self._handled.park()
            await self._wait_unmuted()
            if not await self._read_exactly(head, 4):
                await self._flush_deferred()
                if self._send is not None:
                    await self._send.aclose()  # the peer closed its side: the writer flushes and stops
                return
            self._touch()
            # The reader may have been waiting for this frame when a throttle began.
            await self._wait_unmuted()
            (size,) = _SIZE.unpack(head)
            limit = self.info.frame_limit or self.limits.max_frame_bytes
            if size < 0 or size > limit:
                if self._on_protocol_error:
                    self._on_protocol_error("frame_size")
                if head[0] == 0x16 and head[1] == 0x03 and self._socket_stream is not None:
                    raise CloseConnection("TLS handshake on a plaintext listener")
                raise CloseConnection("frame size out of range", size=size, limit=limit)
            # Muted (not read) until this frame fits in request memory.
            if self._deferred and not self.memory.fits(size):
                await self._flush_deferred()
            await self.memory.reserve(size)
            try:
                frame = await self._read_frame(size, trio.current_time() + self.limits.frame_read_timeout_s)
            except BaseException:
                self.memory.release(size)
                raise
            self._touch()
            if self._running == 0 and self._queued < self.limits.max_in_flight:
                self._in_flight.acquire_nowait()  # none running: never blocks
                self._running += 1
                handling = self.handler.handle(self.info, frame)
                del frame
                if await self._handle_here(handling, size, me):
                    return
                continue
            try:
                await self._in_flight.acquire()
                try:
                    slot = _Slot()
                    await self._writer_channel().send(slot)
                    self._queued += 1
                except BaseException:
                    self._in_flight.release()
                    raise
            except BaseException:
                self.memory.release(size)
                raise
            self._running += 1
            self._nursery.start_soon(self._run_request, frame, slot, size)
            del frame  # held by the request's task only: freed once answered, not at the next frame

    async def _handle_here(self, handling: Coroutine[Any, Any, EncodedFrame | None], reserved: int,
                           me: trio.lowlevel.Task) -> bool:
        """Runs a request in the reader's task: True when its handler had to wait, this task now
        serves that request alone and a new reader task was started."""
        assert self._nursery is not None
        handed_over = False
        try:
            try:
                waits_for = handling.send(None)
            except StopIteration as done:
                response: EncodedFrame | None = done.value
            else:
                # The handler waits (for replication, a lock, a pause...): the requests behind it
                # must not. This task carries on with this request; another one reads on.
                slot = _Slot()
                self._writer_channel().send_nowait(slot)  # room: checked before (_queued < max_in_flight)
                self._queued += 1
                self.info.io_tasks.remove(me)
                self._nursery.start_soon(self._reader)
                handed_over = True
                await self._finish_request(resume(handling, waits_for), slot, reserved)
                return True
        except CloseConnection as ex:
            _RESPONSE_DELAY_MS.set(0)
            self._request_done(reserved)
            self._queue_done(_Slot(close=ex))
            return False
        except BaseException:
            if not handed_over:
                handling.close()
                self._request_done(reserved)
            raise
        self._request_done(reserved)
        delay_ms = _RESPONSE_DELAY_MS.get()
        if delay_ms > 0:
            _RESPONSE_DELAY_MS.set(0)
        if response is None and delay_ms <= 0:
            # Nothing to send (acks=0): still give the other tasks a turn before the next frame.
            await trio.lowlevel.cancel_shielded_checkpoint()
            return False
        if response is not None:
            self._count_unsent(response)
        if delay_ms > 0 or self._queued:
            queued = _Slot(response=response)
            queued.send_after = trio.current_time() + delay_ms / 1000 if delay_ms > 0 else 0.0
            self._queue_done(queued)
            return False
        assert response is not None
        if self._may_defer(response):
            self._deferred.extend(response.parts)
            self._deferred_count += 1
            self._deferred_bytes += response.size
            return False
        await self._send_response(response)
        return False

    def _may_defer(self, response: EncodedFrame) -> bool:
        """Whether ``response`` may wait to go out with the next one: the connection's next
        request is read already (so its answer follows soon), nothing else of it is running or
        queued, and the held responses are within the COALESCE bounds."""
        pending = self._pending
        if len(pending) < 4 or self._running or self._queued or self.info.muted_until:
            return False
        (size,) = _SIZE.unpack_from(pending)
        # A next frame the reader would refuse closes the connection: answer before it.
        if not 0 <= size <= min(len(pending) - 4, self.info.frame_limit or self.limits.max_frame_bytes):
            return False
        # In-memory parts only (a file region goes out by sendfile).
        if in_memory_bytes(response) != response.size:
            return False
        if not self._deferred:
            self._deferred_since = time.perf_counter()
            return response.size <= COALESCE_BYTES
        return (self._deferred_count < COALESCE_RESPONSES
                and self._deferred_bytes + response.size <= COALESCE_BYTES
                and time.perf_counter() - self._deferred_since <= COALESCE_S)

    async def _flush_deferred(self, *, writer: bool = False) -> None:
        """Sends the responses held back. Once a slot is queued the reader leaves them to the
        writer, which sends them before that slot's response."""
        if self._deferred and (writer or not self._queued):
            await self._send_held()

    async def _send_held(self, response: EncodedFrame | None = None) -> None:
        """The held-back responses, and ``response`` (all in memory) after them, in one send."""
        parts = self._deferred
        size = self._deferred_bytes
        if response is not None:
            parts.extend(response.parts)
            size += response.size
        self._deferred = []
        self._deferred_count = self._deferred_bytes = 0
        try:
            await self.stream.send_all(b"".join(parts))
        finally:
            self.memory.responses -= size
            self._unsent -= size
        self._touch()

    def _queue_done(self, slot: _Slot) -> None:
        slot.done.set()
        self._writer_channel().send_nowait(slot)
        self._queued += 1

    def _writer_channel(self) -> trio.MemorySendChannel[_Slot]:
        if self._send is None:
            assert self._nursery is not None
            self._send, receive = trio.open_memory_channel[_Slot](self.limits.max_in_flight)
            self._nursery.start_soon(self._writer, receive, self._nursery.cancel_scope)
        return self._send

    def _count_unsent(self, response: EncodedFrame) -> None:
        size = in_memory_bytes(response)
        self.memory.responses += size
        self._unsent += size

    def _request_done(self, reserved: int) -> None:
        self.memory.release(reserved)
        self._in_flight.release()
        self._running -= 1
        self._handled.unpark_all()

    async def _read_frame(self, size: int, deadline: float) -> RequestFrame:
        if size <= PREALLOCATE_MAX:
            frame = bytearray(size)
            if size and not await self._read_exactly(frame, size, deadline):
                raise CloseConnection("peer closed mid-frame", received=0, expected=size)
            return frame
        # Memory follows what the peer sent, not what it announced (pages are mapped as
        # they are written). The frame's reservation is held meanwhile, so it must also keep
        # coming at MIN_FRAME_RATE (after a grace period): a peer trickling a 100 MB frame
        # cannot hold 100 MB of request memory until the read timeout.
        view = memoryview(mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS))
        got = 0
        started = trio.current_time()
        while got < size:
            due = min(deadline, started + FRAME_GRACE_S + got / MIN_FRAME_RATE)
            k = await self._recv_into(view[got: min(got + READ_CHUNK, size)], due)
            if k == 0:
                raise CloseConnection("peer closed mid-frame", received=got, expected=size)
            got += k
            self._touch()
        return view

    async def _run_request(self, frame: RequestFrame, slot: _Slot, reserved: int) -> None:
        if self.info.muted_until:
            async with self.info.throttle_lock:
                while self.info.muted_until > trio.current_time():
                    await trio.sleep_until(self.info.muted_until)
                await self._finish_request(self.handler.handle(self.info, frame), slot, reserved)
        else:
            await self._finish_request(self.handler.handle(self.info, frame), slot, reserved)

    async def _finish_request(self, handling: Awaitable[EncodedFrame | None], slot: _Slot, reserved: int) -> None:
        try:
            slot.response = await handling
            delay_ms = _RESPONSE_DELAY_MS.get()
            if delay_ms > 0:
                slot.send_after = trio.current_time() + delay_ms / 1000
                _RESPONSE_DELAY_MS.set(0)
            if slot.response is not None:
                self._count_unsent(slot.response)
        except CloseConnection as ex:
            slot.close = ex
        finally:
            del handling
            self._request_done(reserved)
            slot.done.set()

    async def _writer(self, slots: trio.MemoryReceiveChannel[_Slot], cancel: trio.CancelScope) -> None:
        self.info.io_tasks.append(trio.lowlevel.current_task())
        async for slot in slots:
            if self._deferred:
                # Held back by the reader before this slot was queued: they come first.
                await self._flush_deferred(writer=True)
            await slot.done.wait()
            if slot.close is not None:
                if slot.close.response is not None:
                    await send_frame(self.stream, slot.close.response)
                cancel.cancel()
                raise slot.close
            if slot.response is not None:
                if slot.send_after > trio.current_time():
                    await trio.sleep_until(slot.send_after)
                await self._send_response(slot.response)
                slot.response = None
            self._queued -= 1
        cancel.cancel()

    async def _send_response(self, response: EncodedFrame) -> None:
        if self._deferred:
            if in_memory_bytes(response) == response.size:
                await self._send_held(response)
                return
            await self._send_held()
        try:
            await send_frame(self.stream, response)
        finally:
            size = in_memory_bytes(response)
            self.memory.responses -= size
            self._unsent -= size
        self._touch()
