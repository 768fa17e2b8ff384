"""ConsumerGroupHeartbeat / ConsumerGroupDescribe (KIP-848) on the wire, against a broker
process: validation with Kafka's messages, joining and epochs, commits fenced by member
epoch, the group's type in ListGroups/DescribeGroups, and ``cormorant groups``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from broker.cli import main
from broker.tools.client import KafkaClient
from tests.broker.broker_process import BrokerProcess
from tests.broker.test_group_apis import commit, create_topic, fetch, find
from wire.errors import ErrorCode
from wire.generated.api_009_offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchResponse,
)
from wire.generated.api_015_describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from wire.generated.api_016_list_groups import ListGroupsRequest, ListGroupsResponse
from wire.generated.api_068_consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatRequestTopicPartitions,
    ConsumerGroupHeartbeatResponse,
)
from wire.generated.api_069_consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)

OVERRIDES = {"offsets.topic.num.partitions": "3", "group.consumer.heartbeat.interval.ms": "1000",
             "group.consumer.min.heartbeat.interval.ms": "1000"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("consumer-groups") / "data", OVERRIDES).start()
    try:
        yield b
    finally:
        assert b.stop() == 0


def heartbeat(client: KafkaClient, group: str, member_id: str, epoch: int, *, version: int = 1,
              topics: list[str] | None = None, owned: list[tuple[uuid.UUID, list[int]]] | None = None,
              rebalance_timeout_ms: int = -1, assignor: str | None = None,
              instance_id: str | None = None) -> ConsumerGroupHeartbeatResponse:
    request = ConsumerGroupHeartbeatRequest(
        group_id=group, member_id=member_id, member_epoch=epoch, instance_id=instance_id,
        rebalance_timeout_ms=rebalance_timeout_ms, subscribed_topic_names=topics, server_assignor=assignor,
        topic_partitions=None if owned is None else [
            ConsumerGroupHeartbeatRequestTopicPartitions(topic_id=t, partitions=ps) for t, ps in owned])
    return client.send(request, ConsumerGroupHeartbeatResponse, version)


def join(client: KafkaClient, group: str, member_id: str, topics: list[str],
         **kwargs: object) -> ConsumerGroupHeartbeatResponse:
    return heartbeat(client, group, member_id, 0, topics=topics, owned=[], rebalance_timeout_ms=30_000,
                     **kwargs)  # type: ignore[arg-type]


def test_malformed_heartbeats_get_invalid_request_with_kafka_messages(broker: BrokerProcess) -> None:
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        assert find(c, "cg-bad").error_code == ErrorCode.NONE
        cases = [
            (heartbeat(c, "", "m", 0), "GroupId can't be empty."),
            (heartbeat(c, "cg-bad", "", 0, topics=["t"], owned=[], rebalance_timeout_ms=1), "MemberId can't be empty."),
            (heartbeat(c, "cg-bad", "m", 0, topics=["t"], owned=[]),
             "RebalanceTimeoutMs must be provided in first request."),
            (heartbeat(c, "cg-bad", "m", 0, topics=["t"], rebalance_timeout_ms=1),
             "TopicPartitions must be empty when (re-)joining."),
            (heartbeat(c, "cg-bad", "m", 0, owned=[], rebalance_timeout_ms=1),
             "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."),
            (heartbeat(c, "cg-bad", "m", -2), "InstanceId can't be null."),
            (heartbeat(c, "cg-bad", "m", -3), "MemberEpoch -3 is invalid."),
        ]
        for response, message in cases:
            assert (response.error_code, response.error_message) == (ErrorCode.INVALID_REQUEST, message)
        bad_regex = heartbeat(c, "cg-bad", "m", 0, topics=None, owned=[], rebalance_timeout_ms=1)
        assert bad_regex.error_code == ErrorCode.INVALID_REQUEST  # neither names nor a regex
        request = ConsumerGroupHeartbeatRequest(group_id="cg-bad", member_id="m", member_epoch=0,
                                                rebalance_timeout_ms=1, subscribed_topic_regex="(a",
                                                topic_partitions=[])
        bad_regex = c.send(request, ConsumerGroupHeartbeatResponse, 1)
        assert bad_regex.error_code == ErrorCode.INVALID_REGULAR_EXPRESSION
        assert (bad_regex.error_message or "").startswith("SubscribedTopicRegex `(a` is not a valid regular expression")
        unsupported = join(c, "cg-bad", "m", ["t"], assignor="sticky")
        assert unsupported.error_code == ErrorCode.UNSUPPORTED_ASSIGNOR
        assert unsupported.error_message == "ServerAssignor sticky is not supported. Supported assignors: uniform, range."
        # v0: the coordinator hands out the member id.
        v0 = heartbeat(c, "cg-bad", "", 0, version=0, topics=["t"], owned=[], rebalance_timeout_ms=1000)
        assert v0.error_code == ErrorCode.NONE and v0.member_id
        assert heartbeat(c, "cg-bad", v0.member_id or "", -1, version=0).error_code == ErrorCode.NONE


def test_join_commit_describe_and_list(broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    group, topic = "cg-wire", "cg-wire-topic"
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        create_topic(c, topic, 2)
        assert find(c, group).error_code == ErrorCode.NONE
        joined = join(c, group, "member-1", [topic], assignor="range")
        assert (joined.error_code, joined.member_id, joined.member_epoch) == (ErrorCode.NONE, "member-1", 1)
        assert joined.heartbeat_interval_ms == 1000
        assert joined.assignment is not None
        [tp] = joined.assignment.topic_partitions
        assert sorted(tp.partitions) == [0, 1]
        topic_id = tp.topic_id
        # An ordinary heartbeat with nothing new: no assignment in the answer.
        again = heartbeat(c, group, "member-1", 1)
        assert (again.error_code, again.member_epoch, again.assignment) == (ErrorCode.NONE, 1, None)
        assert heartbeat(c, group, "member-1", 7).error_code == ErrorCode.FENCED_MEMBER_EPOCH
        assert heartbeat(c, group, "stranger", 1).error_code == ErrorCode.UNKNOWN_MEMBER_ID

        # OffsetCommit v9 carries the member epoch: a stale one is refused.
        assert commit(c, group, {(topic, 0): 5}, generation=0, member_id="member-1") == {
            (topic, 0): ErrorCode.STALE_MEMBER_EPOCH}
        assert commit(c, group, {(topic, 0): 5}, generation=1, member_id="nobody") == {
            (topic, 0): ErrorCode.UNKNOWN_MEMBER_ID}
        assert commit(c, group, {(topic, 0): 5}, generation=1, member_id="member-1") == {(topic, 0): ErrorCode.NONE}
        error, offsets = fetch(c, group, {topic: [0]})
        assert error == ErrorCode.NONE and offsets[(topic, 0)][0] == 5

        described = c.send(ConsumerGroupDescribeRequest(group_ids=[group, "cg-none"]), ConsumerGroupDescribeResponse)
        g, missing = described.groups
        assert (g.error_code, g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name) == (
            ErrorCode.NONE, "Stable", 1, 1, "range")
        [m] = g.members
        assert (m.member_id, m.member_epoch, m.subscribed_topic_names, m.member_type) == (
            "member-1", 1, [topic], 1)
        assert [(t.topic_id, t.topic_name, t.partitions) for t in m.assignment.topic_partitions] == [
            (topic_id, topic, [0, 1])]
        assert missing.error_code == ErrorCode.GROUP_ID_NOT_FOUND

        listed = c.send(ListGroupsRequest(types_filter=["consumer"]), ListGroupsResponse, 5)
        assert (group, "consumer", "Stable", "consumer") in [
            (x.group_id, x.protocol_type, x.group_state, x.group_type) for x in listed.groups]
        classic_only = c.send(ListGroupsRequest(types_filter=["classic"]), ListGroupsResponse, 5)
        assert group not in [x.group_id for x in classic_only.groups]
        # As Kafka 4: not a classic group, so DescribeGroups (up to v5) says Dead, without an error.
        [dg] = c.send(DescribeGroupsRequest(groups=[group]), DescribeGroupsResponse, 5).groups
        assert (dg.error_code, dg.group_state, dg.members) == (ErrorCode.NONE, "Dead", [])
        # v6 (KIP-1043) says why.
        [dg6] = c.send(DescribeGroupsRequest(groups=[group]), DescribeGroupsResponse, 6).groups
        assert (dg6.error_code, dg6.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND,
                                                        f"Group {group} is not a classic group.")
        # OffsetFetch v9 names the member: its epoch must be current.
        stale = c.send(OffsetFetchRequest(groups=[OffsetFetchRequestGroup(
            group_id=group, member_id="member-1", member_epoch=0, topics=None)]), OffsetFetchResponse, 9)
        assert stale.groups[0].error_code == ErrorCode.STALE_MEMBER_EPOCH
        unknown = c.send(OffsetFetchRequest(groups=[OffsetFetchRequestGroup(
            group_id=group, member_id="nobody", member_epoch=1, topics=None)]), OffsetFetchResponse, 9)
        assert unknown.groups[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID
        current = c.send(OffsetFetchRequest(groups=[OffsetFetchRequestGroup(
            group_id=group, member_id="member-1", member_epoch=1, topics=None)]), OffsetFetchResponse, 9)
        assert current.groups[0].error_code == ErrorCode.NONE
        assert [(t.name, p.partition_index, p.committed_offset) for t in current.groups[0].topics
                for p in t.partitions] == [(topic, 0, 5)]
        assert heartbeat(c, "cg-never", "m", 3).error_code == ErrorCode.GROUP_ID_NOT_FOUND

        code, out, _ = (main(["groups", "--bootstrap-server", broker.bootstrap, "list", "--state", "--type"]),
                        *capsys.readouterr())
        assert code == 0 and [group, "Stable", "consumer"] in [line.split() for line in out.splitlines()]
        code = main(["groups", "--bootstrap-server", broker.bootstrap, "describe", group])
        out = capsys.readouterr().out
        assert code == 0
        lines = [line.split() for line in out.splitlines()]
        assert [group, topic, "0", "5", "0", "0", "member-1"] in [line[:7] for line in lines]
        assert any(line[:2] == [group, "member-1"] and line[-1] == f"{topic}(0,1)" for line in lines)

        # The member acknowledges nothing changed and leaves: the group is empty, offsets stay.
        left = heartbeat(c, group, "member-1", -1)
        assert (left.error_code, left.member_epoch) == (ErrorCode.NONE, -1)
        assert commit(c, group, {(topic, 1): 3}) == {(topic, 1): ErrorCode.NONE}  # an admin commit, group empty
        [g] = c.send(ConsumerGroupDescribeRequest(group_ids=[group]), ConsumerGroupDescribeResponse).groups
        assert (g.group_state, g.members) == ("Empty", [])
        # An empty consumer group can be deleted, with its offsets.
        assert main(["groups", "--bootstrap-server", broker.bootstrap, "delete", group]) == 0
        [g] = c.send(ConsumerGroupDescribeRequest(group_ids=[group]), ConsumerGroupDescribeResponse).groups
        assert g.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        assert fetch(c, group, {topic: [0, 1]})[1][(topic, 0)][0] == -1


def test_a_group_with_members_is_not_deleted(broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    group, topic = "cg-keep", "cg-keep-topic"
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        create_topic(c, topic, 1)
        assert find(c, group).error_code == ErrorCode.NONE
        assert join(c, group, "m", [topic]).error_code == ErrorCode.NONE
        assert main(["groups", "--bootstrap-server", broker.bootstrap, "delete", group]) == 1
        assert "NON_EMPTY_GROUP" in capsys.readouterr().err
        [g] = c.send(ConsumerGroupDescribeRequest(group_ids=[group]), ConsumerGroupDescribeResponse).groups
        assert (g.error_code, [m.member_id for m in g.members]) == (ErrorCode.NONE, ["m"])
