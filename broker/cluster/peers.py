"""Requests from this broker to another one (inter-broker listener), for the transaction
coordinator's WriteTxnMarkers and partition leaders' transaction verification.

One :class:`PeerConnection` per broker, addressed from the metadata image (the endpoint
named by ``inter.broker.listener.name``) and replaced when that endpoint changes. A broker
that cannot be reached answers None; callers retry on their own schedule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import structlog
import trio

from broker.cluster.controller_channel import ChannelError, PeerConnection
from broker.security.peer import PeerSecurity
from controller.image import MetadataImage
from wire.primitives import Message

log = structlog.get_logger(__name__)

_R = TypeVar("_R", bound=Message)


def broker_address(image: MetadataImage, broker_id: int, listener_name: str) -> tuple[str, int] | None:
    """Where to reach ``broker_id``: its endpoint on ``listener_name`` (else its first one)."""
    broker = image.brokers.get(broker_id)
    if broker is None or not broker.endpoints:
        return None
    named = [e for e in broker.endpoints if e.name == listener_name]
    endpoint = (named or list(broker.endpoints))[0]
    return endpoint.host, endpoint.port


class PeerBrokers:
    def __init__(self, node_id: int, image: Callable[[], MetadataImage], listener_name: str,
                 security: PeerSecurity | None = None) -> None:
        self.security = security
        self.node_id = node_id
        self.image = image
        self.listener_name = listener_name
        self._connections: dict[int, tuple[tuple[str, int], PeerConnection]] = {}

    def _address(self, broker_id: int) -> tuple[str, int] | None:
        broker = self.image().brokers.get(broker_id)
        if broker is None or broker.fenced:
            return None
        return broker_address(self.image(), broker_id, self.listener_name)

    async def request(self, broker_id: int, message: Message, response_type: type[_R], timeout_s: float,
                      version: int | None = None) -> _R | None:
        address = self._address(broker_id)
        if address is None:
            return None
        known = self._connections.get(broker_id)
        if known is None or known[0] != address:
            if known is not None:
                await known[1].aclose()
            known = (address, PeerConnection(address[0], address[1], f"broker-{self.node_id}", self.security))
            self._connections[broker_id] = known
        try:
            return await known[1].request(message, response_type, timeout_s, version)
        except (ChannelError, trio.TooSlowError) as ex:
            log.info("peer_request_failed", broker=broker_id, api=type(message).__name__, reason=str(ex))
            return None

    async def aclose(self) -> None:
        for _, connection in self._connections.values():
            await connection.aclose()
        self._connections.clear()
