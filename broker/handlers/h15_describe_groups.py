"""DescribeGroups (15), v0-5: state, protocol and members of groups.

Member metadata and assignments are filled in only while the group is Stable,
as Kafka does. A group this coordinator does not know is described as
``Dead`` without an error. v3 can ask for the authorized operations: with no
authorizer every operation a group supports (READ, DELETE, DESCRIBE); v4 adds
the members' group instance ids.
"""

from __future__ import annotations

from broker.dispatch import RequestContext
from wire.generated.api_015_describe_groups import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeGroupsResponseDescribedGroup,
    DescribeGroupsResponseDescribedGroupMember,
)

API_KEY = 15
MIN_VERSION = 0
MAX_VERSION = 5

# AclOperation codes of the GROUP resource: READ (3), DELETE (6), DESCRIBE (8).
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
OPERATIONS_NOT_REQUESTED = -(2**31)


async def handle(ctx: RequestContext, request: DescribeGroupsRequest) -> DescribeGroupsResponse:
    coordinator = ctx.node.group_coordinator
    include_operations = ctx.api_version >= 3 and request.include_authorized_operations
    response = DescribeGroupsResponse()
    pacer = ctx.pacer
    for group_id in request.groups:
        if pacer.tick():
            await pacer.pause()
        error, summary = coordinator.describe_group(group_id)
        response.groups.append(DescribeGroupsResponseDescribedGroup(
            error_code=error,
            group_id=group_id,
            group_state=summary.state,
            protocol_type=summary.protocol_type,
            protocol_data=summary.protocol,
            members=[DescribeGroupsResponseDescribedGroupMember(
                member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                client_host=m.client_host, member_metadata=m.metadata, member_assignment=m.assignment)
                for m in summary.members],
            authorized_operations=(GROUP_AUTHORIZED_OPERATIONS if include_operations and not error
                                   else OPERATIONS_NOT_REQUESTED),
        ))
    return response
