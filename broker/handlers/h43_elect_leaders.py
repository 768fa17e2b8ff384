"""ElectLeaders (43), v0-2: preferred or unclean leader elections, run by the controller.

v0 knows only preferred elections; v1+ carry ``election_type`` (0 preferred, 1 unclean)
and a top-level error. A null partition list elects every partition and leaves the
ones that need no election out of the answer (as Kafka's controller). Per partition:
ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE,
UNKNOWN_TOPIC_OR_PARTITION; an unknown election type is INVALID_REQUEST; REQUEST_TIMED_OUT
when the controller does not commit within ``timeout_ms``. An unclean election asked
for here is an operator's decision: it does not need ``unclean.leader.election.enable``.
See :mod:`controller.elections`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import structlog
import trio

from broker.security.acl_operations import AclOperation, authorize_cluster
from broker.server.dispatch import RequestContext
from controller.elections import ELECTION_TYPES, ElectionOutcome
from wire.errors import ErrorCode
from wire.generated.api_043_elect_leaders import (
    ElectLeadersRequest,
    ElectLeadersResponse,
    ElectLeadersResponsePartitionResult,
    ElectLeadersResponseReplicaElectionResult,
)

API_KEY = 43
MIN_VERSION = 0
MAX_VERSION = 2

log = structlog.get_logger(__name__)


def requested_partitions(request: ElectLeadersRequest) -> list[tuple[str, int]] | None:
    if request.topic_partitions is None:
        return None
    seen: dict[tuple[str, int], None] = {}
    for t in request.topic_partitions:
        for p in t.partitions:
            seen[(t.topic, p)] = None
    return list(seen)


def election_response(outcomes: Mapping[tuple[str, int], ElectionOutcome],
                      error: ErrorCode = ErrorCode.NONE) -> ElectLeadersResponse:
    by_topic: dict[str, ElectLeadersResponseReplicaElectionResult] = {}
    for (topic, index), outcome in outcomes.items():
        result = by_topic.get(topic)
        if result is None:
            result = by_topic[topic] = ElectLeadersResponseReplicaElectionResult(topic=topic)
        result.partition_result.append(ElectLeadersResponsePartitionResult(
            partition_id=index, error_code=outcome.error,
            error_message=outcome.message if outcome.error != ErrorCode.NONE else None))
    return ElectLeadersResponse(error_code=error, replica_election_results=list(by_topic.values()))


def failed(partitions: Sequence[tuple[str, int]] | None, error: ErrorCode) -> ElectLeadersResponse:
    return election_response({tp: ElectionOutcome(error) for tp in partitions or ()}, error)


async def handle(ctx: RequestContext, request: ElectLeadersRequest) -> ElectLeadersResponse:
    partitions = requested_partitions(request)
    if not authorize_cluster(ctx, AclOperation.ALTER):
        return failed(partitions, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if request.election_type not in ELECTION_TYPES:
        return failed(partitions, ErrorCode.INVALID_REQUEST)
    outcomes: Mapping[tuple[str, int], ElectionOutcome] | None = None
    timeout_s = request.timeout_ms / 1000 if request.timeout_ms > 0 else float("inf")
    with trio.move_on_after(timeout_s):
        outcomes = await ctx.services.controller.elect_leaders(request.election_type, partitions)
    if outcomes is None:
        log.warning("elect_leaders_timed_out", timeout_ms=request.timeout_ms)
        return failed(partitions, ErrorCode.REQUEST_TIMED_OUT)
    return election_response(outcomes)
