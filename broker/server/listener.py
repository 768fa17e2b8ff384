"""Listeners: the accept loop of one listener (Kafka's acceptor), its connection limits and
quotas, and the setup (TLS, SASL) of each connection before :class:`Connection` serves it
(:mod:`broker.server.network`)."""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Callable

import structlog
import trio

from broker.quotas.connection_quotas import (
    ConnectionQuotas,
    ConnectionThrottled,
    TooManyConnections,
)
from broker.server.network import (
    CloseConnection,
    Connection,
    ConnectionInfo,
    ConnectionSetup,
    NetworkLimits,
    NetworkMemory,
    RequestHandler,
)

log = structlog.get_logger(__name__)

#: accept() errors that mean "out of resources for now" (trio.serve_listeners' list).
_ACCEPT_CAPACITY_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}
ACCEPT_RETRY_S = 0.1


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
        memory: NetworkMemory | None = None,
        quotas: ConnectionQuotas | None = None,
        on_refused: Callable[[str], None] | None = None,
    ) -> None:
        self.setup = setup
        #: max.connections and the other connection quotas; None: only ``limits.max_connections``.
        self.quotas = quotas
        self._on_refused = on_refused
        self.name = name
        self.memory = memory if memory is not None else NetworkMemory(limits.max_request_memory)
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
                async with trio.open_nursery() as acceptors:
                    for sock in self._sockets:
                        acceptors.start_soon(self._accept_loop, sock, nursery)
            # Stopped accepting: open connections go on until close_connections().
            for sock in self._sockets:
                await sock.aclose()

    async def _accept_loop(self, sock: trio.SocketListener, nursery: trio.Nursery) -> None:
        """Kafka's acceptor: one connection at a time, waiting for a slot (and the creation rate)
        after each, so a listener at its limit leaves the next connections in the backlog."""
        while True:
            try:
                stream = await sock.accept()
            except OSError as ex:
                if ex.errno not in _ACCEPT_CAPACITY_ERRNOS:
                    raise
                # Out of descriptors or memory: retry shortly, as trio.serve_listeners does.
                log.error("accept_failed", listener=self.name, error=os.strerror(ex.errno or 0))
                await trio.sleep(ACCEPT_RETRY_S)
                continue
            try:
                peer = stream.socket.getpeername()
            except OSError:  # gone already
                await stream.aclose()
                continue
            refusal: Exception | None = None
            if self.quotas is not None:
                try:
                    await self.quotas.wait_for_slot(self.name)
                except BaseException:  # stopped accepting while this one waited
                    with trio.CancelScope(shield=True):
                        await stream.aclose()
                    raise
                try:
                    self.quotas.admit(self.name, peer[0])
                except (TooManyConnections, ConnectionThrottled) as ex:
                    refusal = ex
            nursery.start_soon(self._accept, stream, peer, refusal)

    def stop_accepting(self) -> None:
        self._cancel.cancel()

    def close_connections(self) -> None:
        self._draining = True
        for scope in list(self._connections):
            scope.cancel()

    async def _accept(self, stream: trio.SocketStream, peer: tuple[str, int],
                      refusal: Exception | None = None) -> None:
        self._next_id += 1
        sock = stream.socket
        if refusal is not None:
            await self._refuse(stream, peer[0], refusal)
            return
        if (self.quotas is None and self._open >= self.limits.max_connections) or self._draining:
            if self.quotas is not None:
                self.quotas.release(self.name, peer[0])
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
                await Connection(served, info, self.handler, self.limits, self._on_protocol_error, self.memory).run()
        finally:
            self._connections.discard(scope)
            self._open -= 1
            if self.quotas is not None:
                self.quotas.release(self.name, peer[0])
            if self._on_connection_change:
                self._on_connection_change(-1)
            for callback in info.on_close or ():
                try:  # a failing callback must not keep the socket open
                    callback()
                except Exception:
                    log.exception("connection_close_callback_failed", listener=self.name)
            with trio.CancelScope(shield=True):
                await stream.aclose()


    async def _refuse(self, stream: trio.SocketStream, host: str, refusal: Exception) -> None:
        try:
            if isinstance(refusal, ConnectionThrottled):
                # Held unserved for the throttle time, then closed (Kafka's delayed close).
                log.debug("connection_throttled", listener=self.name, peer=host, throttle_ms=refusal.throttle_ms)
                if self._on_refused is not None:
                    self._on_refused("connection_creation_rate_per_ip")
                with trio.move_on_after(refusal.throttle_ms / 1000):
                    await trio.sleep_forever()
            elif isinstance(refusal, TooManyConnections):
                log.info("connection_refused", listener=self.name, peer=host,
                         reason="address already has the configured maximum of connections",
                         limit=refusal.limit)
                if self._on_refused is not None:
                    self._on_refused("max_connections_per_ip")
        finally:
            with trio.CancelScope(shield=True):
                await stream.aclose()
