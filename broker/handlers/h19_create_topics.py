"""CreateTopics (19), v0-7: validate and create topics through the controller.

This handler answers what Kafka's ControllerApis answers: a name given twice gets
one INVALID_REQUEST "Duplicate topic name." entry after the others, as KRaft
answers (ZooKeeper-era brokers answered each copy); ``__cluster_metadata`` cannot
be created. The controller checks the rest (``controller/topic_creation.py``), in
Kafka's order (ReplicationControlManager): per topic the name
(INVALID_TOPIC_EXCEPTION, 17), existence (TOPIC_ALREADY_EXISTS, 36), the
configs (INVALID_CONFIG, 40), the manual assignment (INVALID_REQUEST, 42, or
INVALID_REPLICA_ASSIGNMENT, 39), then partition count and replication factor
(INVALID_PARTITIONS, 37; INVALID_REPLICATION_FACTOR, 38). -1 partitions or
replication factor take ``num.partitions`` / ``default.replication.factor``.

Versions: v1+ carry ``validate_only`` and per-topic error messages; v2+
throttle time; v5+ answer num_partitions, replication_factor and the topic's
resulting configs (name, value, read_only, source, is_sensitive) — also for
validate_only — and are flexible; v7+ the topic id. ``timeout_ms`` > 0 bounds
the wait for the controller; past it every topic gets REQUEST_TIMED_OUT (the
creation may still complete, as in Kafka). A request that would write more than
the controller's per-operation record limit fails as a whole with
POLICY_VIOLATION, as Kafka's does.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import structlog
import trio

from broker.quotas.client_quota_manager import CONTROLLER_MUTATION
from broker.security.acl_operations import AclOperation, ResourceType, authorize_cluster, checker
from broker.server.dispatch import RequestContext
from config import ConfigError
from controller.service import CreateTopicResult, TopicRequest
from controller.topic_creation import MAX_RECORDS_PER_USER_OP
from wire.errors import ErrorCode
from wire.generated.api_019_create_topics import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    CreateTopicsResponseCreatableTopicConfigs,
    CreateTopicsResponseCreatableTopicResult,
)

if TYPE_CHECKING:
    from broker.server.services import BrokerServices

API_KEY = 19
MIN_VERSION = 0
MAX_VERSION = 7

log = structlog.get_logger(__name__)

CLUSTER_METADATA_TOPIC = "__cluster_metadata"


async def handle(ctx: RequestContext, request: CreateTopicsRequest) -> CreateTopicsResponse:
    services = ctx.services
    counts = Counter(t.name for t in request.topics)
    validate_only = request.validate_only and ctx.api_version >= 1
    results: dict[str, CreateTopicsResponseCreatableTopicResult] = {}
    configs_by_name: dict[str, dict[str, str]] = {}
    to_create: list[TopicRequest] = []
    order: list[str] = []
    # CREATE on the cluster covers every topic; otherwise CREATE on each (as Kafka).
    may_create = (None if authorize_cluster(ctx, AclOperation.CREATE, log_denied=False, log_allowed=True)
                  else checker(ctx, AclOperation.CREATE, ResourceType.TOPIC))
    pacer = ctx.pacer
    for topic in request.topics:
        if pacer.tick(1 + len(topic.assignments)):
            await pacer.pause()
        if counts[topic.name] > 1 or topic.name == CLUSTER_METADATA_TOPIC:
            continue
        order.append(topic.name)
        if may_create is not None and not may_create(topic.name):
            results[topic.name] = _failure(topic.name, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            continue
        # A null value on a new topic sets nothing, as in Kafka; a repeated name keeps its last value.
        configs = {c.name: c.value for c in topic.configs if c.value is not None}
        configs_by_name[topic.name] = configs
        to_create.append(
            TopicRequest(
                name=topic.name,
                num_partitions=topic.num_partitions,
                replication_factor=topic.replication_factor,
                assignments=[(a.partition_index, list(a.broker_ids)) for a in topic.assignments],
                configs=configs,
            )
        )
    records = sum(
        1 + len(t.configs) + (len(t.assignments) or (services.config.num_partitions if t.num_partitions == -1
                                                      else max(t.num_partitions, 0)))
        for t in to_create
    )
    if records > MAX_RECORDS_PER_USER_OP:
        # Kafka's controller refuses to write an overly large batch, failing the whole request.
        return CreateTopicsResponse(topics=[
            _failure(t.name, ErrorCode.POLICY_VIOLATION, "Unable to perform excessively large batch operation.")
            for t in request.topics
        ])
    if to_create and not validate_only:
        to_create = _within_mutation_quota(ctx, to_create, results)
    if to_create:
        created: list[CreateTopicResult] | None = None
        timeout_s = request.timeout_ms / 1000 if request.timeout_ms > 0 else float("inf")
        with trio.move_on_after(timeout_s):
            created = await services.controller.create_topics(to_create, validate_only)
        if created is None:
            log.warning("create_topics_timed_out", topics=[t.name for t in to_create], timeout_ms=request.timeout_ms)
            return CreateTopicsResponse(
                topics=[_failure(t.name, ErrorCode.REQUEST_TIMED_OUT, None) for t in request.topics]
            )
        for result in created:
            results[result.name] = _result(services, result, configs_by_name[result.name])
    response = CreateTopicsResponse(topics=[results[name] for name in order])
    for name in counts:
        if counts[name] > 1:
            response.topics.append(_failure(name, ErrorCode.INVALID_REQUEST, "Duplicate topic name."))
    if CLUSTER_METADATA_TOPIC in counts and counts[CLUSTER_METADATA_TOPIC] == 1:
        response.topics.append(_failure(
            CLUSTER_METADATA_TOPIC, ErrorCode.INVALID_REQUEST,
            f"Creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited.",
        ))
    for r in response.topics:
        if r.error_code != ErrorCode.NONE:
            services.log_client_error("create_topic_rejected", topic=r.name, error=ErrorCode(r.error_code).name,
                                      reason=r.error_message, client_id=ctx.client_id)
    return response


def _within_mutation_quota(ctx: RequestContext, topics: list[TopicRequest],
                           results: dict[str, CreateTopicsResponseCreatableTopicResult]) -> list[TopicRequest]:
    """controller_mutation_rate (KIP-599): each topic's partitions are counted in order; from v6 a
    topic arriving once the quota is exceeded gets THROTTLING_QUOTA_EXCEEDED."""
    quota = ctx.services.quotas.controller_mutation.for_request(API_KEY, ctx.api_version, ctx.principal.name,
                                                                ctx.client_id or "")
    allowed = []
    for topic in topics:
        partitions = len(topic.assignments) or (ctx.services.config.num_partitions if topic.num_partitions == -1
                                                else topic.num_partitions)
        if quota.record(partitions):
            allowed.append(topic)
        else:
            results[topic.name] = _failure(topic.name, *quota.error)
    ctx.throttle.add(CONTROLLER_MUTATION, quota.throttle_ms)
    return allowed


def _failure(name: str, code: ErrorCode, message: str | None) -> CreateTopicsResponseCreatableTopicResult:
    return CreateTopicsResponseCreatableTopicResult(name=name, error_code=code, error_message=message)


def _result(services: BrokerServices, result: CreateTopicResult, configs: dict[str, str]) -> CreateTopicsResponseCreatableTopicResult:
    if result.error != ErrorCode.NONE:
        return _failure(result.name, result.error, result.message)
    failure = services.replica_manager.creation_failure(result.name)
    if failure is not None:
        # A limit (descriptors, a full disk) stopped a log being created here; retried until it is.
        return _failure(result.name, ErrorCode.KAFKA_STORAGE_ERROR, failure)
    out = CreateTopicsResponseCreatableTopicResult(
        name=result.name,
        topic_id=result.topic_id,
        error_message=None,
        num_partitions=result.num_partitions,
        replication_factor=result.replication_factor,
        configs=[],
    )
    try:
        entries = services.topic_configs.describe(configs)
    except ConfigError:
        # The controller accepted these configs, so this cannot happen; answer without them.
        log.error("created_topic_configs_unresolvable", topic=result.name)
        return out
    out.configs = [
        CreateTopicsResponseCreatableTopicConfigs(
            name=entry.name,
            value=None if entry.is_sensitive else entry.value,
            read_only=entry.read_only,
            config_source=entry.source,
            is_sensitive=entry.is_sensitive,
        )
        for entry in entries
    ]
    return out

