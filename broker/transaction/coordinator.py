"""TransactionCoordinator: the request flows of Kafka's TransactionCoordinator and
TransactionStateManager (3.9), on the shared coordinator runtime.

Each transactional id hashes to a partition of ``__transaction_state``
(``transaction.state.log.num.partitions``, compacted); the broker leading that
partition coordinates it, from the state its log replays into a
:class:`~broker.transaction.shard.TransactionShard`. The partition's leader
epoch is the coordinator epoch stamped on markers, so a deposed coordinator's
markers are refused by partition leaders.

Every change follows Kafka's pattern: check and prepare under the metadata
(its pending state blocks any other change meanwhile), append the new state
with acks=all, and apply it only once committed.

Beyond Kafka: KIP-890's per-transaction epoch bump needs EndTxn v5, which the
3.9 protocol (and so every client tested) lacks, and without it a delayed
EndTxn from an earlier transaction would settle the current one
(KAFKA-17754). Clients send a transactional id's coordinator requests over one
connection at a time and move to a new one after a timeout, so the
coordinator remembers which connection began the ongoing transaction and
refuses an EndTxn arriving on an older connection of that listener: it was sent
before this transaction began. The refusal is CONCURRENT_TRANSACTIONS, which a
client still waiting on that connection would retry.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

import structlog
import trio

from broker.coordinator import (
    KEY_TYPE_TRANSACTION,
    AppendResult,
    CoordinatorRecord,
    CoordinatorRuntime,
    InternalTopic,
    ShardContext,
)
from broker.transaction.coordinator_results import (
    InitProducerIdResult,
    TransactionDescription,
    TransactionListing,
)
from broker.transaction.end_txn import (
    EndTxnResult,
    epoch_bumped_by_end_txn,
    log_invalid_state,
    plan_end_txn,
)
from broker.transaction.markers import (
    MarkerSender,
    NetworkMarkerSender,
    PendingCompleteTxn,
    TransactionMarkerChannel,
)
from broker.transaction.metadata import (
    IllegalTransitionError,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
    is_epoch_exhausted,
)
from broker.transaction.producer_ids import ProducerIdManager, ProducerIdsUnavailableError
from broker.transaction.records import key_bytes, value_bytes
from broker.transaction.shard import TransactionShard
from broker.transaction.verification import ask_coordinator
from broker.transaction.write_markers import OffsetsMarkerListener
from controller.delta import MetadataDelta
from controller.features import TRANSACTION_VERSION, level
from controller.image import MetadataImage
from controller.service import TopicRequest
from wire.errors import ErrorCode
from wire.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID

if TYPE_CHECKING:
    import random

    from broker.cluster.controller_api import ControllerApi
    from broker.cluster.peers import PeerBrokers
    from broker.group.coordinator import GroupCoordinator
    from broker.replication.replica_manager import ReplicaManager
    from config import BrokerConfig

log = structlog.get_logger(__name__)

TRANSACTION_STATE_TOPIC = "__transaction_state"
OFFSETS_TOPIC = "__consumer_offsets"
#: How long an append to __transaction_state may wait for replication.
APPEND_TIMEOUT_MS = 30_000

S = TransactionState


class _NeedProducerId(Exception):
    """The epoch is exhausted: a new producer id must be fetched before preparing."""


async def _await_append(start: Callable[[Callable[[AppendResult], None]], None]) -> AppendResult:
    box: list[AppendResult] = []
    done = trio.Event()

    def callback(result: AppendResult) -> None:
        if not box:
            box.append(result)
            done.set()

    start(callback)
    await done.wait()
    return box[0]


def _append_error(error: ErrorCode) -> ErrorCode:
    """What a failed write to __transaction_state means to the coordinator's caller."""
    if error in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                 ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if error in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return error


class ClientConnection(Protocol):
    """The connection a request came on: EndTxn from an older connection of the listener
    that began the transaction is refused."""

    @property
    def listener(self) -> str: ...

    @property
    def connection_id(self) -> int: ...


