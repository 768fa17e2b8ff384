"""EndTxn (26), v0-5: commit or abort the producer's ongoing transaction.

The answer comes once the decision (PrepareCommit / PrepareAbort) is durable
in ``__transaction_state``; the markers are written afterwards, and until they
are the next AddPartitionsToTxn gets CONCURRENT_TRANSACTIONS. A retry of an
EndTxn that already completed succeeds. v2 answers PRODUCER_FENCED (earlier
versions get INVALID_PRODUCER_EPOCH); v3 is flexible; v4 (KIP-890) is for
clients that handle TRANSACTION_ABORTABLE; v5 is transactions v2 (KIP-890 part 2): the
producer epoch is bumped by every commit and abort, the answer carries the id and epoch to
use next, a retry is told apart by its older epoch, and an abort with no transaction open
is allowed (see :mod:`broker.transaction.end_txn`). An EndTxn arriving on a connection
older than the one that began the ongoing transaction is refused (see
:mod:`broker.transaction.coordinator`).
"""

from __future__ import annotations

from broker.security.acl_operations import AclOperation, ResourceType, authorize
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_026_end_txn import EndTxnRequest, EndTxnResponse

API_KEY = 26
MIN_VERSION = 0
MAX_VERSION = 5

PRODUCER_FENCED_VERSION = 2
#: EndTxn v5+ is spoken by clients on transactions v2 (KIP-890): the epoch is bumped on every
#: commit and abort, and the answer carries the producer id and epoch to use next.
TRANSACTIONS_V2_VERSION = 5


async def handle(ctx: RequestContext, request: EndTxnRequest) -> EndTxnResponse:
    if not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return EndTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    result = await ctx.services.transaction_coordinator.end_transaction(
        request.transactional_id, request.producer_id, request.producer_epoch, request.committed,
        from_client=True, conn=ctx.conn,
        client_transaction_version=2 if ctx.api_version >= TRANSACTIONS_V2_VERSION else 0)
    error = result.error
    if error is ErrorCode.PRODUCER_FENCED and ctx.api_version < PRODUCER_FENCED_VERSION:
        error = ErrorCode.INVALID_PRODUCER_EPOCH
    return EndTxnResponse(error_code=error, producer_id=result.producer_id, producer_epoch=result.producer_epoch)
