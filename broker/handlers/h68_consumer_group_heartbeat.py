"""ConsumerGroupHeartbeat (68), v0-1: the consumer rebalance protocol (KIP-848).

A member joins with epoch 0, heartbeats with the epoch it was given, leaves
with -1 (or -2, a static member that will come back). Each answer carries its
epoch and, when it changed, its assignment; the coordinator computes the
assignment (see broker/group/consumer_shard.py). Malformed requests get
INVALID_REQUEST with Kafka's message; an assignor the broker does not have,
UNSUPPORTED_ASSIGNOR. v1 (KIP-1082) requires the member to bring its own member
id and may carry a topic regex (RE2 syntax, matched against whole topic names; a
pattern RE2 rejects gets INVALID_REGULAR_EXPRESSION).
"""

from __future__ import annotations

from broker.group.consumer_group import JOIN_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH
from broker.group.consumer_shard import ConsumerHeartbeat
from broker.group.topic_regex import validate
from broker.server.dispatch import RequestContext
from controller.features import GROUP_VERSION, level
from wire.errors import ErrorCode
from wire.generated.api_068_consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    ConsumerGroupHeartbeatResponseAssignment,
    ConsumerGroupHeartbeatResponseTopicPartitions,
)

API_KEY = 68
MIN_VERSION = 0
MAX_VERSION = 1


def invalid_reason(request: ConsumerGroupHeartbeatRequest, version: int) -> str | None:
    """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid."""
    regex = request.subscribed_topic_regex if version >= 1 else None
    if not request.group_id:
        return "GroupId can't be empty."
    if request.instance_id == "":
        return "InstanceId can't be empty."
    if request.rack_id == "":
        return "RackId can't be empty."
    if not request.member_id and (version >= 1 or request.member_epoch != JOIN_GROUP_MEMBER_EPOCH):
        return "MemberId can't be empty."
    if request.member_epoch == JOIN_GROUP_MEMBER_EPOCH:
        if request.rebalance_timeout_ms == -1:
            return "RebalanceTimeoutMs must be provided in first request."
        if request.topic_partitions is None or request.topic_partitions:
            return "TopicPartitions must be empty when (re-)joining."
        if request.subscribed_topic_names is None and regex is None:
            return "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
    elif request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if request.instance_id is None:
            return "InstanceId can't be null."
    elif request.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        return f"MemberEpoch {request.member_epoch} is invalid."
    return None


async def handle(ctx: RequestContext, request: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse:
    version = ctx.api_version
    if level(ctx.services.image.features, GROUP_VERSION) < 1:
        # As Kafka 4: the consumer rebalance protocol needs group.version 1.
        return ConsumerGroupHeartbeatResponse(
            error_code=ErrorCode.UNSUPPORTED_VERSION,
            error_message="The consumer group protocol is not enabled (group.version is 0).")
    coordinator = ctx.services.group_coordinator
    reason = invalid_reason(request, version)
    if reason is not None:
        return ConsumerGroupHeartbeatResponse(error_code=ErrorCode.INVALID_REQUEST, error_message=reason)
    assignors = coordinator.consumer_config.assignors
    if request.server_assignor is not None and request.server_assignor not in assignors:
        return ConsumerGroupHeartbeatResponse(
            error_code=ErrorCode.UNSUPPORTED_ASSIGNOR,
            error_message=f"ServerAssignor {request.server_assignor} is not supported. "
                          f"Supported assignors: {', '.join(assignors)}.")
    regex = request.subscribed_topic_regex if version >= 1 else None
    if regex:
        why = validate(regex)
        if why is not None:
            return ConsumerGroupHeartbeatResponse(
                error_code=ErrorCode.INVALID_REGULAR_EXPRESSION,
                error_message=f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {why}.")
    result = await coordinator.consumer_group_heartbeat(ConsumerHeartbeat(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        subscribed_topic_names=request.subscribed_topic_names,
        subscribed_topic_regex=regex,
        server_assignor=request.server_assignor,
        owned=None if request.topic_partitions is None else [
            (tp.topic_id, list(tp.partitions)) for tp in request.topic_partitions],
        client_id=ctx.client_id or "",
        client_host=f"/{ctx.conn.peer_host}",
    ))
    response = ConsumerGroupHeartbeatResponse(
        error_code=result.error, error_message=result.message, member_id=result.member_id,
        member_epoch=result.member_epoch, heartbeat_interval_ms=result.heartbeat_interval_ms)
    if result.assignment is not None:
        response.assignment = ConsumerGroupHeartbeatResponseAssignment(topic_partitions=[
            ConsumerGroupHeartbeatResponseTopicPartitions(topic_id=t, partitions=sorted(ps))
            for t, ps in sorted(result.assignment.items())])
    return response
