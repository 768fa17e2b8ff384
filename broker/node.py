"""A Cormorant node: the broker (and, with ``process.roles`` including controller, the
controller) of one process, from start-up recovery to graceful shutdown.

A single node is a cluster of one on a cluster's code path (broker/cluster/cluster_mode.py):
a one-voter metadata quorum, its broker registered with its own controller, replica
sets of one. Start-up order: log dirs and ``meta.properties``, log recovery, metadata
replay, the node's roles started, listeners bound, broker registered and unfenced,
listeners serving, ready line.
"""

from __future__ import annotations

import base64
import dataclasses
import gc
import os
import random
import signal
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import structlog
import trio

from broker.cluster.cluster_mode import ClusterMode, QuorumHandle, quorum_cluster_id
from broker.cluster.controller_api import ControllerApi
from broker.cluster.peers import PeerBrokers
from broker.coordinator import KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION, CoordinatorLookup
from broker.eventloop.limits import raise_open_file_limit, run_periodically, supervise
from broker.eventloop.pacing import (
    SWITCH_INTERVAL_S,
    defer_full_collections,
    full_collections,
    settle_heap,
)
from broker.eventloop.watchdog import start_watchdog
from broker.group.coordinator import GroupCoordinator
from broker.handlers import all_handlers
from broker.handlers.h71_get_telemetry_subscriptions import API_KEY as GET_TELEMETRY_SUBSCRIPTIONS
from broker.handlers.h72_push_telemetry import API_KEY as PUSH_TELEMETRY
from broker.log.clean_records import LastRecord
from broker.log.cleaner import CleanerConfig, CleanerStats, LogCleaner
from broker.log.errors import LogDirLockedError
from broker.log.file_cache import FileCache, default_capacity
from broker.log.files import TopicPartition
from broker.log.manager import LogManager
from broker.log.producer_state import ProducerStateConfig
from broker.observability.metrics import BrokerMetrics, DisabledMetrics
from broker.observability.telemetry import Telemetry
from broker.observability.tracing import Tracing
from broker.quotas.connection_quotas import ConnectionQuotas
from broker.quotas.managers import QuotaManagers
from broker.replication.checkpoint_task import CheckpointTask, checkpoint_entries
from broker.replication.fetcher import FetcherSettings, ReplicaFetchers
from broker.replication.isr import IsrManager
from broker.replication.replica_manager import Partition, ReplicaManager
from broker.replication.topic_configs import TopicConfigs
from broker.security.audit_log import AuditLog
from broker.security.authorizer import StandardAuthorizer
from broker.security.keystore_reload import ListenerKeystores
from broker.security.password_encoder import DynamicPasswords, reencode_stored_passwords
from broker.security.peer import inter_broker_security
from broker.security.scram import ScramCredential
from broker.security.scram_bootstrap import InitialCredential, upsertion_request
from broker.security.setup import ListenerSecurity, listener_security
from broker.server.dispatch import Dispatcher, LoopbackMarkerSender, load_handlers
from broker.server.fetch_sessions import FetchSessionCache
from broker.server.listener import Listener
from broker.server.network import NetworkLimits, NetworkMemory
from broker.server.response_errors import ClientErrorLog
from broker.server.services import BrokerServices
from broker.share.coordinator import ShareCoordinator
from broker.transaction.coordinator import TransactionCoordinator
from config import BrokerConfig, ConfigError, TopicConfig
from controller.acls import AuthorizerRules
from controller.delta import MetadataDelta
from controller.image import Endpoint, MetadataImage
from wire.primitives import DecodeLimits

log = structlog.get_logger(__name__)

