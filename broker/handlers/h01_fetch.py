"""Fetch (1), v4-18: the partitions are read by the replica manager
(:meth:`ReplicaManager.fetch_records`, :mod:`broker.replication.fetch`: leadership and
epoch checks, divergence, isolation level, long-polling), record data going out as file
regions with ``os.sendfile``. Fetch sessions (v7+, KIP-227, :mod:`broker.fetch_sessions`):
a full fetch with epoch 0 opens one; incremental fetches name only what changed and get
only partitions with news; an unknown session is FETCH_SESSION_ID_NOT_FOUND, a wrong epoch
INVALID_FETCH_SESSION_EPOCH. v13+ name topics by id.

v0-3 responses can only carry magic 0/1 message sets, which needs down-conversion;
Cormorant stores magic 2 only, so those versions are not offered.
"""

from __future__ import annotations

from broker.acl_operations import AclOperation, replica_or_topic_checker
from broker.dispatch import RequestContext
from broker.fetch_sessions import CachedPartition, SessionFetch, build_response, open_fetch
from broker.quota_manager import FETCH
from broker.replication.fetch import FetchParams, FetchSlot
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

    # The broker's fetch.max.bytes bounds every fetch too (KafkaApis.handleFetchRequest).
    max_bytes = min(request.max_bytes, services.config.fetch_max_bytes)
    window_max = None
    if follower < 0:
        # No fetch returns more than the consumer quota allows in a window (Kafka's getMaxValueInQuotaWindow).
        window_max = services.quotas.fetch.max_value_in_window(ctx.principal.name, ctx.client_id or "")
        if window_max is not None:
            max_bytes = max(min(max_bytes, int(window_max)), 1)
    params = FetchParams(follower, request.max_wait_ms, request.min_bytes, max_bytes,
                         read_committed=request.isolation_level == READ_COMMITTED)
    isr_manager = services.isr_manager
    slots, total = await services.replica_manager.fetch_records(
        (slot(cached) for _, cached in fetch.wanted), params, ctx.pacer,
        on_follower_out_of_isr=isr_manager.poke if isr_manager is not None else None,
        on_wait=services.metrics.fetch_waiting)
    if follower < 0:
        # Sized only under a consumer_byte_rate: without one nothing is counted (the hot path).
        size = response_size(slots, total, fetch.by_id) if window_max is not None else 0
        throttled = _throttled_response(ctx, size, fetch)
        if throttled is not None:
            return throttled
    services.metrics.record_fetch(total, follower=follower >= 0)
    return build_response(services.fetch_sessions, fetch, [slot.response for slot in slots])


#: Bytes of a FetchResponse besides its topics (throttle time, error code, session id, array, tags).
RESPONSE_FIXED_BYTES = 15
#: Bytes of one partition besides its records and aborted transactions: index, error code, high
#: watermark, last stable offset, log start offset, aborted transactions' and records' lengths,
#: preferred read replica, tags.
PARTITION_FIXED_BYTES = 43
ABORTED_TRANSACTION_BYTES = 16


def response_size(slots: list[FetchSlot], records: int, by_id: bool) -> int:
    """The response's size as Kafka's FetchResponse.sizeOf counts it for consumer_byte_rate,
    computed from the fields (not by encoding, which would copy the records): within a few bytes
    per partition (lengths counted at their widest). An incremental fetch counts every partition
    of its session, where Kafka counts only those its response carries (about 43 bytes more per
    unchanged partition)."""
    size = RESPONSE_FIXED_BYTES + records
    topic: str | None = None
    for slot in slots:
        if slot.topic != topic:
            topic = slot.topic
            size += 16 + 5 if by_id else 2 + len(slot.topic.encode()) + 5
        aborted = slot.response.aborted_transactions
        size += PARTITION_FIXED_BYTES + ABORTED_TRANSACTION_BYTES * (len(aborted) if aborted else 0)
    return size


def _throttled_response(ctx: RequestContext, total: int, fetch: SessionFetch) -> FetchResponse | None:
    """consumer_byte_rate and request_percentage, as Kafka's handleFetchRequest: a fetch over either
    quota returns no data (its bytes are not counted) and only the throttle time; a session keeps
    what it was last told, so the next fetch returns this data. A new full fetch opens no session."""
    quotas = ctx.services.quotas
    user, client_id = ctx.principal.name, ctx.client_id or ""
    fetch_ms = quotas.fetch.record(user, client_id, total)
    request_ms = quotas.record_request_time(ctx.throttle)
    if fetch_ms == 0 and request_ms == 0:
        return None
    quotas.fetch.unrecord(user, client_id, total)
    ctx.throttle.add(FETCH, fetch_ms)
    return FetchResponse(session_id=fetch.session.id if fetch.session is not None else 0)


def error_response(request: FetchRequest, code: ErrorCode) -> FetchResponse:
    """Every partition gets ``code``."""
    return FetchResponse(error_code=code, responses=[
        FetchResponseFetchableTopicResponse(topic=t.topic, topic_id=t.topic_id, partitions=[
            FetchResponsePartitionData(partition_index=p.partition, error_code=code, records=b"")
            for p in t.partitions])
        for t in request.topics])
