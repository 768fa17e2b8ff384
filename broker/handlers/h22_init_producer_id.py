"""InitProducerId (22), v0-5: a producer id and epoch for an idempotent or transactional producer.

Without a transactional id every call gets a fresh producer id at epoch 0, from
blocks the controller allocates. With one, the transaction coordinator bumps
the id's epoch (fencing older producers and aborting their open transaction:
the client gets CONCURRENT_TRANSACTIONS and retries). v2 is flexible; v3
(KIP-360) carries the producer id and epoch the client holds, so it can bump
its own epoch after an error; v4 answers PRODUCER_FENCED (earlier versions
get INVALID_PRODUCER_EPOCH instead); v5 (KIP-890) is for clients that handle
TRANSACTION_ABORTABLE.
"""

from __future__ import annotations

from broker.security.acl_operations import init_producer_id_denied
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_022_init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from wire.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 5

PRODUCER_FENCED_VERSION = 4


async def handle(ctx: RequestContext, request: InitProducerIdRequest) -> InitProducerIdResponse:
    denied = init_producer_id_denied(ctx, request.transactional_id)
    if denied is not None:
        return InitProducerIdResponse(error_code=denied, producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH)
    producer_id, producer_epoch = request.producer_id, request.producer_epoch
    if producer_id == NO_PRODUCER_ID and producer_epoch == NO_PRODUCER_EPOCH:
        expected = None
    elif producer_id == NO_PRODUCER_ID or producer_epoch == NO_PRODUCER_EPOCH:
        return InitProducerIdResponse(error_code=ErrorCode.INVALID_REQUEST, producer_id=NO_PRODUCER_ID,
                                      producer_epoch=NO_PRODUCER_EPOCH)
    else:
        expected = (producer_id, producer_epoch)
    result = await ctx.services.transaction_coordinator.init_producer_id(
        request.transactional_id, request.transaction_timeout_ms, expected)
    error = result.error
    if error is ErrorCode.PRODUCER_FENCED and ctx.api_version < PRODUCER_FENCED_VERSION:
        error = ErrorCode.INVALID_PRODUCER_EPOCH
    return InitProducerIdResponse(error_code=error, producer_id=result.producer_id,
                                  producer_epoch=result.producer_epoch)
