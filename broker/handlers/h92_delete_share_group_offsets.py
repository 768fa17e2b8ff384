"""DeleteShareGroupOffsets (92), v0: an empty share group forgets its state of whole topics
(at its group coordinator, which deletes the state at the share coordinators)."""

from __future__ import annotations

from broker.server.dispatch import RequestContext
from broker.share.feature import DISABLED_MESSAGE, share_groups_enabled
from wire.errors import ErrorCode
from wire.generated.api_092_delete_share_group_offsets import (
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse,
    DeleteShareGroupOffsetsResponseTopic,
)

API_KEY = 92
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: DeleteShareGroupOffsetsRequest) -> DeleteShareGroupOffsetsResponse:
    services = ctx.services
    if not share_groups_enabled(services.image):
        return DeleteShareGroupOffsetsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION,
                                               error_message=DISABLED_MESSAGE)
    response = DeleteShareGroupOffsetsResponse()
    error, group = services.group_coordinator.share.group(request.group_id)
    if group is None:
        response.error_code = error
        return response
    if group.members:
        response.error_code = ErrorCode.NON_EMPTY_GROUP
        return response
    for t in request.topics:
        topic = services.image.topic(t.topic_name)
        entry = DeleteShareGroupOffsetsResponseTopic(topic_name=t.topic_name)
        response.responses.append(entry)
        if topic is None:
            entry.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            continue
        entry.topic_id = topic.topic_id
        entry.error_code = services.group_coordinator.share.delete_offsets(request.group_id, topic.topic_id)
    return response
