"""The broker's side of the controller listener: requests to the active controller.

:class:`ControllerChannel` keeps one Kafka-protocol connection per controller
(from ``controller.quorum.voters``), finds the active controller by asking any
of them DescribeQuorum, and retries on NOT_CONTROLLER (41) or a lost connection
until the caller's deadline — as Kafka's NodeToControllerChannelManager does.

:class:`RemoteController` gives the handlers the same calls as the in-process
:class:`controller.service.Controller` (CreateTopics, DeleteTopics,
CreatePartitions, AlterConfigs/IncrementalAlterConfigs, AllocateProducerIds)
and forwards each as the Kafka request to the active controller. After a
change it waits, briefly, until this broker's metadata shows it, so a client
that created a topic finds it in the next Metadata answer.

:class:`BrokerLifecycle` registers the broker (BrokerRegistration), heartbeats
(BrokerHeartbeat) and asks for a controlled shutdown when the node stops.
"""

from __future__ import annotations

import itertools
import random
import struct
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import TypeVar

import structlog
import trio

from broker.acl_requests import DeleteOutcome, forward_create_acls, forward_delete_acls
from broker.quota_requests import QuotaChange, forward_alter_client_quotas
from broker.security.mechanism import AuthenticationFailed
from broker.security.peer import PeerSecurity, authenticate
from controller.acls import AclFilter, StandardAcl
from controller.elections import PREFERRED, ElectionOutcome
from controller.image import BROKER_RESOURCE, TOPIC_RESOURCE, Endpoint, MetadataImage
from controller.quorum import NotControllerError
from controller.reassignment import ReassignmentOutcome
from controller.service import CreateTopicResult, TopicRequest
from wire.errors import ErrorCode
from wire.frame import decode_response, encode_request
from wire.generated.api_018_api_versions import ApiVersionsRequest, ApiVersionsResponse
from wire.generated.api_019_create_topics import (
    CreateTopicsRequest,
    CreateTopicsRequestCreatableReplicaAssignment,
    CreateTopicsRequestCreatableTopic,
    CreateTopicsRequestCreatableTopicConfig,
    CreateTopicsResponse,
)
from wire.generated.api_020_delete_topics import (
    DeleteTopicsRequest,
    DeleteTopicsRequestDeleteTopicState,
    DeleteTopicsResponse,
)
from wire.generated.api_033_alter_configs import (
    AlterConfigsRequest,
    AlterConfigsRequestAlterableConfig,
    AlterConfigsRequestAlterConfigsResource,
    AlterConfigsResponse,
)
from wire.generated.api_037_create_partitions import (
    CreatePartitionsRequest,
    CreatePartitionsRequestCreatePartitionsAssignment,
    CreatePartitionsRequestCreatePartitionsTopic,
    CreatePartitionsResponse,
)
from wire.generated.api_043_elect_leaders import (
    ElectLeadersRequest,
    ElectLeadersRequestTopicPartitions,
    ElectLeadersResponse,
)
from wire.generated.api_044_incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsRequestAlterableConfig,
    IncrementalAlterConfigsRequestAlterConfigsResource,
    IncrementalAlterConfigsResponse,
)
from wire.generated.api_045_alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsRequestReassignablePartition,
    AlterPartitionReassignmentsRequestReassignableTopic,
    AlterPartitionReassignmentsResponse,
)
from wire.generated.api_051_alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
)
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
from wire.generated.api_067_allocate_producer_ids import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
)
from wire.generated.registry import API_SPECS
from wire.primitives import Message

log = structlog.get_logger(__name__)

CLUSTER_METADATA_TOPIC = "__cluster_metadata"
METADATA_TOPIC_ID = uuid.UUID(int=1)
#: metadata.version levels this broker supports (Kafka 3.3-IV0 through 3.9-IV0).
METADATA_VERSION_RANGE = (7, 21)
REQUEST_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 2.0
#: Largest response accepted from a controller.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
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
        async with self._lock:
            try:
                with trio.fail_after(timeout_s):
                    stream = self._stream or await self._open()
                    return await self._exchange(stream, message, self._version(message, version), response_type)
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError) as ex:
                await self.aclose()
                raise ChannelError(f"{self.host}:{self.port}: {ex!r}") from ex
            except ChannelError:
                await self.aclose()
                raise

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


def _top_level_not_controller(response: Message) -> bool:
    return getattr(response, "error_code", 0) == ErrorCode.NOT_CONTROLLER


