"""A node of a cluster: the roles of ``process.roles`` around the metadata quorum.

:class:`broker.node.BrokerNode` hands its metadata to this module on every node. A
node without ``controller.quorum.voters`` is a cluster of one: a combined broker
and controller whose quorum is :class:`controller.quorum.LocalQuorum` (a one-voter
journal), with the same roles as a combined node of a larger cluster and no
controller listener (no peer would connect).

- The **controller role** (:class:`ControllerRole`) runs a voter of the quorum
  (:class:`controller.raft.RaftQuorum`, or the quorum of one), the controller
  service on its replica of the log, and the controller listener: the Kafka APIs of
  :mod:`broker.controller_handlers`, on the same port as the quorum's own
  traffic (:class:`ControllerListener` tells them apart by their first bytes).
  This node's broker role reaches it in process
  (:class:`broker.cluster.in_process.InProcessController`), never over a socket.
- The **broker role** registers with the active controller and heartbeats
  (:class:`broker.cluster.controller_channel.BrokerLifecycle`), forwards topic and
  config changes to it (:class:`broker.cluster.remote_controller.RemoteController`,
  which handlers reach as ``ctx.services.controller``), and reads metadata from a
  :class:`broker.cluster.metadata_follower.MetadataView`: fed by its own controller's
  image on a combined node, by a :class:`broker.cluster.metadata_follower.MetadataFollower`
  on a broker-only node.

Without ``cluster.id``, nodes sharing the same voters derive the same id from
them (:func:`quorum_cluster_id`), so a cluster started by hand agrees on one.
"""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import structlog
import trio

from broker.cluster.controller_channel import BrokerLifecycle, ControllerChannel
from broker.cluster.in_process import InProcessController
from broker.cluster.metadata_follower import MetadataFollower, MetadataView
from broker.cluster.remote_controller import RemoteController
from broker.controller_handlers import all_controller_handlers
from broker.observability.timed_quorum import TimedQuorum
from broker.security.peer import controller_security
from broker.security.setup import ListenerSecurity, listener_security
from broker.server.dispatch import Dispatcher, load_handlers
from broker.server.listener import Listener as NetworkListener
from broker.server.network import NetworkLimits
from config import BrokerConfig, ConfigError, Listener, Password, SecurityProtocol
from controller.apis import ClusterControl
from controller.elections import PREFERRED, imbalanced_partitions
from controller.image import Endpoint
from controller.quorum import LocalQuorum, NotControllerError, QuorumTimeoutError, VoterQuorum
from controller.raft import RaftQuorum, RaftSettings, is_raft_connection
from controller.service import Controller, ControllerSettings
from controller.snapshot import encode_record_batches, image_records
from wire.primitives import DecodeLimits

if TYPE_CHECKING:
    import random

    from broker.observability.metrics import BrokerMetrics
    from broker.security.scram import ScramCredential

#: A user's SCRAM credential as the metadata log has it now (user, mechanism).
CredentialLookup = Callable[[str, int], "ScramCredential | None"]

log = structlog.get_logger(__name__)

#: Sub-directory of the first log dir holding the quorum's journal, meta and snapshot.
METADATA_DIR = "__cluster_metadata-0"
#: How long a new connection to the controller listener may take to show its first bytes.
PEEK_TIMEOUT_S = 2.0
PEEK_BYTES = 5
CONTROLLED_SHUTDOWN_TIMEOUT_S = 3.0


def quorum_cluster_id(config: BrokerConfig) -> str | None:
    """A cluster id every node with the same ``controller.quorum.voters`` derives alike."""
    if not config.controller_quorum_voters:
        return None
    voters = ",".join(f"{v.node_id}@{v.host}:{v.port}" for v in sorted(config.controller_quorum_voters,
                                                                       key=lambda v: v.node_id))
    digest = hashlib.sha256(f"cormorant-cluster:{voters}".encode()).digest()[:16]
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


