"""FindCoordinator (10), v0-6: which broker coordinates a group (or transactional id).

v0 asks for a group; v1 adds ``key_type`` (0 group, 1 transaction); v4
(KIP-699) batches keys, each answered with its own error; v6 adds the share
coordinator (key type 2, KIP-932), which partition leaders look up for a
share-partition's state: the key is ``groupId:topicId:partition`` (topic id in
Kafka's base64 form), hashed as the persister hashes it onto
``__share_group_state``. Key type 2 needs CLUSTER_ACTION on the cluster
(CLUSTER_AUTHORIZATION_FAILED); before v6, or with a malformed key, it is
INVALID_REQUEST, as Kafka. Coordinators register in ``services.coordinators``
by key type; a key type nobody serves is COORDINATOR_NOT_AVAILABLE, so clients
retry. The answer is the leader of the key's partition of the internal topic,
on the listener the request came in on; the topic is created on first use.

v1-3 errors carry Kafka's error message; success carries "NONE", as Kafka's
``Errors.NONE.message()`` does.
"""

from __future__ import annotations

from broker.coordinator import KEY_TYPE_GROUP, KEY_TYPE_SHARE, KEY_TYPE_TRANSACTION
from broker.security.acl_operations import AclOperation, ResourceType, authorize, authorize_cluster
from broker.server.dispatch import RequestContext
from broker.share.state_store import coordinator_key, parse_coordinator_key
from wire.errors import ErrorCode
from wire.generated.api_010_find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    FindCoordinatorResponseCoordinator,
)

API_KEY = 10
MIN_VERSION = 0
MAX_VERSION = 6

BATCHED_VERSION = 4
SHARE_VERSION = 6
_NO_NODE = (-1, "", -1)


async def _find(ctx: RequestContext, key_type: int, key: str) -> tuple[ErrorCode, int, str, int]:
    if key_type == KEY_TYPE_SHARE:
        return await _find_share_coordinator(ctx, key)
    if key_type not in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION):
        return (ErrorCode.INVALID_REQUEST, *_NO_NODE)
    if key_type == KEY_TYPE_GROUP and not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, key):
        return (ErrorCode.GROUP_AUTHORIZATION_FAILED, *_NO_NODE)
    if key_type == KEY_TYPE_TRANSACTION and not authorize(
            ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
        return (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, *_NO_NODE)
    coordinator = ctx.services.coordinators.get(key_type)
    if coordinator is None:
        return (ErrorCode.COORDINATOR_NOT_AVAILABLE, *_NO_NODE)
    return await coordinator.find_coordinator(key, ctx.conn.listener)


async def _find_share_coordinator(ctx: RequestContext, key: str) -> tuple[ErrorCode, int, str, int]:
    if ctx.api_version < SHARE_VERSION:
        return (ErrorCode.INVALID_REQUEST, *_NO_NODE)
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        return (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, *_NO_NODE)
    parsed = parse_coordinator_key(key)
    if parsed is None:
        ctx.services.log_client_error("find_coordinator_invalid_share_key", key=key, client_id=ctx.client_id)
        return (ErrorCode.INVALID_REQUEST, *_NO_NODE)
    # The canonical form of the key is what the persister hashes.
    return await ctx.services.share_coordinator.runtime.find_coordinator(coordinator_key(parsed), ctx.conn.listener)


async def handle(ctx: RequestContext, request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    version = ctx.api_version
    key_type = request.key_type if version >= 1 else KEY_TYPE_GROUP
    if version >= BATCHED_VERSION:
        coordinators = []
        for key in request.coordinator_keys:
            error, node_id, host, port = await _find(ctx, key_type, key)
            coordinators.append(FindCoordinatorResponseCoordinator(
                key=key, node_id=node_id, host=host, port=port, error_code=error, error_message=""))
        return FindCoordinatorResponse(coordinators=coordinators)
    error, node_id, host, port = await _find(ctx, key_type, request.key)
    if error is not ErrorCode.NONE:
        node_id, host, port = _NO_NODE
    return FindCoordinatorResponse(
        error_code=error,
        error_message="NONE" if error is ErrorCode.NONE else error.description,
        node_id=node_id,
        host=host,
        port=port,
    )