META_PROPERTIES = "meta.properties"
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
#: How long in-flight requests may run after SIGTERM before connections are cut.
SHUTDOWN_GRACE_S = 10.0
#: How often partitions whose log could not be created (a full disk, the open-file limit) are retried.
PARTITION_CREATION_RETRY_S = 5.0
#: Replicas created since the heap was last settled that make it worth settling again
#: (young collection and freeze: about a millisecond).
SETTLE_AFTER_NEW_REPLICAS = 1_000


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def new_cluster_id(rng: random.Random) -> str:
    """Kafka's format: a random UUID, URL-safe base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(rng.getrandbits(128).to_bytes(16, "big")).decode().rstrip("=")


def read_meta_properties(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def cleaner_config_from(config: BrokerConfig) -> CleanerConfig:
    return CleanerConfig(
        enable=config.log_cleaner_enable,
        threads=config.log_cleaner_threads,
        backoff_ms=config.log_cleaner_backoff_ms,
        dedupe_buffer_size=config.log_cleaner_dedupe_buffer_size,
        dedupe_buffer_load_factor=config.log_cleaner_io_buffer_load_factor,
        io_buffer_size=config.log_cleaner_io_buffer_size,
        io_max_bytes_per_second=config.log_cleaner_io_max_bytes_per_second,
    )


class BrokerNode:
    def __init__(
        self,
        config: BrokerConfig,
        clock_ms: Callable[[], int] = wall_clock_ms,
        rng: random.Random | None = None,
        initial_credentials: Sequence[InitialCredential] = (),
    ) -> None:
        self.config = config
        self.initial_credentials = initial_credentials
        self.node_id = config.node_id
        self.clock_ms = clock_ms
        self.rng = rng or random.Random()
        self.fetch_sessions = FetchSessionCache(
            config.max_incremental_fetch_session_cache_slots, clock_ms, self.rng
        )
        self.metrics = BrokerMetrics() if config.metrics_enabled else DisabledMetrics()
        self.metrics.client_telemetry.clock_ms = clock_ms
        self.tracing = Tracing(None)
        self.telemetry: Telemetry | None = None
        self.metrics_url: str | None = None
        self.cluster_id = ""
        apis = load_handlers(all_handlers())
        if not config.metrics_enabled:
            # As a Kafka broker without a ClientTelemetry receiver: client telemetry is not offered.
            for api_key in (GET_TELEMETRY_SUBSCRIPTIONS, PUSH_TELEMETRY):
                del apis[api_key]
        self.dispatcher = Dispatcher(apis, DecodeLimits())
        #: Kafka's StandardAuthorizer when authorizer.class.name names it; None: everything is allowed.
        self.authorizer = StandardAuthorizer(
            AuthorizerRules(config.super_users, config.allow_everyone_if_no_acl_found), lambda: self.image,
            AuditLog(config.authorizer_audit_log_file, config.authorizer_audit_log_max_bytes,
                     config.authorizer_audit_log_backup_count),
        ) if config.authorizer_class_name else None
        #: Client quotas (ClientQuotaRecords of the image), as Kafka's quota managers.
        self.quotas = QuotaManagers.from_config(config, clock_ms, lambda: self.image.client_quotas)
        self.quotas.on_throttle = self.metrics.throttled
        self.client_error_log = ClientErrorLog()
        self.dynamic_passwords = DynamicPasswords.from_config(config)
        self.listeners: list[Listener] = []
        #: Request and response memory of every client listener (queued.max.request.bytes).
        self.network_memory = NetworkMemory(config.queued_max_request_bytes)
        self.topic_configs = TopicConfigs(config, self.node_id, lambda: self.image)
        self._shutdown = trio.Event()
        #: Called once when the node starts stopping (the watchdog disarms its stall abort).
        self.on_stopping: Callable[[], None] | None = None
        self._broker_epoch = -1
        #: FindCoordinator key type -> the coordinator answering it (group: 0, transaction: 1).
        self.coordinators: dict[int, CoordinatorLookup] = {}
        # Set up in start():
        self.log_manager: LogManager
        self.quorum: QuorumHandle
        #: The active controller of the cluster (this node's own, in process, when it is active).
        self.controller: ControllerApi
        #: The node's roles in its cluster (a single node's: a cluster of one).
        self.cluster: ClusterMode
        self.replica_manager: ReplicaManager
        #: Replication (cluster mode): fetching as a follower, ISR upkeep as a leader.
        self.fetchers: ReplicaFetchers | None = None
        self.isr_manager: IsrManager | None = None
        self.log_cleaner: LogCleaner
        self.group_coordinator: GroupCoordinator
        self.share_coordinator: ShareCoordinator
        self.transaction_coordinator: TransactionCoordinator

    # ------------------------------------------------------------ views for handlers

    @property
    def image(self) -> MetadataImage:
        return self.controller.image

    async def _create_initial_credentials(self) -> None:
        """``serve --add-scram``: credentials not in the metadata log yet are written before serving."""
        request = upsertion_request(self.initial_credentials,
                                    lambda user, mechanism: (user, mechanism) in self.image.scram_credentials)
        if request is None:
            return
        response = await self.controller.alter_user_scram_credentials(request)
        for result in response.results:
            if result.error_code:
                raise ConfigError("--add-scram", f"{result.user}: {result.error_message}")
            log.info("scram_credential_created", user=result.user)

    def scram_credential(self, user: str, mechanism: int) -> ScramCredential | None:
        """A user's SCRAM credential as the metadata log has it now."""
        found = self.controller.image.scram_credentials.get((user, mechanism))
        if found is None:
            return None
        return ScramCredential(found.salt, found.stored_key, found.server_key, found.iterations)

    @property
    def broker_epoch(self) -> int:
        """This broker's registration epoch (-1 until registered)."""
        return self._broker_epoch

    def _bind_services(self) -> None:
        """What handlers may use (broker/server/services.py), handed to every dispatcher of this node."""
        services = BrokerServices(
            node_id=self.node_id, cluster_id=self.cluster_id, config=self.config, clock_ms=self.clock_ms,
            controller=self.controller, topic_configs=self.topic_configs, replica_manager=self.replica_manager,
            log_manager=self.log_manager, fetch_sessions=self.fetch_sessions, isr_manager=self.isr_manager,
            group_coordinator=self.group_coordinator, transaction_coordinator=self.transaction_coordinator,
            share_coordinator=self.share_coordinator, coordinators=self.coordinators, authorizer=self.authorizer,
            quotas=self.quotas, metrics=self.metrics, tracing=self.tracing, client_errors=self.client_error_log,
            dynamic_passwords=self.dynamic_passwords, api_versions=self.dispatcher.api_versions,
            cluster=self.cluster,
        )
        self.dispatcher.bind(services)
        if self.cluster.controller is not None:
            role = self.cluster.controller
            role.dispatcher.bind(dataclasses.replace(services, api_versions=role.dispatcher.api_versions))

    # ------------------------------------------------------------ lifecycle

    def _prepare_log_dirs(self) -> None:
        cluster_ids = set()
        for d in self.config.log_dirs:
            check_log_dir(d)
            meta = d / META_PROPERTIES
            if meta.exists():
                props = read_meta_properties(meta)
                if props.get("node.id") and int(props["node.id"]) != self.node_id:
                    raise ConfigError(
                        "node.id",
                        f"node.id {self.node_id} does not match {props['node.id']} stored in {meta}",
                    )
                if props.get("cluster.id"):
                    cluster_ids.add(props["cluster.id"])
        if len(cluster_ids) > 1:
            raise ConfigError("log.dirs", f"log dirs belong to different clusters: {sorted(cluster_ids)}")
        configured = self.config.cluster_id
        if configured and cluster_ids and configured not in cluster_ids:
            raise ConfigError("cluster.id", f"cluster.id {configured} does not match the log dirs' {cluster_ids.pop()}")
        self.cluster_id = configured or (
            cluster_ids.pop() if cluster_ids else quorum_cluster_id(self.config) or new_cluster_id(self.rng))
        for d in self.config.log_dirs:
            meta = d / META_PROPERTIES
            if not meta.exists():
                tmp = meta.with_suffix(".tmp")
                tmp.write_text(
                    "#\n# Written by Cormorant; Kafka's meta.properties format.\n"
                    f"version=1\ncluster.id={self.cluster_id}\nnode.id={self.node_id}\n"
                    f"directory.id={base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip('=')}\n"
                )
                tmp.replace(meta)

    def _advertised_endpoints(self) -> list[Endpoint]:
        bound = {listener.name: listener.bound_port for listener in self.listeners}
        endpoints = []
        for adv in self.config.advertised_listeners:
            port = adv.port or bound.get(adv.name, 0)
            host = adv.host or "127.0.0.1"
            endpoints.append(
                Endpoint(adv.name, host, port, SECURITY_PROTOCOL_IDS.get(adv.security_protocol.name, 0))
            )
        return endpoints

    async def run(self, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
        started = time.monotonic()
        files = self._open_file_budget()
        self._prepare_log_dirs()
        try:
            self.log_manager = LogManager(
                list(self.config.log_dirs), TopicConfig.resolve(self.config.topic_defaults(), {}), self.clock_ms,
                files=files, recovery_threads=self.config.num_recovery_threads_per_data_dir,
            )
        except LogDirLockedError as ex:
            # Another broker serves it: a setting to change, said in one line (not a traceback).
            raise ConfigError("log.dirs", str(ex)) from None
        self.metrics.log_recovered(time.monotonic() - started)
        # A single node (no controller.quorum.voters) is a cluster of one: the same roles.
        self.cluster = cluster = ClusterMode(self.config, self.cluster_id, self.rng, self.metrics,
                                             self.scram_credential)
        self.quorum, self.controller = cluster.quorum, cluster.remote
        self.replica_manager = ReplicaManager(
            self.node_id,
            self.log_manager,
            self.topic_configs.log_config_for,
            self.log_manager.read_high_watermarks(),
            producer_state_config=ProducerStateConfig(self.config.producer_id_expiration_ms),
            clock_ms=self.clock_ms,
            min_insync_replicas=self.topic_configs.min_insync_replicas,
        )
        self.checkpoints = CheckpointTask(
            self.log_manager, self.replica_manager, self.metrics,
            min(self.config.replica_high_watermark_checkpoint_interval_ms,
                self.config.log_flush_offset_checkpoint_interval_ms) / 1000, self.clock_ms)
        self.log_manager.request_checkpoint = self.checkpoints.request
        self.replica_manager.apply_image(self.controller.image)
        self.controller.add_metadata_publisher(self.replica_manager.apply_delta)
        self._settled_replicas = len(self.replica_manager.partitions)
        self.controller.add_metadata_publisher(self._settle_new_replicas)
        # New partitions' files are made off the event loop before an image brings them (prepare_image).
        cluster.view.add_preparer(self.replica_manager.prepare_image)
        if cluster.lifecycle is not None and not cluster.single:
            # Replica sets of one have no follower to fetch and no ISR to change.
            self._start_replication(cluster)
        self.log_cleaner = LogCleaner(
            self.log_manager,
            cleaner_config_from(self.config),
            self.clock_ms,
            last_stable_offset_of=self._last_stable_offset_of,
            active_producers_of=self._active_producers_of,
            on_cleaned=self._log_cleaned,
        )
        self.group_coordinator = GroupCoordinator(
            self.config, self.node_id, lambda: self.image, self.replica_manager, self.controller, self.clock_ms,
            self.rng, self.metrics)
        self.coordinators[KEY_TYPE_GROUP] = self.group_coordinator
        self.group_coordinator.on_image(self.controller.image)
        self.controller.add_metadata_publisher(self.group_coordinator.on_metadata_update)
        self.share_coordinator = ShareCoordinator.from_node(self)
        self.share_coordinator.on_image(self.controller.image)
        self.controller.add_metadata_publisher(self.share_coordinator.on_metadata_update)
        self.peers = PeerBrokers(self.node_id, lambda: self.controller.image, self.config.inter_broker_listener_name,
                                 inter_broker_security(self.config))
        self.transaction_coordinator = TransactionCoordinator(
            self.config, self.node_id, lambda: self.image, self.replica_manager, self.controller,
            self.group_coordinator, self.peers, LoopbackMarkerSender(self.dispatcher, self.node_id),
            lambda: self._broker_epoch, self.clock_ms, self.rng)
        self.coordinators[KEY_TYPE_TRANSACTION] = self.transaction_coordinator
        self.transaction_coordinator.on_image(self.controller.image)
        self.controller.add_metadata_publisher(self.transaction_coordinator.on_metadata_update)
        await self.controller.bootstrap()
        self.telemetry = telemetry = Telemetry(
            self.config, self.node_id, self.cluster_id, self.metrics, self.controller, self.quorum,
            self.replica_manager, self.log_manager, self.fetch_sessions, self.network_memory)
        self.tracing = telemetry.tracing
        self._bind_services()

        limits = NetworkLimits(
            max_frame_bytes=self.config.socket_request_max_bytes,
            idle_timeout_s=self.config.connections_max_idle_ms / 1000,
            max_connections=self.config.max_connections,
            max_request_memory=self.config.queued_max_request_bytes,
            frame_read_timeout_s=self.config.socket_request_read_timeout_ms / 1000,
        )
        broker_listeners = cluster.broker_listeners()
        securities: list[ListenerSecurity] = []
        self.connection_quotas = ConnectionQuotas(
            self.config, [lst.name for lst in broker_listeners], self.clock_ms, lambda: self.image.client_quotas,
            self.metrics.acceptor_blocked)
        for lst in broker_listeners:
            security = listener_security(self.config, lst, self.scram_credential, self.metrics.authentication)
            if security is not None:
                securities.append(security)
            self.listeners.append(
                Listener(lst.name, lst.security_protocol.name, lst.host or "0.0.0.0", lst.port,
                         self.dispatcher, limits, self.metrics.connection_callback(lst.name),
                         self.metrics.decode_failure, security, self.network_memory, self.connection_quotas,
                         self.metrics.connection_refused)
            )
        keystores = ListenerKeystores(self.config, self.node_id, securities, self.dynamic_passwords)
        keystores.on_image(self.controller.image)
        self.controller.add_metadata_publisher(keystores.on_metadata_update)
        async with trio.open_nursery() as nursery:
            await nursery.start(self.group_coordinator.run)
            await nursery.start(self.share_coordinator.run)
            await nursery.start(self.transaction_coordinator.run)
            await nursery.start(cluster.run)
            await self._create_initial_credentials()
            for listener in self.listeners:
                try:
                    await listener.bind()
                except OSError as ex:
                    raise ConfigError(
                        "listeners",
                        f"cannot listen on {listener.name}://{listener.host}:{listener.port}: "
                        f"{ex.strerror or ex}",
                    ) from ex
            self.metrics_url = await telemetry.bind()
            nursery.start_soon(telemetry.run)
            self._broker_epoch = await self.controller.register_broker(
                self.node_id, self._advertised_endpoints(), self.config.broker_rack
            )
            nursery.start_soon(reencode_stored_passwords, self.dynamic_passwords, self.controller, self.node_id)
            if self.fetchers is not None and self.isr_manager is not None:
                await nursery.start(self.fetchers.run)
                await nursery.start(self.isr_manager.run)
            for listener in self.listeners:
                nursery.start_soon(listener.serve)
            # Started (SIGTERM handled) before the ready line: a stop sent right after it is a clean one.
            await nursery.start(self._background, nursery.cancel_scope)
            names = [f"{lst.name}://{lst.host or '0.0.0.0'}:{lst.bound_port}" for lst in self.listeners]
            log.info("broker_started", node_id=self.node_id, cluster_id=self.cluster_id, listeners=names,
                     startup_s=round(time.monotonic() - started, 3))
            task_status.started(names)
            await self._shutdown.wait()
            log.info("broker_stopping", node_id=self.node_id)
            if self.on_stopping is not None:
                self.on_stopping()
            await cluster.controlled_shutdown()
            for listener in self.listeners:
                listener.stop_accepting()
            self.share_coordinator.close()
            self.group_coordinator.close()  # waiting JoinGroup/SyncGroup requests are answered
            self.transaction_coordinator.close()
            with trio.move_on_after(SHUTDOWN_GRACE_S):
                await self._wait_connections_idle()
            for listener in self.listeners:
                listener.close_connections()
            nursery.cancel_scope.cancel()
        self._close()

    def _open_file_budget(self) -> FileCache:
        """Raise the open-file limit as far as allowed and split it between log files and the rest."""
        limit = raise_open_file_limit()
        configured = self.config.log_open_files_max
        capacity = configured if configured != -1 else default_capacity(limit.soft)
        log.info("open_file_limit", limit=limit.soft, raised_from=limit.soft_before, hard_limit=limit.hard,
                 log_files=capacity, other_descriptors=max(limit.soft - capacity, 0))
        return FileCache(capacity)

    def _start_replication(self, cluster: ClusterMode) -> None:
        config = self.config
        lifecycle = cluster.lifecycle
        assert lifecycle is not None
        self.fetchers = ReplicaFetchers(
            self.node_id, self.replica_manager, lambda: self.controller.image,
            FetcherSettings(
                max_wait_ms=config.replica_fetch_wait_max_ms, min_bytes=config.replica_fetch_min_bytes,
                max_bytes=config.replica_fetch_response_max_bytes,
                partition_max_bytes=config.replica_fetch_max_bytes, backoff_ms=config.replica_fetch_backoff_ms,
                socket_timeout_ms=config.replica_socket_timeout_ms,
                listener_name=config.inter_broker_listener_name, security=inter_broker_security(config)),
            self._truncate_replica, self._start_replica_over, self.checkpoints.durable)
        self.controller.add_metadata_publisher(self.fetchers.on_metadata_update)
        self.isr_manager = IsrManager(self.node_id, self.replica_manager, cluster.channel,
                                      lambda: lifecycle.broker_epoch, lambda: self.controller.image,
                                      config.replica_lag_time_max_ms, self.clock_ms)

    def _truncate_replica(self, p: Partition, offset: int) -> None:
        # Durable in the checkpoint task's next round, which the fetcher awaits before appending.
        if self.log_manager.truncate_to(p.topic, p.index, offset):
            self.checkpoints.truncated()
        self.replica_manager.after_truncation(p)

    def _start_replica_over(self, p: Partition, offset: int) -> None:
        self.log_manager.truncate_fully_and_start_at(p.topic, p.index, offset)
        self.checkpoints.truncated()
        self.replica_manager.after_truncation(p)

    async def _wait_connections_idle(self) -> None:
        # Connections stay open for their clients; stop once no request is running.
        while self.metrics.requests_in_flight() > 0:
            await trio.sleep(0.01)

    def _close(self) -> None:
        self._write_high_watermarks()
        self.replica_manager.take_producer_snapshots()
        self.log_manager.close(self._broker_epoch)
        self.quorum.close()
        if self.telemetry is not None:
            self.telemetry.shutdown()
        log.info("broker_stopped", node_id=self.node_id)

    def _high_watermark_of(self, tp: TopicPartition) -> int | None:
        p = self.replica_manager.get(tp.topic, tp.partition)
        return None if p is None else p.high_watermark

    def _last_stable_offset_of(self, tp: TopicPartition) -> int | None:
        p = self.replica_manager.get(tp.topic, tp.partition)
        return None if p is None else p.last_stable_offset

    def _active_producers_of(self, tp: TopicPartition) -> dict[int, LastRecord] | None:
        p = self.replica_manager.get(tp.topic, tp.partition)
        if p is None:
            return None
        return {pid: LastRecord(last, epoch) for pid, (last, epoch) in p.producer_state.last_records().items()}

    def _log_cleaned(self, stats: CleanerStats) -> None:
        if stats.completed:
            self.metrics.compaction_finished(stats.duration_ms / 1000, stats.bytes_read - stats.bytes_written)

    def _write_high_watermarks(self) -> None:
        self.log_manager.write_high_watermarks(checkpoint_entries(self.replica_manager.partitions.items()))

    def request_shutdown(self) -> None:
        self._shutdown.set()

    async def _background(self, cancel: trio.CancelScope,
                          task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        # Each loop survives its own failures (a full disk, the open-file limit): logged once, retried.
        config = self.config
        async with trio.open_nursery() as nursery:
            await nursery.start(self._signals)
            task_status.started()
            nursery.start_soon(run_periodically, "retention", config.log_retention_check_interval_ms / 1000,
                               self._apply_retention)
            nursery.start_soon(supervise, "checkpoints", self.checkpoints.run)
            nursery.start_soon(run_periodically, "producer_expiration",
                               config.producer_id_expiration_check_interval_ms / 1000,
                               lambda: self.replica_manager.remove_expired_producers(self.clock_ms()))
            nursery.start_soon(run_periodically, "partition_creation_retry", PARTITION_CREATION_RETRY_S,
                               self.replica_manager.retry_failed_creations)
            nursery.start_soon(supervise, "log_cleaner", self.log_cleaner.run)
            nursery.start_soon(full_collections, self.config.event_loop_full_collection_interval_ms / 1000)

    def _settle_new_replicas(self, _delta: MetadataDelta, _image: MetadataImage) -> None:
        """Replicas created in bulk (a CreateTopics of thousands of partitions) are long-lived:
        frozen as start-up's are, or every periodic full collection would walk them (140 ms
        for 10,000 partitions, one event-loop step)."""
        hosted = len(self.replica_manager.partitions)
        if hosted - self._settled_replicas >= SETTLE_AFTER_NEW_REPLICAS:
            settle_heap()
            log.info("new_replicas_settled", replicas=hosted - self._settled_replicas)
            self._settled_replicas = hosted
        else:  # replicas removed since count against the next bulk creation
            self._settled_replicas = min(self._settled_replicas, hosted)

    async def _signals(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            task_status.started()
            async for _ in signals:
                self.request_shutdown()
                return

    async def _apply_retention(self) -> None:
        deleted = await self.log_manager.apply_retention_paced(self.clock_ms(), self._high_watermark_of)
        self.metrics.retention_deleted(deleted)
        if deleted:
            log.info("retention_applied", segments_deleted=deleted)

def check_log_dir(path: Path) -> None:
    """Create a log dir if needed; one that cannot be used is a ConfigError naming log.dirs."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ConfigError("log.dirs", f"{path} is not a directory") from None
    except OSError as ex:
        raise ConfigError("log.dirs", f"cannot create {path}: {ex.strerror or ex}") from ex
    if not path.is_dir():
        raise ConfigError("log.dirs", f"{path} is not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError("log.dirs", f"{path} is not writable")


async def serve(config: BrokerConfig, initial_credentials: Sequence[InitialCredential] = ()) -> None:
    # No full collection starts on its own while the broker starts: each walked the whole
    # growing heap (seven of them while 20,000 partitions loaded, a quarter of that load's CPU).
    # What they would have freed is a few dozen objects, frozen by settle_heap.
    thresholds = defer_full_collections()
    try:
        await _serve(config, initial_credentials)
    finally:
        gc.set_threshold(*thresholds)


async def _serve(config: BrokerConfig, initial_credentials: Sequence[InitialCredential]) -> None:
    node = BrokerNode(config, initial_credentials=initial_credentials)
    async with trio.open_nursery() as nursery:
        names = await nursery.start(node.run)
        settle_heap()
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        watchdog = start_watchdog(config.event_loop_slow_step_ms, config.event_loop_stall_abort_ms, node.metrics)
        if watchdog is not None:
            node.on_stopping = watchdog.disarm_abort
        metrics = f" metrics={node.metrics_url}" if node.metrics_url else ""
        print(f"cormorant ready listeners={','.join(names)} node_id={config.node_id} cluster_id={node.cluster_id}"
              f"{metrics}", flush=True)
        del names
    if watchdog is not None:
        watchdog.stop()

