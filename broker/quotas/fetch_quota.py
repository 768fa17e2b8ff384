"""Client quotas on Fetch, as Kafka's KafkaApis.handleFetchRequest applies them:
``consumer_byte_rate`` bounds how much one fetch may return and throttles a consumer
over it; ``request_percentage`` throttles one that uses too much of the broker's time.
Follower fetches are exempt. The Fetch handler (:mod:`broker.handlers.h01_fetch`) calls
:func:`fetch_max_bytes` before reading and :func:`throttled_response` after.
"""

from __future__ import annotations

from broker.quotas.client_quota_manager import FETCH
from broker.replication.fetch import FetchSlot
from broker.server.dispatch import RequestContext
from broker.server.fetch_sessions import SessionFetch
from wire.generated.api_001_fetch import FetchResponse

#: Bytes of a FetchResponse besides its topics (throttle time, error code, session id, array, tags).
RESPONSE_FIXED_BYTES = 15
#: Bytes of one partition besides its records and aborted transactions: index, error code, high
#: watermark, last stable offset, log start offset, aborted transactions' and records' lengths,
#: preferred read replica, tags.
PARTITION_FIXED_BYTES = 43
ABORTED_TRANSACTION_BYTES = 16


def fetch_max_bytes(ctx: RequestContext, request_max_bytes: int, follower: int) -> tuple[int, bool]:
    """The most one fetch may return, and whether a consumer_byte_rate applies (only then is
    the response sized, keeping the loop over partitions off the common path)."""
    # The broker's fetch.max.bytes bounds every fetch too (KafkaApis.handleFetchRequest).
    max_bytes = min(request_max_bytes, ctx.services.config.fetch_max_bytes)
    if follower >= 0:
        return max_bytes, False
    # No fetch returns more than the consumer quota allows in a window (Kafka's getMaxValueInQuotaWindow).
    window_max = ctx.services.quotas.fetch.max_value_in_window(ctx.principal.name, ctx.client_id or "")
    if window_max is None:
        return max_bytes, False
    return max(min(max_bytes, int(window_max)), 1), True


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


def throttled_response(ctx: RequestContext, fetch: SessionFetch, slots: list[FetchSlot], records: int,
                       sized: bool) -> FetchResponse | None:
    """A consumer's fetch over consumer_byte_rate or request_percentage returns no data (its bytes
    are not counted) and only the throttle time; a session keeps what it was last told, so the
    next fetch returns this data. A new full fetch opens no session. None: not throttled."""
    quotas = ctx.services.quotas
    user, client_id = ctx.principal.name, ctx.client_id or ""
    # Sized only under a consumer_byte_rate: without one nothing is counted (the hot path).
    total = response_size(slots, records, fetch.by_id) if sized else 0
    fetch_ms = quotas.fetch.record(user, client_id, total)
    request_ms = quotas.record_request_time(ctx.throttle)
    if fetch_ms == 0 and request_ms == 0:
        return None
    quotas.fetch.unrecord(user, client_id, total)
    ctx.throttle.add(FETCH, fetch_ms)
    return FetchResponse(session_id=fetch.session.id if fetch.session is not None else 0)
