"""CreateTopics (19), v0-7, on the controller listener: topics forwarded by brokers.

The broker that received the client's request already answered duplicates and
``__cluster_metadata``; the active controller validates the rest (names, settings,
manual assignments, placement) against the current image and writes the records.
Every topic gets NOT_CONTROLLER (41) on a controller that is not active, and
REQUEST_TIMED_OUT (7) when the quorum does not commit within ``timeout_ms``.
"""

from __future__ import annotations

from broker.controller_handlers._common import call, controller_role
from broker.server.dispatch import RequestContext
from controller.service import TopicRequest
from wire.generated.api_019_create_topics import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    CreateTopicsResponseCreatableTopicResult,
)

API_KEY = 19
MIN_VERSION = 0
MAX_VERSION = 7


async def handle(ctx: RequestContext, request: CreateTopicsRequest) -> CreateTopicsResponse:
    role = controller_role(ctx)
    requests = [
        TopicRequest(
            name=t.name,
            num_partitions=t.num_partitions,
            replication_factor=t.replication_factor,
            assignments=[(a.partition_index, list(a.broker_ids)) for a in t.assignments],
            configs={c.name: c.value for c in t.configs if c.value is not None},
        )
        for t in request.topics
    ]
    validate_only = request.validate_only and ctx.api_version >= 1
    results, code = await call(role.controller.create_topics(requests, validate_only), request.timeout_ms)
    if results is None:
        return CreateTopicsResponse(topics=[
            CreateTopicsResponseCreatableTopicResult(name=t.name, error_code=code, error_message=None)
            for t in request.topics
        ])
    return CreateTopicsResponse(topics=[
        CreateTopicsResponseCreatableTopicResult(
            name=r.name,
            topic_id=r.topic_id,
            error_code=r.error,
            error_message=r.message,
            num_partitions=r.num_partitions,
            replication_factor=r.replication_factor,
            configs=[],
        )
        for r in results
    ])
