"""Metadata (3), v0-13: brokers, cluster id, topics, partitions, leaders and epochs.

Topics are null (v1+) for "all topics"; v0's empty list also means all. Unknown
topics are created when both the request (v4+) and ``auto.create.topics.enable``
allow it. Brokers are listed with their endpoint on the listener the request
arrived on. Topic ids from v10; a request by id alone (v12+) is answered by id.
v13 adds a top-level error code (KIP-1102's REBOOTSTRAP_REQUIRED, which a broker never
sets itself: a malformed request gets INVALID_REQUEST there).
v8+ can ask for each topic's authorized operations, v8-10 for the cluster's
(KIP-430; from v11 DescribeCluster answers that): without an authorizer, every
operation the resource type supports, as Kafka reports.

With an authorizer, as Kafka's KafkaApis: "all topics" lists only the topics the
caller may DESCRIBE; a topic named (or given by id) without DESCRIBE, or missing
and to be auto-created without CREATE (on the cluster or the topic), is answered
TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

from broker.security.acl_operations import (
    CLUSTER_NAME,
    AclOperation,
    ResourceType,
    authorize,
    authorized_operations,
    checker,
)
from broker.server.dispatch import RequestContext
from controller.image import MetadataImage, TopicImage
from controller.service import TopicRequest, validate_topic_name
from wire.errors import ErrorCode
from wire.generated.api_003_metadata import (
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from wire.primitives import ZERO_UUID

API_KEY = 3
MIN_VERSION = 0
MAX_VERSION = 13

#: The versions whose response carries the cluster's authorized operations.
CLUSTER_OPERATIONS_VERSIONS = range(8, 11)


def brokers_for(image: MetadataImage, listener: str) -> list[MetadataResponseBroker]:
    out = []
    for broker in sorted(image.live_brokers(), key=lambda b: b.broker_id):
        ep = broker.endpoint(listener)
        if ep is not None:
            out.append(MetadataResponseBroker(node_id=broker.broker_id, host=ep.host, port=ep.port, rack=broker.rack))
    return out


def live_on(image: MetadataImage, listener: str) -> frozenset[int]:
    """The live brokers with an endpoint on ``listener``: the only possible leaders there."""
    return frozenset(b.broker_id for b in image.live_brokers() if b.endpoint(listener) is not None)


def _partitions(
    topic: TopicImage, live: frozenset[int], lists: dict[tuple[int, ...], list[int]]
) -> tuple[MetadataResponsePartition, ...]:
    """``lists``: one list per distinct set of brokers, shared by the entries (read only)."""
    partitions = []
    for index in sorted(topic.partitions):
        part = topic.partitions[index]
        led = part.leader in live
        offline = tuple(r for r in part.replicas if r not in live)
        partitions.append(
            MetadataResponsePartition(
                error_code=ErrorCode.NONE if led else ErrorCode.LEADER_NOT_AVAILABLE,
                partition_index=index,
                leader_id=part.leader if led else -1,
                leader_epoch=part.leader_epoch,
                replica_nodes=lists.setdefault(part.replicas, list(part.replicas)),
                isr_nodes=lists.setdefault(part.isr, list(part.isr)),
                offline_replicas=lists.setdefault(offline, list(offline)),
            )
        )
    return tuple(partitions)


#: Bounds the distinct broker lists kept for sharing (each a few ints).
MAX_SHARED_LISTS = 65_536


class _ListenerPartitions:
    """Each topic's partition entries as answered on one listener, for one set of live
    brokers. Images are immutable and a new image shares the topic images that did not
    change, so an entry holds while its topic image is the one the current image has:
    a client asking for all topics again (librdkafka does, often) costs no per-partition
    work. The partition entries (and their short broker lists) are shared between
    responses and never changed; each response gets its own topic entries and partition
    lists (handle() sets authorized operations on a topic entry, and the dispatcher frees
    a large response's long lists)."""

    __slots__ = ("by_topic_id", "image", "lists", "live")

    def __init__(self, image: MetadataImage, live: frozenset[int]) -> None:
        self.image = image
        self.live = live
        self.by_topic_id: dict[uuid.UUID, tuple[TopicImage, tuple[MetadataResponsePartition, ...]]] = {}
        #: Replica, ISR and offline lists by their brokers: a few hundred distinct ones
        #: instead of three lists a partition (two thirds of the entries' memory).
        self.lists: dict[tuple[int, ...], list[int]] = {}

    def follow(self, image: MetadataImage, live: frozenset[int]) -> None:
        """Moves to ``image``: keeps the entries of topics it did not change."""
        if image is self.image:
            return
        if live != self.live:
            self.by_topic_id = {}
            self.lists = {}
        elif image.topics_by_id is not self.image.topics_by_id:
            topics = image.topics_by_id
            self.by_topic_id = {tid: kept for tid, kept in self.by_topic_id.items() if topics.get(tid) is kept[0]}
        self.image = image
        self.live = live

    def partitions(self, topic: TopicImage) -> tuple[MetadataResponsePartition, ...]:
        kept = self.by_topic_id.get(topic.topic_id)
        if kept is not None and kept[0] is topic:
            return kept[1]
        if len(self.lists) > MAX_SHARED_LISTS:  # sets no longer in use, after many reassignments
            self.lists = {}
        built = _partitions(topic, self.live, self.lists)
        self.by_topic_id[topic.topic_id] = (topic, built)
        return built


#: By listener name (a handful). One broker per process in service; brokers sharing a
#: process (tests) only rebuild the entries when the image they answer from alternates.
_by_listener: dict[str, _ListenerPartitions] = {}


def topic_metadata(image: MetadataImage, topic: TopicImage, listener: str) -> MetadataResponseTopic:
    """``topic`` as answered on ``listener``: a new entry (the caller may change it)."""
    cache = _by_listener.get(listener)
    if cache is None or cache.image is not image:
        live = live_on(image, listener)
        if cache is None:
            cache = _by_listener[listener] = _ListenerPartitions(image, live)
        else:
            cache.follow(image, live)
    return MetadataResponseTopic(
        error_code=ErrorCode.NONE,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.is_internal,
        partitions=list(cache.partitions(topic)),
    )


async def handle(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    response = await _describe(ctx, request)
    if request.include_topic_authorized_operations:
        for topic in response.topics:
            if topic.name is not None:
                topic.topic_authorized_operations = authorized_operations(ctx, ResourceType.TOPIC, topic.name)
    if ctx.api_version in CLUSTER_OPERATIONS_VERSIONS and request.include_cluster_authorized_operations:
        response.cluster_authorized_operations = authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
    return response


def _always(name: str) -> bool:
    del name
    return True


def internal_topic_creators(ctx: RequestContext) -> dict[str, Callable[[], Awaitable[None]]]:
    """The coordinators' internal topics, by name, each with what creates it."""
    services = ctx.services
    runtimes = (services.group_coordinator.runtime, services.transaction_coordinator.runtime,
                services.share_coordinator.runtime)
    return {runtime.topic.name: runtime.ensure_topic for runtime in runtimes}


async def _describe(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    services = ctx.services
    image = services.image
    listener = ctx.conn.listener
    response = MetadataResponse(
        brokers=brokers_for(image, listener),
        cluster_id=services.cluster_id,
        controller_id=services.node_id,
    )
    pacer = ctx.pacer
    if request.topics is None or (ctx.api_version == 0 and not request.topics):
        for known in sorted(image.topics_by_id.values(), key=lambda t: t.name):
            if authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, known.name, log_denied=False):
                response.topics.append(topic_metadata(image, known, listener))
            if pacer.tick(1 + len(known.partitions)):
                await pacer.pause()
        return response
    may_describe = checker(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC)
    may_create = (_always if authorize(ctx, AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, log_denied=False)
                  else checker(ctx, AclOperation.CREATE, ResourceType.TOPIC))
    denied: set[str] = set()
    allow_create = services.config.auto_create_topics_enable and (ctx.api_version < 4 or request.allow_auto_topic_creation)
    to_create: dict[str, None] = {}
    # Each topic takes at least one partition: more than this many cannot be created anyway.
    most = services.config.max_partitions_per_request
    for t in request.topics:
        if pacer.tick():
            await pacer.pause()
        name = t.name
        if name is None:
            continue
        if not may_describe(name):
            denied.add(name)
        elif (allow_create and len(to_create) < most and image.topic(name) is None
                and validate_topic_name(name) is None):
            if not may_create(name):
                denied.add(name)
            else:
                to_create[name] = None
    if to_create:
        # An internal topic is created as its coordinator creates it (its own partition count,
        # replication factor and configs: offsets.topic.*, transaction.state.log.*,
        # share.coordinator.state.topic.*), as Kafka's AutoTopicCreationManager does.
        internal = internal_topic_creators(ctx)
        ordinary = [TopicRequest(name) for name in to_create if name not in internal]
        if ordinary:
            await services.controller.create_topics(ordinary)
        for name in to_create:
            if name in internal:
                await internal[name]()
        image = services.image
    # A second pass over the request itself: a list of what was asked would be a
    # million more entries to free at once.
    for t in request.topics:
        if pacer.tick():
            await pacer.pause()
        name = t.name
        if name is None:
            topic = image.topics_by_id.get(t.topic_id)
            if topic is None:
                response.topics.append(
                    MetadataResponseTopic(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=t.topic_id)
                )
                continue
            if not may_describe(topic.name):
                response.topics.append(MetadataResponseTopic(
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=None, topic_id=t.topic_id))
                continue
        elif name in denied:
            response.topics.append(MetadataResponseTopic(
                error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name, topic_id=ZERO_UUID))
            continue
        else:
            found = image.topic(name)
            if found is None:
                code = (
                    ErrorCode.INVALID_TOPIC_EXCEPTION
                    if validate_topic_name(name) is not None
                    else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                )
                response.topics.append(MetadataResponseTopic(error_code=code, name=name, topic_id=ZERO_UUID))
                continue
            topic = found
        response.topics.append(topic_metadata(image, topic, listener))
    return response
