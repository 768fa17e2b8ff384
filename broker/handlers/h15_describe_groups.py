"""DescribeGroups (15), v0-6: state, protocol and members of groups.

Member metadata and assignments are filled in only while the group is Stable,
as Kafka does. A group this coordinator does not know is described as
``Dead`` without an error, and so is a consumer-protocol group (Kafka 4: it is not a
classic group; ConsumerGroupDescribe describes it). v3 can ask for the authorized operations: with no
authorizer every operation a group supports (READ, DELETE, DESCRIBE); v4 adds
the members' group instance ids. v6 (KIP-1043) answers a group that is not there (or not
a classic group) GROUP_ID_NOT_FOUND ("Group X is not a classic group." for a consumer-protocol group), still
described as ``Dead``.
"""

from __future__ import annotations

from broker.group.group import GroupState
from broker.security.acl_operations import (
    OPERATIONS_NOT_REQUESTED,
    AclOperation,
    ResourceType,
    authorize,
    authorized_operations,
)
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_015_describe_groups import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeGroupsResponseDescribedGroup,
    DescribeGroupsResponseDescribedGroupMember,
)

API_KEY = 15
MIN_VERSION = 0
MAX_VERSION = 6


async def handle(ctx: RequestContext, request: DescribeGroupsRequest) -> DescribeGroupsResponse:
    coordinator = ctx.services.group_coordinator
    include_operations = ctx.api_version >= 3 and request.include_authorized_operations
    response = DescribeGroupsResponse()
    pacer = ctx.pacer
    for group_id in request.groups:
        if pacer.tick():
            await pacer.pause()
        if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            response.groups.append(DescribeGroupsResponseDescribedGroup(
                error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=group_id, group_state="",
                protocol_type="", protocol_data="", authorized_operations=OPERATIONS_NOT_REQUESTED))
            continue
        _, share_group = coordinator.share.group(group_id)
        if share_group is not None:
            # A share group: its state, type "share", members without protocol data.
            response.groups.append(DescribeGroupsResponseDescribedGroup(
                group_id=group_id, group_state=share_group.state, protocol_type="share",
                members=[DescribeGroupsResponseDescribedGroupMember(
                    member_id=m.member_id, client_id=m.client_id, client_host=m.client_host)
                    for m in share_group.members.values()],
                authorized_operations=(authorized_operations(ctx, ResourceType.GROUP, group_id) if include_operations
                                       else OPERATIONS_NOT_REQUESTED)))
            continue
        error, summary = coordinator.describe_group(group_id)
        message = None
        if ctx.api_version >= 6 and error is ErrorCode.NONE and summary.state == GroupState.DEAD.value:
            _, consumer_group = coordinator.describe_consumer_group(group_id)
            error, message = ErrorCode.GROUP_ID_NOT_FOUND, (
                f"Group {group_id} is not a classic group." if consumer_group is not None
                else f"Group {group_id} not found.")
        response.groups.append(DescribeGroupsResponseDescribedGroup(
            error_code=error,
            error_message=message,
            group_id=group_id,
            group_state=summary.state,
            protocol_type=summary.protocol_type,
            protocol_data=summary.protocol,
            members=[DescribeGroupsResponseDescribedGroupMember(
                member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                client_host=m.client_host, member_metadata=m.metadata, member_assignment=m.assignment)
                for m in summary.members],
            authorized_operations=(authorized_operations(ctx, ResourceType.GROUP, group_id)
                                   if include_operations and not error
                                   else OPERATIONS_NOT_REQUESTED),
        ))
    return response
