"""Checks of a partition's AcknowledgementBatches before any is applied, as Kafka's
``KafkaApis.validateAcknowledgementBatches`` makes them for ShareFetch and ShareAcknowledge.

A partition fails as a whole, with AcknowledgeErrorCode (ShareFetch) or ErrorCode
(ShareAcknowledge) INVALID_REQUEST, when a batch's first offset is past its last, a batch
starts before the previous one ends, a batch has no acknowledge types or a number of them
that is neither 1 nor one per offset, a type is outside 0-3 (0-4 from version 2, which adds
RENEW, KIP-1222), or a RENEW comes in a request that did not set IsRenewAck.

A valid partition with a RENEW is then refused with INVALID_RECORD_STATE when its group set
``share.renew.acknowledge.enable=false`` (Kafka 4.3, KIP-1240).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from broker.share.leader import AckBatch
from broker.share.partition import REJECT, RENEW
from config.group import RENEW_ACKNOWLEDGE_ENABLE, boolean_config

#: The first ShareFetch/ShareAcknowledge version with RENEW and IsRenewAck.
RENEW_VERSION = 2


def batches_valid(batches: Iterable[AckBatch], api_version: int, is_renew_ack: bool) -> bool:
    highest = RENEW if api_version >= RENEW_VERSION else REJECT
    previous_last = -1
    for first, last, types in batches:
        if first > last or first < previous_last or not types:
            return False
        if len(types) > 1 and last - first != len(types) - 1:
            return False
        if any(t < 0 or t > highest for t in types):
            return False
        if RENEW in types and not is_renew_ack:
            return False
        previous_last = last
    return True


def renew_refused(batches: Iterable[AckBatch], group_configs: Mapping[str, str]) -> bool:
    """Whether the batches hold a RENEW that the group's ``share.renew.acknowledge.enable``
    forbids."""
    return not boolean_config(group_configs, RENEW_ACKNOWLEDGE_ENABLE) and any(
        RENEW in types for _, _, types in batches)
