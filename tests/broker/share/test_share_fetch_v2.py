"""ShareFetch and ShareAcknowledge v2 on the wire, against a broker process: ShareAcquireMode
(KIP-1206) record_limit and batch_optimized, an unknown mode; BatchSize and the throttling of
redeliveries near the delivery count limit; RENEW acknowledgements
(KIP-1222) that keep records held past their lock, Kafka's errors for RENEW where it is not
allowed, and the group's lock duration as AcquisitionLockTimeoutMs."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from broker.share.partition import ACCEPT, RELEASE, RENEW
from broker.tools.client import KafkaClient
from tests.broker.broker_process import BrokerProcess
from tests.broker.share.test_group_configs import SET, alter
from tests.broker.share.test_share_group_apis import (
    OVERRIDES,
    acquired,
    heartbeat,
    produce,
    topic_id,
)
from tests.broker.test_group_apis import create_topic
from wire.errors import ErrorCode
from wire.generated.api_078_share_fetch import (
    ShareFetchRequest,
    ShareFetchRequestAcknowledgementBatch,
    ShareFetchRequestFetchPartition,
    ShareFetchRequestFetchTopic,
    ShareFetchResponse,
)
from wire.generated.api_079_share_acknowledge import (
    ShareAcknowledgeRequest,
    ShareAcknowledgeRequestAcknowledgementBatch,
    ShareAcknowledgeRequestAcknowledgePartition,
    ShareAcknowledgeRequestAcknowledgeTopic,
    ShareAcknowledgeResponse,
)

LOCK_MS = 1000  # the least share.record.lock.duration.ms a group may set
Acks = list[tuple[int, int, list[int]]]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # A group may set a lock duration down to the broker's minimum, lowered here to the least
    # value Kafka accepts so that the renewals below span several locks in seconds.
    overrides = {**OVERRIDES, "group.share.min.record.lock.duration.ms": str(LOCK_MS)}
    b = BrokerProcess(tmp_path_factory.mktemp("share-fetch-v2") / "data", overrides).start()
    try:
        yield b
    finally:
        assert b.stop() == 0


def fetch(c: KafkaClient, group: str, member: str, epoch: int, tid: uuid.UUID, *, version: int = 2,
          mode: int = 0, max_records: int = 100, acks: Acks | None = None, renew: bool = False,
          max_bytes: int = 1 << 20, min_bytes: int = 1, batch_size: int | None = None) -> ShareFetchResponse:
    return c.send(ShareFetchRequest(
        group_id=group, member_id=member, share_session_epoch=epoch, max_wait_ms=0, min_bytes=min_bytes,
        max_bytes=max_bytes, max_records=max_records,
        batch_size=max_records if batch_size is None else batch_size, share_acquire_mode=mode,
        is_renew_ack=renew,
        topics=[ShareFetchRequestFetchTopic(topic_id=tid, partitions=[ShareFetchRequestFetchPartition(
            partition_index=0, acknowledgement_batches=[
                ShareFetchRequestAcknowledgementBatch(first_offset=f, last_offset=la, acknowledge_types=t)
                for f, la, t in acks or []])])]), ShareFetchResponse, version)


def renew_fetch(c: KafkaClient, group: str, member: str, epoch: int, tid: uuid.UUID, acks: Acks) -> ShareFetchResponse:
    """A ShareFetch that only renews, as KIP-1222 wants it: nothing to fetch, no wait."""
    return fetch(c, group, member, epoch, tid, acks=acks, renew=True, max_records=0, max_bytes=0, min_bytes=0)


def ack(c: KafkaClient, group: str, member: str, epoch: int, tid: uuid.UUID, acks: Acks, *,
        version: int = 2, renew: bool = False) -> ShareAcknowledgeResponse:
    return c.send(ShareAcknowledgeRequest(
        group_id=group, member_id=member, share_session_epoch=epoch, is_renew_ack=renew,
        topics=[ShareAcknowledgeRequestAcknowledgeTopic(topic_id=tid, partitions=[
            ShareAcknowledgeRequestAcknowledgePartition(partition_index=0, acknowledgement_batches=[
                ShareAcknowledgeRequestAcknowledgementBatch(first_offset=f, last_offset=la, acknowledge_types=t)
                for f, la, t in acks])])]), ShareAcknowledgeResponse, version)


def ack_error(r: ShareAcknowledgeResponse) -> int:
    assert r.error_code == ErrorCode.NONE, r
    return r.responses[0].partitions[0].error_code


def queue(c: KafkaClient, name: str, members: list[str], batches: list[int], **configs: str) -> uuid.UUID:
    """A topic of one partition with ``batches`` produced (records per batch), its share group
    reading from the earliest offset, and ``members`` joined."""
    create_topic(c, name, 1)
    group = f"g-{name}"
    ops = [(k, SET, v) for k, v in {"share.auto.offset.reset": "earliest", **configs}.items()]
    assert alter(c, group, *ops) == (ErrorCode.NONE, None)
    for member in members:
        assert heartbeat(c, group, member, 0, [name]).error_code == ErrorCode.NONE
    for n in batches:
        produce(c, name, n)
    return topic_id(c, name)


def test_record_limit_splits_batches_and_batch_optimized_finishes_them(broker: BrokerProcess) -> None:
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        tid = queue(c, "modes", ["a", "b", "c", "d"], [10, 10])
        # record_limit: 3 of the first batch of 10, then the next 3
        assert acquired(fetch(c, "g-modes", "a", 0, tid, mode=1, max_records=3)) == [(0, 2, 1)]
        assert acquired(fetch(c, "g-modes", "b", 0, tid, mode=1, max_records=3)) == [(3, 5, 1)]
        # batch_optimized (0, and what v1 gets): 3 wanted, the rest of the batch taken too
        assert acquired(fetch(c, "g-modes", "c", 0, tid, mode=0, max_records=3)) == [(6, 9, 1)]
        assert acquired(fetch(c, "g-modes", "d", 0, tid, version=1, max_records=3)) == [(10, 19, 1)]
        # an unknown mode: Kafka's ShareAcquireMode.forId fails, UNKNOWN_SERVER_ERROR
        produce(c, "modes", 1)
        r = fetch(c, "g-modes", "a", 1, tid, mode=7)
        assert (r.error_code, r.error_message) == (ErrorCode.UNKNOWN_SERVER_ERROR, "Unknown share acquire mode id: 7")
        assert acquired(fetch(c, "g-modes", "a", 2, tid, mode=1)) == [(20, 20, 1)]


def test_batch_size_and_delivery_throttling(broker: BrokerProcess) -> None:
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        tid = queue(c, "batches", ["a"], [5, 5, 5, 5], **{"share.delivery.count.limit": "5"})
        # BatchSize 10: two in-flight batches of two log batches each
        assert acquired(fetch(c, "g-batches", "a", 0, tid, version=1, max_records=20, batch_size=10)) == [
            (0, 9, 1), (10, 19, 1)]
        for epoch, delivery in ((1, 2), (2, 3)):
            assert acquired(fetch(c, "g-batches", "a", epoch, tid, version=1, max_records=20, batch_size=10,
                                  acks=[(0, 19, [RELEASE])])) == [(0, 9, delivery), (10, 19, delivery)]
        # Delivered 3 times of 5: throttled, half a batch (10 >> 1) and nothing else in the fetch.
        assert acquired(fetch(c, "g-batches", "a", 3, tid, version=1, max_records=20, batch_size=10,
                              acks=[(0, 19, [RELEASE])])) == [(0, 4, 4)]
        assert acquired(fetch(c, "g-batches", "a", 4, tid, version=1, max_records=20, batch_size=10,
                              acks=[(0, 4, [ACCEPT])])) == [(5, 9, 4)]


def test_renew_keeps_records_held_past_their_lock(broker: BrokerProcess) -> None:
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        tid = queue(c, "renew", ["a", "b"], [4], **{"share.record.lock.duration.ms": str(LOCK_MS)})
        first = fetch(c, "g-renew", "a", 0, tid)
        assert acquired(first) == [(0, 3, 1)]
        assert first.acquisition_lock_timeout_ms == LOCK_MS  # the group's, not the broker's
        assert acquired(fetch(c, "g-renew", "b", 0, tid)) == []
        # a holds 0-1 by ShareAcknowledge and 2-3 by ShareFetch renewals, for three lock durations
        epoch = 1
        deadline = time.monotonic() + 3 * LOCK_MS / 1000
        while time.monotonic() < deadline:
            r = ack(c, "g-renew", "a", epoch, tid, [(0, 1, [RENEW])], renew=True)
            assert ack_error(r) == ErrorCode.NONE and r.acquisition_lock_timeout_ms == LOCK_MS
            f = renew_fetch(c, "g-renew", "a", epoch + 1, tid, [(2, 3, [RENEW])])
            assert f.error_code == ErrorCode.NONE and acquired(f) == []  # renewing fetches nothing
            assert f.responses[0].partitions[0].acknowledge_error_code == ErrorCode.NONE
            epoch += 2
            time.sleep(LOCK_MS / 1000 / 3)
        assert acquired(fetch(c, "g-renew", "b", 1, tid)) == [], "b sees none of a's renewed records"
        # a settles them: accepted 0-2, released 3, which b then gets on its second delivery
        assert ack_error(ack(c, "g-renew", "a", epoch, tid, [(0, 3, [ACCEPT, ACCEPT, ACCEPT, RELEASE])])) == 0
        assert acquired(fetch(c, "g-renew", "b", 2, tid)) == [(3, 3, 2)]
        # not renewed, b's lock runs out: b's own RENEW comes too late
        time.sleep(LOCK_MS / 1000 * 1.5)
        late = ack(c, "g-renew", "b", 3, tid, [(3, 3, [RENEW])], renew=True)
        assert ack_error(late) == ErrorCode.INVALID_RECORD_STATE


def test_renew_where_kafka_refuses_it(broker: BrokerProcess) -> None:
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        tid = queue(c, "renew-bad", ["a"], [2])
        assert acquired(fetch(c, "g-renew-bad", "a", 0, tid)) == [(0, 1, 1)]
        # RENEW before v2, or without IsRenewAck: INVALID_REQUEST for the partition
        assert ack_error(ack(c, "g-renew-bad", "a", 1, tid, [(0, 1, [RENEW])], version=1)) == ErrorCode.INVALID_REQUEST
        assert ack_error(ack(c, "g-renew-bad", "a", 2, tid, [(0, 1, [RENEW])])) == ErrorCode.INVALID_REQUEST
        r = fetch(c, "g-renew-bad", "a", 3, tid, acks=[(0, 1, [RENEW])], max_records=0, max_bytes=0, min_bytes=0)
        assert r.responses[0].partitions[0].acknowledge_error_code == ErrorCode.INVALID_REQUEST
        # an IsRenewAck ShareFetch that would fetch: INVALID_REQUEST for the request, in Kafka's words
        r = fetch(c, "g-renew-bad", "a", 4, tid, acks=[(0, 1, [RENEW])], renew=True, max_records=5, min_bytes=0,
                  max_bytes=0)
        assert (r.error_code, r.error_message) == (ErrorCode.INVALID_REQUEST,
                                                   "maxRecords must be set to 0, if isRenewAck is true.")
        # the records are still a's: the refused requests changed nothing
        assert ack_error(ack(c, "g-renew-bad", "a", 4, tid, [(0, 1, [ACCEPT])])) == ErrorCode.NONE
