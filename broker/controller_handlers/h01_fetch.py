"""Fetch (1), v4-16, on the controller listener: brokers follow the metadata log.

Only ``__cluster_metadata`` partition 0 is served (by name before v13, by its
fixed topic id from v13). Brokers fetch as KRaft observers: ``replica_id``
(``replica_state`` from v15) names the broker, and the controller reports its
fetch offset in DescribeQuorum. Records come back as record batches whose
values are framed metadata records, up to the committed end (the high
watermark); a fetch at the end waits up to ``max_wait_ms`` for more. An offset
older than the records the controller still holds gets ``snapshot_id`` (v12+;
OFFSET_OUT_OF_RANGE before), and the broker loads the image with FetchSnapshot.
Every controller answers from its own committed log, which never disagrees with
another's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.cluster.controller_channel import CLUSTER_METADATA_TOPIC, METADATA_TOPIC_ID
from broker.controller_handlers._common import controller_role
from broker.server.dispatch import RequestContext
from controller.snapshot import encode_record_batches
from wire.errors import ErrorCode
from wire.generated.api_001_fetch import (
    FetchRequest,
    FetchRequestFetchPartition,
    FetchResponse,
    FetchResponseFetchableTopicResponse,
    FetchResponseLeaderIdAndEpoch,
    FetchResponsePartitionData,
    FetchResponseSnapshotId,
)

if TYPE_CHECKING:
    from broker.cluster.cluster_mode import ControllerRole

API_KEY = 1
MIN_VERSION = 4
MAX_VERSION = 16

#: Records returned by one fetch at most (metadata records are small).
MAX_RECORDS_PER_FETCH = 2000
#: Longest wait a fetch may ask for.
MAX_WAIT_S = 5.0


async def handle(ctx: RequestContext, request: FetchRequest) -> FetchResponse:
    role = controller_role(ctx)
    by_id = ctx.api_version >= 13
    replica = request.replica_state.replica_id if ctx.api_version >= 15 else request.replica_id
    response = FetchResponse()
    for topic in request.topics:
        out = FetchResponseFetchableTopicResponse(topic=topic.topic, topic_id=topic.topic_id)
        response.responses.append(out)
        is_metadata = topic.topic_id == METADATA_TOPIC_ID if by_id else topic.topic == CLUSTER_METADATA_TOPIC
        for p in topic.partitions:
            if not is_metadata or p.partition != 0:
                unknown = ErrorCode.UNKNOWN_TOPIC_ID if by_id and not is_metadata else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                out.partitions.append(FetchResponsePartitionData(partition_index=p.partition, error_code=unknown,
                                                                 records=b""))
                continue
            out.partitions.append(await _fetch(ctx, role, p, request.max_wait_ms, replica))
    return response


async def _fetch(ctx: RequestContext, role: ControllerRole, p: FetchRequestFetchPartition, max_wait_ms: int,
                 replica: int) -> FetchResponsePartitionData:
    quorum = role.quorum
    offset = p.fetch_offset
    if offset >= quorum.end_offset and max_wait_ms > 0:
        await quorum.wait_for_records(offset, min(max_wait_ms / 1000, MAX_WAIT_S))
    quorum.record_observer(replica, offset)
    status = quorum.describe()
    data = FetchResponsePartitionData(
        partition_index=0,
        high_watermark=quorum.end_offset,
        last_stable_offset=quorum.end_offset,
        log_start_offset=quorum.log_start_offset,
        current_leader=FetchResponseLeaderIdAndEpoch(leader_id=status.leader_id, leader_epoch=status.epoch),
        records=b"",
    )
    if offset < quorum.log_start_offset:
        if ctx.api_version >= 12:
            data.snapshot_id = FetchResponseSnapshotId(end_offset=quorum.log_start_offset, epoch=0)
        else:
            data.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
        return data
    records = quorum.read(offset, MAX_RECORDS_PER_FETCH)
    if records:
        data.records = encode_record_batches([record for _, record in records], records[0][0])
    return data
