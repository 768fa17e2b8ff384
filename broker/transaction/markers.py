"""Writing a decided transaction's markers, then completing it (Kafka's
TransactionMarkerChannelManager and TransactionMarkerRequestCompletionHandler).

Once PrepareCommit or PrepareAbort is durable, the coordinator sends one
WriteTxnMarkers request per partition leader, retrying what fails for a
retriable reason (a leader moving, too few replicas, a timeout) with a short
backoff, until every partition has its marker. Then the CompleteCommit or
CompleteAbort record is appended, retried while ``__transaction_state`` is
unavailable. Everything stops quietly when this broker stops coordinating the
transaction (a new coordinator reloads it and sends the markers again) or when
a partition leader says the producer or coordinator epoch moved on.

Requests go through a :class:`MarkerSender`. To the local broker (every
partition of a single node) they are encoded, dispatched to the WriteTxnMarkers
handler and decoded like any request from another broker
(:class:`broker.server.dispatch.LoopbackMarkerSender`); a remote leader
is sent WriteTxnMarkers over the inter-broker listener (:class:`NetworkMarkerSender`);
one that cannot be reached is retried.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import structlog
import trio

from broker.transaction.metadata import TransactionMetadata, TxnTransitMetadata
from wire.errors import ErrorCode
from wire.generated.api_027_write_txn_markers import (
    WriteTxnMarkersRequest,
    WriteTxnMarkersRequestWritableTxnMarker,
    WriteTxnMarkersRequestWritableTxnMarkerTopic,
    WriteTxnMarkersResponse,
)

if TYPE_CHECKING:
    from broker.cluster.peers import PeerBrokers
    from broker.transaction.coordinator import TransactionCoordinator
    from broker.transaction.shard import TransactionShard

log = structlog.get_logger(__name__)

#: WriteTxnMarkers version brokers of metadata.version 3.9 send.
WRITE_TXN_MARKERS_VERSION = 1
#: How long a remote partition leader gets to write its markers.
PEER_TIMEOUT_S = 15.0
RETRY_BACKOFF_S = 0.1

_RETRIABLE = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.KAFKA_STORAGE_ERROR,
})
_FENCED = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED})
_PARTITION_GONE = frozenset({ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, ErrorCode.UNSUPPORTED_VERSION})


class MarkerSender(Protocol):
    async def send(self, broker_id: int, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse | None:
        """The leader's answer, or None if it could not be reached."""
        ...


