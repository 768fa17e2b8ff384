"""AlterUserScramCredentials (51), v0: SCRAM credentials written to the metadata log.

A broker-only node forwards the request to the active controller and answers once
its own image has the change, so the user can authenticate here right after.
"""

from __future__ import annotations

from broker.security.acl_operations import AclOperation, authorize_cluster
from broker.server.dispatch import RequestContext
from controller.quorum import NotControllerError
from wire.errors import ErrorCode
from wire.generated.api_051_alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResponseAlterUserScramCredentialsResult,
)

API_KEY = 51
MIN_VERSION = 0
MAX_VERSION = 0


def failed(request: AlterUserScramCredentialsRequest, code: ErrorCode) -> AlterUserScramCredentialsResponse:
    users = dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions])
    return AlterUserScramCredentialsResponse(results=[
        AlterUserScramCredentialsResponseAlterUserScramCredentialsResult(user=user, error_code=code)
        for user in users])


def error_response(request: AlterUserScramCredentialsRequest, code: ErrorCode) -> AlterUserScramCredentialsResponse:
    return failed(request, code)


async def handle(ctx: RequestContext, request: AlterUserScramCredentialsRequest) -> AlterUserScramCredentialsResponse:
    if not authorize_cluster(ctx, AclOperation.ALTER):
        return failed(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    try:
        return await ctx.services.controller.alter_user_scram_credentials(request)
    except NotControllerError:
        return failed(request, ErrorCode.NOT_CONTROLLER)
