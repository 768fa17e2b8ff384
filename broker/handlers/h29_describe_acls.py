"""DescribeAcls (29), v0-3: the ACLs of this broker's metadata image that match a filter.

As Kafka's AclApis: DESCRIBE on the CLUSTER is needed (CLUSTER_AUTHORIZATION_FAILED);
without an authorizer the answer is SECURITY_DISABLED; a filter with an UNKNOWN part is
INVALID_REQUEST. Matches are grouped by resource pattern, in a stable order. v0 has no
pattern type (LITERAL); v2 is flexible.
"""

from __future__ import annotations

from broker.handlers.h30_create_acls import NO_AUTHORIZER
from broker.security.acl_operations import AclOperation, authorize_cluster
from broker.server.dispatch import RequestContext
from controller.acls import AclError, AclFilter, StandardAcl
from wire.errors import ErrorCode
from wire.generated.api_029_describe_acls import (
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeAclsResponseAclDescription,
    DescribeAclsResponseDescribeAclsResource,
)

API_KEY = 29
MIN_VERSION = 0
MAX_VERSION = 3


def error_response(request: DescribeAclsRequest, code: ErrorCode, message: str | None = None) -> DescribeAclsResponse:
    return DescribeAclsResponse(error_code=code, error_message=message)


async def handle(ctx: RequestContext, request: DescribeAclsRequest) -> DescribeAclsResponse:
    if ctx.services.authorizer is None:
        return error_response(request, ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return error_response(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    flt = AclFilter.of(request.resource_type_filter, request.resource_name_filter, request.pattern_type_filter,
                       request.principal_filter, request.host_filter, request.operation, request.permission_type)
    try:
        flt.validate()
    except AclError as ex:
        return error_response(request, ErrorCode.INVALID_REQUEST, str(ex))
    by_resource: dict[tuple[int, str, int], list[StandardAcl]] = {}
    for acl in sorted((a for a in ctx.services.image.acls.values() if flt.matches(a)), key=StandardAcl.sort_key):
        by_resource.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []).append(acl)
    return DescribeAclsResponse(error_message=None, resources=[
        DescribeAclsResponseDescribeAclsResource(
            resource_type=rt, resource_name=name, pattern_type=pt,
            acls=[DescribeAclsResponseAclDescription(principal=a.principal, host=a.host, operation=a.operation,
                                                     permission_type=a.permission) for a in acls])
        for (rt, name, pt), acls in by_resource.items()])
