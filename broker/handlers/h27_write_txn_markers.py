"""WriteTxnMarkers (27), v0-1: a transaction coordinator asks this partition leader to write
COMMIT or ABORT markers.

Each marker is a control batch appended with the producer's epoch and the
coordinator's epoch (a marker from an older coordinator is
TRANSACTION_COORDINATOR_FENCED, one with an older producer epoch
INVALID_PRODUCER_EPOCH), answered once replicated. The coordinator on this
broker sends its own markers here too, through the dispatcher. v1 is flexible.
"""

from __future__ import annotations

from broker.dispatch import RequestContext
from broker.transaction.append import write_txn_markers
from wire.generated.api_027_write_txn_markers import WriteTxnMarkersRequest, WriteTxnMarkersResponse

API_KEY = 27
MIN_VERSION = 0
MAX_VERSION = 1

#: Kafka's request.timeout.ms default: how long a marker waits for replication.
REQUEST_TIMEOUT_MS = 30_000


async def handle(ctx: RequestContext, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    node = ctx.node
    return await write_txn_markers(node, request, REQUEST_TIMEOUT_MS,
                                   node.transaction_coordinator.offsets_marker_listener())
