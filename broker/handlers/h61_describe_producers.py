"""DescribeProducers (61), v0: the idempotent and transactional producers a partition
leader knows (KIP-664): id, epoch, last sequence and timestamp, coordinator
epoch of the last marker and the first offset of an open transaction (-1 if none).
"""

from __future__ import annotations

from broker.security.acl_operations import AclOperation, ResourceType, authorize
from broker.server.dispatch import RequestContext
from controller.service import validate_topic_name
from wire.errors import ErrorCode
from wire.generated.api_061_describe_producers import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeProducersResponsePartitionResponse,
    DescribeProducersResponseProducerState,
    DescribeProducersResponseTopicResponse,
)

API_KEY = 61
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: DescribeProducersRequest) -> DescribeProducersResponse:
    services = ctx.services
    rm = services.replica_manager
    response = DescribeProducersResponse()
    for topic in request.topics:
        t_resp = DescribeProducersResponseTopicResponse(name=topic.name)
        response.topics.append(t_resp)
        invalid = validate_topic_name(topic.name)
        topic_error: tuple[ErrorCode, str | None] | None = None
        if not authorize(ctx, AclOperation.READ, ResourceType.TOPIC, topic.name):
            topic_error = (ErrorCode.TOPIC_AUTHORIZATION_FAILED, None)
        elif invalid is not None:
            topic_error = (ErrorCode.INVALID_TOPIC_EXCEPTION, invalid)
        elif services.image.topic(topic.name) is None:
            topic_error = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.description)
        for index in topic.partition_indexes:
            p_resp = DescribeProducersResponsePartitionResponse(partition_index=index)
            t_resp.partitions.append(p_resp)
            if topic_error is not None:
                p_resp.error_code, p_resp.error_message = topic_error
                continue
            partition = rm.get(topic.name, index)
            if partition is None:
                t = services.image.topic(topic.name)
                known = t is not None and index in t.partitions
                p_resp.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if not rm.is_leader(partition):
                p_resp.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                continue
            p_resp.active_producers = [
                DescribeProducersResponseProducerState(
                    producer_id=p.producer_id, producer_epoch=p.producer_epoch, last_sequence=p.last_sequence,
                    last_timestamp=p.last_timestamp, coordinator_epoch=p.coordinator_epoch,
                    current_txn_start_offset=p.current_txn_start_offset)
                for p in partition.producer_state.active_producers()
            ]
    return response
