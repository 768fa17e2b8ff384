"""ListOffsets (2), v0-11: offsets by timestamp, from the partition leader's log.

Targets (Kafka's ``ListOffsetsRequest`` constants): EARLIEST (-2) is the log
start offset; LATEST (-1) the high watermark for consumers (the last stable
offset under read_committed, v2+; the log end offset for a follower's
``replica_id``); MAX_TIMESTAMP (-3, v7+) the first record holding the largest
timestamp (KIP-734); EARLIEST_LOCAL (-4, v8+) the log start offset, as there is
no tiered storage; LATEST_TIERED (-5, v9+) and EARLIEST_PENDING_UPLOAD (-6, v11+, KIP-1023)
-1 with leader epoch -1, as Kafka answers without tiered storage (v10's timeout
bounds remote reads, of which there are none here). A timestamp finds the first record whose
timestamp is at or above it (the time index narrows the scan; the batch is
decoded for the exact record). Lookups that land at or past the last offset a
client may read answer -1/-1, so nothing beyond the high watermark leaks.

v0 answers ``old_style_offsets``: up to ``max_num_offsets`` segment base
offsets at or before the timestamp, newest first (Kafka's
``legacyFetchOffsetsBefore``). v1+ answer one timestamp and offset; a special
target the request version is too old for gets UNSUPPORTED_VERSION, and a
partition named twice gets INVALID_REQUEST. v4+ fence with
``current_leader_epoch`` (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH) and
return the leader epoch of the answer. A leader whose high watermark has not
reached the start of its epoch answers OFFSET_NOT_AVAILABLE (v5+) or
LEADER_NOT_AVAILABLE (older).
"""

from __future__ import annotations

import structlog

from broker.eventloop.pacing import discard
from broker.replication.replica_manager import Partition
from broker.security.acl_operations import AclOperation, ResourceType, checker
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.exceptions import CorruptRecordError
from wire.generated.api_002_list_offsets import (
    ListOffsetsRequest,
    ListOffsetsRequestListOffsetsPartition,
    ListOffsetsResponse,
    ListOffsetsResponseListOffsetsPartitionResponse,
    ListOffsetsResponseListOffsetsTopicResponse,
)
from wire.records import NO_TIMESTAMP

API_KEY = 2
MIN_VERSION = 0
MAX_VERSION = 11

log = structlog.get_logger(__name__)

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6
#: Lowest request version allowed to ask for each special target.
TARGET_MIN_VERSION = {
    EARLIEST_TIMESTAMP: 1,
    LATEST_TIMESTAMP: 1,
    MAX_TIMESTAMP: 7,
    EARLIEST_LOCAL_TIMESTAMP: 8,
    LATEST_TIERED_TIMESTAMP: 9,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP: 11,
}
CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2
READ_COMMITTED = 1
UNKNOWN_EPOCH = -1