class ControllerChannel:
    """Requests to the controllers of ``voters`` ((node id, host, port))."""

    def __init__(self, voters: Sequence[tuple[int, str, int]], client_id: str, rng: random.Random) -> None:
        self.voters = {voter: (host, port) for voter, host, port in voters}
        self._connections = {voter: _Connection(host, port, client_id) for voter, host, port in voters}
        self.rng = rng
        self.active_id: int | None = None

    async def send(self, voter: int, message: Message, response_type: type[_R],
                   timeout_s: float = REQUEST_TIMEOUT_S, version: int | None = None) -> _R:
        return await self._connections[voter].request(message, response_type, timeout_s, version)

    def forget_active(self) -> None:
        self.active_id = None

    async def find_active(self) -> int:
        """Asks the controllers, in random order, who leads the quorum."""
        order = list(self.voters)
        self.rng.shuffle(order)
        for voter in order:
            try:
                reply = await self.send(voter, describe_quorum_request(), DescribeQuorumResponse, timeout_s=1.0)
            except ChannelError:
                continue
            leader = quorum_leader(reply)
            if leader in self.voters:
                self.active_id = leader
                return leader
        raise ChannelError("no controller knows an active controller")

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
    for topic in reply.topics:
        for partition in topic.partitions:
            return partition.leader_id
    return -1


# ---------------------------------------------------------------- forwarding


WaitForImage = Callable[[Callable[[MetadataImage], bool], float], Awaitable[bool]]


