"""CreateAcls (30), v0-3, on the controller listener: ACL creations forwarded by brokers.

The broker has authorized the caller; the active controller validates each ACL and
writes AccessControlEntryRecords. NOT_CONTROLLER (41) on a controller that is not active.
"""

from __future__ import annotations

from broker.controller_handlers._common import call, controller_role
from broker.security.acl_requests import acl_of_creation
from broker.server.dispatch import RequestContext
from wire.generated.api_030_create_acls import (
    CreateAclsRequest,
    CreateAclsResponse,
    CreateAclsResponseAclCreationResult,
)

API_KEY = 30
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse:
    role = controller_role(ctx)
    outcomes, code = await call(role.controller.create_acls([acl_of_creation(c) for c in request.creations]))
    if outcomes is None:
        return CreateAclsResponse(results=[CreateAclsResponseAclCreationResult(error_code=code, error_message=None)
                                           for _ in request.creations])
    return CreateAclsResponse(results=[CreateAclsResponseAclCreationResult(error_code=c, error_message=m)
                                       for c, m in outcomes])
