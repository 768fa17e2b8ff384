"""WriteTxnMarkers (27), v0-2: a transaction coordinator asks this partition leader to write
COMMIT or ABORT markers.

Each marker is a control batch appended with the producer's epoch and the
coordinator's epoch (a marker from an older coordinator is
TRANSACTION_COORDINATOR_FENCED, one with an older producer epoch
INVALID_PRODUCER_EPOCH), answered once replicated. The coordinator on this
broker sends its own markers here too, through the dispatcher. v1 is flexible. v2 (KIP-1228) names each marker's transaction
version: a transactions-v2 marker must carry an epoch above the producer's last one (its
EndTxn bumped it), else INVALID_PRODUCER_EPOCH; others only not below it. This broker's
coordinator still sends v1.
"""

from __future__ import annotations

from broker.security.acl_operations import AclOperation, authorize_cluster
from broker.server.dispatch import RequestContext
from broker.transaction.write_markers import write_txn_markers
from wire.errors import ErrorCode
from wire.generated.api_027_write_txn_markers import (
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
    WriteTxnMarkersResponseWritableTxnMarkerPartitionResult,
    WriteTxnMarkersResponseWritableTxnMarkerResult,
    WriteTxnMarkersResponseWritableTxnMarkerTopicResult,
)

API_KEY = 27
MIN_VERSION = 0
MAX_VERSION = 2

#: Kafka's request.timeout.ms default: how long a marker waits for replication.
REQUEST_TIMEOUT_MS = 30_000


async def handle(ctx: RequestContext, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    services = ctx.services
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        return error_response(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    return await write_txn_markers(services.replica_manager, services.clock_ms, request, REQUEST_TIMEOUT_MS,
                                   services.transaction_coordinator.offsets_marker_listener(), ctx.api_version)


def error_response(request: WriteTxnMarkersRequest, code: ErrorCode) -> WriteTxnMarkersResponse:
    return WriteTxnMarkersResponse(markers=[
        WriteTxnMarkersResponseWritableTxnMarkerResult(producer_id=m.producer_id, topics=[
            WriteTxnMarkersResponseWritableTxnMarkerTopicResult(name=t.name, partitions=[
                WriteTxnMarkersResponseWritableTxnMarkerPartitionResult(partition_index=i, error_code=code)
                for i in t.partition_indexes])
            for t in m.topics])
        for m in request.markers])
