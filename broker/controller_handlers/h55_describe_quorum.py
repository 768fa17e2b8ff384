"""DescribeQuorum (55), v0-2, on the controller listener: the metadata quorum's state.

As KRaft's leader answers it: the leader's id, the leader epoch (the Raft term,
which rises with every election), the high watermark (committed metadata end
offset) and each voter's log end offset; brokers that fetch the log appear as
observers with their fetch offset. Only the Raft leader knows the voters'
offsets; another controller answers NOT_LEADER_OR_FOLLOWER (6) with the leader
it knows, which is how brokers find the active controller. v2 adds each
voter's controller endpoint.
"""

from __future__ import annotations

from broker.controller_handlers._common import controller_role
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_055_describe_quorum import (
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    DescribeQuorumResponseListener,
    DescribeQuorumResponseNode,
    DescribeQuorumResponsePartitionData,
    DescribeQuorumResponseReplicaState,
    DescribeQuorumResponseTopicData,
)

API_KEY = 55
MIN_VERSION = 0
MAX_VERSION = 2

CLUSTER_METADATA_TOPIC = "__cluster_metadata"


async def handle(ctx: RequestContext, request: DescribeQuorumRequest) -> DescribeQuorumResponse:
    role = controller_role(ctx)
    quorum = role.quorum.describe()
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
            data = DescribeQuorumResponsePartitionData(
                partition_index=0,
                error_code=ErrorCode.NONE if quorum.is_leader else ErrorCode.NOT_LEADER_OR_FOLLOWER,
                error_message=None,
                leader_id=quorum.leader_id,
                leader_epoch=quorum.epoch,
                high_watermark=quorum.high_watermark,
            )
            if quorum.is_leader:
                data.current_voters = [DescribeQuorumResponseReplicaState(replica_id=voter, log_end_offset=leo)
                                       for voter, leo in quorum.voters]
                data.observers = [DescribeQuorumResponseReplicaState(replica_id=broker, log_end_offset=leo)
                                  for broker, leo in quorum.observers]
            out.partitions.append(data)
    if ctx.api_version >= 2:
        response.nodes = [
            DescribeQuorumResponseNode(node_id=voter, listeners=[
                DescribeQuorumResponseListener(name=role.listener_name, host=host, port=port)])
            for voter, (host, port) in sorted(role.voter_addresses.items())
        ]
    return response
