"""The partition as the one way into its log: leader appends (Produce, coordinators, markers)
with their leadership, min.insync.replicas and producer-state checks; follower appends that
keep the producer state in step with what the log appended; and the one wait for the high
watermark (acks=all, markers, coordinator writes) that ends with NOT_LEADER_OR_FOLLOWER when
leadership moves."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio.testing

from broker.log.config import LogConfig
from broker.log.manager import LogManager
from broker.log.producer_state import AppendOrigin
from broker.replication.delayed_produce import wait_for_replication
from broker.replication.partition import AppendRefusedError, Partition
from broker.replication.replica_manager import ReplicaManager
from broker.transaction.write_markers import write_txn_markers
from controller.image import MetadataImage, PartitionImage, TopicImage
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.generated.api_027_write_txn_markers import (
    WriteTxnMarkersRequest,
    WriteTxnMarkersRequestWritableTxnMarker,
    WriteTxnMarkersRequestWritableTxnMarkerTopic,
)
from wire.records import NewRecord

TOPIC = "t"
TOPIC_ID = uuid.UUID(int=7)
PID = 4000


def image(leader: int, epoch: int, isr: tuple[int, ...] = (1, 2)) -> MetadataImage:
    parts = {0: PartitionImage(TOPIC_ID, 0, (1, 2), isr, leader, epoch, epoch)}
    return MetadataImage(topics_by_id={TOPIC_ID: TopicImage(TOPIC, TOPIC_ID, parts)}, topic_ids={TOPIC: TOPIC_ID})


def batch(seq: int, *, txn: bool = False, pid: int = PID) -> bytearray:
    return bytearray(build_batch([NewRecord(b"k", b"v%d" % seq, timestamp=1)], producer_id=pid, producer_epoch=0,
                                 base_sequence=seq, is_transactional=txn))


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[LogManager]:
    manager = LogManager([tmp_path], LogConfig(), lambda: 1_000)
    yield manager
    manager.close(0)


def replica_manager(logs: LogManager, node_id: int, min_isr: int = 1) -> ReplicaManager:
    return ReplicaManager(node_id, logs, lambda _image, _topic: LogConfig(), {}, min_insync_replicas=lambda _t: min_isr)


def leader(logs: LogManager, **kwargs: int) -> tuple[ReplicaManager, Partition]:
    rm = replica_manager(logs, 1, **kwargs)
    rm.apply_image(image(1, 3))
    p = rm.get(TOPIC, 0)
    assert p is not None and p.is_leader
    return rm, p


def test_an_exact_retry_gets_the_original_offsets(logs: LogManager) -> None:
    _, p = leader(logs)
    first = p.append_records_to_leader(batch(0), origin=AppendOrigin.CLIENT)
    p.append_records_to_leader(batch(1), origin=AppendOrigin.CLIENT)
    again = p.append_records_to_leader(batch(0), origin=AppendOrigin.CLIENT)
    assert (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset) == (0, 0)
    assert p.log_end_offset == 2
    with pytest.raises(AppendRefusedError) as refused:
        p.append_records_to_leader(batch(5), origin=AppendOrigin.CLIENT)
    assert refused.value.code is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert p.log_end_offset == 2


def test_under_min_isr_refuses_acks_all_only(logs: LogManager) -> None:
    rm, p = leader(logs, min_isr=2)
    rm.apply_image(image(1, 3, isr=(1,)))
    assert p.under_min_isr
    with pytest.raises(AppendRefusedError) as refused:
        p.append_records_to_leader(batch(0), origin=AppendOrigin.CLIENT, required_acks=-1)
    assert refused.value.code is ErrorCode.NOT_ENOUGH_REPLICAS
    assert p.append_records_to_leader(batch(0), origin=AppendOrigin.CLIENT, required_acks=1).first_offset == 0
    with pytest.raises(AppendRefusedError):
        p.append_records_to_leader(bytearray(build_batch([NewRecord(b"k", b"v")])), origin=AppendOrigin.COORDINATOR)


def test_a_follower_append_updates_the_producer_state(logs: LogManager, tmp_path: Path) -> None:
    _, lead = leader(logs)
    lead.append_records_to_leader(batch(0, txn=True), origin=AppendOrigin.COORDINATOR)
    other = LogManager([tmp_path / "follower"], LogConfig(), lambda: 1_000)
    try:
        rm = replica_manager(other, 2)
        rm.apply_image(image(1, 3))
        follower = rm.get(TOPIC, 0)
        assert follower is not None and not follower.is_leader
        data = lead.log.read(0, 1 << 20, None, min_one_batch=True).region
        assert data is not None
        follower.append_records_to_follower(data if isinstance(data, bytes) else data.read())
        # The transaction is open on the follower as on the leader, with no catch-up by hand.
        assert follower.producer_state.has_ongoing_transaction(PID, 0)
        follower.high_watermark = 1
        assert follower.last_stable_offset == 0
    finally:
        other.close(0)


def test_an_acks_all_wait_ends_when_leadership_moves(logs: LogManager) -> None:
    rm, p = leader(logs)
    info = p.append_records_to_leader(batch(0), origin=AppendOrigin.CLIENT)
    outcome: list[ErrorCode] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_for_replication, [(p, info.last_offset + 1, outcome.append)], 30_000)
            await trio.sleep(1)
            assert outcome == []  # follower 2 has not fetched: the high watermark is still 0
            rm.apply_image(image(2, 4))

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert outcome == [ErrorCode.NOT_LEADER_OR_FOLLOWER]


def test_a_marker_waiting_for_replication_answers_not_leader_when_leadership_moves(logs: LogManager) -> None:
    rm, p = leader(logs)
    p.append_records_to_leader(batch(0, txn=True), origin=AppendOrigin.COORDINATOR)
    request = WriteTxnMarkersRequest(markers=[WriteTxnMarkersRequestWritableTxnMarker(
        producer_id=PID, producer_epoch=0, transaction_result=True, coordinator_epoch=0,
        topics=[WriteTxnMarkersRequestWritableTxnMarkerTopic(name=TOPIC, partition_indexes=[0])])])

    async def main() -> list[int]:
        async with trio.open_nursery() as nursery:
            results: list[int] = []

            async def write() -> None:
                response = await write_txn_markers(rm, lambda: 1_000, request, 30_000)
                results.extend(part.error_code for part in response.markers[0].topics[0].partitions)

            nursery.start_soon(write)
            await trio.sleep(1)
            assert not p.producer_state.has_ongoing_transaction(PID, 0)  # the marker is in the log
            rm.apply_image(image(2, 4))
        return results

    results = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert results == [ErrorCode.NOT_LEADER_OR_FOLLOWER]


def test_the_high_watermark_waits_for_a_replica_the_leader_asked_to_add(logs: LogManager) -> None:
    """The controller may count a replica in the ISR (and elect it) as soon as it accepts the
    leader's AlterPartition, before the leader hears of it: until then the leader's high
    watermark counts the replica it asked to add (Kafka's maximal ISR)."""
    rm, p = leader(logs)
    rm.apply_image(image(1, 3, isr=(1,)))
    p.append_records_to_leader(batch(0), origin=AppendOrigin.CLIENT)
    assert p.high_watermark == 1
    rm.record_follower_fetch(p, 2, 1)  # caught up: the leader asks for ISR (1, 2)
    p.pending_isr = (1, 2)
    p.append_records_to_leader(batch(1), origin=AppendOrigin.CLIENT)
    assert p.high_watermark == 1  # replica 2 has not fetched offset 1 yet
    rm.record_follower_fetch(p, 2, 2)
    assert p.high_watermark == 2


def test_an_isr_shrinking_below_min_isr_after_the_append_is_not_acknowledged(logs: LogManager) -> None:
    """The shrink itself moves the high watermark past the write (the leader alone is the ISR),
    yet the write is on fewer replicas than min.insync.replicas: Kafka answers
    NOT_ENOUGH_REPLICAS_AFTER_APPEND, and so does the one wait here."""
    rm, p = leader(logs, min_isr=2)
    info = p.append_records_to_leader(batch(0), origin=AppendOrigin.CLIENT, required_acks=-1)
    outcome: list[ErrorCode] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_for_replication, [(p, info.last_offset + 1, outcome.append)], 30_000)
            await trio.sleep(1)
            assert outcome == []
            rm.apply_image(image(1, 3, isr=(1,)))

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert p.high_watermark == 1
    assert outcome == [ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND]
