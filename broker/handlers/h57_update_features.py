"""UpdateFeatures (57), v0-2: change finalized feature levels (KIP-584, KIP-1022), as
``kafka-features.sh upgrade|downgrade`` and ``Admin.updateFeatures`` do.

ALTER on the cluster is needed (CLUSTER_AUTHORIZATION_FAILED). The active controller
applies every update or none (controller/features.py): an unknown feature, a level this
software does not support, a downgrade without a downgrade type, a metadata.version
downgrade or a missing dependency is INVALID_UPDATE_VERSION with Kafka's message; a
feature named twice is INVALID_REQUEST. ``validate_only`` changes nothing.
"""

from __future__ import annotations

from broker.cluster.controller_channel import ControllerRequestError
from broker.cluster.feature_requests import response_of, updates_of
from broker.security.acl_operations import AclOperation, authorize_cluster
from broker.server.dispatch import RequestContext
from controller.quorum import NotControllerError, QuorumTimeoutError
from wire.errors import ErrorCode
from wire.generated.api_057_update_features import UpdateFeaturesRequest, UpdateFeaturesResponse

API_KEY = 57
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: UpdateFeaturesRequest) -> UpdateFeaturesResponse:
    version = ctx.api_version
    if not authorize_cluster(ctx, AclOperation.ALTER):
        return response_of(request, version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    try:
        error, message = await ctx.services.controller.update_features(updates_of(request, version),
                                                                    request.validate_only)
    except NotControllerError:
        error, message = ErrorCode.NOT_CONTROLLER, None
    except QuorumTimeoutError:
        error, message = ErrorCode.REQUEST_TIMED_OUT, None
    except ControllerRequestError as ex:
        error, message = ex.code, str(ex)
    return response_of(request, version, error, message)
