"""DescribeCluster (60), v0-2: cluster id, controller id and the live brokers (KIP-700).

Brokers are listed with their endpoint on the listener the request came in on.
The controller id is the one clients may reach: in KRaft, Kafka brokers report
a live broker. v1 adds ``endpoint_type`` (KIP-919): 1 asks for brokers, which
this listener serves; 2 (controllers) is MISMATCHED_ENDPOINT_TYPE and any other
value UNSUPPORTED_ENDPOINT_TYPE — INVALID_REQUEST for both in v0, as Kafka
answers. ``include_cluster_authorized_operations`` reports every cluster
operation, as a broker without an authorizer allows them all. v2 (KIP-1073) may ask
for the fenced brokers too, each with ``is_fenced``.
"""

from __future__ import annotations

from broker.security.acl_operations import (
    CLUSTER_NAME,
    OPERATIONS_NOT_REQUESTED,
    ResourceType,
    authorized_operations,
)
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_060_describe_cluster import (
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeClusterResponseDescribeClusterBroker,
)

API_KEY = 60
MIN_VERSION = 0
MAX_VERSION = 2

BROKER_ENDPOINT = 1
CONTROLLER_ENDPOINT = 2
ENDPOINT_NAMES = {BROKER_ENDPOINT: "BROKER", CONTROLLER_ENDPOINT: "CONTROLLER"}

async def handle(ctx: RequestContext, request: DescribeClusterRequest) -> DescribeClusterResponse:
    wanted = request.endpoint_type if ctx.api_version >= 1 else BROKER_ENDPOINT
    if wanted not in ENDPOINT_NAMES:
        return DescribeClusterResponse(
            error_code=ErrorCode.INVALID_REQUEST if ctx.api_version == 0 else ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
            error_message=f"Unsupported endpoint type {wanted}",
        )
    if wanted != BROKER_ENDPOINT:
        return DescribeClusterResponse(
            error_code=ErrorCode.INVALID_REQUEST if ctx.api_version == 0 else ErrorCode.MISMATCHED_ENDPOINT_TYPE,
            error_message=(
                f"The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type "
                f"{ENDPOINT_NAMES[wanted]}"
            ),
        )
    services = ctx.services
    brokers = []
    with_fenced = ctx.api_version >= 2 and request.include_fenced_brokers
    listed = services.image.brokers.values() if with_fenced else services.image.live_brokers()
    for broker in sorted(listed, key=lambda b: b.broker_id):
        ep = broker.endpoint(ctx.conn.listener)
        if ep is not None:
            brokers.append(DescribeClusterResponseDescribeClusterBroker(
                broker_id=broker.broker_id, host=ep.host, port=ep.port, rack=broker.rack, is_fenced=broker.fenced))
    # KRaft brokers report themselves (clients cannot reach controllers directly).
    controller_id = services.node_id
    return DescribeClusterResponse(
        endpoint_type=BROKER_ENDPOINT,
        cluster_id=services.cluster_id,
        # Kafka answers -1 rather than name a node the client cannot find in the list.
        controller_id=controller_id if any(b.broker_id == controller_id and not b.is_fenced for b in brokers) else -1,
        brokers=brokers,
        cluster_authorized_operations=(
            authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
            if request.include_cluster_authorized_operations
            else OPERATIONS_NOT_REQUESTED
        ),
    )
