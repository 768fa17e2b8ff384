"""DeleteRecords (21), v0-2: move partitions' log start offsets forward.

Each partition's log start offset becomes the requested offset (-1 means the
high watermark); segments wholly below it are deleted, and the answer's
``low_watermark`` is the new log start offset. As Kafka's ReplicaManager: an
unknown partition is UNKNOWN_TOPIC_OR_PARTITION; internal topics refuse with
INVALID_TOPIC_EXCEPTION; only the leader deletes (NOT_LEADER_OR_FOLLOWER); a
topic whose cleanup.policy lacks ``delete`` is POLICY_VIOLATION; an offset
below -1 or beyond the high watermark is OFFSET_OUT_OF_RANGE. An offset below
the current log start changes nothing. A partition named twice is answered
once, for its last offset. Failed partitions answer low watermark -1.

The answer does not wait for followers to trim their logs: they follow the
leader's log start offset as they fetch. v2 is flexible.
"""

from __future__ import annotations

import structlog

from broker.eventloop.pacing import discard
from broker.handlers.h02_list_offsets import PartitionError, hosted_partition, local_log_for
from broker.log.errors import OffsetOutOfRangeError
from broker.security.acl_operations import AclOperation, ResourceType, checker
from broker.server.dispatch import RequestContext
from controller.image import INTERNAL_TOPICS
from wire.errors import ErrorCode
from wire.generated.api_021_delete_records import (
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteRecordsResponseDeleteRecordsPartitionResult,
    DeleteRecordsResponseDeleteRecordsTopicResult,
)

API_KEY = 21
MIN_VERSION = 0
MAX_VERSION = 2

log = structlog.get_logger(__name__)

HIGH_WATERMARK = -1
INVALID_LOW_WATERMARK = -1


async def handle(ctx: RequestContext, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    # A map by topic and partition, as Kafka builds it: the last offset named wins.
    wanted: dict[str, dict[int, int]] = {}
    pacer = ctx.pacer
    for topic in request.topics:
        offsets = wanted.setdefault(topic.name, {})
        for p in topic.partitions:
            offsets[p.partition_index] = p.offset
            if pacer.tick():
                await pacer.pause()
    response = DeleteRecordsResponse()
    may_delete = checker(ctx, AclOperation.DELETE, ResourceType.TOPIC)
    for name, partitions in wanted.items():
        t_resp = DeleteRecordsResponseDeleteRecordsTopicResult(name=name)
        response.topics.append(t_resp)
        for index, offset in partitions.items():
            if pacer.tick():
                await pacer.pause()
            out = DeleteRecordsResponseDeleteRecordsPartitionResult(
                partition_index=index, low_watermark=INVALID_LOW_WATERMARK
            )
            t_resp.partitions.append(out)
            if not may_delete(name):
                out.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            try:
                out.low_watermark = _delete(ctx, name, index, offset)
            except PartitionError as ex:
                out.error_code = ex.code
                ctx.services.log_client_error("delete_records_failed", topic=name, partition=index, offset=offset,
                                              error=ex.code.name, reason=ex.message, client_id=ctx.client_id)
        await discard(pacer, partitions)
    return response


def _delete(ctx: RequestContext, topic: str, index: int, offset: int) -> int:
    known = ctx.services.image.topic(topic)
    if known is None or index not in known.partitions:
        raise PartitionError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    if topic in INTERNAL_TOPICS:
        raise PartitionError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot delete records of internal topic {topic}")
    partition = local_log_for(ctx, hosted_partition(ctx, topic, index), None, require_leader=True)
    if not partition.config.delete_enabled:
        raise PartitionError(
            ErrorCode.POLICY_VIOLATION,
            f"Records of partition {topic}-{index} can not be deleted due to the configured policy",
        )
    hw = partition.high_watermark
    target = hw if offset == HIGH_WATERMARK else offset
    if target < 0:
        raise PartitionError(ErrorCode.OFFSET_OUT_OF_RANGE, f"The offset {target} for partition {topic}-{index} is not valid")
    before = partition.log_start_offset
    try:
        log_start = partition.log.delete_records_before(target, hw)
    except OffsetOutOfRangeError as ex:
        raise PartitionError(
            ErrorCode.OFFSET_OUT_OF_RANGE,
            f"Cannot increment the log start offset to {target} of partition {topic}-{index} "
            f"since it is larger than the high watermark {hw}",
        ) from ex
    except OSError as ex:
        log.error("delete_records_storage_error", topic=topic, partition=index, error=str(ex))
        raise PartitionError(ErrorCode.KAFKA_STORAGE_ERROR) from ex
    if log_start != before:
        log.info("records_deleted", topic=topic, partition=index, log_start_offset=log_start,
                 client_id=ctx.client_id)
    return log_start
