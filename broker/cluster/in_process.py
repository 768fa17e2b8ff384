"""A node's own controller, reached in process.

A node that is both broker and controller needs no socket to reach its own
controller role: :class:`InProcessController` is the route the broker role's
:class:`broker.cluster.controller_channel.ControllerChannel` takes for requests to
this node's id (forwarded admin changes, DescribeQuorum, registration,
heartbeats, AlterPartition). A request is encoded and decoded as on the wire and
handled by the controller listener's own dispatcher, so the controller answers
it exactly as it answers a peer's (NOT_CONTROLLER while another node's controller
is active, and the channel then goes to that one over the network).

Each request runs in the controller role's nursery, as a peer's request runs in
its connection's task: a caller that stops waiting does not cut a write short.
"""

from __future__ import annotations

import itertools
from typing import TypeVar

import structlog
import trio

from broker.cluster.controller_channel import ChannelError
from broker.server.dispatch import Dispatcher
from broker.server.network import CloseConnection, ConnectionInfo
from wire.frame import decode_response, encode_request
from wire.generated.registry import API_SPECS
from wire.primitives import Message

log = structlog.get_logger(__name__)

_R = TypeVar("_R", bound=Message)


class InProcessController:
    """The channel's route to this node's own controller role: its dispatcher, no socket."""

    def __init__(self, node_id: int, dispatcher: Dispatcher, listener_name: str) -> None:
        self._node_id = node_id
        self.dispatcher = dispatcher
        self.client_id = f"cormorant-broker-{node_id}"
        self._conn = ConnectionInfo(listener_name, "PLAINTEXT", "127.0.0.1", 0, 0, -1)
        self._correlation = itertools.count(1)
        self._nursery: trio.Nursery | None = None

    @property
    def node_id(self) -> int:
        return self._node_id

    def attach(self, nursery: trio.Nursery | None) -> None:
        """The controller role runs (its requests run in ``nursery``), or stopped (None)."""
        self._nursery = nursery

    def _version(self, message: Message, wanted: int | None) -> int:
        # The version a peer would settle on from this controller's ApiVersions.
        spec = API_SPECS[message.API_KEY]
        entry = self.dispatcher.apis.get(message.API_KEY)
        if entry is None:
            raise ChannelError(f"the controller does not support {spec.name}")
        if wanted is not None:
            return wanted
        version = min(spec.max_version, entry.max_version)
        if version < max(spec.min_version, entry.min_version):
            raise ChannelError(f"no common version of {spec.name}")
        return version

    async def request(self, message: Message, response_type: type[_R], timeout_s: float,
                      version: int | None = None) -> _R:
        nursery = self._nursery
        if nursery is None:
            raise ChannelError(f"controller {self._node_id} (this node) is not running")
        api_version = self._version(message, version)
        correlation = next(self._correlation) & 0x7FFFFFFF
        frame = bytearray(encode_request(message, api_version, correlation, self.client_id)[4:])
        answer: list[bytes | ChannelError] = []
        done = trio.Event()
        nursery.start_soon(self._handle, frame, answer, done)
        with trio.move_on_after(timeout_s):
            await done.wait()
        if not answer:
            raise ChannelError(f"controller {self._node_id} (this node): no answer within {timeout_s}s")
        result = answer[0]
        if isinstance(result, ChannelError):
            raise result
        got, response = decode_response(memoryview(result)[4:], response_type, api_version)
        if got != correlation or not isinstance(response, response_type):
            raise ChannelError(f"correlation id {got}, expected {correlation}")
        return response

    async def _handle(self, frame: bytearray, answer: list[bytes | ChannelError], done: trio.Event) -> None:
        try:
            encoded = await self.dispatcher.handle(self._conn, frame)
            answer.append(ChannelError("the controller sent no response") if encoded is None
                          else encoded.to_bytes())
        except CloseConnection as ex:
            answer.append(ChannelError(f"the controller refused the request: {ex}"))
        except Exception as ex:  # a request of ours must never take the controller role down
            log.exception("in_process_controller_request_failed")
            answer.append(ChannelError(f"the controller failed: {ex!r}"))
        finally:
            done.set()

    async def aclose(self) -> None:
        """Nothing to close: there is no connection."""
