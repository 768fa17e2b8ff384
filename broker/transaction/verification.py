"""Verification of a transaction's first write to a partition (KIP-890 part 1), on the
produce path (Kafka's ReplicaManager.appendRecords with transaction verification).

A partition's first transactional write of a transaction is verified with the
transaction coordinator before it is appended: the partition must be in the
producer's ongoing transaction, else INVALID_TXN_STATE, so a write that arrives
after its transaction ended cannot open a transaction nobody will ever close.
With transactions v2 (Produce v12+ and ``transaction.version`` 2) the client sends no
AddPartitionsToTxn: the coordinator adds the partition instead of verifying it (KIP-890
part 2). Only produces carrying transactional batches come here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from broker.log.producer_state import VerificationGuard
from broker.log.validation import ValidatedRecords
from broker.replication.partition import AppendRefusedError, Partition
from wire.errors import ErrorCode
from wire.generated.api_024_add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnRequestAddPartitionsToTxnTopic,
    AddPartitionsToTxnRequestAddPartitionsToTxnTransaction,
    AddPartitionsToTxnResponse,
)
from wire.records import (
    ATTRIBUTES_OFFSET,
    MAGIC_OFFSET,
    MAGIC_V2,
    PRODUCER_ID_OFFSET,
    TRANSACTIONAL_FLAG_MASK,
)

if TYPE_CHECKING:
    from broker.cluster.peers import PeerBrokers

#: Produce v11 is the first whose clients understand TRANSACTION_ABORTABLE (KIP-890).
TRANSACTION_ABORTABLE_PRODUCE_VERSION = 11
#: AddPartitionsToTxn v4 (batched): what a partition leader asks a remote coordinator.
VERIFY_VERSION = 4
VERIFY_TIMEOUT_S = 10.0
#: Produce v12+ on transactions v2: the partition leader adds the partition to the transaction.
TRANSACTIONS_V2_PRODUCE_VERSION = 12

# Verification failures an old client would not retry: NOT_ENOUGH_REPLICAS makes it retry
# the produce without a metadata refresh (as Kafka).
_RETRY_AS_NOT_ENOUGH_REPLICAS = frozenset({
    ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NETWORK_EXCEPTION, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
})


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


async def verify_transactional_write(
    partition: Partition,
    validated: ValidatedRecords,
    transactional_id: str | None,
    api_version: int,
    verifier: TransactionVerifier | None,
) -> VerificationGuard | None:
    """The guard the append must carry, once the coordinator has verified the partition
    (None when there is nothing to verify); raises :class:`AppendRefusedError`."""
    state = partition.producer_state
    transactional = [h for _, h in validated.batches if h.producer_id >= 0 and h.is_transactional]
    if not transactional or not state.config.transaction_verification_enabled:
        return None
    first = transactional[0]
    guard = state.maybe_start_verification(first.producer_id, first.base_sequence, first.producer_epoch)
    if guard is not None:
        await _verify(partition, transactional_id, first.producer_id, first.producer_epoch, api_version, verifier)
    return guard


async def _verify(partition: Partition, transactional_id: str | None, producer_id: int, producer_epoch: int,
                  api_version: int, verifier: TransactionVerifier | None) -> None:
    tp = (partition.topic, partition.index)
    if transactional_id is None:
        raise AppendRefusedError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
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
        raise AppendRefusedError(error, "Partition was not added to the transaction")
    if error in _RETRY_AS_NOT_ENOUGH_REPLICAS:
        raise AppendRefusedError(
            ErrorCode.NOT_ENOUGH_REPLICAS,
            f"Unable to verify the partition has been added to the transaction. Underlying error: {error.name}")
    raise AppendRefusedError(error)


async def ask_coordinator(
    peers: PeerBrokers, leader: int, transactional_id: str, producer_id: int, producer_epoch: int,
    partitions: list[tuple[str, int]], *, verify_only: bool,
) -> dict[tuple[str, int], ErrorCode]:
    """AddPartitionsToTxn v4 to the coordinator's broker ``leader``: verify (or, transactions
    v2, add) the partitions; an unreachable coordinator reads as NETWORK_EXCEPTION."""
    topics: dict[str, list[int]] = {}
    for topic, index in partitions:
        topics.setdefault(topic, []).append(index)
    request = AddPartitionsToTxnRequest(transactions=[AddPartitionsToTxnRequestAddPartitionsToTxnTransaction(
        transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
        verify_only=verify_only,
        topics=[AddPartitionsToTxnRequestAddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in topics.items()],
    )])
    reply = await peers.request(leader, request, AddPartitionsToTxnResponse, VERIFY_TIMEOUT_S, VERIFY_VERSION)
    if reply is None:
        return dict.fromkeys(partitions, ErrorCode.NETWORK_EXCEPTION)
    if reply.error_code != ErrorCode.NONE:
        return dict.fromkeys(partitions, ErrorCode.for_code(reply.error_code))
    answered = {
        (t.name, r.partition_index): ErrorCode.for_code(r.partition_error_code)
        for txn in reply.results_by_transaction for t in txn.topic_results for r in t.results_by_partition
    }
    return {tp: answered.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR) for tp in partitions}
