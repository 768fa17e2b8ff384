"""AlterPartitionReassignments (45), v0: move partitions onto new replica sets (KIP-455).

Each partition's ``replicas`` is its target; null cancels an ongoing reassignment. The
controller widens the replica set, the added brokers fetch like any follower, and the
reassignment completes once every target replica is in the ISR (see
:mod:`controller.reassignment`). Per partition: UNKNOWN_TOPIC_OR_PARTITION,
INVALID_REPLICA_ASSIGNMENT, NO_REASSIGNMENT_IN_PROGRESS; REQUEST_TIMED_OUT (top level)
when the controller does not commit within ``timeout_ms``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import structlog
import trio

from broker.security.acl_operations import AclOperation, authorize_cluster
from broker.server.dispatch import RequestContext
from controller.reassignment import ReassignmentOutcome
from wire.errors import ErrorCode
from wire.generated.api_045_alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    AlterPartitionReassignmentsResponseReassignablePartitionResponse,
    AlterPartitionReassignmentsResponseReassignableTopicResponse,
)

API_KEY = 45
MIN_VERSION = 0
MAX_VERSION = 0

log = structlog.get_logger(__name__)

Requested = list[tuple[str, int, Sequence[int] | None]]


def requested(request: AlterPartitionReassignmentsRequest) -> Requested:
    return [(t.name, p.partition_index, None if p.replicas is None else list(p.replicas))
            for t in request.topics for p in t.partitions]


def reassignment_response(requests: Requested, outcomes: Mapping[tuple[str, int], ReassignmentOutcome] | None,
                          error: ErrorCode = ErrorCode.NONE) -> AlterPartitionReassignmentsResponse:
    response = AlterPartitionReassignmentsResponse(error_code=error, error_message=None)
    by_topic: dict[str, AlterPartitionReassignmentsResponseReassignableTopicResponse] = {}
    for name, index, _ in requests:
        topic = by_topic.get(name)
        if topic is None:
            topic = by_topic[name] = AlterPartitionReassignmentsResponseReassignableTopicResponse(name=name)
            response.responses.append(topic)
        outcome = (outcomes or {}).get((name, index), ReassignmentOutcome(error))
        topic.partitions.append(AlterPartitionReassignmentsResponseReassignablePartitionResponse(
            partition_index=index, error_code=outcome.error,
            error_message=outcome.message if outcome.error != ErrorCode.NONE else None))
    return response


async def handle(ctx: RequestContext, request: AlterPartitionReassignmentsRequest) -> AlterPartitionReassignmentsResponse:
    requests = requested(request)
    if not authorize_cluster(ctx, AclOperation.ALTER):
        return reassignment_response(requests, None, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    outcomes: Mapping[tuple[str, int], ReassignmentOutcome] | None = None
    timeout_s = request.timeout_ms / 1000 if request.timeout_ms > 0 else float("inf")
    with trio.move_on_after(timeout_s):
        outcomes = await ctx.services.controller.alter_reassignments(requests)
    if outcomes is None:
        log.warning("alter_partition_reassignments_timed_out", timeout_ms=request.timeout_ms)
        return reassignment_response(requests, None, ErrorCode.REQUEST_TIMED_OUT)
    return reassignment_response(requests, outcomes)
