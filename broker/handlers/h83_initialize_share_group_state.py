"""InitializeShareGroupState (83), v0: the share coordinator's initialize of share-partition state
(KIP-932; inter-broker, sent by partition leaders' persisters, see broker/share/persister.py).

Each share-partition is answered by the shard of its coordinator key
(broker/share/state_service.py): NOT_COORDINATOR when this broker does not lead its
``__share_group_state`` partition. Requires CLUSTER_ACTION on the cluster.
"""

from __future__ import annotations

from broker.security.acl_operations import AclOperation, authorize_cluster
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_083_initialize_share_group_state import (
    InitializeShareGroupStateRequest,
    InitializeShareGroupStateResponse,
)

API_KEY = 83
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: InitializeShareGroupStateRequest) -> InitializeShareGroupStateResponse:
    refused = None if authorize_cluster(ctx, AclOperation.CLUSTER_ACTION) else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return await ctx.services.share_coordinator.state_service.initialize(request, refused)
