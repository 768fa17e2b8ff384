"""DeleteTopics (20), v0-6, on the controller listener: deletions forwarded by brokers.

Topics are named in ``topic_names`` (v0-5) or ``topics`` (v6, by name or id).
NOT_CONTROLLER (41) on a controller that is not active; REQUEST_TIMED_OUT (7)
when the quorum does not commit within ``timeout_ms``.
"""

from __future__ import annotations

from broker.controller_handlers._common import call, controller_role
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_020_delete_topics import (
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DeleteTopicsResponseDeletableTopicResult,
)
from wire.primitives import ZERO_UUID

API_KEY = 20
MIN_VERSION = 0
MAX_VERSION = 6


async def handle(ctx: RequestContext, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
    role = controller_role(ctx)
    image = role.controller.image
    names: list[str] = []
    unknown_ids = []
    if ctx.api_version >= 6:
        for state in request.topics:
            if state.name is not None:
                names.append(state.name)
            elif state.topic_id in image.topics_by_id:
                names.append(image.topics_by_id[state.topic_id].name)
            else:
                unknown_ids.append(state.topic_id)
    else:
        names = list(request.topic_names)
    ids = {name: image.topic_ids.get(name, ZERO_UUID) for name in names}
    outcome, code = await call(role.controller.delete_topics(names), request.timeout_ms)
    response = DeleteTopicsResponse()
    for name in names:
        result = code if outcome is None else outcome.get(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        response.responses.append(DeleteTopicsResponseDeletableTopicResult(
            name=name, topic_id=ids[name], error_code=result, error_message=None))
    for topic_id in unknown_ids:
        response.responses.append(DeleteTopicsResponseDeletableTopicResult(
            name=None, topic_id=topic_id, error_code=ErrorCode.UNKNOWN_TOPIC_ID, error_message=None))
    return response
