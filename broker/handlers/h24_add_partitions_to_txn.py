"""AddPartitionsToTxn (24), v0-5: add partitions to a producer's ongoing transaction.

v0-3 come from clients: one transaction, answered per partition with the one
outcome. v2 answers PRODUCER_FENCED (earlier versions get
INVALID_PRODUCER_EPOCH); v3 is flexible. v4+ come from brokers (KIP-890 part
1): a batch of transactions, each either added or, with ``verify_only``, only
checked (a partition leader asking whether a transactional write belongs to
an ongoing transaction). A partition that does not exist fails the whole
transaction: it gets UNKNOWN_TOPIC_OR_PARTITION, the others
OPERATION_NOT_ATTEMPTED. Clients may not add the internal topics
(TOPIC_AUTHORIZATION_FAILED, as Kafka); AddOffsetsToTxn adds
``__consumer_offsets``.
"""

from __future__ import annotations

from broker.security.acl_operations import (
    AclOperation,
    ResourceType,
    authorize,
    authorize_cluster,
    checker,
)
from broker.server.dispatch import RequestContext
from controller.image import INTERNAL_TOPICS
from wire.errors import ErrorCode
from wire.generated.api_024_add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnRequestAddPartitionsToTxnTransaction,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResponseAddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnResponseAddPartitionsToTxnResult,
    AddPartitionsToTxnResponseAddPartitionsToTxnTopicResult,
)

API_KEY = 24
MIN_VERSION = 0
MAX_VERSION = 5

PRODUCER_FENCED_VERSION = 2
BATCHED_VERSION = 4


async def handle(ctx: RequestContext, request: AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse:
    version = ctx.api_version
    if version < BATCHED_VERSION:
        transactions = [AddPartitionsToTxnRequestAddPartitionsToTxnTransaction(
            transactional_id=request.v3_and_below_transactional_id,
            producer_id=request.v3_and_below_producer_id,
            producer_epoch=request.v3_and_below_producer_epoch,
            topics=request.v3_and_below_topics,
        )]
    else:
        transactions = request.transactions
    results = [await _one(ctx, txn) for txn in transactions]
    if version < BATCHED_VERSION:
        return AddPartitionsToTxnResponse(results_by_topic_v3_and_below=results[0].topic_results)
    return AddPartitionsToTxnResponse(results_by_transaction=results)


async def _one(
    ctx: RequestContext, txn: AddPartitionsToTxnRequestAddPartitionsToTxnTransaction
) -> AddPartitionsToTxnResponseAddPartitionsToTxnResult:
    coordinator = ctx.services.transaction_coordinator
    image = ctx.services.image
    partitions: list[tuple[str, int]] = []
    for topic in txn.topics:
        for index in topic.partitions:
            if (topic.name, index) not in partitions:
                partitions.append((topic.name, index))
    failed: dict[tuple[str, int], ErrorCode] = {}
    # v4+ (batched) comes from brokers: verify-only, or adding for a Produce on transactions v2.
    from_broker = ctx.api_version >= BATCHED_VERSION
    txn_allowed = (authorize_cluster(ctx, AclOperation.CLUSTER_ACTION) if txn.verify_only or from_broker
                   else authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn.transactional_id))
    may_write = checker(ctx, AclOperation.WRITE, ResourceType.TOPIC)
    for tp in partitions:
        t = image.topic(tp[0])
        if not txn_allowed:
            failed[tp] = (ErrorCode.CLUSTER_AUTHORIZATION_FAILED if txn.verify_only or from_broker
                          else ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        elif not may_write(tp[0]):
            failed[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif ctx.api_version < BATCHED_VERSION and tp[0] in INTERNAL_TOPICS:
            failed[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif t is None or tp[1] not in t.partitions:
            failed[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    errors: dict[tuple[str, int], ErrorCode]
    if failed:
        errors = {tp: failed.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in partitions}
    elif txn.verify_only:
        errors = coordinator.verify_partitions_now(txn.transactional_id, txn.producer_id, txn.producer_epoch, partitions)
    else:
        error = await coordinator.add_partitions(
            txn.transactional_id, txn.producer_id, txn.producer_epoch, set(partitions),
            None if from_broker else ctx.conn, client_transaction_version=2 if from_broker else 0)
        if error is ErrorCode.PRODUCER_FENCED and ctx.api_version < PRODUCER_FENCED_VERSION:
            error = ErrorCode.INVALID_PRODUCER_EPOCH
        errors = dict.fromkeys(partitions, error)
    by_topic: dict[str, AddPartitionsToTxnResponseAddPartitionsToTxnTopicResult] = {}
    for (name, index), error in errors.items():
        result = by_topic.get(name)
        if result is None:
            result = by_topic[name] = AddPartitionsToTxnResponseAddPartitionsToTxnTopicResult(name=name)
        result.results_by_partition.append(AddPartitionsToTxnResponseAddPartitionsToTxnPartitionResult(
            partition_index=index, partition_error_code=error))
    return AddPartitionsToTxnResponseAddPartitionsToTxnResult(
        transactional_id=txn.transactional_id, topic_results=list(by_topic.values()))
