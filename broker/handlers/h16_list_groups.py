"""ListGroups (16), v0-5: the groups this broker coordinates.

v4 (KIP-518) filters by state (case-insensitive) and reports each group's
state; v5 (KIP-848) filters by type and reports it: ``classic``, ``consumer`` or ``share``. While some ``__consumer_offsets`` partition is still loading
the groups found so far come with COORDINATOR_LOAD_IN_PROGRESS, as Kafka's.
"""

from __future__ import annotations

import heapq

from broker.group.group import GroupOverview
from broker.security.acl_operations import AclOperation, ResourceType, authorize, authorize_cluster
from broker.server.dispatch import RequestContext
from wire.generated.api_016_list_groups import (
    ListGroupsRequest,
    ListGroupsResponse,
    ListGroupsResponseListedGroup,
)

API_KEY = 16
MIN_VERSION = 0
MAX_VERSION = 5

#: Groups sorted in one go before the handler may yield.
SORT_RUN = 4096


async def handle(ctx: RequestContext, request: ListGroupsRequest) -> ListGroupsResponse:
    version = ctx.api_version
    states = set(request.states_filter or []) if version >= 4 else set()
    types = set(request.types_filter or []) if version >= 5 else set()
    error, groups = ctx.services.group_coordinator.list_groups(states, types)
    pacer = ctx.pacer
    # DESCRIBE on the cluster lists every group; otherwise those the caller may DESCRIBE (as Kafka).
    if not authorize_cluster(ctx, AclOperation.DESCRIBE, log_denied=False):
        permitted: list[GroupOverview] = []
        for g in groups:
            if authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id, log_denied=False):
                permitted.append(g)
            if pacer.tick():
                await pacer.pause()
        groups = permitted
    # Sorted a run at a time and merged, so that many groups are not one long sort.
    runs: list[list[GroupOverview]] = []
    for start in range(0, len(groups), SORT_RUN):
        runs.append(sorted(groups[start:start + SORT_RUN], key=_group_id))
        if pacer.tick(SORT_RUN):
            await pacer.pause()
    response = ListGroupsResponse(error_code=error)
    for g in heapq.merge(*runs, key=_group_id):
        response.groups.append(ListGroupsResponseListedGroup(
            group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state, group_type=g.group_type))
        if pacer.tick():
            await pacer.pause()
    return response


def _group_id(group: GroupOverview) -> str:
    return group.group_id
