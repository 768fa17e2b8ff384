"""The group APIs at every version against a real broker process, through broker.tools.client.

Clients' behaviour is covered by compat_tests/test_groups.py; these tests pin what
the wire says per version (fields that appear, errors Kafka gives) and what
survives a restart.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.tools.client import KafkaClient
from tests.broker.broker_process import BrokerProcess
from wire.errors import ErrorCode
from wire.generated.api_008_offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)
from wire.generated.api_009_offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
    OffsetFetchRequestTopics,
    OffsetFetchResponse,
)
from wire.generated.api_010_find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from wire.generated.api_011_join_group import (
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
)
from wire.generated.api_012_heartbeat import HeartbeatRequest, HeartbeatResponse
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
from wire.generated.api_015_describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from wire.generated.api_016_list_groups import ListGroupsRequest, ListGroupsResponse
from wire.generated.api_019_create_topics import (
    CreateTopicsRequest,
    CreateTopicsRequestCreatableTopic,
    CreateTopicsResponse,
)
from wire.generated.api_042_delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from wire.generated.api_047_offset_delete import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
    OffsetDeleteResponse,
)
from wire.generated.data.consumer_protocol_subscription import ConsumerProtocolSubscription

OVERRIDES = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "5"}
NONE = ErrorCode.NONE


def subscription(*topics: str) -> bytes:
    return struct.pack(">h", 0) + ConsumerProtocolSubscription(topics=list(topics)).encode(0)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("groups") / "data", OVERRIDES).start()
    try:
        yield b
    finally:
        assert b.stop() == 0


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[KafkaClient]:
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        yield c


def create_topic(client: KafkaClient, name: str, partitions: int) -> None:
    r = client.send(CreateTopicsRequest(topics=[CreateTopicsRequestCreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1)], timeout_ms=10_000), CreateTopicsResponse)
    assert r.topics[0].error_code in (NONE, ErrorCode.TOPIC_ALREADY_EXISTS)


def find(client: KafkaClient, group: str, version: int = 3, key_type: int = 0) -> FindCoordinatorResponse:
    return client.send(FindCoordinatorRequest(key=group, key_type=key_type), FindCoordinatorResponse, version)


def join(client: KafkaClient, group: str, member_id: str = "", version: int = 9, instance: str | None = None,
         session_ms: int = 30_000, topic: str = "t") -> JoinGroupResponse:
    request = JoinGroupRequest(group_id=group, session_timeout_ms=session_ms, rebalance_timeout_ms=30_000,
                               member_id=member_id, group_instance_id=instance, protocol_type="consumer",
                               protocols=[JoinGroupRequestProtocol(name="range", metadata=subscription(topic))])
    return client.send(request, JoinGroupResponse, version)


def join_member(client: KafkaClient, group: str, version: int = 9, **kwargs: object) -> JoinGroupResponse:
    r = join(client, group, version=version, **kwargs)  # type: ignore[arg-type]
    if r.error_code == ErrorCode.MEMBER_ID_REQUIRED:
        r = join(client, group, r.member_id, version=version, **kwargs)  # type: ignore[arg-type]
    assert r.error_code == NONE, ErrorCode.for_code(r.error_code)
    return r


def sync(client: KafkaClient, group: str, generation: int, member_id: str, assignment: bytes = b"a",
         version: int = 5) -> SyncGroupResponse:
    request = SyncGroupRequest(group_id=group, generation_id=generation, member_id=member_id,
                               protocol_type="consumer", protocol_name="range",
                               assignments=[SyncGroupRequestAssignment(member_id=member_id, assignment=assignment)])
    return client.send(request, SyncGroupResponse, version)


def commit(client: KafkaClient, group: str, offsets: dict[tuple[str, int], int], version: int = 9,
           generation: int = -1, member_id: str = "", metadata: str | None = "m") -> dict[tuple[str, int], int]:
    topics: dict[str, list[OffsetCommitRequestPartition]] = {}
    for (t, p), o in offsets.items():
        topics.setdefault(t, []).append(OffsetCommitRequestPartition(
            partition_index=p, committed_offset=o, committed_leader_epoch=4, committed_metadata=metadata))
    r = client.send(OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=generation,
                                        member_id=member_id, topics=[OffsetCommitRequestTopic(name=t, partitions=ps)
                                                                     for t, ps in topics.items()]),
                    OffsetCommitResponse, version)
    return {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}


def fetch(client: KafkaClient, group: str, partitions: dict[str, list[int]] | None,
          version: int = 9) -> tuple[int, dict[tuple[str, int], tuple[int, int, str | None, int]]]:
    if version >= 8:
        topics = None if partitions is None else [OffsetFetchRequestTopics(name=t, partition_indexes=ps)
                                                  for t, ps in partitions.items()]
        r = client.send(OffsetFetchRequest(groups=[OffsetFetchRequestGroup(group_id=group, topics=topics)]),
                        OffsetFetchResponse, version)
        [g] = r.groups
        return g.error_code, {(t.name, p.partition_index): (p.committed_offset, p.committed_leader_epoch, p.metadata,
                                                            p.error_code) for t in g.topics for p in t.partitions}
    old = None if partitions is None else [OffsetFetchRequestTopic(name=t, partition_indexes=ps)
                                           for t, ps in partitions.items()]
    r = client.send(OffsetFetchRequest(group_id=group, topics=old), OffsetFetchResponse, version)
    return r.error_code, {(t.name, p.partition_index): (p.committed_offset, p.committed_leader_epoch, p.metadata,
                                                        p.error_code) for t in r.topics for p in t.partitions}


def test_find_coordinator_every_version(client: KafkaClient, broker: BrokerProcess) -> None:
    host, port = "127.0.0.1", broker.port
    for version in range(4):
        r = find(client, "fc-group", version)
        assert (r.error_code, r.node_id, r.host, r.port) == (NONE, 1, host, port), version
        if version >= 1:
            assert r.error_message == "NONE"  # Kafka's Errors.NONE.message()
    for version in (4, 5, 6):
        r = client.send(FindCoordinatorRequest(key_type=0, coordinator_keys=["a", "b"]), FindCoordinatorResponse,
                        version)
        assert [(c.key, c.error_code, c.node_id, c.port) for c in r.coordinators] == [
            ("a", NONE, 1, port), ("b", NONE, 1, port)]
    share = client.send(FindCoordinatorRequest(key_type=2, coordinator_keys=["s"]), FindCoordinatorResponse, 5)
    assert share.coordinators[0].error_code == ErrorCode.INVALID_REQUEST
    # key type SHARE from v6: a key not of the form groupId:topicId:partition is INVALID_REQUEST, as
    # in Kafka (well-formed keys: tests/broker/share/test_find_share_coordinator.py)
    share = client.send(FindCoordinatorRequest(key_type=2, coordinator_keys=["s"]), FindCoordinatorResponse, 6)
    assert share.coordinators[0].error_code == ErrorCode.INVALID_REQUEST
    r = find(client, "x", 3, key_type=9)
    assert (r.error_code, r.node_id, r.port) == (ErrorCode.INVALID_REQUEST, -1, -1)


def test_join_sync_heartbeat_leave_at_every_version(client: KafkaClient) -> None:
    for version in range(10):
        group = f"jg-{version}"
        first = join(client, group, version=version)
        if version >= 4:
            assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED and first.member_id.startswith("cormorant-admin-")
            assert first.generation_id == -1
            r = join(client, group, first.member_id, version=version)
        else:
            r = first
        assert (r.error_code, r.generation_id, r.leader, r.protocol_name) == (NONE, 1, r.member_id, "range")
        assert r.protocol_type == ("consumer" if version >= 7 else None)
        assert [m.member_id for m in r.members] == [r.member_id]
        s = sync(client, group, 1, r.member_id, b"x", version=min(version, 5))
        assert (s.error_code, s.assignment) == (NONE, b"x")
        assert s.protocol_name == ("range" if version >= 5 else None)
        hb_version = min(version, 4)
        hb = client.send(HeartbeatRequest(group_id=group, generation_id=1, member_id=r.member_id),
                         HeartbeatResponse, hb_version)
        assert hb.error_code == NONE
        hb = client.send(HeartbeatRequest(group_id=group, generation_id=0, member_id=r.member_id),
                         HeartbeatResponse, hb_version)
        assert hb.error_code == ErrorCode.ILLEGAL_GENERATION
        leave_version = min(version, 5)
        if leave_version >= 3:
            lr = client.send(LeaveGroupRequest(group_id=group, members=[
                LeaveGroupRequestMemberIdentity(member_id=r.member_id), LeaveGroupRequestMemberIdentity(member_id="x")]),
                LeaveGroupResponse, leave_version)
            assert lr.error_code == NONE
            assert [(m.member_id, m.error_code) for m in lr.members] == [
                (r.member_id, NONE), ("x", ErrorCode.UNKNOWN_MEMBER_ID)]
        else:
            lr = client.send(LeaveGroupRequest(group_id=group, member_id=r.member_id), LeaveGroupResponse,
                             leave_version)
            assert lr.error_code == NONE
            lr = client.send(LeaveGroupRequest(group_id=group, member_id="x"), LeaveGroupResponse, leave_version)
            assert lr.error_code == ErrorCode.UNKNOWN_MEMBER_ID
        d = client.send(DescribeGroupsRequest(groups=[group]), DescribeGroupsResponse)
        assert (d.groups[0].group_state, d.groups[0].members) == ("Empty", [])


def test_group_errors(client: KafkaClient) -> None:
    assert join(client, "").error_code == ErrorCode.INVALID_GROUP_ID
    hb = client.send(HeartbeatRequest(group_id="", generation_id=1, member_id="m"), HeartbeatResponse)
    assert hb.error_code == ErrorCode.INVALID_GROUP_ID
    assert join(client, "ge", session_ms=100).error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    assert join(client, "ge", "unknown").error_code == ErrorCode.UNKNOWN_MEMBER_ID
    s = client.send(SyncGroupRequest(group_id="ge", generation_id=1, member_id="m"), SyncGroupResponse, 5)
    assert s.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL  # v5 needs protocol type and name
    r = join_member(client, "ge-static", instance="i-1")
    again = join(client, "ge-static", r.member_id + "-old", instance="i-1")
    assert again.error_code == ErrorCode.FENCED_INSTANCE_ID


def test_offset_commit_and_fetch_at_every_version(client: KafkaClient) -> None:
    create_topic(client, "oc", 2)
    # v0 lived in ZooKeeper: a KRaft broker answers UNSUPPORTED_VERSION.
    assert commit(client, "oc-g", {("oc", 0): 1}, version=0) == {("oc", 0): ErrorCode.UNSUPPORTED_VERSION}
    assert fetch(client, "oc-g", {"oc": [0]}, version=0)[1][("oc", 0)][3] == ErrorCode.UNSUPPORTED_VERSION
    for version in range(1, 10):
        group = f"oc-{version}"
        assert commit(client, group, {("oc", 0): 10 + version, ("oc", 1): 20, ("nope", 0): 1}, version=version) == {
            ("oc", 0): NONE, ("oc", 1): NONE, ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        for fetch_version in range(1, 10):
            error, got = fetch(client, group, {"oc": [0, 1], "other": [0]}, version=fetch_version)
            assert error == NONE
            epoch = 4 if version >= 6 and fetch_version >= 5 else -1
            assert got[("oc", 0)] == (10 + version, epoch, "m", NONE), (version, fetch_version)
            assert got[("other", 0)][0] == -1
        # null topics: every partition with an offset (v2+)
        assert set(fetch(client, group, None, version=2)[1]) == {("oc", 0), ("oc", 1)}
    # Several groups in one request (v8).
    r = client.send(OffsetFetchRequest(groups=[
        OffsetFetchRequestGroup(group_id="oc-8", topics=None),
        OffsetFetchRequestGroup(group_id="oc-9", topics=[OffsetFetchRequestTopics(name="oc", partition_indexes=[0])]),
    ], require_stable=True), OffsetFetchResponse, 8)
    assert [(g.group_id, g.error_code, len([p for t in g.topics for p in t.partitions])) for g in r.groups] == [
        ("oc-8", NONE, 2), ("oc-9", NONE, 1)]
    # Null metadata is stored as "".
    commit(client, "oc-null", {("oc", 0): 1}, metadata=None)
    assert fetch(client, "oc-null", {"oc": [0]})[1][("oc", 0)][2] == ""


def test_members_commit_with_their_generation(client: KafkaClient) -> None:
    create_topic(client, "mc", 1)
    r = join_member(client, "mc-g")
    assert sync(client, "mc-g", r.generation_id, r.member_id).error_code == NONE
    assert commit(client, "mc-g", {("mc", 0): 5}) == {("mc", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    assert commit(client, "mc-g", {("mc", 0): 5}, generation=r.generation_id + 1, member_id=r.member_id) == {
        ("mc", 0): ErrorCode.ILLEGAL_GENERATION}
    assert commit(client, "mc-g", {("mc", 0): 5}, generation=r.generation_id, member_id=r.member_id) == {
        ("mc", 0): NONE}


def test_list_describe_delete_and_offset_delete(client: KafkaClient) -> None:
    create_topic(client, "ad", 1)
    r = join_member(client, "ad-live", topic="ad")
    sync(client, "ad-live", r.generation_id, r.member_id, b"assigned")
    commit(client, "ad-empty", {("ad", 0): 3})
    for version in range(6):
        lg = client.send(ListGroupsRequest(), ListGroupsResponse, version)
        listed = {g.group_id: g for g in lg.groups}
        assert lg.error_code == NONE and {"ad-live", "ad-empty"} <= set(listed)
        assert listed["ad-live"].protocol_type == "consumer"
        assert listed["ad-live"].group_state == ("Stable" if version >= 4 else "")
        assert listed["ad-live"].group_type == ("classic" if version >= 5 else "")
    filtered = client.send(ListGroupsRequest(states_filter=["empty"]), ListGroupsResponse, 4)
    assert "ad-empty" in {g.group_id for g in filtered.groups} and "ad-live" not in {g.group_id for g in filtered.groups}
    none = client.send(ListGroupsRequest(types_filter=["consumer"]), ListGroupsResponse, 5)
    assert none.groups == []
    for version in range(6):
        d = client.send(DescribeGroupsRequest(groups=["ad-live", "ad-missing"],
                                              include_authorized_operations=version >= 3),
                        DescribeGroupsResponse, version)
        live, missing = d.groups
        assert (live.error_code, live.group_state, live.protocol_type, live.protocol_data) == (
            NONE, "Stable", "consumer", "range")
        [m] = live.members
        assert (m.member_id, m.client_id, m.client_host, m.member_assignment) == (
            r.member_id, "cormorant-admin", "/127.0.0.1", b"assigned")
        assert m.member_metadata == subscription("ad")
        assert (missing.error_code, missing.group_state) == (NONE, "Dead")
        assert live.authorized_operations == (328 if version >= 3 else -(2**31))
    dg = client.send(DeleteGroupsRequest(groups_names=["ad-live", "ad-empty", "ad-missing", "ad-empty"]),
                     DeleteGroupsResponse)
    assert [(x.group_id, x.error_code) for x in dg.results] == [
        ("ad-live", ErrorCode.NON_EMPTY_GROUP), ("ad-empty", NONE), ("ad-missing", ErrorCode.GROUP_ID_NOT_FOUND)]
    commit(client, "ad-live", {("ad", 0): 1}, generation=r.generation_id, member_id=r.member_id)
    od = client.send(OffsetDeleteRequest(group_id="ad-live", topics=[
        OffsetDeleteRequestTopic(name="ad", partitions=[OffsetDeleteRequestPartition(partition_index=0)]),
        OffsetDeleteRequestTopic(name="nope", partitions=[OffsetDeleteRequestPartition(partition_index=0)])]),
        OffsetDeleteResponse)
    assert od.error_code == NONE
    assert {(t.name, p.partition_index): p.error_code for t in od.topics for p in t.partitions} == {
        ("ad", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    od = client.send(OffsetDeleteRequest(group_id="ad-missing", topics=[]), OffsetDeleteResponse)
    assert (od.error_code, od.topics) == (ErrorCode.GROUP_ID_NOT_FOUND, [])


def restarted_offsets(tmp_path: Path, stop: str) -> None:
    b = BrokerProcess(tmp_path / "data", OVERRIDES).start()
    try:
        with KafkaClient.connect(b.bootstrap, timeout_s=20) as c:
            create_topic(c, "rs", 3)
            find(c, "rs-g")
            for i in range(20):
                assert commit(c, "rs-g", {("rs", i % 3): i}) == {("rs", i % 3): NONE}
            r = join_member(c, "rs-member")
            sync(c, "rs-member", r.generation_id, r.member_id, b"mine")
        if stop == "kill":
            b.kill9()
            b.start()
        else:
            assert b.stop() == 0
            b.start()
        with KafkaClient.connect(b.bootstrap, timeout_s=20) as c:
            deadline = time.monotonic() + 20
            while True:
                error, got = fetch(c, "rs-g", None)
                if error != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert error == NONE
            assert {tp: v[0] for tp, v in got.items()} == {("rs", 0): 18, ("rs", 1): 19, ("rs", 2): 17}
            # The stable member is back in its generation, with its assignment, until its session runs out.
            d = c.send(DescribeGroupsRequest(groups=["rs-member"]), DescribeGroupsResponse)
            assert d.groups[0].group_state == "Stable"
            assert d.groups[0].members[0].member_assignment == b"mine"
            hb = c.send(HeartbeatRequest(group_id="rs-member", generation_id=r.generation_id, member_id=r.member_id),
                        HeartbeatResponse)
            assert hb.error_code == NONE
    finally:
        b.stop()


def test_offsets_and_groups_survive_a_graceful_restart(tmp_path: Path) -> None:
    restarted_offsets(tmp_path, "graceful")


def test_offsets_and_groups_survive_sigkill(tmp_path: Path) -> None:
    restarted_offsets(tmp_path, "kill")


def test_shutdown_answers_a_waiting_join_at_once(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", OVERRIDES).start()
    try:
        with KafkaClient.connect(b.bootstrap, timeout_s=20) as a, KafkaClient.connect(b.bootstrap, timeout_s=20) as c:
            assert join(a, "sd").error_code == ErrorCode.NOT_COORDINATOR  # no __consumer_offsets yet
            assert find(a, "sd").error_code == NONE
            r = join_member(a, "sd")
            sync(a, "sd", r.generation_id, r.member_id)
            first = join(c, "sd")
            answers: list[JoinGroupResponse] = []
            t = threading.Thread(target=lambda: answers.append(join(c, "sd", first.member_id)), daemon=True)
            t.start()
            time.sleep(0.5)  # the join waits for the first member to rejoin
            assert not answers
            started = time.monotonic()
            assert b.stop() == 0
            assert time.monotonic() - started < 5
            t.join(5)
            assert answers and answers[0].error_code == ErrorCode.NOT_COORDINATOR
    finally:
        b.stop()
