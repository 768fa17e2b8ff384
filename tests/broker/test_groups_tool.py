"""``cormorant groups`` against a real broker: list, describe (offsets, lag, members), delete,
reset-offsets."""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest

from broker.cli import main
from broker.tools.client import KafkaClient
from tests.broker.broker_process import BrokerProcess
from tests.broker.test_group_apis import OVERRIDES, commit, create_topic, fetch, find, join_member
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.generated.api_000_produce import (
    ProduceRequest,
    ProduceRequestPartitionProduceData,
    ProduceRequestTopicProduceData,
    ProduceResponse,
)
from wire.generated.api_013_leave_group import (
    LeaveGroupRequest,
    LeaveGroupRequestMemberIdentity,
    LeaveGroupResponse,
)
from wire.generated.api_014_sync_group import (
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)
from wire.generated.data.consumer_protocol_assignment import (
    ConsumerProtocolAssignment,
    ConsumerProtocolAssignmentTopicPartition,
)
from wire.records import NewRecord


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("groups-tool") / "data", OVERRIDES).start()
    try:
        yield b
    finally:
        assert b.stop() == 0


def groups(broker: BrokerProcess, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["groups", "--bootstrap-server", broker.bootstrap, *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def produce(client: KafkaClient, topic: str, partition: int, count: int) -> None:
    batch = build_batch([NewRecord(None, f"v{i}".encode()) for i in range(count)])
    r = client.send(ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[ProduceRequestTopicProduceData(
        name=topic, partition_data=[ProduceRequestPartitionProduceData(index=partition, records=batch)])]),
        ProduceResponse)
    assert r.responses[0].partition_responses[0].error_code == ErrorCode.NONE


def consumer_assignment(topic: str, partitions: list[int]) -> bytes:
    return struct.pack(">h", 0) + ConsumerProtocolAssignment(
        assigned_partitions=[ConsumerProtocolAssignmentTopicPartition(topic, partitions)]).encode(0)


def rows(out: str, first: str) -> list[list[str]]:
    """The data rows of the table whose header starts with ``first`` columns."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == first.split())
    table = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        table.append(line.split())
    return table


def test_list_describe_delete_and_reset(broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        create_topic(c, "gt", 2)
        produce(c, "gt", 0, 10)
        produce(c, "gt", 1, 4)
        find(c, "gt-live")
        commit(c, "gt-idle", {("gt", 0): 3, ("gt", 1): 4})
        member = join_member(c, "gt-live", topic="gt")
        s = c.send(SyncGroupRequest(group_id="gt-live", generation_id=member.generation_id,
                                    member_id=member.member_id, protocol_type="consumer", protocol_name="range",
                                    assignments=[SyncGroupRequestAssignment(
                                        member_id=member.member_id, assignment=consumer_assignment("gt", [0, 1]))]),
                   SyncGroupResponse)
        assert s.error_code == ErrorCode.NONE
        commit(c, "gt-live", {("gt", 0): 7}, generation=member.generation_id, member_id=member.member_id)

        code, out, _ = groups(broker, capsys, "list")
        assert code == 0 and {"gt-idle", "gt-live"} <= set(out.split())
        code, out, _ = groups(broker, capsys, "list", "--state")
        assert ["gt-live", "Stable"] in [line.split() for line in out.splitlines()]

        code, out, _ = groups(broker, capsys, "describe", "gt-live")
        assert code == 0
        assert rows(out, "GROUP COORDINATOR")[0][-2:] == ["Stable", "1"]
        offsets = rows(out, "GROUP TOPIC")
        assert [r[:6] for r in offsets] == [["gt-live", "gt", "0", "7", "10", "3"],
                                            ["gt-live", "gt", "1", "-", "4", "-"]]
        assert all(r[6] == member.member_id and r[7] == "/127.0.0.1" and r[8] == "cormorant-admin"
                   for r in offsets)
        [m] = rows(out, "GROUP CONSUMER-ID")
        assert m == ["gt-live", member.member_id, "-", "/127.0.0.1", "cormorant-admin", "2", "gt(0,1)"]

        code, out, _ = groups(broker, capsys, "describe", "gt-idle", "--offsets")
        assert "Consumer group 'gt-idle' has no active members." in out
        assert rows(out, "GROUP TOPIC") == [
            ["gt-idle", "gt", "0", "3", "10", "7", "-", "-", "-"],
            ["gt-idle", "gt", "1", "4", "4", "0", "-", "-", "-"]]

        code, _, err = groups(broker, capsys, "describe", "gt-nobody")
        assert code == 1 and "Consumer group 'gt-nobody' does not exist." in err

        code, _, err = groups(broker, capsys, "delete", "gt-live")
        assert code == 1 and "NON_EMPTY_GROUP" in err
        code, _, err = groups(broker, capsys, "reset-offsets", "--group", "gt-live", "--topic", "gt", "--to-earliest",
                              "--execute")
        assert code == 1 and "current state is Stable" in err

        # An idle group: a dry run shows the plan, --execute commits it (clamped to the log).
        code, out, err = groups(broker, capsys, "reset-offsets", "--group", "gt-idle", "--topic", "gt",
                                "--to-latest")
        assert code == 0 and "--execute option is missing" in err
        assert [r[-1] for r in rows(out, "GROUP TOPIC")] == ["10", "4"]
        assert {tp: v[0] for tp, v in fetch(c, "gt-idle", None)[1].items()} == {("gt", 0): 3, ("gt", 1): 4}
        code, out, _ = groups(broker, capsys, "reset-offsets", "--group", "gt-idle", "--topic", "gt:1",
                              "--to-offset", "99", "--execute")
        assert code == 0 and rows(out, "GROUP TOPIC") == [["gt-idle", "gt", "1", "4"]]
        code, out, _ = groups(broker, capsys, "reset-offsets", "--group", "gt-idle", "--topic", "gt",
                              "--to-earliest", "--execute")
        assert {tp: v[0] for tp, v in fetch(c, "gt-idle", None)[1].items()} == {("gt", 0): 0, ("gt", 1): 0}

        lr = c.send(LeaveGroupRequest(group_id="gt-live", members=[
            LeaveGroupRequestMemberIdentity(member_id=member.member_id)]), LeaveGroupResponse)
        assert lr.error_code == ErrorCode.NONE
        code, out, _ = groups(broker, capsys, "delete", "gt-live")
        assert code == 0 and "Deletion of requested consumer groups ('gt-live') was successful." in out
        code, out, _ = groups(broker, capsys, "list")
        assert "gt-live" not in out.split()