class NetworkMarkerSender:
    """This broker's own partitions through ``local`` (its dispatcher), other leaders over the
    inter-broker listener (Kafka's TransactionMarkerChannelManager)."""

    def __init__(self, node_id: int, local: MarkerSender, peers: PeerBrokers) -> None:
        self._node_id = node_id
        self._local = local
        self._peers = peers

    async def send(self, broker_id: int, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse | None:
        if broker_id == self._node_id:
            return await self._local.send(broker_id, request)
        return await self._peers.request(broker_id, request, WriteTxnMarkersResponse, PEER_TIMEOUT_S,
                                         WRITE_TXN_MARKERS_VERSION)


@dataclass(eq=False, slots=True)
class PendingCompleteTxn:
    transactional_id: str
    coordinator_epoch: int
    shard: TransactionShard
    metadata: TransactionMetadata
    complete: TxnTransitMetadata
    commit: bool
    producer_id: int
    producer_epoch: int


class TransactionMarkerChannel:
    def __init__(
        self,
        coordinator: TransactionCoordinator,
        sender: MarkerSender,
        leader_of: Callable[[str, int], int | None],
    ) -> None:
        """``leader_of(topic, partition)``: the leader's id, -1 if it has none, None if the
        partition does not exist."""
        self._coordinator = coordinator
        self._sender = sender
        self._leader_of = leader_of
        self._send, self._receive = trio.open_memory_channel[PendingCompleteTxn](math.inf)
        self.in_flight: dict[str, PendingCompleteTxn] = {}

    def add_markers_to_send(self, pending: PendingCompleteTxn) -> None:
        previous = self.in_flight.get(pending.transactional_id)
        if previous is not None:
            log.info("txn_markers_replaced", transactional_id=pending.transactional_id)
        self.in_flight[pending.transactional_id] = pending
        self._send.send_nowait(pending)

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            async for pending in self._receive:
                nursery.start_soon(self._complete, pending)

    def _current(self, pending: PendingCompleteTxn) -> bool:
        """Whether this broker still coordinates the transaction as it did when it was decided."""
        if self.in_flight.get(pending.transactional_id) is not pending:
            return False
        _, shard = self._coordinator.runtime.shard_for(pending.transactional_id)
        return (shard is pending.shard and shard.coordinator_epoch == pending.coordinator_epoch
                and shard.transactions.get(pending.transactional_id) is pending.metadata)

    def _drop(self, pending: PendingCompleteTxn, reason: str) -> None:
        if self.in_flight.get(pending.transactional_id) is pending:
            del self.in_flight[pending.transactional_id]
        log.info("txn_markers_cancelled", transactional_id=pending.transactional_id, reason=reason)

    async def _complete(self, pending: PendingCompleteTxn) -> None:
        metadata = pending.metadata
        while True:
            if not self._current(pending):
                self._drop(pending, "not the coordinator any more")
                return
            if not metadata.topic_partitions:
                break
            by_leader: dict[int, list[tuple[str, int]]] = {}
            for tp in sorted(metadata.topic_partitions):
                leader = self._leader_of(*tp)
                if leader is None:
                    # The partition is gone (topic deleted): nothing to mark.
                    metadata.remove_partition(tp)
                elif leader >= 0:
                    by_leader.setdefault(leader, []).append(tp)
            for leader, partitions in by_leader.items():
                if not await self._send_to(pending, leader, partitions):
                    return
            if metadata.topic_partitions:
                await trio.sleep(RETRY_BACKOFF_S)
        await self._write_completion(pending)

    async def _send_to(self, pending: PendingCompleteTxn, leader: int, partitions: list[tuple[str, int]]) -> bool:
        """One WriteTxnMarkers round to ``leader``; False if the transaction must be left alone."""
        topics: dict[str, list[int]] = {}
        for name, index in partitions:
            topics.setdefault(name, []).append(index)
        request = WriteTxnMarkersRequest(markers=[WriteTxnMarkersRequestWritableTxnMarker(
            producer_id=pending.producer_id,
            producer_epoch=pending.producer_epoch,
            transaction_result=pending.commit,
            topics=[WriteTxnMarkersRequestWritableTxnMarkerTopic(name=t, partition_indexes=p) for t, p in topics.items()],
            coordinator_epoch=pending.coordinator_epoch,
        )])
        response = await self._sender.send(leader, request)
        if not self._current(pending):
            self._drop(pending, "not the coordinator any more")
            return False
        if response is None:
            return True  # unreachable: retried with the partition's leader at that time
        for marker in response.markers:
            if marker.producer_id != pending.producer_id:
                continue
            for topic in marker.topics:
                for result in topic.partitions:
                    tp = (topic.name, result.partition_index)
                    error = ErrorCode(result.error_code)
                    if error is ErrorCode.NONE or error in _PARTITION_GONE:
                        pending.metadata.remove_partition(tp)
                    elif error in _FENCED:
                        log.info("txn_markers_fenced", transactional_id=pending.transactional_id, topic=tp[0],
                                 partition=tp[1], error=error.name)
                        self._drop(pending, error.name)
                        return False
                    elif error not in _RETRIABLE:
                        log.error("txn_marker_unexpected_error", transactional_id=pending.transactional_id,
                                  topic=tp[0], partition=tp[1], error=error.name)
        return True

    async def _write_completion(self, pending: PendingCompleteTxn) -> None:
        if self.in_flight.get(pending.transactional_id) is pending:
            del self.in_flight[pending.transactional_id]
        while True:
            error = await self._coordinator.append_transit(
                pending.transactional_id, pending.shard, pending.coordinator_epoch, pending.complete,
                retry_on_error=lambda e: e is ErrorCode.COORDINATOR_NOT_AVAILABLE)
            if error is not ErrorCode.COORDINATOR_NOT_AVAILABLE:
                log.info("transaction_completed", transactional_id=pending.transactional_id,
                         producer_id=pending.producer_id, committed=pending.commit, error=error.name)
                return
            await trio.sleep(RETRY_BACKOFF_S)