class ControllerListener(NetworkListener):
    """The controller listener: Kafka requests, and the quorum's peer connections on the same port."""

    def __init__(self, name: str, security_protocol: str, host: str, port: int, handler: Dispatcher,
                 limits: NetworkLimits, raft: RaftQuorum, setup: ListenerSecurity | None = None) -> None:
        super().__init__(name, security_protocol, host, port, handler, limits, setup=setup)
        self.raft = raft

    async def _accept(self, stream: trio.SocketStream, peer: tuple[str, int],
                      refusal: Exception | None = None) -> None:
        preamble = await _peek(stream, PEEK_BYTES, PEEK_TIMEOUT_S)
        if preamble is not None and is_raft_connection(preamble):
            # Nothing was read: pysyncobj takes over the socket as it was accepted.
            sock = socket.socket(fileno=os.dup(stream.socket.fileno()))
            await stream.aclose()
            self.raft.adopt_connection(sock)
            return
        await super()._accept(stream, peer, refusal)


async def _peek(stream: trio.SocketStream, size: int, timeout_s: float) -> bytes | None:
    with trio.move_on_after(timeout_s):
        while True:
            try:
                data: bytes = await stream.socket.recv(size, socket.MSG_PEEK)
            except OSError:
                return None
            if len(data) >= size or not data:
                return data
            await trio.sleep(0.005)
    return None


class ControllerRole:
    """A voter of the metadata quorum and, when it leads, the active controller."""

    def __init__(self, config: BrokerConfig, cluster_id: str, rng: random.Random, metrics: BrokerMetrics,
                 scram_credential: CredentialLookup, voters: Sequence[tuple[int, str, int]]) -> None:
        self.config = config
        self.node_id = node_id = config.node_id
        self.voter_addresses = {voter: (host, port) for voter, host, port in voters}
        directory = config.log_dirs[0] / METADATA_DIR
        self.quorum: VoterQuorum
        #: The replicated quorum of ``controller.quorum.voters``; None for a single node's quorum of one.
        self.raft: RaftQuorum | None = None
        local: LocalQuorum | None = None
        if voters:
            secret = config.get("controller.quorum.secret")
            self.quorum = self.raft = RaftQuorum(
                node_id, voters, directory, RaftSettings(secret=secret.value if isinstance(secret, Password) else None))
        else:
            # No voters named: a quorum of one, this node, on its metadata journal.
            self.quorum = local = LocalQuorum(node_id, directory)
        self.controller = Controller(
            node_id,
            TimedQuorum(self.quorum, metrics),
            ControllerSettings(config.num_partitions, config.default_replication_factor,
                               config.unclean_leader_election_enable,
                               max_partitions_per_request=config.max_partitions_per_request,
                               max_partitions_per_broker=config.max_partitions_per_broker,
                               config=config),
            rng,
        )
        if local is not None:
            self.controller.replay(list(local.replay()))
        self.quorum.add_reset_listener(self.controller.reset_image)
        self.cluster_control = ClusterControl(self.controller, cluster_id,
                                              config.broker_session_timeout_ms / 1000, colocated=local is not None)
        self.quorum.add_activation_listener(self.cluster_control.activate)
        self.dispatcher = Dispatcher(load_handlers(all_controller_handlers()), DecodeLimits())
        self.listener_name = (config.controller_listener_names or ("CONTROLLER",))[0]
        #: How this node's broker role reaches this controller: in process, never over a socket.
        self.in_process = InProcessController(node_id, self.dispatcher, self.listener_name)
        # A quorum of one has no peer to hear from: no controller listener to bind.
        raft = self.raft
        self.listeners = [] if raft is None else [
            self._listener(lst, scram_credential, metrics, raft) for lst in self._listener_configs(config)]
        self._snapshot: tuple[int, bytes] | None = None

    def _listener_configs(self, config: BrokerConfig) -> list[Listener]:
        own = self.voter_addresses[config.node_id]
        configured = [lst for lst in config.listeners if lst.name in config.controller_listener_names]
        if not configured:
            # No controller listener named: serve on this voter's own address.
            return [Listener(self.listener_name, own[0], own[1], SecurityProtocol.PLAINTEXT)]
        secured = [lst.name for lst in configured if lst.security_protocol is not SecurityProtocol.PLAINTEXT]
        if secured and config.get("controller.quorum.secret") is None:
            raise ConfigError("controller.quorum.secret",
                              f"controller listener {secured[0]} is secured but the quorum's own traffic would not "
                              "be: set controller.quorum.secret (the same on every controller)")
        if not any(lst.port in (own[1], 0) for lst in configured):
            raise ConfigError("controller.quorum.voters",
                              f"node {config.node_id}'s voter port {own[1]} is not a controller listener's port")
        return [Listener(lst.name, lst.host, own[1] if lst.port == 0 else lst.port, lst.security_protocol)
                for lst in configured]

    def _listener(self, lst: Listener, scram_credential: CredentialLookup,
                  metrics: BrokerMetrics, raft: RaftQuorum) -> ControllerListener:
        config = self.config
        limits = NetworkLimits(
            max_frame_bytes=config.socket_request_max_bytes,
            idle_timeout_s=config.connections_max_idle_ms / 1000,
            max_connections=config.max_connections,
            max_request_memory=config.queued_max_request_bytes,
            frame_read_timeout_s=config.socket_request_read_timeout_ms / 1000,
        )
        security = listener_security(config, lst, scram_credential, metrics.authentication)
        return ControllerListener(lst.name, lst.security_protocol.name, lst.host or "0.0.0.0", lst.port,
                                  self.dispatcher, limits, raft, security)

    def snapshot_bytes(self) -> tuple[int, bytes]:
        """The image at the oldest retained offset, as record batches (cached per offset)."""
        start = self.quorum.log_start_offset
        if self._snapshot is None or self._snapshot[0] != start:
            self._snapshot = (start, encode_record_batches(image_records(self.quorum.snapshot()), 0))
        return self._snapshot

    async def _balance_leaders(self) -> None:
        """auto.leader.rebalance.enable: the active controller hands leadership back to
        preferred replicas when a broker leads too few of the partitions it is preferred for."""
        config = self.config
        while True:
            await trio.sleep(config.leader_imbalance_check_interval_seconds)
            if not self.quorum.is_leader():
                continue
            wanted = imbalanced_partitions(self.controller.image, config.leader_imbalance_per_broker_percentage)
            if not wanted:
                continue
            try:
                await self.controller.elect_leaders(PREFERRED, wanted)
            except (NotControllerError, QuorumTimeoutError) as ex:
                log.info("leader_rebalance_skipped", reason=type(ex).__name__)

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                await self._run(nursery, task_status)
        finally:
            self.in_process.attach(None)

    async def _run(self, nursery: trio.Nursery, task_status: trio.TaskStatus[None]) -> None:
        for listener in self.listeners:
            await listener.bind()
        await nursery.start(self.quorum.run)
        self.in_process.attach(nursery)
        for listener in self.listeners:
            nursery.start_soon(listener.serve)
        nursery.start_soon(self.cluster_control.run)
        if self.config.auto_leader_rebalance_enable:
            nursery.start_soon(self._balance_leaders)
        names = [f"{lst.name}://{lst.host}:{lst.bound_port}" for lst in self.listeners]
        log.info("controller_started", node_id=self.node_id, listeners=names)
        task_status.started()


