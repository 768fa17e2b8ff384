"""The broker's side of the controller listener: requests to the active controller.

:class:`ControllerChannel` keeps one Kafka-protocol connection per controller
(from ``controller.quorum.voters``), finds the active controller by asking any
of them DescribeQuorum, and retries on NOT_CONTROLLER (41) or a lost connection
until the caller's deadline — as Kafka's NodeToControllerChannelManager does. On a
node that is a controller too, requests to its own controller take a
:class:`LocalControllerRoute` instead of a socket: forwarded changes, registration
and heartbeats reach the network only when another node's controller is active.

:class:`broker.cluster.remote_controller.RemoteController` gives the handlers the same
calls as the in-process :class:`controller.service.Controller` and forwards each
over this channel.

:class:`BrokerLifecycle` registers the broker (BrokerRegistration), heartbeats
(BrokerHeartbeat) and asks for a controlled shutdown when the node stops.
"""

from __future__ import annotations

import itertools
import random
import struct
import uuid
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Protocol, TypeVar

import structlog
import trio

from broker.security.mechanism import AuthenticationFailed
from broker.security.peer import PeerSecurity, authenticate
from controller.image import Endpoint
from controller.quorum import NotControllerError
from wire.errors import ErrorCode
from wire.frame import decode_response, encode_request
from wire.generated.api_018_api_versions import ApiVersionsRequest, ApiVersionsResponse
from wire.generated.api_055_describe_quorum import (
    DescribeQuorumRequest,
    DescribeQuorumRequestPartitionData,
    DescribeQuorumRequestTopicData,
    DescribeQuorumResponse,
)
from wire.generated.api_062_broker_registration import (
    BrokerRegistrationRequest,
    BrokerRegistrationRequestFeature,
    BrokerRegistrationRequestListener,
    BrokerRegistrationResponse,
)
from wire.generated.api_063_broker_heartbeat import BrokerHeartbeatRequest, BrokerHeartbeatResponse
from wire.generated.registry import API_SPECS
from wire.primitives import Message

log = structlog.get_logger(__name__)

CLUSTER_METADATA_TOPIC = "__cluster_metadata"
METADATA_TOPIC_ID = uuid.UUID(int=1)
#: metadata.version levels this broker supports (Kafka 3.3-IV0 through 3.9-IV0).
METADATA_VERSION_RANGE = (7, 21)
REQUEST_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 2.0
#: How long the search for the active controller waits for the voters' answers.
FIND_ACTIVE_TIMEOUT_S = 1.0
#: Largest response accepted from a controller.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
#: How often a fenced broker heartbeats (at most).
FENCED_HEARTBEAT_INTERVAL_S = 0.25
RETRY_BACKOFF_MIN_S = 0.05
RETRY_BACKOFF_MAX_S = 1.0
#: How long a forwarded change waits to show up in this broker's metadata.
PROPAGATION_WAIT_S = 5.0
OP_SET = 0
OP_DELETE = 1

_R = TypeVar("_R", bound=Message)
_SIZE = struct.Struct(">i")


class ChannelError(Exception):
    """A controller could not be reached, or answered nonsense."""


class ControllerRequestError(Exception):
    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(f"{code.name}: {message}" if message else code.name)
        self.code = code


