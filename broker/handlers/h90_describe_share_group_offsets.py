"""DescribeShareGroupOffsets (90), v0-1: each share-partition's start offset and lag.

At the group's coordinator (which knows the share-partitions the group covers). The
start offset is the first record not yet accepted or archived, as the share
coordinator keeps it (ReadShareGroupStateSummary through the persister); the lag counts
the offsets from there to the high watermark (when this broker leads the partition). A partition the group never read
answers start offset -1. v1 (4.3) may ask for every topic (Topics null).
"""

from __future__ import annotations

from broker.server.dispatch import RequestContext
from broker.share.feature import DISABLED_MESSAGE, share_groups_enabled
from wire.errors import ErrorCode
from wire.generated.api_090_describe_share_group_offsets import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsResponseGroup,
    DescribeShareGroupOffsetsResponsePartition,
    DescribeShareGroupOffsetsResponseTopic,
)

API_KEY = 90
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: DescribeShareGroupOffsetsRequest) -> DescribeShareGroupOffsetsResponse:
    services = ctx.services
    image = services.image
    if not share_groups_enabled(image):
        return DescribeShareGroupOffsetsResponse(groups=[DescribeShareGroupOffsetsResponseGroup(
            group_id=g.group_id, error_code=ErrorCode.UNSUPPORTED_VERSION, error_message=DISABLED_MESSAGE)
            for g in request.groups])
    response = DescribeShareGroupOffsetsResponse()
    for g in request.groups:
        out = DescribeShareGroupOffsetsResponseGroup(group_id=g.group_id)
        response.groups.append(out)
        error, group = services.group_coordinator.share.group(g.group_id)
        if group is None:
            out.error_code = error
            out.error_message = f"Group {g.group_id} not found." if error is ErrorCode.GROUP_ID_NOT_FOUND else None
            continue
        if g.topics is None:
            wanted: dict[str, list[int]] = {}
            for topic_id, partition in sorted(group.state_partitions):
                t = image.topics_by_id.get(topic_id)
                if t is not None:
                    wanted.setdefault(t.name, []).append(partition)
        else:
            wanted = {t.topic_name: list(t.partitions) for t in g.topics}
        for name, partitions in sorted(wanted.items()):
            topic = image.topic(name)
            entry = DescribeShareGroupOffsetsResponseTopic(topic_name=name,
                                                           topic_id=topic.topic_id if topic is not None else None)  # type: ignore[arg-type]
            out.topics.append(entry)
            for p in partitions:
                pd = DescribeShareGroupOffsetsResponsePartition(partition_index=p, start_offset=-1, leader_epoch=-1)
                entry.partitions.append(pd)
                if topic is None or p not in topic.partitions:
                    pd.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                summary = await services.share_coordinator.persister.read_summary((g.group_id, topic.topic_id, p))
                if summary.error is not ErrorCode.NONE:
                    pd.error_code = summary.error
                    continue
                if summary.start_offset < 0:
                    continue
                pd.start_offset = summary.start_offset
                pd.leader_epoch = topic.partitions[p].leader_epoch
                local = services.replica_manager.get(name, p)
                if local is not None:
                    pd.lag = max(local.high_watermark - summary.start_offset, 0)
    return response