class PartitionError(Exception):
    """A per-partition failure answered with ``code`` (Kafka's ApiException at the edge)."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


def hosted_partition(ctx: RequestContext, topic: str, index: int) -> Partition:
    """The local replica of ``topic``-``index`` (Kafka's getPartitionOrException).

    A partition the cluster has but this broker does not host is NOT_LEADER_OR_FOLLOWER;
    one the cluster does not know is UNKNOWN_TOPIC_OR_PARTITION.
    """
    partition = ctx.services.replica_manager.get(topic, index)
    if partition is not None:
        return partition
    known = ctx.services.image.topic(topic)
    if known is not None and index in known.partitions:
        raise PartitionError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    raise PartitionError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


def check_leader_epoch(partition: Partition, current_leader_epoch: int | None) -> ErrorCode:
    """Kafka's checkCurrentLeaderEpoch: the requester's idea of the epoch against ours."""
    if current_leader_epoch is None or current_leader_epoch == UNKNOWN_EPOCH:
        return ErrorCode.NONE
    if partition.leader_epoch > current_leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    if partition.leader_epoch < current_leader_epoch:
        return ErrorCode.UNKNOWN_LEADER_EPOCH
    return ErrorCode.NONE


def local_log_for(
    ctx: RequestContext, partition: Partition, current_leader_epoch: int | None, require_leader: bool
) -> Partition:
    """Kafka's Partition.getLocalLog: epoch fencing first, then leadership."""
    error = check_leader_epoch(partition, current_leader_epoch)
    if error != ErrorCode.NONE:
        raise PartitionError(error)
    if require_leader and not ctx.services.replica_manager.is_leader(partition):
        raise PartitionError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    return partition


async def handle(ctx: RequestContext, request: ListOffsetsRequest) -> ListOffsetsResponse:
    response = ListOffsetsResponse()
    seen: set[tuple[str, int]] = set()
    duplicates: set[tuple[str, int]] = set()
    pacer = ctx.pacer
    for topic in request.topics:
        for p in topic.partitions:
            key = (topic.name, p.partition_index)
            (duplicates if key in seen else seen).add(key)
            if pacer.tick():
                await pacer.pause()
    may_describe = checker(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC)
    for topic in request.topics:
        t_resp = ListOffsetsResponseListOffsetsTopicResponse(name=topic.name)
        response.topics.append(t_resp)
        for p in topic.partitions:
            if pacer.tick():
                await pacer.pause()
            if not may_describe(topic.name):
                t_resp.partitions.append(_error(p, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            elif ctx.api_version == 0:
                t_resp.partitions.append(_list_v0(ctx, request, topic.name, p))
            elif (topic.name, p.partition_index) in duplicates:
                t_resp.partitions.append(_error(p, ErrorCode.INVALID_REQUEST))
            else:
                t_resp.partitions.append(_list(ctx, request, topic.name, p))
    await discard(pacer, seen, duplicates)
    return response


def _error(p: ListOffsetsRequestListOffsetsPartition, code: ErrorCode) -> ListOffsetsResponseListOffsetsPartitionResponse:
    return ListOffsetsResponseListOffsetsPartitionResponse(
        partition_index=p.partition_index, error_code=code, timestamp=NO_TIMESTAMP, offset=-1
    )


def _list(
    ctx: RequestContext, request: ListOffsetsRequest, topic: str, p: ListOffsetsRequestListOffsetsPartition
) -> ListOffsetsResponseListOffsetsPartitionResponse:
    version = ctx.api_version
    target = p.timestamp
    if target < 0 and version < TARGET_MIN_VERSION.get(target, 1 << 15):
        return _error(p, ErrorCode.UNSUPPORTED_VERSION)
    is_consumer = request.replica_id == CONSUMER_REPLICA_ID
    try:
        partition = hosted_partition(ctx, topic, p.partition_index)
        local_log_for(
            ctx,
            partition,
            p.current_leader_epoch if version >= 4 else None,
            require_leader=request.replica_id != DEBUGGING_REPLICA_ID,
        )
        found = _read_offset(partition, target, is_consumer, request.isolation_level == READ_COMMITTED)
    except PartitionError as ex:
        code = ex.code
        if code == ErrorCode.OFFSET_NOT_AVAILABLE and version < 5:
            code = ErrorCode.LEADER_NOT_AVAILABLE
        ctx.services.log_client_error("list_offsets_failed", topic=topic, partition=p.partition_index,
                                      error=code.name, client_id=ctx.client_id)
        return _error(p, code)
    if found is None:
        return _error(p, ErrorCode.NONE)
    timestamp, offset, leader_epoch = found
    out = ListOffsetsResponseListOffsetsPartitionResponse(
        partition_index=p.partition_index, timestamp=timestamp, offset=offset
    )
    if leader_epoch is not None and version >= 4:
        out.leader_epoch = leader_epoch
    return out


def _read_offset(
    partition: Partition, target: int, is_consumer: bool, read_committed: bool
) -> tuple[int, int, int | None] | None:
    """:func:`_offset_for_timestamp`, with storage failures answered for this partition only."""
    try:
        return _offset_for_timestamp(partition, target, is_consumer, read_committed)
    except CorruptRecordError as ex:
        log.error("list_offsets_corrupt_log", topic=partition.topic, partition=partition.index, error=str(ex))
        raise PartitionError(ErrorCode.CORRUPT_MESSAGE) from ex
    except OSError as ex:
        log.error("list_offsets_storage_error", topic=partition.topic, partition=partition.index, error=str(ex))
        raise PartitionError(ErrorCode.KAFKA_STORAGE_ERROR) from ex


def _offset_for_timestamp(
    partition: Partition, target: int, is_consumer: bool, read_committed: bool
) -> tuple[int, int, int | None] | None:
    """(timestamp, offset, leader epoch) for ``target``, as Partition.fetchOffsetForTimestamp.

    None means "no such offset" (answered -1/-1 without an error).
    """
    plog = partition.log
    hw = partition.high_watermark
    if not is_consumer:
        last_fetchable = plog.log_end_offset
    elif read_committed:
        last_fetchable = partition.last_stable_offset
    else:
        last_fetchable = hw
    not_available: PartitionError | None = None
    epoch_start = _leader_epoch_start_offset(partition)
    if is_consumer and epoch_start is not None and epoch_start > hw:
        not_available = PartitionError(
            ErrorCode.OFFSET_NOT_AVAILABLE,
            f"high watermark {hw} is behind the start offset {epoch_start} of leader epoch {partition.leader_epoch}",
        )
    if target == LATEST_TIMESTAMP:
        if not_available is not None:
            raise not_available
        return NO_TIMESTAMP, last_fetchable, partition.leader_epoch
    cache = plog.leader_epoch_cache
    if target in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        start = plog.log_start_offset
        if target == EARLIEST_TIMESTAMP:
            earliest = cache.earliest_entry
            epoch = earliest.epoch if earliest is not None and earliest.start_offset <= start else None
        else:
            epoch = cache.epoch_for_offset(start)
        return NO_TIMESTAMP, start, epoch
    if target in (LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP):
        # Without tiered storage Kafka answers offset -1 with leader epoch -1.
        result: tuple[int, int, int | None] | None = (NO_TIMESTAMP, -1, -1)
    elif target == MAX_TIMESTAMP:
        found = plog.max_timestamp_offset()
        result = None if found is None else (found.timestamp, found.offset, found.leader_epoch)
    else:
        found = plog.offset_for_timestamp(target)
        result = None if found is None else (found.timestamp, found.offset, found.leader_epoch)
    if result is not None and result[1] < last_fetchable:
        return result
    if not_available is not None:
        raise not_available
    return None


def _leader_epoch_start_offset(partition: Partition) -> int | None:
    """Where this leader's epoch began in the log, if this broker leads in the current epoch."""
    latest = partition.log.leader_epoch_cache.latest_entry
    if latest is None or latest.epoch != partition.leader_epoch:
        return None
    return latest.start_offset


def _list_v0(
    ctx: RequestContext, request: ListOffsetsRequest, topic: str, p: ListOffsetsRequestListOffsetsPartition
) -> ListOffsetsResponseListOffsetsPartitionResponse:
    out = ListOffsetsResponseListOffsetsPartitionResponse(partition_index=p.partition_index)
    if p.timestamp < EARLIEST_TIMESTAMP:
        # v0 knows only LATEST and EARLIEST among the negative targets.
        out.error_code = ErrorCode.UNSUPPORTED_VERSION
        return out
    try:
        partition = hosted_partition(ctx, topic, p.partition_index)
        local_log_for(ctx, partition, None, require_leader=request.replica_id != DEBUGGING_REPLICA_ID)
    except PartitionError as ex:
        out.error_code = ex.code
        return out
    try:
        offsets = legacy_offsets_before(partition, p.timestamp, p.max_num_offsets, ctx.services.clock_ms())
    except OSError as ex:
        log.error("list_offsets_storage_error", topic=topic, partition=p.partition_index, error=str(ex))
        out.error_code = ErrorCode.KAFKA_STORAGE_ERROR
        return out
    if request.replica_id == CONSUMER_REPLICA_ID:
        hw = partition.high_watermark
        if any(o > hw for o in offsets):
            offsets = [hw] + [o for o in offsets if o <= hw]
    out.old_style_offsets = offsets
    return out


def legacy_offsets_before(partition: Partition, timestamp: int, max_num_offsets: int, now_ms: int) -> list[int]:
    """Kafka's legacyFetchOffsetsBefore: segment start offsets by segment modification time.

    Each segment contributes its base offset (at least the log start offset) and its
    last-modified time; a non-empty active segment adds the log end offset at ``now_ms``.
    """
    plog = partition.log
    segments = plog.segments
    pairs = [(max(s.base_offset, plog.log_start_offset), s.last_modified_ms) for s in segments]
    if segments and segments[-1].size > 0:
        pairs.append((plog.log_end_offset, now_ms))
    if timestamp == LATEST_TIMESTAMP:
        start = len(pairs) - 1
    elif timestamp == EARLIEST_TIMESTAMP:
        start = 0
    else:
        start = len(pairs) - 1
        while start >= 0 and pairs[start][1] > timestamp:
            start -= 1
    count = max(min(max_num_offsets, start + 1), 0)
    return sorted((pairs[start - j][0] for j in range(count)), reverse=True)
