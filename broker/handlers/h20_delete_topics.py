"""DeleteTopics (20), v0-6: remove topics through the controller.

v0-5 name topics in ``topic_names``; v6 in ``topics``, each by name or by id
(KIP-516). As Kafka's controller (ControllerApis.deleteTopics): a state with
neither name nor id, or with both, is INVALID_REQUEST; a name or id given twice
gets one INVALID_REQUEST entry; an unknown name is UNKNOWN_TOPIC_OR_PARTITION,
an unknown id UNKNOWN_TOPIC_ID; a name whose id was also given is INVALID_REQUEST.
With ``delete.topic.enable=false`` every topic gets TOPIC_DELETION_DISABLED
(v3+) or INVALID_REQUEST (older). Error messages from v5; topic ids in the
answer from v6. Results come in request order (Kafka shuffles them).
``timeout_ms`` > 0 bounds the wait for the controller (REQUEST_TIMED_OUT).
"""

from __future__ import annotations

import uuid

import structlog
import trio

from broker.quotas.client_quota_manager import CONTROLLER_MUTATION
from broker.security.acl_operations import AclOperation, ResourceType, authorize, checker
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_020_delete_topics import (
    DeleteTopicsRequest,
    DeleteTopicsRequestDeleteTopicState,
    DeleteTopicsResponse,
    DeleteTopicsResponseDeletableTopicResult,
)
from wire.primitives import ZERO_UUID

API_KEY = 20
MIN_VERSION = 0
MAX_VERSION = 6

log = structlog.get_logger(__name__)

# Kafka's default messages for these errors (Errors.message()), which its controller sends.
UNKNOWN_TOPIC_MESSAGE = "This server does not host this topic-partition."
UNKNOWN_TOPIC_ID_MESSAGE = "This server does not host this topic ID."


def _states(ctx: RequestContext, request: DeleteTopicsRequest) -> list[DeleteTopicsRequestDeleteTopicState]:
    if ctx.api_version >= 6:
        return list(request.topics)
    return [DeleteTopicsRequestDeleteTopicState(name=name) for name in request.topic_names]


async def handle(ctx: RequestContext, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
    services = ctx.services
    states = _states(ctx, request)
    response = DeleteTopicsResponse()

    def answer(name: str | None, topic_id: uuid.UUID, code: ErrorCode, message: str | None = None) -> None:
        response.responses.append(
            DeleteTopicsResponseDeletableTopicResult(name=name, topic_id=topic_id, error_code=code, error_message=message)
        )

    if not services.config.delete_topic_enable:
        code = ErrorCode.TOPIC_DELETION_DISABLED if ctx.api_version >= 3 else ErrorCode.INVALID_REQUEST
        for state in states:
            answer(state.name, state.topic_id, code)
        return response

    names: list[str] = []
    duplicate_names: list[str] = []
    ids: list[uuid.UUID] = []
    duplicate_ids: list[uuid.UUID] = []

    def add_name(name: str) -> None:
        if name in duplicate_names:
            return
        if name in names:
            names.remove(name)
            duplicate_names.append(name)
        else:
            names.append(name)

    for state in states:
        if state.name is None:
            if state.topic_id == ZERO_UUID:
                answer(None, ZERO_UUID, ErrorCode.INVALID_REQUEST, "Neither topic name nor id were specified.")
            elif state.topic_id in duplicate_ids:
                pass
            elif state.topic_id in ids:
                ids.remove(state.topic_id)
                duplicate_ids.append(state.topic_id)
            else:
                ids.append(state.topic_id)
        elif state.topic_id == ZERO_UUID:
            add_name(state.name)
        else:
            answer(state.name, state.topic_id, ErrorCode.INVALID_REQUEST,
                   "You may not specify both topic name and topic id.")
    for name in duplicate_names:
        answer(name, ZERO_UUID, ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
    for topic_id in duplicate_ids:
        answer(None, topic_id, ErrorCode.INVALID_REQUEST, "Duplicate topic id.")

    image = services.image
    id_to_name: dict[uuid.UUID, str] = {}
    may_delete = checker(ctx, AclOperation.DELETE, ResourceType.TOPIC)
    for topic_id in ids:
        topic = image.topics_by_id.get(topic_id)
        if topic is None:
            answer(None, topic_id, ErrorCode.UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_ID_MESSAGE)
        elif not may_delete(topic.name):
            # Whoever may not even describe the topic learns nothing of its existence (as Kafka).
            describable = authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topic.name, log_denied=False)
            answer(None, topic_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED if describable
                   else ErrorCode.UNKNOWN_TOPIC_ID)
        else:
            id_to_name[topic_id] = topic.name
    given_ids = set(id_to_name)
    for name in names:
        found = image.topic_ids.get(name)
        if not may_delete(name):
            answer(name, ZERO_UUID, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        elif found is None:
            answer(name, ZERO_UUID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_MESSAGE)
        elif found in given_ids:
            # A name that resolves to an id the request also gave: neither is deleted.
            id_to_name.pop(found, None)
            answer(name, found, ErrorCode.INVALID_REQUEST,
                   "The provided topic name maps to an ID that was already supplied.")
        else:
            id_to_name[found] = name
    if id_to_name:
        # controller_mutation_rate (KIP-599): each topic's partitions, in order; strict from v5.
        quota = services.quotas.controller_mutation.for_request(API_KEY, ctx.api_version, ctx.principal.name,
                                                                ctx.client_id or "")
        for topic_id, name in list(id_to_name.items()):
            deleted = image.topic(name)
            if not quota.record(len(deleted.partitions) if deleted is not None else 0):
                del id_to_name[topic_id]
                answer(name, topic_id, *quota.error)
        ctx.throttle.add(CONTROLLER_MUTATION, quota.throttle_ms)
    if id_to_name:
        outcome: dict[str, ErrorCode] | None = None
        timeout_s = request.timeout_ms / 1000 if request.timeout_ms > 0 else float("inf")
        with trio.move_on_after(timeout_s):
            outcome = await services.controller.delete_topics(list(id_to_name.values()))
        if outcome is None:
            log.warning("delete_topics_timed_out", topics=sorted(id_to_name.values()), timeout_ms=request.timeout_ms)
            response.responses = []
            for state in states:
                answer(state.name, state.topic_id, ErrorCode.REQUEST_TIMED_OUT)
            return response
        for topic_id, name in id_to_name.items():
            code = outcome.get(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            answer(name, topic_id, code, None if code == ErrorCode.NONE else UNKNOWN_TOPIC_MESSAGE)
    for r in response.responses:
        if r.error_code != ErrorCode.NONE:
            services.log_client_error("delete_topic_rejected", topic=r.name, topic_id=str(r.topic_id),
                                      error=ErrorCode(r.error_code).name, client_id=ctx.client_id)
    return response
