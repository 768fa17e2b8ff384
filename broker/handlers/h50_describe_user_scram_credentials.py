"""DescribeUserScramCredentials (50), v0: users and the SCRAM mechanisms and iterations
they have credentials for, from the metadata image (never salts or keys).

No user list (null or empty) describes every user; a user asked for twice is
DUPLICATE_RESOURCE, one without credentials RESOURCE_NOT_FOUND, as Kafka's. With an
authorizer the caller needs DESCRIBE on the cluster (ALTER for AlterUserScramCredentials).
"""

from __future__ import annotations

from broker.security.acl_operations import AclOperation, authorize_cluster
from broker.security.scram_admin import describe_credentials
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_050_describe_user_scram_credentials import (
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)

API_KEY = 50
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(
    ctx: RequestContext, request: DescribeUserScramCredentialsRequest
) -> DescribeUserScramCredentialsResponse:
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return DescribeUserScramCredentialsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    return describe_credentials(request, ctx.services.image)
