"""ListTransactions (66), v0-2: the transactional ids this broker coordinates (KIP-664),
filtered by state names and producer ids; v1 (KIP-994) adds a minimum
duration (ids whose transaction started more than that many ms ago); v2 (KIP-1152) a
regular expression the whole transactional id must match (empty or null: every id; one
that does not compile: INVALID_REGULAR_EXPRESSION). Unknown state names are echoed back
in ``unknown_state_filters``.

Kafka compiles the pattern with java.util.regex. A backtracking engine on the event loop
would let one pattern hold every client (``(a|aa)*c`` against a long id), so the pattern is
RE2's, as KIP-848's topic regexes: linear time, the same syntax for everything but
backreferences and lookaround, which RE2 refuses (INVALID_REGULAR_EXPRESSION).
"""

from __future__ import annotations

from typing import Any

import re2

from broker.security.acl_operations import AclOperation, ResourceType, authorize
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_066_list_transactions import (
    ListTransactionsRequest,
    ListTransactionsResponse,
    ListTransactionsResponseTransactionState,
)

API_KEY = 66
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: ListTransactionsRequest) -> ListTransactionsResponse:
    pattern: Any = None  # a compiled RE2 pattern (the binding has no type hints)
    if ctx.api_version >= 2 and request.transactional_id_pattern:
        try:
            pattern = re2.compile(request.transactional_id_pattern)
        except re2.error:
            return ListTransactionsResponse(error_code=ErrorCode.INVALID_REGULAR_EXPRESSION)
    error, unknown, found = ctx.services.transaction_coordinator.list_transactions(
        request.state_filters, request.producer_id_filters,
        request.duration_filter if ctx.api_version >= 1 else -1)
    return ListTransactionsResponse(
        error_code=error,
        unknown_state_filters=unknown,
        transaction_states=[
            ListTransactionsResponseTransactionState(
                transactional_id=t.transactional_id, producer_id=t.producer_id, transaction_state=t.state)
            for t in found
            if (pattern is None or pattern.fullmatch(t.transactional_id))
            and authorize(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, t.transactional_id,
                          log_denied=False)
        ],
    )
