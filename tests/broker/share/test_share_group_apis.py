"""Share-group APIs (KIP-932) on the wire, against a broker process: heartbeat validation
and epochs, share sessions, acquisition and acknowledgement errors, and what a restart
keeps."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from broker.tools.client import KafkaClient
from tests.broker.broker_process import BrokerProcess
from tests.broker.test_group_apis import create_topic
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.generated.api_000_produce import (
    ProduceRequest,
    ProduceRequestPartitionProduceData,
    ProduceRequestTopicProduceData,
    ProduceResponse,
)
from wire.generated.api_003_metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from wire.generated.api_010_find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from wire.generated.api_015_describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from wire.generated.api_016_list_groups import ListGroupsRequest, ListGroupsResponse
from wire.generated.api_042_delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from wire.generated.api_068_consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from wire.generated.api_069_consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from wire.generated.api_076_share_group_heartbeat import (
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from wire.generated.api_077_share_group_describe import (
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
)
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
from wire.records import NewRecord

OVERRIDES = {"offsets.topic.num.partitions": "1", "share.coordinator.state.topic.num.partitions": "1",
             "share.coordinator.state.topic.replication.factor": "1"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("share-groups") / "data", OVERRIDES).start()
    try:
        yield b
    finally:
        assert b.stop() == 0


def heartbeat(c: KafkaClient, group: str, member: str, epoch: int,
              topics: list[str] | None = None) -> ShareGroupHeartbeatResponse:
    """ShareGroupHeartbeat at the group's coordinator, found first as clients do (which creates
    ``__consumer_offsets`` and waits for it to load)."""
    if group:
        find_coordinator(c, group)
    return c.send(ShareGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=epoch,
                                             subscribed_topic_names=topics), ShareGroupHeartbeatResponse, 1)


def find_coordinator(c: KafkaClient, group: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        r = c.send(FindCoordinatorRequest(key=group, key_type=0), FindCoordinatorResponse, 3)
        if r.error_code == ErrorCode.NONE:
            return
        assert time.monotonic() < deadline, f"no coordinator for {group}: {ErrorCode.for_code(r.error_code)}"
        time.sleep(0.05)


def topic_id(c: KafkaClient, name: str) -> uuid.UUID:
    r = c.send(MetadataRequest(topics=[MetadataRequestTopic(name=name)]), MetadataResponse, 12)
    return r.topics[0].topic_id


def produce(c: KafkaClient, topic: str, n: int) -> None:
    batch = build_batch([NewRecord(None, f"v{i}".encode()) for i in range(n)])
    r = c.send(ProduceRequest(acks=-1, timeout_ms=10_000, topic_data=[ProduceRequestTopicProduceData(
        name=topic, partition_data=[ProduceRequestPartitionProduceData(index=0, records=batch)])]), ProduceResponse, 9)
    assert r.responses[0].partition_responses[0].error_code == ErrorCode.NONE


def share_fetch(c: KafkaClient, group: str, member: str, epoch: int, tid: uuid.UUID,
                acks: list[tuple[int, int, list[int]]] | None = None, max_records: int = 100) -> ShareFetchResponse:
    return c.send(ShareFetchRequest(
        group_id=group, member_id=member, share_session_epoch=epoch, max_wait_ms=0, min_bytes=1,
        max_records=max_records, batch_size=max_records,
        topics=[ShareFetchRequestFetchTopic(topic_id=tid, partitions=[ShareFetchRequestFetchPartition(
            partition_index=0, acknowledgement_batches=[
                ShareFetchRequestAcknowledgementBatch(first_offset=f, last_offset=la, acknowledge_types=t)
                for f, la, t in acks or []])])]), ShareFetchResponse, 1)


def acknowledge(c: KafkaClient, group: str, member: str, epoch: int, tid: uuid.UUID,
                acks: list[tuple[int, int, list[int]]]) -> ShareAcknowledgeResponse:
    return c.send(ShareAcknowledgeRequest(
        group_id=group, member_id=member, share_session_epoch=epoch,
        topics=[ShareAcknowledgeRequestAcknowledgeTopic(topic_id=tid, partitions=[
            ShareAcknowledgeRequestAcknowledgePartition(partition_index=0, acknowledgement_batches=[
                ShareAcknowledgeRequestAcknowledgementBatch(first_offset=f, last_offset=la, acknowledge_types=t)
                for f, la, t in acks])])]), ShareAcknowledgeResponse, 1)


def acquired(r: ShareFetchResponse) -> list[tuple[int, int, int]]:
    return [(a.first_offset, a.last_offset, a.delivery_count)
            for t in r.responses for p in t.partitions for a in p.acquired_records]


def test_heartbeat_validation_and_epochs(broker: BrokerProcess) -> None:
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        create_topic(c, "hb", 2)
        assert heartbeat(c, "", "m", 0, ["hb"]).error_code == ErrorCode.INVALID_REQUEST
        assert heartbeat(c, "g-hb", "", 0, ["hb"]).error_code == ErrorCode.INVALID_REQUEST
        assert heartbeat(c, "g-hb", "m1", 0, None).error_code == ErrorCode.INVALID_REQUEST
        assert heartbeat(c, "g-hb", "m1", 3, None).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        r1 = heartbeat(c, "g-hb", "m1", 0, ["hb"])
        assert r1.error_code == ErrorCode.NONE and r1.member_epoch == 1
        assert r1.assignment is not None and sorted(r1.assignment.topic_partitions[0].partitions) == [0, 1]
        r2 = heartbeat(c, "g-hb", "m2", 0, ["hb"])
        assert r2.member_epoch == 2
        # the second member took a partition: m1 learns at its next heartbeat, with the new epoch
        r1 = heartbeat(c, "g-hb", "m1", 1)
        assert r1.error_code == ErrorCode.NONE and r1.member_epoch == 2
        assert r1.assignment is not None and len(r1.assignment.topic_partitions[0].partitions) == 1
        assert heartbeat(c, "g-hb", "m1", 2).assignment is None  # unchanged: not repeated
        assert heartbeat(c, "g-hb", "m1", 1).error_code == ErrorCode.FENCED_MEMBER_EPOCH
        groups = c.send(ListGroupsRequest(types_filter=["share"]), ListGroupsResponse, 5).groups
        assert [(g.group_id, g.group_type, g.group_state) for g in groups if g.group_id == "g-hb"] == [
            ("g-hb", "share", "Stable")]
        described = c.send(DescribeGroupsRequest(groups=["g-hb"]), DescribeGroupsResponse, 5).groups[0]
        assert (described.error_code, described.protocol_type, described.group_state) == (0, "share", "Stable")
        assert sorted(m.member_id for m in described.members) == ["m1", "m2"]
        deleted = c.send(DeleteGroupsRequest(groups_names=["g-hb"]), DeleteGroupsResponse, 2).results[0]
        assert deleted.error_code == ErrorCode.NON_EMPTY_GROUP
        assert heartbeat(c, "g-hb", "m2", -1).member_epoch == -1
        assert heartbeat(c, "g-hb", "m2", 3).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert heartbeat(c, "g-hb", "m1", -1).member_epoch == -1
        deleted = c.send(DeleteGroupsRequest(groups_names=["g-hb"]), DeleteGroupsResponse, 2).results[0]
        assert deleted.error_code == ErrorCode.NONE
        groups = c.send(ListGroupsRequest(types_filter=["share"]), ListGroupsResponse, 5).groups
        assert "g-hb" not in [g.group_id for g in groups]


def test_one_group_id_namespace_with_consumer_groups(broker: BrokerProcess) -> None:
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        create_topic(c, "ns", 1)
        assert heartbeat(c, "g-share", "m1", 0, ["ns"]).error_code == ErrorCode.NONE
        find_coordinator(c, "g-consumer")
        joined = c.send(ConsumerGroupHeartbeatRequest(group_id="g-consumer", member_id="c1", member_epoch=0,
                                                      rebalance_timeout_ms=30_000, subscribed_topic_names=["ns"],
                                                      topic_partitions=[]), ConsumerGroupHeartbeatResponse, 0)
        assert joined.error_code == ErrorCode.NONE
        refused = heartbeat(c, "g-consumer", "m1", 0, ["ns"])
        assert (refused.error_code, refused.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND,
                                                               "Group g-consumer is not a share group.")
        wrong = c.send(ConsumerGroupHeartbeatRequest(group_id="g-share", member_id="c1", member_epoch=0,
                                                     rebalance_timeout_ms=30_000, subscribed_topic_names=["ns"],
                                                     topic_partitions=[]), ConsumerGroupHeartbeatResponse, 0)
        assert (wrong.error_code, wrong.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND,
                                                           "Group g-share is not a consumer group.")
        described = c.send(ConsumerGroupDescribeRequest(group_ids=["g-share"]), ConsumerGroupDescribeResponse, 0)
        assert (described.groups[0].error_code, described.groups[0].error_message) == (
            ErrorCode.GROUP_ID_NOT_FOUND, "Group g-share is not a consumer group.")
        share_described = c.send(ShareGroupDescribeRequest(group_ids=["g-consumer", "g-share"]),
                                 ShareGroupDescribeResponse, 1).groups
        assert [(g.error_code, g.error_message) for g in share_described] == [
            (ErrorCode.GROUP_ID_NOT_FOUND, "Group g-consumer is not a share group."), (ErrorCode.NONE, None)]
        assert [m.member_id for m in share_described[1].members] == ["m1"]


def test_sessions_acquisition_and_acknowledgement_errors(broker: BrokerProcess) -> None:
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        create_topic(c, "q", 1)
        tid = topic_id(c, "q")
        produce(c, "q", 5)
        assert heartbeat(c, "g-q", "a", 0, ["q"]).error_code == ErrorCode.NONE
        assert heartbeat(c, "g-q", "b", 0, ["q"]).error_code == ErrorCode.NONE
        # latest by default: nothing yet; then records produced after the first fetch
        assert acquired(share_fetch(c, "g-q", "a", 0, tid)) == []
        produce(c, "q", 2)  # two batches: batch_optimized acquisition stops at batch ends
        produce(c, "q", 2)
        assert acquired(share_fetch(c, "g-q", "a", 1, tid, max_records=2)) == [(5, 6, 1)]
        assert acquired(share_fetch(c, "g-q", "b", 0, tid)) == [(7, 8, 1)]
        # sessions: a wrong epoch, an unknown session, acknowledgements on an initial fetch
        assert share_fetch(c, "g-q", "a", 7, tid).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        assert share_fetch(c, "g-q", "zz", 1, tid).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
        assert share_fetch(c, "g-q", "a", 0, tid, acks=[(5, 5, [1])]).error_code == ErrorCode.INVALID_REQUEST
        # b may not acknowledge a's records; a REJECTs one and RELEASEs the other
        r = acknowledge(c, "g-q", "b", 1, tid, [(5, 5, [1])])
        assert r.responses[0].partitions[0].error_code == ErrorCode.INVALID_RECORD_STATE
        r = acknowledge(c, "g-q", "a", 2, tid, [(5, 6, [3, 2])])
        assert r.responses[0].partitions[0].error_code == ErrorCode.NONE
        # b accepts its records piggy-backed and gets the released one, second delivery
        f = share_fetch(c, "g-q", "b", 2, tid, acks=[(7, 8, [1])])
        assert acquired(f) == [(6, 6, 2)]
        assert f.responses[0].partitions[0].acknowledge_error_code == ErrorCode.NONE


def test_a_member_that_leaves_gives_back_its_records_and_their_delivery(broker: BrokerProcess) -> None:
    """As Kafka's releaseAcquiredRecords: what a leaving member held is available again and its
    delivery is taken back, so the next member gets it on the same delivery count."""
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        create_topic(c, "lv", 1)
        tid = topic_id(c, "lv")
        assert heartbeat(c, "g-lv", "a", 0, ["lv"]).error_code == ErrorCode.NONE
        assert heartbeat(c, "g-lv", "b", 0, ["lv"]).error_code == ErrorCode.NONE
        assert acquired(share_fetch(c, "g-lv", "a", 0, tid)) == []
        produce(c, "lv", 3)
        assert acquired(share_fetch(c, "g-lv", "a", 1, tid)) == [(0, 2, 1)]
        assert acknowledge(c, "g-lv", "a", 2, tid, [(0, 0, [2])]).responses[0].partitions[0].error_code \
            == ErrorCode.NONE  # 0 released by the client: that delivery counts
        assert heartbeat(c, "g-lv", "a", -1).member_epoch == -1
        deadline = time.monotonic() + 10
        got: list[tuple[int, int, int]] = []
        epoch = 0
        while not got and time.monotonic() < deadline:
            got = acquired(share_fetch(c, "g-lv", "b", epoch, tid))
            epoch += 1
            time.sleep(0.05 if not got else 0)
        assert got == [(0, 0, 2), (1, 2, 1)]


def test_a_restart_keeps_acknowledgements_and_delivery_counts(tmp_path_factory: pytest.TempPathFactory) -> None:
    b = BrokerProcess(tmp_path_factory.mktemp("share-restart") / "data", OVERRIDES).start()
    try:
        with KafkaClient.connect(b.bootstrap, timeout_s=20) as c:
            create_topic(c, "r", 1)
            tid = topic_id(c, "r")
            heartbeat(c, "g-r", "a", 0, ["r"])
            assert acquired(share_fetch(c, "g-r", "a", 0, tid)) == []
            produce(c, "r", 4)
            assert acquired(share_fetch(c, "g-r", "a", 1, tid)) == [(0, 3, 1)]
            r = acknowledge(c, "g-r", "a", 2, tid, [(0, 3, [1, 3, 0, 0])])
            assert r.responses[0].partitions[0].error_code == ErrorCode.NONE
        b.restart()
        with KafkaClient.connect(b.bootstrap, timeout_s=20) as c:
            # the membership was replayed from __consumer_offsets: the member keeps its epoch
            again = heartbeat(c, "g-r", "a", 1)
            assert (again.error_code, again.member_epoch) == (ErrorCode.NONE, 1)
            assert again.assignment is not None and again.assignment.topic_partitions[0].partitions == [0]
            # 0 accepted, 1 rejected: gone; 2 and 3 come back on their second delivery
            assert acquired(share_fetch(c, "g-r", "a", 0, tid)) == [(2, 3, 2)]
    finally:
        assert b.stop() == 0
