"""ShareFetch (78), v1-2: records acquired for a share-group member (KIP-932).

Piggy-backed acknowledgements are applied (and committed) first; then records
of the session's partitions are acquired, waiting up to MaxWaitMs for some.
Each partition answers whole batches plus AcquiredRecords, the offset ranges
this member now holds with their delivery counts (the client hands out only
those). A final epoch (-1) only acknowledges and closes the share session.

MaxRecords and BatchSize (v1+) shape the acquisition as in Kafka: new records are
acquired in in-flight batches of about BatchSize records, cut at log-batch boundaries, each
its own AcquiredRecords entry, and MaxRecords is exceeded only to finish a log batch
(broker/share/partition.py; a BatchSize below 1 does not split).

Version 2 adds ShareAcquireMode (KIP-1206: batch_optimized or record_limit, see
broker/share/acquire_mode.py) and IsRenewAck (KIP-1222): a request that renews
acquisition locks (acknowledge type 4) must set MaxBytes, MinBytes, MaxRecords and
MaxWaitMs to 0, and fetches nothing, so that the renewed locks do not run out while
it waits. AcquisitionLockTimeoutMs is the group's ``share.record.lock.duration.ms``.
"""

from __future__ import annotations

import uuid

from broker.server.dispatch import RequestContext
from broker.share.acknowledgements import RENEW_VERSION, batches_valid, renew_refused
from broker.share.acquire_mode import ACQUIRE_MODES, BATCH_OPTIMIZED, unknown_mode_message
from broker.share.coordinator import FINAL_EPOCH, INITIAL_EPOCH
from broker.share.feature import DISABLED_MESSAGE, share_groups_enabled
from broker.share.leader import AckBatch, PartitionOutcome
from wire.errors import ErrorCode
from wire.generated.api_078_share_fetch import (
    ShareFetchRequest,
    ShareFetchResponse,
    ShareFetchResponseAcquiredRecords,
    ShareFetchResponseLeaderIdAndEpoch,
    ShareFetchResponsePartitionData,
    ShareFetchResponseShareFetchableTopicResponse,
)

API_KEY = 78
MIN_VERSION = 1
MAX_VERSION = 2
#: MaxRecords when a request gives none.
DEFAULT_MAX_RECORDS = 500


def renew_fetch_error(request: ShareFetchRequest) -> str | None:
    """Kafka's message when an IsRenewAck request asks to fetch anything."""
    wrong = [f"{name} must be set to 0, " for name, value in (
        ("maxBytes", request.max_bytes), ("minBytes", request.min_bytes),
        ("maxRecords", request.max_records), ("maxWaitMs", request.max_wait_ms)) if value != 0]
    return "".join(wrong) + "if isRenewAck is true." if wrong else None


async def handle(ctx: RequestContext, request: ShareFetchRequest) -> ShareFetchResponse:
    if not share_groups_enabled(ctx.services.image):
        return ShareFetchResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, error_message=DISABLED_MESSAGE)
    coordinator = ctx.services.share_coordinator
    group_id, member_id, epoch = request.group_id or "", request.member_id or "", request.share_session_epoch
    if not group_id or not member_id:
        return ShareFetchResponse(error_code=ErrorCode.INVALID_REQUEST,
                                  error_message="GroupId and MemberId must be set.")
    version = ctx.api_version
    renew = version >= RENEW_VERSION and request.is_renew_ack
    if renew and (message := renew_fetch_error(request)) is not None:
        return ShareFetchResponse(error_code=ErrorCode.INVALID_REQUEST, error_message=message)
    acks: dict[tuple[uuid.UUID, int], list[AckBatch]] = {}
    requested: list[tuple[uuid.UUID, int]] = []
    for t in request.topics:
        for p in t.partitions:
            requested.append((t.topic_id, p.partition_index))
            if p.acknowledgement_batches:
                acks[(t.topic_id, p.partition_index)] = [
                    (b.first_offset, b.last_offset, list(b.acknowledge_types)) for b in p.acknowledgement_batches]
    if acks and epoch == INITIAL_EPOCH:
        return ShareFetchResponse(error_code=ErrorCode.INVALID_REQUEST,
                                  error_message="Acknowledge data present on initial fetch.")
    forgotten = [(f.topic_id, p) for f in request.forgotten_topics_data for p in f.partitions]
    error, session = coordinator.open_session(group_id, member_id, epoch, requested, forgotten)
    if session is None:
        return ShareFetchResponse(error_code=error)
    outcomes: dict[tuple[uuid.UUID, int], PartitionOutcome] = {}
    for tp in [tp for tp, batches in acks.items() if not batches_valid(batches, version, renew)]:
        del acks[tp]
        outcomes[tp] = PartitionOutcome(acknowledge_error=ErrorCode.INVALID_REQUEST, acknowledged=True)
    group_configs = ctx.services.image.group_config(group_id)
    for tp in [tp for tp, batches in acks.items() if renew_refused(batches, group_configs)]:
        del acks[tp]
        outcomes[tp] = PartitionOutcome(acknowledge_error=ErrorCode.INVALID_RECORD_STATE, acknowledged=True)
    if acks:
        outcomes.update(await coordinator.acknowledge(group_id, member_id, acks))
    mode = request.share_acquire_mode if version >= RENEW_VERSION else BATCH_OPTIMIZED
    if epoch == FINAL_EPOCH:
        await coordinator.close_session(group_id, member_id)
    elif renew:
        pass  # renewing locks fetches nothing (KIP-1222)
    elif session.partitions and mode not in ACQUIRE_MODES:
        return ShareFetchResponse(error_code=ErrorCode.UNKNOWN_SERVER_ERROR, error_message=unknown_mode_message(mode))
    else:
        wait = 0 if acks else request.max_wait_ms
        fetched = await coordinator.acquire(group_id, member_id, sorted(session.partitions),
                                            request.max_records or DEFAULT_MAX_RECORDS, request.max_bytes, wait,
                                            mode, request.batch_size)
        for tp, o in fetched.items():
            previous = outcomes.get(tp)
            if previous is not None:
                o.acknowledge_error, o.acknowledged = previous.acknowledge_error, True
            outcomes[tp] = o
    response = ShareFetchResponse(acquisition_lock_timeout_ms=coordinator.record_lock_duration_ms(group_id))
    by_topic: dict[uuid.UUID, ShareFetchResponseShareFetchableTopicResponse] = {}
    for (topic_id, partition), o in sorted(outcomes.items()):
        if not (o.acquired or o.acknowledged or o.error is not ErrorCode.NONE or epoch == INITIAL_EPOCH):
            continue
        entry = by_topic.get(topic_id)
        if entry is None:
            entry = by_topic[topic_id] = ShareFetchResponseShareFetchableTopicResponse(topic_id=topic_id)
            response.responses.append(entry)
        entry.partitions.append(ShareFetchResponsePartitionData(
            partition_index=partition, error_code=o.error, acknowledge_error_code=o.acknowledge_error,
            current_leader=ShareFetchResponseLeaderIdAndEpoch(leader_id=o.leader_id, leader_epoch=o.leader_epoch),
            records=o.records,
            acquired_records=[ShareFetchResponseAcquiredRecords(first_offset=a.first_offset, last_offset=a.last_offset,
                                                                delivery_count=a.delivery_count)
                              for a in o.acquired]))
    return response
