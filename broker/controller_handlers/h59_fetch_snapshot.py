"""FetchSnapshot (59), v0-1: a broker loads the metadata image it is too far behind for.

The snapshot is the image at the controller's oldest retained offset, written
as metadata records in record batches (:func:`controller.snapshot.image_records`);
its id's ``end_offset`` is that offset, which Fetch named in ``snapshot_id``.
Another id is SNAPSHOT_NOT_FOUND (the broker fetches again and learns the
current one); a position past the end is POSITION_OUT_OF_RANGE. Large
snapshots come in chunks of at most ``max_bytes``.
"""

from __future__ import annotations

from broker.cluster.controller_channel import CLUSTER_METADATA_TOPIC
from broker.controller_handlers._common import controller_role
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_059_fetch_snapshot import (
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    FetchSnapshotResponseLeaderIdAndEpoch,
    FetchSnapshotResponsePartitionSnapshot,
    FetchSnapshotResponseSnapshotId,
    FetchSnapshotResponseTopicSnapshot,
)

API_KEY = 59
MIN_VERSION = 0
MAX_VERSION = 1

MAX_CHUNK_BYTES = 4 * 1024 * 1024


async def handle(ctx: RequestContext, request: FetchSnapshotRequest) -> FetchSnapshotResponse:
    role = controller_role(ctx)
    quorum = role.quorum
    status = quorum.describe()
    response = FetchSnapshotResponse()
    for topic in request.topics:
        out = FetchSnapshotResponseTopicSnapshot(name=topic.name)
        response.topics.append(out)
        for p in topic.partitions:
            data = FetchSnapshotResponsePartitionSnapshot(
                index=p.partition,
                current_leader=FetchSnapshotResponseLeaderIdAndEpoch(leader_id=status.leader_id,
                                                                     leader_epoch=status.epoch),
                unaligned_records=b"",
            )
            out.partitions.append(data)
            if topic.name != CLUSTER_METADATA_TOPIC or p.partition != 0:
                data.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            end_offset, snapshot = role.snapshot_bytes()
            if p.snapshot_id.end_offset != end_offset:
                data.error_code = ErrorCode.SNAPSHOT_NOT_FOUND
                continue
            if p.position < 0 or p.position > len(snapshot):
                data.error_code = ErrorCode.POSITION_OUT_OF_RANGE
                continue
            chunk = snapshot[p.position : p.position + max(1, min(request.max_bytes, MAX_CHUNK_BYTES))]
            data.snapshot_id = FetchSnapshotResponseSnapshotId(end_offset=end_offset, epoch=0)
            data.size = len(snapshot)
            data.position = p.position
            data.unaligned_records = chunk
    return response
