"""AlterShareGroupOffsets (91), v0: move an empty share group's start offsets.

The share-partition restarts at the given offset with nothing in flight; -1
means the high watermark (latest), -2 the log start (earliest). A group with
members: NON_EMPTY_GROUP.
"""

from __future__ import annotations

import uuid

from broker.server.dispatch import RequestContext
from broker.share.feature import DISABLED_MESSAGE, share_groups_enabled
from wire.errors import ErrorCode
from wire.generated.api_091_alter_share_group_offsets import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
    AlterShareGroupOffsetsResponsePartition,
    AlterShareGroupOffsetsResponseTopic,
)

API_KEY = 91
MIN_VERSION = 0
MAX_VERSION = 0
LATEST = -1
EARLIEST = -2


async def handle(ctx: RequestContext, request: AlterShareGroupOffsetsRequest) -> AlterShareGroupOffsetsResponse:
    services = ctx.services
    if not share_groups_enabled(services.image):
        return AlterShareGroupOffsetsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, error_message=DISABLED_MESSAGE)
    response = AlterShareGroupOffsetsResponse()
    error, group = services.group_coordinator.share.group(request.group_id)
    if error not in (ErrorCode.NONE, ErrorCode.GROUP_ID_NOT_FOUND):
        response.error_code = error  # NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ...
        return response
    if group is not None and group.members:
        response.error_code = ErrorCode.NON_EMPTY_GROUP
        response.error_message = "The group has active members."
        return response
    for t in request.topics:
        topic = services.image.topic(t.topic_name)
        entry = AlterShareGroupOffsetsResponseTopic(topic_name=t.topic_name,
                                                    topic_id=topic.topic_id if topic is not None else None)  # type: ignore[arg-type]
        response.responses.append(entry)
        offsets = {}
        for p in t.partitions:
            local = services.replica_manager.get(t.topic_name, p.partition_index)
            if topic is None or p.partition_index not in topic.partitions or local is None:
                entry.partitions.append(AlterShareGroupOffsetsResponsePartition(
                    partition_index=p.partition_index, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            offset = {LATEST: local.high_watermark, EARLIEST: local.log_start_offset}.get(
                p.start_offset, p.start_offset)
            if not local.log_start_offset <= offset <= local.high_watermark:
                entry.partitions.append(AlterShareGroupOffsetsResponsePartition(
                    partition_index=p.partition_index, error_code=ErrorCode.OFFSET_OUT_OF_RANGE))
                continue
            offsets[(topic.topic_id, p.partition_index)] = offset
        results: dict[tuple[uuid.UUID, int], ErrorCode] = {}
        if offsets:
            # The group (at its group coordinator) covers them, then their state restarts.
            error = services.group_coordinator.share.cover_for_reset(request.group_id, offsets)
            results = ({tp: error for tp in offsets} if error is not ErrorCode.NONE
                       else await services.share_coordinator.reset_offsets(request.group_id, offsets))
        for (_, partition), code in results.items():
            entry.partitions.append(AlterShareGroupOffsetsResponsePartition(partition_index=partition, error_code=code))
    return response
