"""CreateAcls (30), v0-3: ACLs written to the metadata log by the active controller.

As Kafka's AclApis: the caller needs ALTER on the CLUSTER (CLUSTER_AUTHORIZATION_FAILED
on every creation otherwise); without an authorizer every creation is SECURITY_DISABLED.
Each creation is validated by the controller (INVALID_REQUEST with Kafka's message for
an ANY/UNKNOWN type, pattern, operation or permission, a CLUSTER name other than
``kafka-cluster``, an empty name, a principal without ``Type:``); an ACL that exists
already succeeds. v0 has no pattern type (LITERAL); v2 is flexible.
"""

from __future__ import annotations

from broker.security.acl_operations import AclOperation, authorize_cluster
from broker.security.acl_requests import acl_of_creation
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_030_create_acls import (
    CreateAclsRequest,
    CreateAclsResponse,
    CreateAclsResponseAclCreationResult,
)

API_KEY = 30
MIN_VERSION = 0
MAX_VERSION = 3

NO_AUTHORIZER = "No Authorizer is configured."


def error_response(request: CreateAclsRequest, code: ErrorCode, message: str | None = None) -> CreateAclsResponse:
    return CreateAclsResponse(results=[CreateAclsResponseAclCreationResult(error_code=code, error_message=message)
                                       for _ in request.creations])


async def handle(ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse:
    if ctx.services.authorizer is None:
        return error_response(request, ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    if not authorize_cluster(ctx, AclOperation.ALTER):
        return error_response(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                              "Cluster authorization failed.")
    if not request.creations:
        return CreateAclsResponse()
    acls = [acl_of_creation(c) for c in request.creations]
    outcomes = await ctx.services.controller.create_acls(acls)
    for acl, (code, message) in zip(acls, outcomes, strict=True):
        if code != ErrorCode.NONE:
            ctx.services.log_client_error("create_acls_rejected", acl=str(acl), error=code.name, reason=message,
                                          client_id=ctx.client_id)
    return CreateAclsResponse(results=[CreateAclsResponseAclCreationResult(error_code=code, error_message=message)
                                       for code, message in outcomes])
