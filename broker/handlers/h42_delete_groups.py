"""DeleteGroups (42), v0-2: delete empty groups and their committed offsets.

Only an Empty group can go (NON_EMPTY_GROUP otherwise); an unknown one is
GROUP_ID_NOT_FOUND. Offsets and the group records (a share group's membership too)
are removed with tombstones in ``__consumer_offsets`` by the group coordinator; a
share group's share-partitions' state is deleted at their share coordinators
(``__share_group_state``). A deleted group's group configs (ConfigRecords of resource
type GROUP) are deleted at the controller too, so a new group of that name starts with
none. Each group is answered once, in request order.
"""

from __future__ import annotations

import structlog

from broker.security.acl_operations import AclOperation, ResourceType, authorized_names
from broker.server.dispatch import RequestContext
from controller.image import GROUP_RESOURCE
from wire.errors import ErrorCode
from wire.generated.api_042_delete_groups import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteGroupsResponseDeletableGroupResult,
)

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2

log = structlog.get_logger(__name__)


async def handle(ctx: RequestContext, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    group_ids = list(dict.fromkeys(request.groups_names))
    allowed = authorized_names(ctx, AclOperation.DELETE, ResourceType.GROUP, group_ids)
    results = {g: ErrorCode.GROUP_AUTHORIZATION_FAILED for g in group_ids if g not in allowed}
    results.update(ctx.services.group_coordinator.delete_groups([g for g in group_ids if g in allowed]))
    for g in group_ids:
        configs = ctx.services.image.group_config(g)
        if results[g] == ErrorCode.NONE and configs:
            code, message = await ctx.services.controller.alter_configs(
                GROUP_RESOURCE, g, dict.fromkeys(configs), False, False)
            if code is not ErrorCode.NONE:
                log.warning("group_configs_not_deleted", group_id=g, error=code.name, message=message)
    return DeleteGroupsResponse(results=[
        DeleteGroupsResponseDeletableGroupResult(group_id=g, error_code=results[g]) for g in group_ids])
