"""OffsetDelete (47), v0: delete a group's committed offsets for some partitions (KIP-496).

Allowed for an Empty group, or for topics a consumer group no longer
subscribes to (GROUP_SUBSCRIBED_TO_TOPIC otherwise). Partitions of unknown
topics get UNKNOWN_TOPIC_OR_PARTITION; a group-level error (GROUP_ID_NOT_FOUND,
NON_EMPTY_GROUP, NOT_COORDINATOR...) is the top-level error code with no
partitions, as Kafka answers.
"""

from __future__ import annotations

from broker.security.acl_operations import AclOperation, ResourceType, authorize, checker
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_047_offset_delete import (
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
)

API_KEY = 47
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: OffsetDeleteRequest) -> OffsetDeleteResponse:
    image = ctx.services.image
    if not authorize(ctx, AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return OffsetDeleteResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    may_read = checker(ctx, AclOperation.READ, ResourceType.TOPIC)
    errors: dict[tuple[str, int], ErrorCode] = {}
    valid: list[tuple[str, int]] = []
    for topic in request.topics:
        known = image.topic(topic.name)
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            if not may_read(topic.name):
                errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif known is None or p.partition_index not in known.partitions:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                valid.append(tp)
    group_error, results = ctx.services.group_coordinator.delete_offsets(request.group_id, valid)
    if group_error is not ErrorCode.NONE:
        return OffsetDeleteResponse(error_code=group_error)
    errors.update(results)
    response = OffsetDeleteResponse()
    for topic in request.topics:
        t = OffsetDeleteResponseTopic(name=topic.name)
        for p in topic.partitions:
            error = errors.get((topic.name, p.partition_index))
            if error is not None:
                t.partitions.append(OffsetDeleteResponsePartition(partition_index=p.partition_index,
                                                                  error_code=error))
        response.topics.append(t)
    return response