class _NoQuorum:
    """What a broker-only node has in place of a quorum voter."""

    leader_id = -1
    epoch = 0
    end_offset = 0

    def is_leader(self) -> bool:
        return False

    def close(self) -> None:
        pass


#: What a node has as ``node.quorum``: its voter, or nothing on a broker-only node.
QuorumHandle = VoterQuorum | _NoQuorum


class ClusterMode:
    """The roles of one node of a cluster — a single node too: without ``controller.quorum.voters``
    it is a combined broker and controller of a quorum of one (:class:`controller.quorum.LocalQuorum`),
    with the same roles, channels and view as a combined node of a larger cluster."""

    def __init__(self, config: BrokerConfig, cluster_id: str, rng: random.Random, metrics: BrokerMetrics,
                 scram_credential: CredentialLookup) -> None:
        node_id = config.node_id
        self.config = config
        voters = [(v.node_id, v.host, v.port) for v in config.controller_quorum_voters]
        #: A single node: the only voter of its quorum and the only broker of its cluster.
        self.single = not voters
        self.view = MetadataView(metrics.metadata_apply_failed)
        self.controller: ControllerRole | None = None
        self.follower: MetadataFollower | None = None
        self.lifecycle: BrokerLifecycle | None = None
        if config.is_controller or self.single:
            self.controller = role = ControllerRole(config, cluster_id, rng, metrics, scram_credential, voters)
            role.controller.add_metadata_publisher(self.view.on_metadata_update)
            if self.single:
                # Its journal is replayed already: the view starts from it, caught up.
                self.view.update(role.controller.image)
                self.view.mark_caught_up()
        local = self.controller.in_process if self.controller is not None else None
        # A quorum of one has one voter, this node, reached in process.
        channel_voters = voters or [(node_id, "127.0.0.1", 0)]
        self.channel = ControllerChannel(channel_voters, f"cormorant-broker-{node_id}", rng,
                                         controller_security(config), local)
        # Registration and heartbeats have connections of their own (Kafka's "heartbeat" channel):
        # never queued behind an AlterPartition, a forwarded request or a metadata fetch that
        # waits on a controller the network cut off, while the session runs out.
        self.heartbeat_channel = ControllerChannel(channel_voters, f"cormorant-broker-{node_id}-heartbeat", rng,
                                                   controller_security(config), local)
        if config.is_broker or self.single:
            if self.controller is None:
                self.follower = MetadataFollower(self.channel, node_id, cluster_id, self.view)
            incarnation = uuid.UUID(int=rng.getrandbits(128), version=4)
            self.lifecycle = BrokerLifecycle(self.heartbeat_channel, node_id, cluster_id, incarnation,
                                             config.broker_heartbeat_interval_ms / 1000,
                                             lambda: self.view.image.offset,
                                             config.broker_session_timeout_ms / 1000,
                                             caught_up_to=self._caught_up_to)
        self.remote = RemoteController(self.channel, lambda: self.view.image, self.view.add_publisher,
                                       self.view.wait_for, self._register, self._bootstrap)
        self.quorum: QuorumHandle = self.controller.quorum if self.controller is not None else _NoQuorum()
        self._nursery: trio.Nursery | None = None

    async def _caught_up_to(self, offset: int, timeout_s: float) -> None:
        await self.view.wait_for(lambda image: image.offset >= offset, timeout_s)

    async def _bootstrap(self) -> None:
        """A new cluster's first records, written at once when this node's controller is active
        (a single node's always is); otherwise the active controller writes them on activation."""
        role = self.controller
        if role is not None and role.quorum.is_leader():
            try:
                await role.controller.bootstrap()
            except NotControllerError as ex:
                log.info("bootstrap_deferred", reason=str(ex))

    def broker_listeners(self) -> list[Listener]:
        config = self.config
        if self.single:
            # Every listener but a controller one (all of them if there is nothing else).
            return [lst for lst in config.listeners if lst.name not in config.controller_listener_names] or list(
                config.listeners)
        if not config.is_broker:
            return []
        return [lst for lst in config.listeners if lst.name not in config.controller_listener_names]

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Runs the node's roles until cancelled; started before the broker registers."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self.view.run)
                if self.controller is not None:
                    await nursery.start(self.controller.run)
                    nursery.start_soon(self._follow_local_log, self.controller)
                if self.follower is not None:
                    nursery.start_soon(self.follower.run)
                task_status.started()
        finally:
            self._nursery = None
            with trio.CancelScope(shield=True):
                await self.channel.aclose()
                await self.heartbeat_channel.aclose()

    async def _follow_local_log(self, role: ControllerRole) -> None:
        # A combined node serves its own replica of the log once it has caught up.
        await role.quorum.caught_up.wait()
        self.view.mark_caught_up()

    async def _register(self, broker_id: int, endpoints: Sequence[Endpoint], rack: str | None) -> int:
        lifecycle = self.lifecycle
        if lifecycle is None or self._nursery is None:
            return -1
        epoch = await lifecycle.register(endpoints, rack)
        self._nursery.start_soon(lifecycle.run)
        timeout_s = self.config.initial_broker_registration_timeout_ms / 1000
        with trio.move_on_after(timeout_s):
            await self.view.caught_up.wait()
            await lifecycle.unfenced.wait()
            return epoch
        log.warning("broker_not_unfenced", broker_id=broker_id, timeout_s=timeout_s,
                    caught_up=self.view.caught_up.is_set())
        return epoch

    async def controlled_shutdown(self) -> None:
        """Moves this broker's leaderships away before it stops serving (best effort). A single
        node has no other broker to take them: fencing it would only raise every leader epoch."""
        if self.lifecycle is not None and not self.single:
            await self.lifecycle.controlled_shutdown(CONTROLLED_SHUTDOWN_TIMEOUT_S)
