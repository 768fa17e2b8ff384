"""AddOffsetsToTxn (25), v0-4: add a group's ``__consumer_offsets`` partition to the
producer's transaction, so TxnOffsetCommit can write there (send_offsets_to_transaction).

v2 answers PRODUCER_FENCED (earlier versions get INVALID_PRODUCER_EPOCH); v3
is flexible; v4 (KIP-890) is for clients that handle TRANSACTION_ABORTABLE.
"""

from __future__ import annotations

from broker.security.acl_operations import AclOperation, ResourceType, authorize
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_025_add_offsets_to_txn import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
)

API_KEY = 25
MIN_VERSION = 0
MAX_VERSION = 4

PRODUCER_FENCED_VERSION = 2


async def handle(ctx: RequestContext, request: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse:
    if not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return AddOffsetsToTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return AddOffsetsToTxnResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    coordinator = ctx.services.transaction_coordinator
    tp = coordinator.offsets_partition(request.group_id)
    error = await coordinator.add_partitions(request.transactional_id, request.producer_id,
                                             request.producer_epoch, {tp}, ctx.conn)
    if error is ErrorCode.PRODUCER_FENCED and ctx.api_version < PRODUCER_FENCED_VERSION:
        error = ErrorCode.INVALID_PRODUCER_EPOCH
    return AddOffsetsToTxnResponse(error_code=error)
