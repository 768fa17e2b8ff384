"""Appends that carry producer ids: the produce path's idempotent and transactional checks,
and transaction markers (the partition-leader side of WriteTxnMarkers).

Produce (Kafka's ReplicaManager.handleProduceAppend and appendToLocalLog): a
partition's first transactional write of a transaction is verified with the
transaction coordinator first (KIP-890 part 1): the partition must be in the
producer's ongoing transaction, else INVALID_TXN_STATE, so a write that
arrives after its transaction ended cannot open a transaction nobody will
ever close. With transactions v2 (Produce v12+ and ``transaction.version`` 2)
the client sends no AddPartitionsToTxn: the coordinator adds the partition
instead of verifying it (KIP-890 part 2). Then :meth:`ProducerStateManager.append` deduplicates, checks
sequences and epochs, and appends.

Markers (Kafka's KafkaApis.handleWriteTxnMarkersRequest): each COMMIT or ABORT
is one control batch per partition, appended with origin COORDINATOR and
answered once replicated (acks=all). A marker on ``__consumer_offsets`` also
tells the group coordinator to make the transaction's offset commits visible
(or drop them).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

import structlog
import trio

from broker.log.partition_log import AppendInfo
from broker.log.producer_state import (
    AppendOrigin,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerStateError,
    TransactionCoordinatorFencedError,
)
from broker.replica_manager import Partition
from broker.validation import ValidatedRecords
from wire.errors import ErrorCode
from wire.generated.api_027_write_txn_markers import (
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
    WriteTxnMarkersResponseWritableTxnMarkerPartitionResult,
    WriteTxnMarkersResponseWritableTxnMarkerResult,
    WriteTxnMarkersResponseWritableTxnMarkerTopicResult,
)
from wire.records import (
    ATTRIBUTES_OFFSET,
    MAGIC_OFFSET,
    MAGIC_V2,
    PRODUCER_ID_OFFSET,
    TRANSACTIONAL_FLAG_MASK,
    ControlRecordType,
)

if TYPE_CHECKING:
    from broker.node import BrokerNode

log = structlog.get_logger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
#: Produce v11 is the first whose clients understand TRANSACTION_ABORTABLE (KIP-890).
TRANSACTION_ABORTABLE_PRODUCE_VERSION = 11
#: WriteTxnMarkers v2 names each marker's transaction version (KIP-1228).
MARKER_TRANSACTION_VERSION_VERSION = 2
#: Produce v12+ on transactions v2: the partition leader adds the partition to the transaction.
TRANSACTIONS_V2_PRODUCE_VERSION = 12

_STATE_ERRORS: dict[type[ProducerStateError], ErrorCode] = {
    OutOfOrderSequenceError: ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
    InvalidProducerEpochError: ErrorCode.INVALID_PRODUCER_EPOCH,
    InvalidTxnStateError: ErrorCode.INVALID_TXN_STATE,
    TransactionCoordinatorFencedError: ErrorCode.TRANSACTION_COORDINATOR_FENCED,
}
# Verification failures an old client would not retry: NOT_ENOUGH_REPLICAS makes it retry
# the produce without a metadata refresh (as Kafka).
_RETRY_AS_NOT_ENOUGH_REPLICAS = frozenset({
    ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NETWORK_EXCEPTION, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
})


class ProduceAppendError(Exception):
    """A partition's produce failed before anything was written; ``code`` goes to the client."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


def state_error_code(ex: ProducerStateError) -> ErrorCode:
    for cls, code in _STATE_ERRORS.items():
        if isinstance(ex, cls):
            return code
    return ErrorCode.UNKNOWN_SERVER_ERROR


def has_transactional_records(records: object) -> bool:
    """Whether the first batch has a producer id and the transactional flag (Kafka's
    ProduceRequest.hasTransactionalRecords looks at each partition's first batch)."""
    if not isinstance(records, (bytes, bytearray, memoryview)):
        return False
    if len(records) < PRODUCER_ID_OFFSET + 8 or records[MAGIC_OFFSET] != MAGIC_V2:
        return False
    producer_id = int.from_bytes(records[PRODUCER_ID_OFFSET:PRODUCER_ID_OFFSET + 8], "big", signed=True)
    return producer_id >= 0 and bool(records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_FLAG_MASK)


class TransactionVerifier(Protocol):
    async def verify_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], ErrorCode]:
        """Per partition: NONE if it is in the producer's ongoing transaction, else the reason."""
        ...

    def transactions_v2_enabled(self) -> bool:
        """Whether the cluster's transaction.version is 2 (KIP-890 part 2)."""
        ...

    async def add_partitions_for_produce(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], ErrorCode]:
        """Transactions v2: add the partitions to the producer's transaction (it sends no
        AddPartitionsToTxn); per partition NONE, else the reason."""
        ...


async def append_produce(
    partition: Partition,
    validated: ValidatedRecords,
    transactional_id: str | None,
    api_version: int,
    verifier: TransactionVerifier | None,
) -> AppendInfo:
    """Append one partition's validated produce data as leader; raises :class:`ProduceAppendError`."""
    state = partition.producer_state
    guard = None
    transactional = [h for _, h in validated.batches if h.producer_id >= 0 and h.is_transactional]
    if transactional and state.config.transaction_verification_enabled:
        first = transactional[0]
        guard = state.maybe_start_verification(first.producer_id, first.base_sequence, first.producer_epoch)
        if guard is not None:
            await _verify(partition, transactional_id, first.producer_id, first.producer_epoch, api_version, verifier)
    try:
        return state.append(validated.data, validated.batches, partition.leader_epoch,
                            origin=AppendOrigin.CLIENT, verification_guard=guard)
    except ProducerStateError as ex:
        log.info("produce_refused", topic=partition.topic, partition=partition.index,
                 error=state_error_code(ex).name, reason=str(ex))
        raise ProduceAppendError(state_error_code(ex)) from ex


