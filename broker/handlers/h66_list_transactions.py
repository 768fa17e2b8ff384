"""ListTransactions (66), v0-1: the transactional ids this broker coordinates (KIP-664),
filtered by state names and producer ids; v1 (KIP-994) adds a minimum
duration (ids whose transaction started more than that many ms ago). Unknown
state names are echoed back in ``unknown_state_filters``.
"""

from __future__ import annotations

from broker.acl_operations import AclOperation, ResourceType, authorize
from broker.dispatch import RequestContext
from wire.generated.api_066_list_transactions import (
    ListTransactionsRequest,
    ListTransactionsResponse,
    ListTransactionsResponseTransactionState,
)

API_KEY = 66
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: ListTransactionsRequest) -> ListTransactionsResponse:
    error, unknown, found = ctx.node.transaction_coordinator.list_transactions(
        request.state_filters, request.producer_id_filters,
        request.duration_filter if ctx.api_version >= 1 else -1)
    return ListTransactionsResponse(
        error_code=error,
        unknown_state_filters=unknown,
        transaction_states=[
            ListTransactionsResponseTransactionState(
                transactional_id=t.transactional_id, producer_id=t.producer_id, transaction_state=t.state)
            for t in found
            if authorize(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, t.transactional_id,
                         log_denied=False)
        ],
    )