class RemoteController:
    """The controller calls the handlers make, forwarded to the active controller.

    Also stands in for the in-process controller where the node reads metadata
    (``image``, ``add_image_listener``) and registers the broker
    (``register_broker``, which runs :class:`BrokerLifecycle`).
    """

    def __init__(
        self,
        channel: ControllerChannel,
        image: Callable[[], MetadataImage],
        add_image_listener: Callable[[Callable[[MetadataImage], None]], None],
        wait_for_image: WaitForImage,
        register: Callable[[int, Sequence[Endpoint], str | None], Awaitable[int]],
        request_timeout_s: float = 30.0,
    ) -> None:
        self.channel = channel
        self._image = image
        self._add_image_listener = add_image_listener
        self._wait_for_image = wait_for_image
        self._register = register
        self.request_timeout_s = request_timeout_s

    @property
    def image(self) -> MetadataImage:
        return self._image()

    def add_image_listener(self, listener: Callable[[MetadataImage], None]) -> None:
        self._add_image_listener(listener)

    async def bootstrap(self) -> None:
        """The active controller writes the bootstrap records; nothing to do here."""

    async def register_broker(self, broker_id: int, endpoints: Sequence[Endpoint], rack: str | None) -> int:
        return await self._register(broker_id, endpoints, rack)

    async def create_topics(
        self, requests: Sequence[TopicRequest], validate_only: bool = False
    ) -> list[CreateTopicResult]:
        request = CreateTopicsRequest(
            topics=[
                CreateTopicsRequestCreatableTopic(
                    name=r.name,
                    num_partitions=r.num_partitions,
                    replication_factor=r.replication_factor,
                    assignments=[CreateTopicsRequestCreatableReplicaAssignment(partition_index=i, broker_ids=list(b))
                                 for i, b in sorted(r.assignments.items())],
                    configs=[CreateTopicsRequestCreatableTopicConfig(name=k, value=v)
                             for k, v in sorted(r.configs.items())],
                )
                for r in requests
            ],
            timeout_ms=int(self.request_timeout_s * 1000),
            validate_only=validate_only,
        )
        reply = await self.channel.send_to_active(
            request, CreateTopicsResponse, timeout_s=self.request_timeout_s,
            not_controller=lambda r: any(t.error_code == ErrorCode.NOT_CONTROLLER for t in r.topics))
        results = [
            CreateTopicResult(
                name=t.name,
                error=ErrorCode.for_code(t.error_code),
                message=t.error_message,
                topic_id=t.topic_id,
                num_partitions=t.num_partitions,
                replication_factor=t.replication_factor,
            )
            for t in reply.topics
        ]
        created = {r.topic_id for r in results if r.error == ErrorCode.NONE}
        if created and not validate_only:
            await self._wait_for_image(lambda image: created <= set(image.topics_by_id), PROPAGATION_WAIT_S)
        return results

    async def delete_topics(self, names: Sequence[str]) -> dict[str, ErrorCode]:
        request = DeleteTopicsRequest(
            topics=[DeleteTopicsRequestDeleteTopicState(name=n) for n in names],
            topic_names=list(names),
            timeout_ms=int(self.request_timeout_s * 1000),
        )
        reply = await self.channel.send_to_active(
            request, DeleteTopicsResponse, timeout_s=self.request_timeout_s,
            not_controller=lambda r: any(t.error_code == ErrorCode.NOT_CONTROLLER for t in r.responses))
        out = {t.name or "": ErrorCode.for_code(t.error_code) for t in reply.responses}
        gone = {name for name, code in out.items() if code == ErrorCode.NONE}
        if gone:
            await self._wait_for_image(lambda image: not gone & set(image.topic_ids), PROPAGATION_WAIT_S)
        return out

    async def create_partitions(
        self, changes: Sequence[tuple[str, int, list[list[int]] | None]], validate_only: bool
    ) -> dict[str, tuple[ErrorCode, str | None]]:
        request = CreatePartitionsRequest(
            topics=[
                CreatePartitionsRequestCreatePartitionsTopic(
                    name=name, count=count,
                    assignments=None if assignments is None else [
                        CreatePartitionsRequestCreatePartitionsAssignment(broker_ids=list(a)) for a in assignments],
                )
                for name, count, assignments in changes
            ],
            timeout_ms=int(self.request_timeout_s * 1000),
            validate_only=validate_only,
        )
        reply = await self.channel.send_to_active(
            request, CreatePartitionsResponse, timeout_s=self.request_timeout_s,
            not_controller=lambda r: any(t.error_code == ErrorCode.NOT_CONTROLLER for t in r.results))
        out = {t.name: (ErrorCode.for_code(t.error_code), t.error_message) for t in reply.results}
        grown = {name: count for name, count, _ in changes if out.get(name, (None,))[0] == ErrorCode.NONE}
        if grown and not validate_only:
            def done(image: MetadataImage) -> bool:
                return all((t := image.topic(n)) is not None and len(t.partitions) >= c for n, c in grown.items())

            await self._wait_for_image(done, PROPAGATION_WAIT_S)
        return out

    async def alter_user_scram_credentials(
        self, request: AlterUserScramCredentialsRequest
    ) -> AlterUserScramCredentialsResponse:
        reply = await self.channel.send_to_active(
            request, AlterUserScramCredentialsResponse, timeout_s=self.request_timeout_s,
            not_controller=lambda r: any(u.error_code == ErrorCode.NOT_CONTROLLER for u in r.results))
        ok = {u.user for u in reply.results if u.error_code == ErrorCode.NONE}
        upserted = {(u.name, u.mechanism, u.salt) for u in request.upsertions if u.name in ok}
        deleted = {(d.name, d.mechanism) for d in request.deletions if d.name in ok}

        def done(image: MetadataImage) -> bool:
            credentials = image.scram_credentials
            return all((found := credentials.get((name, mechanism))) is not None and found.salt == salt
                       for name, mechanism, salt in upserted) and not any(key in credentials for key in deleted)

        if upserted or deleted:
            await self._wait_for_image(done, PROPAGATION_WAIT_S)
        return reply

    async def elect_leaders(
        self, election_type: int, partitions: Sequence[tuple[str, int]] | None
    ) -> dict[tuple[str, int], ElectionOutcome]:
        topics: dict[str, list[int]] = {}
        for topic, index in partitions or ():
            topics.setdefault(topic, []).append(index)
        request = ElectLeadersRequest(
            election_type=election_type,
            topic_partitions=None if partitions is None else [
                ElectLeadersRequestTopicPartitions(topic=t, partitions=ps) for t, ps in topics.items()],
            timeout_ms=int(self.request_timeout_s * 1000),
        )
        reply = await self.channel.send_to_active(request, ElectLeadersResponse, timeout_s=self.request_timeout_s)
        out = {
            (t.topic, r.partition_id): ElectionOutcome(ErrorCode.for_code(r.error_code), r.error_message)
            for t in reply.replica_election_results for r in t.partition_result
        }
        elected = [tp for tp, o in out.items() if o.error == ErrorCode.NONE]
        if elected:
            def done(image: MetadataImage) -> bool:
                for name, index in elected:
                    topic = image.topic(name)
                    part = topic.partitions.get(index) if topic is not None else None
                    if part is None or part.leader < 0 or (
                            election_type == PREFERRED and part.leader != part.replicas[0]):
                        return False
                return True

            await self._wait_for_image(done, PROPAGATION_WAIT_S)
        return out

    async def alter_reassignments(
        self, requests: Sequence[tuple[str, int, Sequence[int] | None]]
    ) -> dict[tuple[str, int], ReassignmentOutcome]:
        topics: dict[str, AlterPartitionReassignmentsRequestReassignableTopic] = {}
        for name, index, target in requests:
            topic = topics.setdefault(name, AlterPartitionReassignmentsRequestReassignableTopic(name=name))
            topic.partitions.append(AlterPartitionReassignmentsRequestReassignablePartition(
                partition_index=index, replicas=None if target is None else list(target)))
        request = AlterPartitionReassignmentsRequest(timeout_ms=int(self.request_timeout_s * 1000),
                                                     topics=list(topics.values()))
        reply = await self.channel.send_to_active(request, AlterPartitionReassignmentsResponse,
                                                  timeout_s=self.request_timeout_s)
        if reply.error_code != ErrorCode.NONE:
            return {(n, i): ReassignmentOutcome(ErrorCode.for_code(reply.error_code), reply.error_message)
                    for n, i, _ in requests}
        return {(t.name, p.partition_index): ReassignmentOutcome(ErrorCode.for_code(p.error_code), p.error_message)
                for t in reply.responses for p in t.partitions}

    async def alter_configs(
        self,
        resource_type: int,
        resource_name: str,
        changes: Mapping[str, str | None],
        replace_all: bool,
        validate_only: bool,
    ) -> tuple[ErrorCode, str | None]:
        code: int
        message: str | None
        if replace_all:
            legacy = AlterConfigsRequest(
                resources=[AlterConfigsRequestAlterConfigsResource(
                    resource_type=resource_type, resource_name=resource_name,
                    configs=[AlterConfigsRequestAlterableConfig(name=k, value=v)
                             for k, v in sorted(changes.items()) if v is not None])],
                validate_only=validate_only,
            )
            reply = await self.channel.send_to_active(
                legacy, AlterConfigsResponse, timeout_s=self.request_timeout_s,
                not_controller=lambda r: any(t.error_code == ErrorCode.NOT_CONTROLLER for t in r.responses))
            code, message = reply.responses[0].error_code, reply.responses[0].error_message
        else:
            incremental = IncrementalAlterConfigsRequest(
                resources=[IncrementalAlterConfigsRequestAlterConfigsResource(
                    resource_type=resource_type, resource_name=resource_name,
                    configs=[IncrementalAlterConfigsRequestAlterableConfig(
                        name=k, config_operation=OP_DELETE if v is None else OP_SET, value=v)
                        for k, v in sorted(changes.items())])],
                validate_only=validate_only,
            )
            inc = await self.channel.send_to_active(
                incremental, IncrementalAlterConfigsResponse, timeout_s=self.request_timeout_s,
                not_controller=lambda r: any(t.error_code == ErrorCode.NOT_CONTROLLER for t in r.responses))
            code, message = inc.responses[0].error_code, inc.responses[0].error_message
        result = ErrorCode.for_code(code)
        if result == ErrorCode.NONE and not validate_only and resource_type in (TOPIC_RESOURCE, BROKER_RESOURCE):
            expected = dict(changes)

            def shown(image: MetadataImage) -> bool:
                current = image.configs.get((resource_type, resource_name), {})
                if replace_all:
                    return dict(current) == {k: v for k, v in expected.items() if v is not None}
                return all(current.get(k) == v for k, v in expected.items())

            await self._wait_for_image(shown, PROPAGATION_WAIT_S)
        return result, message

    async def create_acls(self, acls: Sequence[StandardAcl]) -> list[tuple[ErrorCode, str | None]]:
        return await forward_create_acls(self.channel, self.request_timeout_s, self._wait_for_image,
                                         PROPAGATION_WAIT_S, acls)

    async def delete_acls(self, filters: Sequence[AclFilter]) -> list[DeleteOutcome]:
        return await forward_delete_acls(self.channel, self.request_timeout_s, self._wait_for_image,
                                         PROPAGATION_WAIT_S, filters)

    async def alter_client_quotas(self, changes: Sequence[QuotaChange],
                                  validate_only: bool) -> list[tuple[ErrorCode, str | None]]:
        return await forward_alter_client_quotas(self.channel, self.request_timeout_s, self._wait_for_image,
                                                 PROPAGATION_WAIT_S, changes, validate_only)

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> tuple[int, int]:
        reply = await self.channel.send_to_active(
            AllocateProducerIdsRequest(broker_id=broker_id, broker_epoch=broker_epoch),
            AllocateProducerIdsResponse, timeout_s=self.request_timeout_s)
        if reply.error_code != ErrorCode.NONE:
            raise ControllerRequestError(ErrorCode.for_code(reply.error_code), "AllocateProducerIds failed")
        return reply.producer_id_start, reply.producer_id_len


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
    ) -> None:
        self.channel = channel
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self.incarnation_id = incarnation_id
        self.heartbeat_interval_s = heartbeat_interval_s
        self.metadata_offset = metadata_offset
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
        # One attempt waits at most two heartbeat intervals: a controller cut off (packets dropped,
        # no reset) must not hold the heartbeats until the new controller's session for this
        # broker (broker.session.timeout.ms) has expired.
        reply = await self.channel.send_to_active(
            request, BrokerHeartbeatResponse, timeout_s=REQUEST_TIMEOUT_S,
            attempt_timeout_s=min(REQUEST_TIMEOUT_S, max(0.5, 2 * self.heartbeat_interval_s)))
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
        while not self._stopping:
            # A fenced broker asks often: it is unfenced as soon as it has caught up.
            await trio.sleep(min(self.heartbeat_interval_s, 0.25) if self.fenced else self.heartbeat_interval_s)
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
