"""DeleteAcls (31), v0-3: remove every ACL a filter matches, through the active controller.

As Kafka's AclApis: ALTER on the CLUSTER is needed (CLUSTER_AUTHORIZATION_FAILED per
filter otherwise); without an authorizer each filter is SECURITY_DISABLED. A filter
with an UNKNOWN part is INVALID_REQUEST; ANY and MATCH patterns match as Kafka's
AclBindingFilter. Each filter answers the ACLs it matched (an ACL matched by two
filters is listed by both, removed once). v0 has no pattern type (LITERAL); v2 is flexible.
"""

from __future__ import annotations

from broker.handlers.h30_create_acls import NO_AUTHORIZER
from broker.security.acl_operations import AclOperation, authorize_cluster
from broker.security.acl_requests import filter_of_wire, matching_acl_of
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_031_delete_acls import (
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteAclsResponseDeleteAclsFilterResult,
)

API_KEY = 31
MIN_VERSION = 0
MAX_VERSION = 3


def error_response(request: DeleteAclsRequest, code: ErrorCode, message: str | None = None) -> DeleteAclsResponse:
    return DeleteAclsResponse(filter_results=[
        DeleteAclsResponseDeleteAclsFilterResult(error_code=code, error_message=message) for _ in request.filters])


async def handle(ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
    if ctx.services.authorizer is None:
        return error_response(request, ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    if not authorize_cluster(ctx, AclOperation.ALTER):
        return error_response(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    if not request.filters:
        return DeleteAclsResponse()
    outcomes = await ctx.services.controller.delete_acls([filter_of_wire(f) for f in request.filters])
    return DeleteAclsResponse(filter_results=[
        DeleteAclsResponseDeleteAclsFilterResult(error_code=code, error_message=message,
                                                 matching_acls=[matching_acl_of(a) for a in acls])
        for code, message, acls in outcomes])
