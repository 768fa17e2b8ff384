"""CreatePartitions (37), v0-3: add partitions to existing topics through the controller.

As Kafka's controller (ControllerApis.createPartitions,
ReplicationControlManager): a topic named twice gets one INVALID_REQUEST
"Duplicate topic name." entry; an unknown topic is UNKNOWN_TOPIC_OR_PARTITION;
a count equal to or below the current one is INVALID_PARTITIONS; manual
assignments must cover exactly the new partitions, name registered brokers
once each and match the topic's replication factor (INVALID_REPLICA_ASSIGNMENT);
without them the topic's replication factor must fit the live brokers
(INVALID_REPLICATION_FACTOR). ``validate_only`` checks without creating.
A request that would add more than the controller's per-operation record limit
fails as a whole with POLICY_VIOLATION, as Kafka's does. ``timeout_ms`` > 0
bounds the wait for the controller (REQUEST_TIMED_OUT).

v2+ are flexible; v1+ only differ in throttling behaviour.
"""

from __future__ import annotations

import structlog
import trio

from broker.quotas.client_quota_manager import CONTROLLER_MUTATION
from broker.security.acl_operations import AclOperation, ResourceType, authorize
from broker.server.dispatch import RequestContext
from controller.image import MetadataImage
from controller.topic_creation import MAX_RECORDS_PER_USER_OP, manual_assignment_error
from wire.errors import ErrorCode
from wire.generated.api_037_create_partitions import (
    CreatePartitionsRequest,
    CreatePartitionsRequestCreatePartitionsTopic,
    CreatePartitionsResponse,
    CreatePartitionsResponseCreatePartitionsTopicResult,
)

API_KEY = 37
MIN_VERSION = 0
MAX_VERSION = 3

log = structlog.get_logger(__name__)


def _precheck(image: MetadataImage, topic: CreatePartitionsRequestCreatePartitionsTopic) -> tuple[ErrorCode, str | None] | None:
    """Kafka's checks, with its messages; None when the controller may go ahead."""
    found = image.topic(topic.name)
    if found is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
    current = len(found.partitions)
    if topic.count == current:
        return ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s)."
    if topic.count < current:
        return ErrorCode.INVALID_PARTITIONS, (
            f"The topic {topic.name} currently has {current} partition(s); {topic.count} would not be an increase."
        )
    additional = topic.count - current
    replication_factor = len(found.partitions[0].replicas) if 0 in found.partitions else 1
    live = {b.broker_id for b in image.live_brokers()}
    if topic.assignments is not None:
        if len(topic.assignments) != additional:
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, (
                f"Attempted to add {additional} additional partition(s), but only {len(topic.assignments)} "
                "assignment(s) were specified."
            )
        for i, a in enumerate(topic.assignments):
            problem = manual_assignment_error(image, a.broker_ids, replication_factor)
            if problem is not None:
                return ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem
            if not live.intersection(a.broker_ids):
                return ErrorCode.INVALID_REPLICA_ASSIGNMENT, (
                    f"All brokers specified in the manual partition assignment for partition {current + i} "
                    "are fenced or in controlled shutdown."
                )
    elif replication_factor > len(live):
        return ErrorCode.INVALID_REPLICATION_FACTOR, (
            f"The target replication factor of {replication_factor} cannot be reached because only "
            f"{len(live)} broker(s) are registered."
        )
    return None


async def handle(ctx: RequestContext, request: CreatePartitionsRequest) -> CreatePartitionsResponse:
    services = ctx.services
    image = services.image
    response = CreatePartitionsResponse()
    names = [t.name for t in request.topics]
    duplicates = [n for i, n in enumerate(names) if names.count(n) > 1 and names.index(n) == i]
    for name in duplicates:
        response.results.append(_result(name, ErrorCode.INVALID_REQUEST, "Duplicate topic name."))
    results: dict[str, CreatePartitionsResponseCreatePartitionsTopicResult] = {}
    changes: list[tuple[str, int, list[list[int]] | None]] = []
    order: list[str] = []
    new_partitions = 0
    for topic in request.topics:
        if topic.name in duplicates:
            continue
        order.append(topic.name)
        if not authorize(ctx, AclOperation.ALTER, ResourceType.TOPIC, topic.name):
            results[topic.name] = _result(topic.name, ErrorCode.TOPIC_AUTHORIZATION_FAILED, None)
            continue
        problem = _precheck(image, topic)
        if problem is not None:
            results[topic.name] = _result(topic.name, problem[0], problem[1])
            continue
        assignments = None if topic.assignments is None else [list(a.broker_ids) for a in topic.assignments]
        changes.append((topic.name, topic.count, assignments))
        existing = image.topic(topic.name)
        new_partitions += topic.count - (len(existing.partitions) if existing is not None else 0)
    if new_partitions > MAX_RECORDS_PER_USER_OP:
        # Kafka's controller refuses operations that would write an overly large batch.
        return CreatePartitionsResponse(results=[
            _result(t.name, ErrorCode.POLICY_VIOLATION, "Unable to perform excessively large batch operation.")
            for t in request.topics
        ])
    if changes and not request.validate_only:
        # controller_mutation_rate (KIP-599): the new partitions of each topic, in order; strict from v3.
        quota = services.quotas.controller_mutation.for_request(API_KEY, ctx.api_version, ctx.principal.name,
                                                                ctx.client_id or "")
        allowed = []
        for change in changes:
            existing = image.topic(change[0])
            if quota.record(change[1] - (len(existing.partitions) if existing is not None else 0)):
                allowed.append(change)
            else:
                results[change[0]] = _result(change[0], *quota.error)
        changes = allowed
        ctx.throttle.add(CONTROLLER_MUTATION, quota.throttle_ms)
    if changes:
        outcome: dict[str, tuple[ErrorCode, str | None]] | None = None
        timeout_s = request.timeout_ms / 1000 if request.timeout_ms > 0 else float("inf")
        with trio.move_on_after(timeout_s):
            outcome = await services.controller.create_partitions(changes, request.validate_only)
        if outcome is None:
            log.warning("create_partitions_timed_out", topics=[c[0] for c in changes], timeout_ms=request.timeout_ms)
            return CreatePartitionsResponse(
                results=[_result(t.name, ErrorCode.REQUEST_TIMED_OUT, None) for t in request.topics]
            )
        for name, (code, message) in outcome.items():
            failure = services.replica_manager.creation_failure(name) if code == ErrorCode.NONE else None
            if failure is not None:
                code, message = ErrorCode.KAFKA_STORAGE_ERROR, failure
            results[name] = _result(name, code, message)
            if code == ErrorCode.NONE and not request.validate_only:
                log.info("partitions_created", topic=name, count=next(c[1] for c in changes if c[0] == name))
    response.results.extend(results[name] for name in order)
    for r in response.results:
        if r.error_code != ErrorCode.NONE:
            services.log_client_error("create_partitions_rejected", topic=r.name, error=ErrorCode(r.error_code).name,
                                      reason=r.error_message, client_id=ctx.client_id)
    return response


def _result(name: str, code: ErrorCode, message: str | None) -> CreatePartitionsResponseCreatePartitionsTopicResult:
    return CreatePartitionsResponseCreatePartitionsTopicResult(name=name, error_code=code, error_message=message)
