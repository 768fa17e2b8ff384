"""ConsumerGroupDescribe (69), v0-1: consumer-protocol groups, their members and assignments.

A group that does not exist, or is a classic group, gets GROUP_ID_NOT_FOUND
(the admin client then falls back to DescribeGroups). Each member comes with
its current and its target assignment; v1 (KIP-1099) adds the member type:
1, a consumer-protocol member, 0 a classic member of a group being migrated. Authorized operations as DescribeGroups gives
them.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from broker.security.acl_operations import (
    OPERATIONS_NOT_REQUESTED,
    ResourceType,
    authorized_operations,
)
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_069_consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupDescribeResponseAssignment,
    ConsumerGroupDescribeResponseDescribedGroup,
    ConsumerGroupDescribeResponseMember,
    ConsumerGroupDescribeResponseTopicPartitions,
)

API_KEY = 69
MIN_VERSION = 0
MAX_VERSION = 1

CLASSIC_MEMBER_TYPE = 0
CONSUMER_MEMBER_TYPE = 1


async def handle(ctx: RequestContext, request: ConsumerGroupDescribeRequest) -> ConsumerGroupDescribeResponse:
    coordinator = ctx.services.group_coordinator
    names = {tid: name for name, tid in ctx.services.image.topic_ids.items()}

    def assignment(a: Mapping[uuid.UUID, frozenset[int]]) -> ConsumerGroupDescribeResponseAssignment:
        return ConsumerGroupDescribeResponseAssignment(topic_partitions=[
            ConsumerGroupDescribeResponseTopicPartitions(topic_id=t, topic_name=names.get(t, ""),
                                                         partitions=sorted(ps))
            for t, ps in sorted(a.items())])

    response = ConsumerGroupDescribeResponse()
    for group_id in request.group_ids:
        error, group = coordinator.describe_consumer_group(group_id)
        if group is None:
            message = None
            if error is ErrorCode.GROUP_ID_NOT_FOUND:
                share_group = coordinator.share.group(group_id)[1] is not None
                message = f"Group {group_id} is not a consumer group." if share_group else f"Group {group_id} not found."
            response.groups.append(ConsumerGroupDescribeResponseDescribedGroup(
                group_id=group_id, error_code=error, error_message=message))
            continue
        response.groups.append(ConsumerGroupDescribeResponseDescribedGroup(
            group_id=group_id,
            group_state=group.state.value,
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=group.assignor,
            members=[ConsumerGroupDescribeResponseMember(
                member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                client_id=m.client_id, client_host=m.client_host,
                subscribed_topic_names=list(m.subscribed_topic_names), subscribed_topic_regex=m.subscribed_topic_regex,
                assignment=assignment(m.assigned), target_assignment=assignment(group.target.get(m.member_id, {})),
                member_type=CLASSIC_MEMBER_TYPE if m.classic is not None else CONSUMER_MEMBER_TYPE)
                for m in sorted(group.members.values(), key=lambda m: m.member_id)],
            authorized_operations=(authorized_operations(ctx, ResourceType.GROUP, group_id)
                                   if request.include_authorized_operations
                                   else OPERATIONS_NOT_REQUESTED),
        ))
    return response