class _Connection:
    """One Kafka-protocol connection to one controller; one request at a time."""

    def __init__(self, host: str, port: int, client_id: str, security: PeerSecurity | None = None) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.security = security
        self._stream: trio.abc.Stream | None = None
        self._buffer = bytearray()
        self._lock = trio.Lock()
        self._correlation = itertools.count(1)
        self._versions: dict[int, tuple[int, int]] = {}

    async def _open(self) -> trio.abc.Stream:
        with trio.fail_after(CONNECT_TIMEOUT_S):
            stream: trio.abc.Stream = await trio.open_tcp_stream(self.host, self.port)
            if self.security is not None and self.security.ssl_context is not None:
                stream = trio.SSLStream(stream, self.security.ssl_context, server_hostname=self.host)
                await stream.do_handshake()
        self._stream = stream
        self._buffer = bytearray()
        try:
            reply = await self._exchange(stream, ApiVersionsRequest(client_software_name="cormorant-broker",
                                                                    client_software_version="1"),
                                         3, ApiVersionsResponse)
            if reply.error_code == ErrorCode.UNSUPPORTED_VERSION:
                reply = await self._exchange(stream, ApiVersionsRequest(), 0, ApiVersionsResponse)
            if reply.error_code != ErrorCode.NONE:
                raise ChannelError(f"ApiVersions failed: {ErrorCode.for_code(reply.error_code).name}")
            self._versions = {k.api_key: (k.min_version, k.max_version) for k in reply.api_keys}
            if self.security is not None and self.security.mechanism is not None:
                await self._authenticate(stream, self.security)
        except BaseException:
            await self.aclose()
            raise
        return stream

    async def _authenticate(self, stream: trio.abc.Stream, security: PeerSecurity) -> None:
        try:
            await authenticate(security, partial(self._exchange, stream))
        except AuthenticationFailed as ex:
            raise ChannelError(str(ex)) from ex

    def _version(self, message: Message, wanted: int | None) -> int:
        spec = API_SPECS[message.API_KEY]
        theirs = self._versions.get(message.API_KEY)
        if theirs is None:
            raise ChannelError(f"the controller does not support {spec.name}")
        if wanted is not None:
            return wanted
        version = min(spec.max_version, theirs[1])
        if version < max(spec.min_version, theirs[0]):
            raise ChannelError(f"no common version of {spec.name}")
        return version

    async def request(self, message: Message, response_type: type[_R], timeout_s: float,
                      version: int | None = None) -> _R:
        # The timeout covers the wait for the connection too: a request queued behind one that
        # hangs on a controller cut off from the network gives up in its own time.
        try:
            with trio.fail_after(timeout_s):
                await self._lock.acquire()
        except trio.TooSlowError as ex:
            raise ChannelError(f"{self.host}:{self.port}: busy for {timeout_s}s") from ex
        try:
            with trio.fail_after(timeout_s):
                stream = self._stream or await self._open()
                return await self._exchange(stream, message, self._version(message, version), response_type)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError) as ex:
            await self.aclose()
            raise ChannelError(f"{self.host}:{self.port}: {ex!r}") from ex
        except BaseException:
            # ChannelError, or cancelled mid-exchange: what is left on the stream belongs to
            # no request any more.
            await self.aclose()
            raise
        finally:
            self._lock.release()

    async def _exchange(self, stream: trio.abc.Stream, message: Message, version: int,
                        response_type: type[_R]) -> _R:
        correlation = next(self._correlation) & 0x7FFFFFFF
        await stream.send_all(encode_request(message, version, correlation, self.client_id))
        (size,) = _SIZE.unpack(await self._read(stream, 4))
        if size < 4 or size > MAX_RESPONSE_BYTES:
            raise ChannelError(f"response size {size} out of range")
        got, response = decode_response(await self._read(stream, size), response_type, version)
        if got != correlation:
            raise ChannelError(f"correlation id {got}, expected {correlation}")
        assert isinstance(response, response_type)
        return response

    async def _read(self, stream: trio.abc.Stream, n: int) -> bytes:
        while len(self._buffer) < n:
            chunk = await stream.receive_some(max(65536, n - len(self._buffer)))
            if not chunk:
                raise ChannelError("connection closed by the controller")
            self._buffer += chunk
        out = bytes(self._buffer[:n])
        del self._buffer[:n]
        return out

    async def aclose(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            with trio.CancelScope(shield=True):
                await stream.aclose()


class ControllerConnection(Protocol):
    """How the channel reaches one controller: over a socket (:class:`_Connection`), or in
    process for this node's own controller role (no socket to a peer it is part of)."""

    async def request(self, message: Message, response_type: type[_R], timeout_s: float,
                      version: int | None = None) -> _R: ...

    async def aclose(self) -> None: ...


class LocalControllerRoute(ControllerConnection, Protocol):
    """This node's own controller, reached in process."""

    @property
    def node_id(self) -> int: ...


def _top_level_not_controller(response: Message) -> bool:
    return getattr(response, "error_code", 0) == ErrorCode.NOT_CONTROLLER


class ControllerChannel:
    """Requests to the controllers of ``voters`` ((node id, host, port))."""

    def __init__(self, voters: Sequence[tuple[int, str, int]], client_id: str, rng: random.Random,
                 security: PeerSecurity | None = None, local: LocalControllerRoute | None = None) -> None:
        self.voters = {voter: (host, port) for voter, host, port in voters}
        self._connections: dict[int, ControllerConnection] = {
            voter: _Connection(host, port, client_id, security) for voter, host, port in voters}
        if local is not None and local.node_id in self._connections:
            # This node's own controller: requests to it never leave the process.
            self._connections[local.node_id] = local
        self.rng = rng
        self.active_id: int | None = None

    async def send(self, voter: int, message: Message, response_type: type[_R],
                   timeout_s: float = REQUEST_TIMEOUT_S, version: int | None = None) -> _R:
        return await self._connections[voter].request(message, response_type, timeout_s, version)

    def forget_active(self) -> None:
        self.active_id = None

    async def find_active(self, timeout_s: float = FIND_ACTIVE_TIMEOUT_S) -> int:
        """Asks every controller at once who leads the quorum, and believes the newest epoch.

        One at a time, a controller cut off from the network would cost a whole timeout, and one
        that has not heard of the election yet would name the leader it lost. The answers of a
        majority include one from a voter that took part in the latest election (two majorities
        meet), so the search ends once a majority answered, or at ``timeout_s``.
        """
        answers: dict[int, tuple[int, int]] = {}  # voter -> (epoch, leader)
        majority = len(self.voters) // 2 + 1
        asked = len(self.voters)
        done = trio.Event()

        async def ask(voter: int) -> None:
            nonlocal asked
            try:
                reply = await self.send(voter, describe_quorum_request(), DescribeQuorumResponse,
                                        timeout_s=timeout_s)
                answers[voter] = quorum_leader_and_epoch(reply)
            except ChannelError:
                pass
            finally:
                asked -= 1
            named = any(leader in self.voters for _, leader in answers.values())
            if (len(answers) >= majority and named) or asked == 0:
                done.set()

        order = list(self.voters)
        self.rng.shuffle(order)
        async with trio.open_nursery() as nursery:
            for voter in order:
                nursery.start_soon(ask, voter)
            with trio.move_on_after(timeout_s):
                await done.wait()
            nursery.cancel_scope.cancel()
        named = [(epoch, leader) for epoch, leader in answers.values() if leader in self.voters]
        if not named:
            raise ChannelError("no controller knows an active controller")
        _, leader = max(named)
        self.active_id = leader
        return leader

    async def send_to_active(
        self,
        message: Message,
        response_type: type[_R],
        *,
        timeout_s: float,
        not_controller: Callable[[_R], bool] = _top_level_not_controller,
        version: int | None = None,
        attempt_timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> _R:
        """Sends to the active controller, retrying on NOT_CONTROLLER and lost connections; a
        controller silent for ``attempt_timeout_s`` is given up for whichever the quorum names."""
        deadline = trio.current_time() + timeout_s
        backoff = RETRY_BACKOFF_MIN_S
        last: Exception | None = None
        while True:
            remaining = deadline - trio.current_time()
            if remaining <= 0:
                raise ChannelError(f"no answer from the active controller within {timeout_s}s: {last!r}")
            try:
                target = self.active_id if self.active_id is not None else await self.find_active()
                reply = await self.send(target, message, response_type, timeout_s=min(remaining, attempt_timeout_s),
                                        version=version)
                if not not_controller(reply):
                    return reply
                last = NotControllerError(f"controller {target} is not active")
                self.active_id = None
            except ChannelError as ex:
                last = ex
                self.active_id = None
            await trio.sleep(min(backoff, max(0.0, deadline - trio.current_time())))
            backoff = min(backoff * 2, RETRY_BACKOFF_MAX_S)

    async def aclose(self) -> None:
        for connection in self._connections.values():
            await connection.aclose()


def describe_quorum_request() -> DescribeQuorumRequest:
    return DescribeQuorumRequest(topics=[DescribeQuorumRequestTopicData(
        topic_name=CLUSTER_METADATA_TOPIC, partitions=[DescribeQuorumRequestPartitionData(partition_index=0)])])


def quorum_leader(reply: DescribeQuorumResponse) -> int:
    return quorum_leader_and_epoch(reply)[1]


def quorum_leader_and_epoch(reply: DescribeQuorumResponse) -> tuple[int, int]:
    """(epoch, leader id) as the answering voter knows them."""
    for topic in reply.topics:
        for partition in topic.partitions:
            return partition.leader_epoch, partition.leader_id
    return -1, -1


# ---------------------------------------------------------------- registration and heartbeats


class BrokerLifecycle:
    """Registers this broker with the active controller and keeps its session alive."""

    def __init__(
        self,
        channel: ControllerChannel,
        broker_id: int,
        cluster_id: str,
        incarnation_id: uuid.UUID,
        heartbeat_interval_s: float,
        metadata_offset: Callable[[], int],
        session_timeout_s: float | None = None,
        caught_up_to: Callable[[int, float], Awaitable[None]] | None = None,
    ) -> None:
        self.channel = channel
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self.incarnation_id = incarnation_id
        self.heartbeat_interval_s = heartbeat_interval_s
        self.metadata_offset = metadata_offset
        #: Returns once this broker's metadata reaches an offset (or after a timeout): the first
        #: heartbeat after a registration goes as soon as the broker has caught up with it.
        self.caught_up_to = caught_up_to
        # One heartbeat attempt waits at most two heartbeat intervals, and at most half a session
        # (as Kafka bounds its heartbeat requests, KAFKA-14392): a controller cut off (packets
        # dropped, no reset) must not hold the heartbeats until the new controller's session for
        # this broker (broker.session.timeout.ms, counted from its activation) has expired.
        attempt = min(REQUEST_TIMEOUT_S, max(0.5, 2 * heartbeat_interval_s))
        self.heartbeat_attempt_timeout_s = attempt if session_timeout_s is None else min(attempt, session_timeout_s / 2)
        self.broker_epoch = -1
        self.fenced = True
        self.unfenced = trio.Event()
        self._endpoints: tuple[Endpoint, ...] = ()
        self._rack: str | None = None
        self._stopping = False

    async def register(self, endpoints: Sequence[Endpoint], rack: str | None) -> int:
        """Registers (retrying until the controller accepts); returns the broker epoch."""
        self._endpoints, self._rack = tuple(endpoints), rack
        backoff = RETRY_BACKOFF_MIN_S
        while True:
            request = BrokerRegistrationRequest(
                broker_id=self.broker_id,
                cluster_id=self.cluster_id,
                incarnation_id=self.incarnation_id,
                listeners=[BrokerRegistrationRequestListener(name=e.name, host=e.host, port=e.port,
                                                             security_protocol=e.security_protocol)
                           for e in self._endpoints],
                features=[BrokerRegistrationRequestFeature(name="metadata.version",
                                                           min_supported_version=METADATA_VERSION_RANGE[0],
                                                           max_supported_version=METADATA_VERSION_RANGE[1])],
                rack=rack,
                previous_broker_epoch=self.broker_epoch,
            )
            try:
                reply = await self.channel.send_to_active(request, BrokerRegistrationResponse,
                                                          timeout_s=REQUEST_TIMEOUT_S * 2)
            except ChannelError as ex:
                log.info("broker_registration_retry", reason=str(ex))
            else:
                code = ErrorCode.for_code(reply.error_code)
                if code == ErrorCode.NONE:
                    self.broker_epoch = reply.broker_epoch
                    self.fenced = True
                    log.info("broker_registered", broker_id=self.broker_id, epoch=self.broker_epoch)
                    return self.broker_epoch
                if code == ErrorCode.INCONSISTENT_CLUSTER_ID:
                    raise ControllerRequestError(code, f"the controllers' cluster id is not {self.cluster_id}")
                log.info("broker_registration_retry", reason=code.name)
            await trio.sleep(backoff)
            backoff = min(backoff * 2, RETRY_BACKOFF_MAX_S)

    async def heartbeat(self, want_shut_down: bool = False) -> BrokerHeartbeatResponse:
        request = BrokerHeartbeatRequest(
            broker_id=self.broker_id,
            broker_epoch=self.broker_epoch,
            current_metadata_offset=self.metadata_offset(),
            want_fence=False,
            want_shut_down=want_shut_down,
        )
        reply = await self.channel.send_to_active(
            request, BrokerHeartbeatResponse, timeout_s=REQUEST_TIMEOUT_S,
            attempt_timeout_s=self.heartbeat_attempt_timeout_s)
        code = ErrorCode.for_code(reply.error_code)
        if code == ErrorCode.NONE:
            if self.fenced and not reply.is_fenced:
                log.info("broker_unfenced", broker_id=self.broker_id, epoch=self.broker_epoch)
                self.unfenced.set()
            elif not self.fenced and reply.is_fenced:
                log.warning("broker_fenced_by_controller", broker_id=self.broker_id, epoch=self.broker_epoch)
                self.unfenced = trio.Event()
            self.fenced = reply.is_fenced
        return reply

    async def run(self) -> None:
        """Heartbeats until cancelled; registers again if the controller lost the registration."""
        registered = True
        while not self._stopping:
            # A fenced broker asks often: it is unfenced as soon as it has caught up.
            wait_s = min(self.heartbeat_interval_s, FENCED_HEARTBEAT_INTERVAL_S) if self.fenced \
                else self.heartbeat_interval_s
            if registered and self.caught_up_to is not None:
                await self.caught_up_to(self.broker_epoch, wait_s)
            else:
                await trio.sleep(wait_s)
            registered = False
            if self._stopping:
                return
            try:
                reply = await self.heartbeat()
            except ChannelError as ex:
                log.info("broker_heartbeat_failed", reason=str(ex))
                continue
            code = ErrorCode.for_code(reply.error_code)
            if code in (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED):
                log.warning("broker_registration_lost", reason=code.name)
                self.fenced = True
                self.unfenced = trio.Event()
                await self.register(self._endpoints, self._rack)
                registered = True

    async def controlled_shutdown(self, timeout_s: float) -> bool:
        """Asks the controller to move leadership away before this broker stops."""
        self._stopping = True
        if self.broker_epoch < 0:
            return False
        with trio.move_on_after(timeout_s):
            while True:
                try:
                    reply = await self.heartbeat(want_shut_down=True)
                    if reply.should_shut_down:
                        log.info("broker_controlled_shutdown_done", broker_id=self.broker_id)
                        return True
                except ChannelError as ex:
                    log.info("broker_controlled_shutdown_retry", reason=str(ex))
                await trio.sleep(0.1)
        log.warning("broker_controlled_shutdown_timed_out", broker_id=self.broker_id, timeout_s=timeout_s)
        return False


#: One Kafka-protocol connection to another node (controllers, and leaders for follower fetches).
PeerConnection = _Connection
