"""ShareAcknowledge (79), v1-2: acknowledgements of acquired records (KIP-932).

Acknowledge types: 0 gap, 1 ACCEPT, 2 RELEASE, 3 REJECT, and from v2 4 RENEW
(KIP-1222: the record's acquisition lock starts again, its state stays; the request
sets IsRenewAck). The answer comes once the new share-partition state is committed;
a record not acquired by this member gets INVALID_RECORD_STATE, a partition whose
batches Kafka would refuse (broker/share/acknowledgements.py) INVALID_REQUEST.
Epoch -1 also closes the share session. v2 answers the group's acquisition lock
duration (AcquisitionLockTimeoutMs).
"""

from __future__ import annotations

import uuid

from broker.server.dispatch import RequestContext
from broker.share.acknowledgements import RENEW_VERSION, batches_valid, renew_refused
from broker.share.coordinator import FINAL_EPOCH, INITIAL_EPOCH
from broker.share.feature import DISABLED_MESSAGE, share_groups_enabled
from broker.share.leader import AckBatch, PartitionOutcome
from wire.errors import ErrorCode
from wire.generated.api_079_share_acknowledge import (
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareAcknowledgeResponseLeaderIdAndEpoch,
    ShareAcknowledgeResponsePartitionData,
    ShareAcknowledgeResponseShareAcknowledgeTopicResponse,
)

API_KEY = 79
MIN_VERSION = 1
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: ShareAcknowledgeRequest) -> ShareAcknowledgeResponse:
    if not share_groups_enabled(ctx.services.image):
        return ShareAcknowledgeResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, error_message=DISABLED_MESSAGE)
    coordinator = ctx.services.share_coordinator
    group_id, member_id, epoch = request.group_id or "", request.member_id or "", request.share_session_epoch
    if not group_id or not member_id:
        return ShareAcknowledgeResponse(error_code=ErrorCode.INVALID_REQUEST,
                                        error_message="GroupId and MemberId must be set.")
    if epoch == INITIAL_EPOCH:
        return ShareAcknowledgeResponse(error_code=ErrorCode.INVALID_SHARE_SESSION_EPOCH)
    error, session = coordinator.open_session(group_id, member_id, epoch, (), ())
    if session is None:
        return ShareAcknowledgeResponse(error_code=error)
    acks: dict[tuple[uuid.UUID, int], list[AckBatch]] = {
        (t.topic_id, p.partition_index): [(b.first_offset, b.last_offset, list(b.acknowledge_types))
                                          for b in p.acknowledgement_batches]
        for t in request.topics for p in t.partitions}
    version = ctx.api_version
    renew = version >= RENEW_VERSION and request.is_renew_ack
    outcomes: dict[tuple[uuid.UUID, int], PartitionOutcome] = {}
    for tp in [tp for tp, batches in acks.items() if not batches_valid(batches, version, renew)]:
        del acks[tp]
        outcomes[tp] = PartitionOutcome(acknowledge_error=ErrorCode.INVALID_REQUEST, acknowledged=True)
    group_configs = ctx.services.image.group_config(group_id)
    for tp in [tp for tp, batches in acks.items() if renew_refused(batches, group_configs)]:
        del acks[tp]
        outcomes[tp] = PartitionOutcome(acknowledge_error=ErrorCode.INVALID_RECORD_STATE, acknowledged=True)
    outcomes.update(await coordinator.acknowledge(group_id, member_id, acks))
    if epoch == FINAL_EPOCH:
        await coordinator.close_session(group_id, member_id)
    response = ShareAcknowledgeResponse(acquisition_lock_timeout_ms=coordinator.record_lock_duration_ms(group_id))
    by_topic: dict[uuid.UUID, ShareAcknowledgeResponseShareAcknowledgeTopicResponse] = {}
    for (topic_id, partition), o in sorted(outcomes.items()):
        entry = by_topic.get(topic_id)
        if entry is None:
            entry = by_topic[topic_id] = ShareAcknowledgeResponseShareAcknowledgeTopicResponse(topic_id=topic_id)
            response.responses.append(entry)
        entry.partitions.append(ShareAcknowledgeResponsePartitionData(
            partition_index=partition, error_code=o.acknowledge_error,
            current_leader=ShareAcknowledgeResponseLeaderIdAndEpoch(leader_id=o.leader_id,
                                                                    leader_epoch=o.leader_epoch)))
    return response
