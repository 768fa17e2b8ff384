"""ListPartitionReassignments (46), v0: the partitions being reassigned, with their
replicas and the replicas being added and removed — all of them, or among the named
partitions (unknown ones are left out, as in Kafka). Answered from this broker's
metadata image, which follows the controller's log.
"""

from __future__ import annotations

from broker.security.acl_operations import AclOperation, authorize_cluster
from broker.server.dispatch import RequestContext
from controller.reassignment import ongoing
from wire.errors import ErrorCode
from wire.generated.api_046_list_partition_reassignments import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    ListPartitionReassignmentsResponseOngoingPartitionReassignment,
    ListPartitionReassignmentsResponseOngoingTopicReassignment,
)

API_KEY = 46
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: ListPartitionReassignmentsRequest) -> ListPartitionReassignmentsResponse:
    topics = None if request.topics is None else [(t.name, t.partition_indexes) for t in request.topics]
    response = ListPartitionReassignmentsResponse(error_message=None)
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        response.error_code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return response
    by_topic: dict[str, ListPartitionReassignmentsResponseOngoingTopicReassignment] = {}
    for r in ongoing(ctx.services.image, topics):
        topic = by_topic.get(r.topic)
        if topic is None:
            topic = by_topic[r.topic] = ListPartitionReassignmentsResponseOngoingTopicReassignment(name=r.topic)
            response.topics.append(topic)
        topic.partitions.append(ListPartitionReassignmentsResponseOngoingPartitionReassignment(
            partition_index=r.partition, replicas=list(r.replicas), adding_replicas=list(r.adding),
            removing_replicas=list(r.removing)))
    return response
