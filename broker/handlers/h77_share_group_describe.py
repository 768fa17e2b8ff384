"""ShareGroupDescribe (77), v1: share groups with their members and assignments, at their
group coordinator (the leader of the group's ``__consumer_offsets`` partition)."""

from __future__ import annotations

import uuid

from broker.server.dispatch import RequestContext
from broker.share.feature import DISABLED_MESSAGE, share_groups_enabled
from wire.errors import ErrorCode
from wire.generated.api_077_share_group_describe import (
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    ShareGroupDescribeResponseAssignment,
    ShareGroupDescribeResponseDescribedGroup,
    ShareGroupDescribeResponseMember,
    ShareGroupDescribeResponseTopicPartitions,
)

API_KEY = 77
MIN_VERSION = 1
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: ShareGroupDescribeRequest) -> ShareGroupDescribeResponse:
    image = ctx.services.image
    if not share_groups_enabled(image):
        return ShareGroupDescribeResponse(groups=[ShareGroupDescribeResponseDescribedGroup(
            group_id=g, error_code=ErrorCode.UNSUPPORTED_VERSION, error_message=DISABLED_MESSAGE)
            for g in request.group_ids])
    response = ShareGroupDescribeResponse()
    for group_id in request.group_ids:
        error, group = ctx.services.group_coordinator.share.group(group_id)
        if group is None:
            message = None
            if error is ErrorCode.GROUP_ID_NOT_FOUND:
                _, summary = ctx.services.group_coordinator.describe_group(group_id)
                _, consumer_group = ctx.services.group_coordinator.describe_consumer_group(group_id)
                other = consumer_group is not None or summary.state not in ("", "Dead")
                message = f"Group {group_id} is not a share group." if other else f"Group {group_id} not found."
            response.groups.append(ShareGroupDescribeResponseDescribedGroup(
                group_id=group_id, error_code=error, error_message=message, group_state="Dead"))
            continue
        described = ShareGroupDescribeResponseDescribedGroup(
            group_id=group_id, group_state=group.state, group_epoch=group.group_epoch,
            assignment_epoch=group.group_epoch, assignor_name="simple")
        for m in group.members.values():
            by_topic: dict[uuid.UUID, list[int]] = {}
            for topic_id, partition in sorted(m.assignment):
                by_topic.setdefault(topic_id, []).append(partition)
            tps = []
            for topic_id, parts in by_topic.items():
                topic = image.topics_by_id.get(topic_id)
                tps.append(ShareGroupDescribeResponseTopicPartitions(
                    topic_id=topic_id, topic_name=topic.name if topic is not None else "",
                    partitions=parts))
            described.members.append(ShareGroupDescribeResponseMember(
                member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch, client_id=m.client_id,
                client_host=m.client_host, subscribed_topic_names=sorted(m.subscribed_topics),
                assignment=ShareGroupDescribeResponseAssignment(topic_partitions=tps)))
        response.groups.append(described)
    return response
