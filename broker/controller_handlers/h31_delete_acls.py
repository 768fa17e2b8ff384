"""DeleteAcls (31), v0-3, on the controller listener: ACL removals forwarded by brokers.

The active controller matches each filter against its image and writes a
RemoveAccessControlEntryRecord per matched ACL. NOT_CONTROLLER (41) on a controller
that is not active.
"""

from __future__ import annotations

from broker.controller_handlers._common import call, controller_role
from broker.security.acl_requests import filter_of_wire, matching_acl_of
from broker.server.dispatch import RequestContext
from wire.generated.api_031_delete_acls import (
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteAclsResponseDeleteAclsFilterResult,
)

API_KEY = 31
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
    role = controller_role(ctx)
    outcomes, code = await call(role.controller.delete_acls([filter_of_wire(f) for f in request.filters]))
    if outcomes is None:
        return DeleteAclsResponse(filter_results=[
            DeleteAclsResponseDeleteAclsFilterResult(error_code=code, error_message=None) for _ in request.filters])
    return DeleteAclsResponse(filter_results=[
        DeleteAclsResponseDeleteAclsFilterResult(error_code=c, error_message=m,
                                                 matching_acls=[matching_acl_of(a) for a in acls])
        for c, m, acls in outcomes])
