"""TxnOffsetCommit (28), v0-5: a transactional producer commits a group's offsets as part
of its transaction (send_offsets_to_transaction).

The group's ``__consumer_offsets`` partition must be in the transaction
(AddOffsetsToTxn first): it is verified with the transaction coordinator
unless the producer already wrote there in this transaction (KIP-890 part 1),
else INVALID_TXN_STATE. The transaction coordinator is often another broker
(the group and the transactional id hash to partitions of different internal
topics): it is then asked with AddPartitionsToTxn v4 (verify only), as a
partition leader asks before a transaction's first write. The offsets are
written with the producer's id and epoch and count only once the
transaction's COMMIT marker reaches that partition. Partitions of unknown
topics get UNKNOWN_TOPIC_OR_PARTITION.

Per version: v1 is v0; v2 adds the leader epoch; v3 (KIP-447) the member id,
generation and group instance id, which fence zombie members as OffsetCommit
does; v3 is flexible; v4 (KIP-890) is for clients that handle
TRANSACTION_ABORTABLE; v5 is transactions v2, where the client sends no AddOffsetsToTxn
and the offsets partition is added to the transaction here. Before v2, COORDINATOR_LOAD_IN_PROGRESS is answered as
COORDINATOR_NOT_AVAILABLE, which older clients expect.
"""

from __future__ import annotations

from broker.group.records import OffsetAndMetadata
from broker.group.shard_types import commit_error
from broker.security.acl_operations import (
    AclOperation,
    ResourceType,
    checker,
    txn_offset_commit_denied,
)
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_028_txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)

API_KEY = 28
MIN_VERSION = 0
MAX_VERSION = 5

NO_LEADER_EPOCH = -1
LOAD_IN_PROGRESS_VERSION = 2
TRANSACTION_ABORTABLE_VERSION = 4
#: TxnOffsetCommit v5+ with transaction.version 2: the offsets partition is added to the
#: transaction by the broker, the client sends no AddOffsetsToTxn (KIP-890 part 2).
TRANSACTIONS_V2_VERSION = 5


async def handle(ctx: RequestContext, request: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
    services = ctx.services
    errors: dict[tuple[str, int], ErrorCode] = {}
    offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
    now = services.clock_ms()
    image = services.image
    denied = txn_offset_commit_denied(ctx, request.transactional_id, request.group_id)
    may_read = checker(ctx, AclOperation.READ, ResourceType.TOPIC)
    for topic in request.topics:
        known = image.topic(topic.name)
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            if denied is not None:
                errors[tp] = denied
            elif not may_read(topic.name):
                errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif known is None or p.partition_index not in known.partitions:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                offsets[tp] = OffsetAndMetadata(
                    offset=p.committed_offset,
                    leader_epoch=None if p.committed_leader_epoch == NO_LEADER_EPOCH else p.committed_leader_epoch,
                    metadata=p.committed_metadata or "",
                    commit_timestamp_ms=now,
                )
    if offsets:
        # Only the group's coordinator asks the transaction coordinator (as Kafka checks the group first).
        error = services.group_coordinator.group_status(request.group_id)
        if error is ErrorCode.NONE:
            error = await _verify(ctx, request)
        if error is not ErrorCode.NONE:
            errors.update(dict.fromkeys(offsets, error))
        else:
            errors.update(await services.group_coordinator.commit_transactional_offsets(
                request.group_id, request.producer_id, request.producer_epoch, request.member_id,
                request.group_instance_id, request.generation_id, offsets))
    if ctx.api_version < LOAD_IN_PROGRESS_VERSION:
        errors = {tp: ErrorCode.COORDINATOR_NOT_AVAILABLE if e is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS else e
                  for tp, e in errors.items()}
    response = TxnOffsetCommitResponse()
    for topic in request.topics:
        t = TxnOffsetCommitResponseTopic(name=topic.name)
        for p in topic.partitions:
            t.partitions.append(TxnOffsetCommitResponsePartition(
                partition_index=p.partition_index, error_code=errors[(topic.name, p.partition_index)]))
        response.topics.append(t)
    return response


async def _verify(ctx: RequestContext, request: TxnOffsetCommitRequest) -> ErrorCode:
    """Whether the group's offsets partition is in the producer's ongoing transaction."""
    coordinator = ctx.services.transaction_coordinator
    tp = coordinator.offsets_partition(request.group_id)
    partition = ctx.services.replica_manager.get(*tp)
    if partition is not None and partition.producer_state.has_ongoing_transaction(
            request.producer_id, request.producer_epoch):
        return ErrorCode.NONE
    if ctx.api_version >= TRANSACTIONS_V2_VERSION and coordinator.transactions_v2_enabled():
        # Transactions v2: no AddOffsetsToTxn was sent; the offsets partition is added here.
        error = (await coordinator.add_partitions_for_produce(
            request.transactional_id, request.producer_id, request.producer_epoch, [tp]))[tp]
    else:
        error = (await coordinator.verify_partitions(
            request.transactional_id, request.producer_id, request.producer_epoch, [tp]))[tp]
    if error is ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if error is ErrorCode.TRANSACTION_ABORTABLE and ctx.api_version < TRANSACTION_ABORTABLE_VERSION:
        return ErrorCode.INVALID_TXN_STATE
    return commit_error(error)
