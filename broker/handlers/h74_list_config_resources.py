"""ListConfigResources (74), v0-1 (KIP-1142; v0 was ListClientMetricsResources, KIP-714):
the names of the config resources of the given types, as Kafka's KafkaApis lists them.

v0 knows client metrics subscriptions only; v1 also groups (every group with a group config
set, from the metadata image), broker loggers and brokers (the live brokers with an endpoint
on this listener, by id) and topics (every topic). No types named means every type the version knows; a type
it does not know answers UNSUPPORTED_VERSION. The caller needs DESCRIBE_CONFIGS on the
cluster, else CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from broker.security.acl_operations import AclOperation, authorize_cluster
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_074_list_config_resources import (
    ListConfigResourcesRequest,
    ListConfigResourcesResponse,
    ListConfigResourcesResponseConfigResource,
)

API_KEY = 74
MIN_VERSION = 0
MAX_VERSION = 1

# ConfigResource.Type ids.
TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
CLIENT_METRICS = 16
GROUP = 32
#: The types each version lists, in the order Kafka lists them.
SUPPORTED_TYPES = {0: (CLIENT_METRICS,), 1: (GROUP, CLIENT_METRICS, BROKER_LOGGER, BROKER, TOPIC)}


async def handle(ctx: RequestContext, request: ListConfigResourcesRequest) -> ListConfigResourcesResponse:
    if not authorize_cluster(ctx, AclOperation.DESCRIBE_CONFIGS):
        return ListConfigResourcesResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    supported = SUPPORTED_TYPES[min(ctx.api_version, MAX_VERSION)]
    wanted = set(request.resource_types) if ctx.api_version >= 1 and request.resource_types else set(supported)
    if not wanted <= set(supported):
        return ListConfigResourcesResponse(error_code=ErrorCode.UNSUPPORTED_VERSION)
    image = ctx.services.image
    brokers = sorted(b.broker_id for b in image.live_brokers() if b.endpoint(ctx.conn.listener) is not None)
    names = {
        GROUP: sorted(name for kind, name in image.configs if kind == GROUP),
        CLIENT_METRICS: sorted(name for kind, name in image.configs if kind == CLIENT_METRICS),
        BROKER_LOGGER: [str(b) for b in brokers],
        BROKER: [str(b) for b in brokers],
        TOPIC: sorted(image.topic_ids),
    }
    return ListConfigResourcesResponse(config_resources=[
        ListConfigResourcesResponseConfigResource(resource_name=name, resource_type=kind)
        for kind in supported if kind in wanted for name in names[kind]])