class TransactionCoordinator:
    key_type = KEY_TYPE_TRANSACTION

    def __init__(
        self,
        config: BrokerConfig,
        node_id: int,
        image: Callable[[], MetadataImage],
        replica_manager: ReplicaManager,
        controller: ControllerApi,
        groups: GroupCoordinator,
        peers: PeerBrokers,
        local_markers: MarkerSender,
        broker_epoch: Callable[[], int],
        clock_ms: Callable[[], int],
        rng: random.Random,
    ) -> None:
        self.node_id = node_id
        self._image = image
        self._replica_manager = replica_manager
        self._controller = controller
        self._groups = groups
        self._peers = peers
        self._broker_epoch = broker_epoch
        self._clock_ms = clock_ms
        c = config
        self.max_timeout_ms = c.transaction_max_timeout_ms
        self.transactional_id_expiration_ms = c.transactional_id_expiration_ms
        self.abort_interval_ms = c.transaction_abort_timed_out_transaction_cleanup_interval_ms
        self.expiration_interval_ms = c.transaction_remove_expired_transaction_cleanup_interval_ms
        topic = InternalTopic(
            name=TRANSACTION_STATE_TOPIC,
            num_partitions=c.transaction_state_log_num_partitions,
            replication_factor=c.transaction_state_log_replication_factor,
            configs={
                "cleanup.policy": "compact",
                "compression.type": "uncompressed",
                "unclean.leader.election.enable": "false",
                "segment.bytes": str(c.transaction_state_log_segment_bytes),
                "min.insync.replicas": str(c.transaction_state_log_min_isr),
            },
        )
        self.runtime: CoordinatorRuntime[TransactionShard] = CoordinatorRuntime(
            name="transaction",
            node_id=node_id,
            topic=topic,
            image=image(),
            replica_manager=replica_manager,
            shard_factory=self._new_shard,
            create_topic=self._create_topic,
            clock_ms=clock_ms,
            rng=rng,
            append_timeout_ms=APPEND_TIMEOUT_MS,
        )
        self.producer_ids = ProducerIdManager(self._allocate_producer_ids)
        self.markers = TransactionMarkerChannel(self, NetworkMarkerSender(node_id, local_markers, peers),
                                                self._leader_of)
        # transactional id -> (listener, connection id) that began its ongoing transaction
        self._started_on: dict[str, tuple[str, int]] = {}
        self._active = False

    # ------------------------------------------------------------ wiring

    def _new_shard(self, ctx: ShardContext) -> TransactionShard:
        partition = self._replica_manager.get(TRANSACTION_STATE_TOPIC, ctx.partition)
        epoch = partition.leader_epoch if partition is not None else 0
        return TransactionShard(ctx, epoch, self._on_shard_loaded)

    async def _create_topic(self, topic: InternalTopic) -> None:
        live = len(self._image().live_brokers())
        rf = min(topic.replication_factor, max(live, 1))
        configs = dict(topic.configs)
        if rf < topic.replication_factor:
            # As for __consumer_offsets: Kafka would wait for enough brokers; a single node
            # would then have no transactions unless its config said 1.
            log.warning("transaction_topic_replication_lowered", topic=topic.name,
                        configured=topic.replication_factor, live_brokers=live, replication_factor=rf)
            configs["min.insync.replicas"] = str(min(int(configs["min.insync.replicas"]), rf))
        results = await self._controller.create_topics(
            [TopicRequest(topic.name, topic.num_partitions, rf, configs=configs)])
        for r in results:
            if r.error not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                log.error("transaction_topic_not_created", topic=topic.name, error=r.error.name, message=r.message)

    async def _allocate_producer_ids(self) -> tuple[int, int]:
        return await self._controller.allocate_producer_ids(self.node_id, self._broker_epoch())

    def _leader_of(self, topic: str, partition: int) -> int | None:
        t = self._image().topic(topic)
        if t is None or partition not in t.partitions:
            return None
        return t.partitions[partition].leader

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        self.runtime.on_metadata_update(delta, image)

    def on_image(self, image: MetadataImage) -> None:
        self.runtime.on_image(image)

    async def find_coordinator(self, key: str, listener: str) -> tuple[ErrorCode, int, str, int]:
        return await self.runtime.find_coordinator(key, listener)

    def partition_for(self, transactional_id: str) -> int:
        return self.runtime.partition_for(transactional_id)

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._active = True
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.runtime.run)
                nursery.start_soon(self.producer_ids.run)
                nursery.start_soon(self.markers.run)
                nursery.start_soon(self._periodically, self.abort_interval_ms, self.abort_timed_out_transactions)
                nursery.start_soon(self._periodically, self.expiration_interval_ms,
                                   self.remove_expired_transactional_ids)
                task_status.started()
        finally:
            self._active = False

    def close(self) -> None:
        self._active = False
        self.runtime.close()

    async def _periodically(self, interval_ms: int, job: Callable[[], Awaitable[None]]) -> None:
        while True:
            await trio.sleep(interval_ms / 1000)
            try:
                await job()
            except Exception:
                log.exception("transaction_coordinator_job_failed", job=getattr(job, "__name__", "?"))

    def _now(self) -> int:
        return self._clock_ms()

    # ------------------------------------------------------------ state lookup and writes

    def _lookup(self, transactional_id: str) -> tuple[ErrorCode, TransactionShard | None, TransactionMetadata | None]:
        if not self._active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None, None
        error, shard = self.runtime.shard_for(transactional_id)
        if shard is None:
            return error, None, None
        return ErrorCode.NONE, shard, shard.transactions.get(transactional_id)

    async def append_transit(
        self,
        transactional_id: str,
        shard: TransactionShard,
        coordinator_epoch: int,
        transit: TxnTransitMetadata,
        retry_on_error: Callable[[ErrorCode], bool] = lambda _: False,
    ) -> ErrorCode:
        """Write ``transit`` to the log and apply it once committed (Kafka's appendTransactionToLog)."""
        error, current, metadata = self._lookup(transactional_id)
        if current is None:
            return error
        if metadata is None or current is not shard or current.coordinator_epoch != coordinator_epoch:
            return ErrorCode.NOT_COORDINATOR
        value = None if transit.txn_state is S.DEAD else value_bytes(
            transit, level(self._image().features, TRANSACTION_VERSION))
        record = CoordinatorRecord(key_bytes(transactional_id), value)
        result = await _await_append(lambda cb: shard.ctx.append([record], cb))
        error = ErrorCode.NONE if result.error is ErrorCode.NONE else _append_error(result.error)
        lookup_error, current, metadata = self._lookup(transactional_id)
        if error is ErrorCode.NONE:
            if current is None:
                return lookup_error
            if current is not shard or current.coordinator_epoch != coordinator_epoch or metadata is None:
                return ErrorCode.NOT_COORDINATOR
            if transit.txn_state is S.DEAD:
                if metadata.pending_state is S.DEAD and metadata.producer_epoch == transit.producer_epoch:
                    del shard.transactions[transactional_id]
                    self._started_on.pop(transactional_id, None)
                else:
                    metadata.pending_state = None
                return ErrorCode.NONE
            metadata.complete_transition(transit)
            return ErrorCode.NONE
        if current is shard and current.coordinator_epoch == coordinator_epoch and metadata is not None:
            if not retry_on_error(error):
                metadata.pending_state = None
        log.info("transaction_state_append_failed", transactional_id=transactional_id,
                 state=transit.txn_state.state_name, error=error.name)
        return error

    # ------------------------------------------------------------ InitProducerId

    async def init_producer_id(
        self,
        transactional_id: str | None,
        timeout_ms: int,
        expected: tuple[int, int] | None,
    ) -> InitProducerIdResult:
        if transactional_id is None:
            # An idempotent producer: a fresh id every time (a given id and epoch are ignored, as in Kafka).
            try:
                return InitProducerIdResult(ErrorCode.NONE, await self.producer_ids.generate_producer_id(), 0)
            except ProducerIdsUnavailableError:
                return InitProducerIdResult(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        if not transactional_id:
            return InitProducerIdResult(ErrorCode.INVALID_REQUEST)
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return InitProducerIdResult(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        rotation_id: int | None = None
        for _ in range(3):
            error, shard, metadata = self._lookup(transactional_id)
            if shard is None:
                return InitProducerIdResult(error)
            if metadata is None:
                if rotation_id is None:
                    try:
                        rotation_id = await self.producer_ids.generate_producer_id()
                    except ProducerIdsUnavailableError:
                        return InitProducerIdResult(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
                    continue  # look again: the await let others in
                metadata = TransactionMetadata.new(transactional_id, rotation_id, timeout_ms, self._now())
                shard.transactions[transactional_id] = metadata
                rotation_id = None
            try:
                prepared = self._prepare_init(metadata, timeout_ms, expected, rotation_id)
            except _NeedProducerId:
                try:
                    rotation_id = await self.producer_ids.generate_producer_id()
                except ProducerIdsUnavailableError:
                    return InitProducerIdResult(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
                continue
            break
        else:
            return InitProducerIdResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if isinstance(prepared, ErrorCode):
            return InitProducerIdResult(prepared)
        coordinator_epoch = shard.coordinator_epoch
        if prepared.txn_state is S.PREPARE_EPOCH_FENCE:
            # Abort the open transaction first; the client retries and gets the bumped epoch.
            error = (await self.end_transaction(transactional_id, prepared.producer_id, prepared.producer_epoch,
                                                commit=False, from_client=False)).error
            return InitProducerIdResult(ErrorCode.CONCURRENT_TRANSACTIONS if error is ErrorCode.NONE else error)
        error = await self.append_transit(transactional_id, shard, coordinator_epoch, prepared)
        if error is not ErrorCode.NONE:
            return InitProducerIdResult(error)
        self._started_on.pop(transactional_id, None)
        log.info("transactional_id_initialized", transactional_id=transactional_id,
                 producer_id=prepared.producer_id, producer_epoch=prepared.producer_epoch,
                 partition=self.partition_for(transactional_id))
        return InitProducerIdResult(ErrorCode.NONE, prepared.producer_id, prepared.producer_epoch)

    def _prepare_init(
        self,
        metadata: TransactionMetadata,
        timeout_ms: int,
        expected: tuple[int, int] | None,
        new_producer_id: int | None,
    ) -> TxnTransitMetadata | ErrorCode:
        if metadata.pending_transition_in_progress:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if expected is not None:
            pid, epoch = expected
            valid = (metadata.producer_epoch == NO_PRODUCER_EPOCH or pid == metadata.producer_id
                     or (pid == metadata.last_producer_id and is_epoch_exhausted(epoch)))
            if not valid:
                return ErrorCode.PRODUCER_FENCED
        state = metadata.state
        if state in (S.PREPARE_ABORT, S.PREPARE_COMMIT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if state in (S.COMPLETE_ABORT, S.COMPLETE_COMMIT, S.EMPTY):
            if metadata.is_producer_epoch_exhausted and (expected is None or expected[1] == metadata.producer_epoch):
                if new_producer_id is None:
                    raise _NeedProducerId
                return metadata.prepare_producer_id_rotation(new_producer_id, timeout_ms, self._now(),
                                                             expected is not None)
            return metadata.prepare_increment_producer_epoch(
                timeout_ms, None if expected is None else expected[1], self._now())
        if state is S.ONGOING:
            # Fence the current producer; this epoch is never returned, the client retries.
            return metadata.prepare_fence_producer_epoch()
        raise IllegalTransitionError(f"{metadata.transactional_id} found in state {state}")

    # ------------------------------------------------------------ AddPartitionsToTxn / AddOffsetsToTxn

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: set[tuple[str, int]],
        conn: ClientConnection | None = None,
        client_transaction_version: int = 0,
    ) -> ErrorCode:
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        error, shard, metadata = self._lookup(transactional_id)
        if shard is None:
            return error
        if metadata is None or metadata.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if metadata.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if metadata.pending_transition_in_progress or metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if metadata.state is S.ONGOING and partitions <= metadata.topic_partitions:
            return ErrorCode.NONE
        begins = metadata.state is not S.ONGOING
        transit = metadata.prepare_add_partitions(partitions, self._now(), client_transaction_version)
        error = await self.append_transit(transactional_id, shard, shard.coordinator_epoch, transit)
        if error is ErrorCode.NONE and begins:
            if conn is not None:
                self._started_on[transactional_id] = (conn.listener, conn.connection_id)
            else:
                self._started_on.pop(transactional_id, None)
        return error

    def offsets_partition(self, group_id: str) -> tuple[str, int]:
        return OFFSETS_TOPIC, self._groups.partition_for(group_id)

    def offsets_marker_listener(self) -> OffsetsMarkerListener:
        """The group coordinator's hook that makes a transaction's offset commits visible
        (or drops them) once its marker is on ``__consumer_offsets``."""
        return self._groups.complete_transaction

    def transactions_v2_enabled(self) -> bool:
        return level(self._image().features, TRANSACTION_VERSION) >= 2

    async def add_partitions_for_produce(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], ErrorCode]:
        """Transactions v2: the partition leader adds the partitions a Produce v12+ writes to,
        here or at the coordinator's broker (AddPartitionsToTxn v5, not verify-only)."""
        error, shard, _ = self._lookup(transactional_id)
        leader = self._leader_of(TRANSACTION_STATE_TOPIC, self.partition_for(transactional_id))
        if shard is not None or error is not ErrorCode.NOT_COORDINATOR or leader is None or leader < 0 \
                or leader == self.node_id:
            code = await self.add_partitions(transactional_id, producer_id, producer_epoch, set(partitions),
                                             client_transaction_version=2)
            return dict.fromkeys(partitions, code)
        return await ask_coordinator(self._peers, leader, transactional_id, producer_id, producer_epoch,
                                     partitions, verify_only=False)

    def verify_partitions_now(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], ErrorCode]:
        """Whether each partition is in the producer's ongoing transaction (KIP-890 part 1)."""
        if not transactional_id:
            return dict.fromkeys(partitions, ErrorCode.INVALID_REQUEST)
        error, shard, metadata = self._lookup(transactional_id)
        if shard is None:
            return dict.fromkeys(partitions, error)
        if metadata is None or metadata.producer_id != producer_id:
            return dict.fromkeys(partitions, ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if metadata.producer_epoch != producer_epoch:
            return dict.fromkeys(partitions, ErrorCode.PRODUCER_FENCED)
        if metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return dict.fromkeys(partitions, ErrorCode.CONCURRENT_TRANSACTIONS)
        return {tp: ErrorCode.NONE if tp in metadata.topic_partitions else ErrorCode.TRANSACTION_ABORTABLE
                for tp in partitions}

    async def verify_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], ErrorCode]:
        """The partition leader's side of verification (KIP-890): the coordinator here answers
        at once; one on another broker is asked with AddPartitionsToTxn v4 (verify only) over
        the inter-broker listener. An unreachable coordinator reads as NETWORK_EXCEPTION,
        which the produce path turns into a retriable error."""
        local = self.verify_partitions_now(transactional_id, producer_id, producer_epoch, partitions)
        if not transactional_id or any(code != ErrorCode.NOT_COORDINATOR for code in local.values()):
            return local
        leader = self._leader_of(TRANSACTION_STATE_TOPIC, self.partition_for(transactional_id))
        if leader is None or leader < 0 or leader == self.node_id:
            return local
        return await ask_coordinator(self._peers, leader, transactional_id, producer_id, producer_epoch,
                                     partitions, verify_only=True)

    # ------------------------------------------------------------ EndTxn

    async def end_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        *,
        from_client: bool = True,
        conn: ClientConnection | None = None,
        client_transaction_version: int = 0,
    ) -> EndTxnResult:
        """EndTxn (Kafka's TransactionCoordinator.endTransaction). With transactions v2
        (EndTxn v5+) the epoch is bumped as the transaction ends, and the answer carries the
        producer id and epoch to use next."""
        if not transactional_id:
            return EndTxnResult(ErrorCode.INVALID_REQUEST)
        error, shard, metadata = self._lookup(transactional_id)
        if shard is None:
            return EndTxnResult(error)
        if metadata is None:
            return EndTxnResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        coordinator_epoch = shard.coordinator_epoch
        tv2 = client_transaction_version >= 2
        decision = plan_end_txn(metadata, producer_id, producer_epoch, commit, from_client, tv2)
        if decision.error is not None:
            if decision.error is ErrorCode.NONE:
                return EndTxnResult(ErrorCode.NONE, metadata.producer_id, metadata.producer_epoch)
            if decision.error is ErrorCode.INVALID_TXN_STATE:
                log_invalid_state(metadata, producer_id, producer_epoch, commit, tv2, "refused")
            return EndTxnResult(decision.error)
        next_producer_id = NO_PRODUCER_ID
        if tv2 and decision.next_state is not None and metadata.is_producer_epoch_exhausted:
            try:
                next_producer_id = await self.producer_ids.generate_producer_id()
            except ProducerIdsUnavailableError:
                return EndTxnResult(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
            if metadata.pending_transition_in_progress:
                return EndTxnResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if metadata.state is S.ONGOING and from_client and self._is_stale_connection(transactional_id, conn):
            log.warning("stale_end_txn_refused", transactional_id=transactional_id, producer_id=producer_id,
                        connection_id=None if conn is None else conn.connection_id,
                        started_on=self._started_on.get(transactional_id))
            return EndTxnResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        is_epoch_fence = False
        next_state = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        if next_state is S.PREPARE_ABORT and metadata.pending_state is S.PREPARE_EPOCH_FENCE:
            is_epoch_fence = True
            metadata.pending_state = None
            metadata.producer_epoch = producer_epoch
            metadata.last_producer_epoch = NO_PRODUCER_EPOCH
        no_partitions = metadata.state is not S.ONGOING
        transit = metadata.prepare_abort_or_commit(
            next_state, self._now(), client_transaction_version if not is_epoch_fence else 0, next_producer_id,
            start_ms=self._now() if no_partitions else None)

        error = await self.append_transit(transactional_id, shard, coordinator_epoch, transit)
        if error is not ErrorCode.NONE:
            if is_epoch_fence:
                lookup_error, current, m = self._lookup(transactional_id)
                if current is shard and m is not None and shard.coordinator_epoch == coordinator_epoch:
                    m.has_failed_epoch_fence = True
                    log.warning("epoch_fence_not_written", transactional_id=transactional_id, error=error.name)
            return EndTxnResult(error)
        lookup_error, current, m = self._lookup(transactional_id)
        if current is None:
            return EndTxnResult(lookup_error)
        if current is not shard or current.coordinator_epoch != coordinator_epoch or m is None:
            return EndTxnResult(ErrorCode.NOT_COORDINATOR)
        if m.producer_id != producer_id:
            return EndTxnResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if m.producer_epoch != producer_epoch and not epoch_bumped_by_end_txn(m, producer_epoch):
            return EndTxnResult(ErrorCode.PRODUCER_FENCED)
        if m.pending_transition_in_progress:
            return EndTxnResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if m.state is not (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT):
            log_invalid_state(m, producer_id, producer_epoch, commit, tv2, "changed during the write")
            return EndTxnResult(ErrorCode.INVALID_TXN_STATE)
        self._started_on.pop(transactional_id, None)
        self._send_markers(shard, coordinator_epoch, m, commit)
        return EndTxnResult(ErrorCode.NONE, m.producer_id, m.producer_epoch)

    def _is_stale_connection(self, transactional_id: str, conn: ClientConnection | None) -> bool:
        started = self._started_on.get(transactional_id)
        return (conn is not None and started is not None and started[0] == conn.listener
                and conn.connection_id < started[1])

    def _send_markers(self, shard: TransactionShard, coordinator_epoch: int, metadata: TransactionMetadata,
                      commit: bool) -> None:
        complete = metadata.prepare_complete(self._now())
        self.markers.add_markers_to_send(PendingCompleteTxn(
            metadata.transactional_id, coordinator_epoch, shard, metadata, complete, commit,
            metadata.producer_id, metadata.producer_epoch))

    def _on_shard_loaded(self, shard: TransactionShard) -> None:
        """Transactions decided but not completed before the last coordinator stopped: finish them."""
        for metadata in list(shard.transactions.values()):
            if metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                log.info("txn_markers_resumed", transactional_id=metadata.transactional_id,
                         state=metadata.state.state_name, partition=shard.partition)
                self._send_markers(shard, shard.coordinator_epoch, metadata, metadata.state is S.PREPARE_COMMIT)

    # ------------------------------------------------------------ housekeeping

    async def abort_timed_out_transactions(self) -> None:
        """Abort every transaction open longer than its timeout, bumping the producer's epoch."""
        now = self._now()
        for shard in self.runtime.active_shards():
            for transactional_id, metadata in list(shard.transactions.items()):
                if (metadata.pending_transition_in_progress or metadata.state is not S.ONGOING
                        or metadata.txn_start_timestamp + metadata.txn_timeout_ms >= now):
                    continue
                transit = metadata.prepare_fence_producer_epoch()
                log.info("transaction_timed_out", transactional_id=transactional_id,
                         producer_id=metadata.producer_id, timeout_ms=metadata.txn_timeout_ms)
                error = (await self.end_transaction(transactional_id, transit.producer_id, transit.producer_epoch,
                                                    commit=False, from_client=False)).error
                if error is not ErrorCode.NONE:
                    log.info("timed_out_transaction_not_aborted", transactional_id=transactional_id,
                             error=error.name)

    async def remove_expired_transactional_ids(self) -> None:
        """Tombstone transactional ids unused for ``transactional.id.expiration.ms``."""
        now = self._now()
        for shard in self.runtime.active_shards():
            for transactional_id, metadata in list(shard.transactions.items()):
                if (metadata.pending_transition_in_progress or not metadata.state.expiration_allowed
                        or metadata.txn_last_update_timestamp > now - self.transactional_id_expiration_ms):
                    continue
                transit = metadata.prepare_dead()
                error = await self.append_transit(transactional_id, shard, shard.coordinator_epoch, transit)
                log.info("transactional_id_expired", transactional_id=transactional_id, error=error.name)

    # ------------------------------------------------------------ describing

    def describe(self, transactional_id: str) -> TransactionDescription:
        if not self._active:
            return TransactionDescription(transactional_id, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if not transactional_id:
            return TransactionDescription(transactional_id, ErrorCode.INVALID_REQUEST)
        error, shard, metadata = self._lookup(transactional_id)
        if shard is None:
            return TransactionDescription(transactional_id, error)
        if metadata is None or metadata.state is S.DEAD:
            return TransactionDescription(transactional_id, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
        return TransactionDescription(
            transactional_id, ErrorCode.NONE, metadata.state.state_name, metadata.txn_timeout_ms,
            metadata.txn_start_timestamp, metadata.producer_id, metadata.producer_epoch,
            tuple(sorted(metadata.topic_partitions)),
        )

    def list_transactions(
        self, states: list[str], producer_ids: list[int], duration_ms: int
    ) -> tuple[ErrorCode, list[str], list[TransactionListing]]:
        """(error, unknown state filters, transactions) as Kafka's listTransactionStates."""
        if not self._active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, [], []
        if self.runtime.is_loading():
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, [], []
        unknown = [s for s in states if TransactionState.from_name(s) is None]
        wanted = {TransactionState.from_name(s) for s in states} - {None}
        pids = set(producer_ids)
        now = self._now()
        found = []
        for shard in self.runtime.active_shards():
            for metadata in shard.transactions.values():
                if metadata.state is S.DEAD:
                    continue
                if pids and metadata.producer_id not in pids:
                    continue
                if states and metadata.state not in wanted:
                    continue
                if duration_ms >= 0 and now - metadata.txn_start_timestamp <= duration_ms:
                    continue
                found.append(TransactionListing(metadata.transactional_id, metadata.producer_id,
                                                metadata.state.state_name))
        return ErrorCode.NONE, unknown, sorted(found, key=lambda t: t.transactional_id)
