"""DescribeQuorum (55), v0-2: the metadata quorum, asked of any broker.

As a KRaft broker does, the request is forwarded to the active controller (over
the controller listener) and its answer returned: leader id, leader epoch (the
Raft term), high watermark, each voter's log end offset and, for v2, the
voters' controller endpoints. A single node asks its own controller, the only
voter of its quorum, in process (the same channel). If no controller answers in time the partition gets
NOT_LEADER_OR_FOLLOWER (6); the tool or client retries.
"""

from __future__ import annotations

from broker.cluster.controller_channel import ChannelError
from broker.security.acl_operations import AclOperation, authorize_cluster
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_055_describe_quorum import (
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    DescribeQuorumResponsePartitionData,
    DescribeQuorumResponseTopicData,
)

API_KEY = 55
MIN_VERSION = 0
MAX_VERSION = 2

CLUSTER_METADATA_TOPIC = "__cluster_metadata"
FORWARD_TIMEOUT_S = 10.0


def _not_answered(response: DescribeQuorumResponse) -> bool:
    # Only the leader answers with the voters; another controller names the leader instead.
    return any(p.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER for t in response.topics for p in t.partitions)


async def handle(ctx: RequestContext, request: DescribeQuorumRequest) -> DescribeQuorumResponse:
    services = ctx.services
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return DescribeQuorumResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    try:
        return await services.cluster.channel.send_to_active(
            request, DescribeQuorumResponse, timeout_s=FORWARD_TIMEOUT_S, not_controller=_not_answered,
            version=ctx.api_version)
    except ChannelError as ex:
        services.log_client_error("describe_quorum_not_forwarded", reason=str(ex), client_id=ctx.client_id)
        return _answer(request, ErrorCode.NOT_LEADER_OR_FOLLOWER)


def _answer(request: DescribeQuorumRequest, code: ErrorCode) -> DescribeQuorumResponse:
    """The answer when the active controller could not be asked: ``code`` for the metadata
    partition, UNKNOWN_TOPIC_OR_PARTITION for anything else named."""
    response = DescribeQuorumResponse()
    for topic in request.topics:
        out = DescribeQuorumResponseTopicData(topic_name=topic.topic_name)
        response.topics.append(out)
        for partition in topic.partitions:
            if topic.topic_name != CLUSTER_METADATA_TOPIC or partition.partition_index != 0:
                out.partitions.append(DescribeQuorumResponsePartitionData(
                    partition_index=partition.partition_index, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    error_message=None))
                continue
            out.partitions.append(DescribeQuorumResponsePartitionData(
                partition_index=0, error_code=code, error_message=None, leader_id=-1, leader_epoch=0,
                high_watermark=0))
    return response
