"""Fetch (1), v4-18: the partitions are read by the replica manager
(:meth:`ReplicaManager.fetch_records`, :mod:`broker.replication.fetch`: leadership and
epoch checks, divergence, isolation level, long-polling), record data going out as file
regions with ``os.sendfile``; client quotas are applied by :mod:`broker.quotas.fetch_quota`.
Fetch sessions (v7+, KIP-227, :mod:`broker.server.fetch_sessions`): a full fetch with epoch 0
opens one; incremental fetches name only what changed and get only partitions with news;
an unknown session is FETCH_SESSION_ID_NOT_FOUND, a wrong epoch INVALID_FETCH_SESSION_EPOCH.
v13+ name topics by id.

v0-3 responses can only carry magic 0/1 message sets, which needs down-conversion;
Cormorant stores magic 2 only, so those versions are not offered.
"""

from __future__ import annotations

from broker.quotas.fetch_quota import fetch_max_bytes, throttled_response
from broker.replication.fetch import FetchParams, FetchSlot
from broker.security.acl_operations import AclOperation, replica_or_topic_checker
from broker.server.dispatch import RequestContext
from broker.server.fetch_sessions import CachedPartition, build_response, open_fetch
from wire.errors import ErrorCode
from wire.generated.api_001_fetch import (
    FetchRequest,
    FetchResponse,
    FetchResponseFetchableTopicResponse,
    FetchResponsePartitionData,
)

API_KEY = 1
MIN_VERSION = 4
MAX_VERSION = 18

READ_COMMITTED = 1


async def handle(ctx: RequestContext, request: FetchRequest) -> FetchResponse:
    services = ctx.services
    fetch = open_fetch(services.fetch_sessions, request, ctx.api_version)
    if isinstance(fetch, ErrorCode):
        return FetchResponse(error_code=fetch, session_id=0)
    # A follower names itself (replica id, ReplicaState from v15); consumers send -1.
    follower = request.replica_state.replica_id if ctx.api_version >= 15 else request.replica_id
    image = services.image
    may_read = replica_or_topic_checker(ctx, follower, AclOperation.READ)

    def slot(cached: CachedPartition) -> FetchSlot:
        topic = image.topics_by_id.get(cached.topic_id) if fetch.by_id else None
        name = (topic.name if topic is not None else "") if fetch.by_id else cached.topic
        pd = FetchResponsePartitionData(partition_index=cached.request.partition, high_watermark=-1,
                                        last_stable_offset=-1, log_start_offset=-1)
        if not name or not may_read(name):
            pd.error_code = (ErrorCode.TOPIC_AUTHORIZATION_FAILED if name else ErrorCode.UNKNOWN_TOPIC_ID
                             if fetch.by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            pd.records = b""
        return FetchSlot(name, cached.request, pd)

    max_bytes, sized = fetch_max_bytes(ctx, request.max_bytes, follower)
    params = FetchParams(follower, request.max_wait_ms, request.min_bytes, max_bytes,
                         read_committed=request.isolation_level == READ_COMMITTED)
    isr_manager = services.isr_manager
    slots, total = await services.replica_manager.fetch_records(
        (slot(cached) for _, cached in fetch.wanted), params, ctx.pacer,
        on_follower_out_of_isr=isr_manager.poke if isr_manager is not None else None,
        on_wait=services.metrics.fetch_waiting)
    if follower < 0 and (throttled := throttled_response(ctx, fetch, slots, total, sized)) is not None:
        return throttled
    services.metrics.record_fetch(total, follower=follower >= 0)
    return build_response(services.fetch_sessions, fetch, [slot.response for slot in slots])


def error_response(request: FetchRequest, code: ErrorCode) -> FetchResponse:
    """Every partition gets ``code``."""
    return FetchResponse(error_code=code, responses=[
        FetchResponseFetchableTopicResponse(topic=t.topic, topic_id=t.topic_id, partitions=[
            FetchResponsePartitionData(partition_index=p.partition, error_code=code, records=b"")
            for p in t.partitions])
        for t in request.topics])