async def _verify(partition: Partition, transactional_id: str | None, producer_id: int, producer_epoch: int,
                  api_version: int, verifier: TransactionVerifier | None) -> None:
    tp = (partition.topic, partition.index)
    if transactional_id is None:
        raise ProduceAppendError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if verifier is None:
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE
    elif api_version >= TRANSACTIONS_V2_PRODUCE_VERSION and verifier.transactions_v2_enabled():
        error = (await verifier.add_partitions_for_produce(transactional_id, producer_id, producer_epoch, [tp])).get(
            tp, ErrorCode.NONE)
    else:
        error = (await verifier.verify_partitions(transactional_id, producer_id, producer_epoch, [tp])).get(
            tp, ErrorCode.NONE)
    if error is ErrorCode.NONE:
        return
    # What the partition leader's verification manager makes of the coordinator's answer.
    if error is ErrorCode.PRODUCER_FENCED:
        error = ErrorCode.INVALID_PRODUCER_EPOCH
    elif error is ErrorCode.TRANSACTION_ABORTABLE and api_version < TRANSACTION_ABORTABLE_PRODUCE_VERSION:
        error = ErrorCode.INVALID_TXN_STATE
    if error is ErrorCode.INVALID_TXN_STATE:
        raise ProduceAppendError(error, "Partition was not added to the transaction")
    if error in _RETRY_AS_NOT_ENOUGH_REPLICAS:
        raise ProduceAppendError(
            ErrorCode.NOT_ENOUGH_REPLICAS,
            f"Unable to verify the partition has been added to the transaction. Underlying error: {error.name}")
    raise ProduceAppendError(error)


# -- markers --------------------------------------------------------------------------------------

#: Called after a marker reached ``__consumer_offsets`` partitions: (producer id, partitions, committed).
OffsetsMarkerListener = Callable[[int, list[int], bool], Awaitable[None] | None]


async def write_txn_markers(
    node: BrokerNode,
    request: WriteTxnMarkersRequest,
    timeout_ms: int,
    offsets_marker_listener: OffsetsMarkerListener | None = None,
    api_version: int = 1,
) -> WriteTxnMarkersResponse:
    """Write each marker to the partitions this broker leads and wait until they are replicated."""
    rm = node.replica_manager
    response = WriteTxnMarkersResponse()
    waiting: list[tuple[Partition, int, WriteTxnMarkersResponseWritableTxnMarkerPartitionResult]] = []
    for marker in request.markers:
        result = WriteTxnMarkersResponseWritableTxnMarkerResult(producer_id=marker.producer_id)
        response.markers.append(result)
        control_type = ControlRecordType.COMMIT if marker.transaction_result else ControlRecordType.ABORT
        transaction_version = marker.transaction_version if api_version >= MARKER_TRANSACTION_VERSION_VERSION else 0
        offsets_partitions: list[int] = []
        for topic in marker.topics:
            t_result = WriteTxnMarkersResponseWritableTxnMarkerTopicResult(name=topic.name)
            result.topics.append(t_result)
            for index in topic.partition_indexes:
                p_result = WriteTxnMarkersResponseWritableTxnMarkerPartitionResult(partition_index=index)
                t_result.partitions.append(p_result)
                partition = rm.get(topic.name, index)
                if partition is None:
                    p_result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                if not rm.is_leader(partition):
                    p_result.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                    continue
                if len(partition.isr) < node.min_insync_replicas(topic.name):
                    p_result.error_code = ErrorCode.NOT_ENOUGH_REPLICAS
                    continue
                try:
                    info = partition.producer_state.append_marker(
                        control_type, marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
                        partition.leader_epoch, origin=AppendOrigin.COORDINATOR,
                        transaction_version=transaction_version)
                except ProducerStateError as ex:
                    p_result.error_code = state_error_code(ex)
                    log.info("txn_marker_refused", topic=topic.name, partition=index, producer_id=marker.producer_id,
                             error=p_result.error_code.name, reason=str(ex))
                    continue
                except OSError as ex:
                    # The marker may have partly landed: retriable, never -1.
                    p_result.error_code = ErrorCode.KAFKA_STORAGE_ERROR
                    log.error("txn_marker_append_failed", topic=topic.name, partition=index, error=str(ex))
                    continue
                rm.maybe_advance_high_watermark(partition)
                partition.wake()
                waiting.append((partition, info.last_offset + 1, p_result))
                if topic.name == OFFSETS_TOPIC:
                    offsets_partitions.append(index)
        if offsets_partitions and offsets_marker_listener is not None:
            outcome = offsets_marker_listener(marker.producer_id, offsets_partitions, marker.transaction_result)
            if outcome is not None:
                await outcome
    await _wait_replicated(node, waiting, timeout_ms)
    return response


async def _wait_replicated(
    node: BrokerNode,
    waiting: list[tuple[Partition, int, WriteTxnMarkersResponseWritableTxnMarkerPartitionResult]],
    timeout_ms: int,
) -> None:
    rm = node.replica_manager
    deadline = trio.current_time() + max(timeout_ms, 0) / 1000
    pending = waiting
    while pending:
        still = []
        for partition, required, p_result in pending:
            if partition.high_watermark >= required:
                continue
            if len(partition.isr) < node.min_insync_replicas(partition.topic):
                p_result.error_code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
                continue
            still.append((partition, required, p_result))
        pending = still
        if not pending or trio.current_time() >= deadline:
            break
        await rm.wait_for_change([p for p, _, _ in pending], deadline)
    for _, _, p_result in pending:
        p_result.error_code = ErrorCode.REQUEST_TIMED_OUT
