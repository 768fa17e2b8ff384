"""Share groups (KIP-932) at the group coordinator: heartbeats, Kafka's share-group records
in ``__consumer_offsets``, and a shard loaded from them (a coordinator that took over)."""

from __future__ import annotations

import struct
import uuid

from broker.coordinator.runtime import ReplayedRecord
from broker.group.consumer_shard import ConsumerHeartbeat, ConsumerHeartbeatResult
from broker.group.coordinator_shard import GroupCoordinatorShard
from broker.group.group import JoinResult
from broker.group.records import OffsetAndMetadata
from broker.group.shard_types import GroupConfig, JoinRequest
from broker.group.share_groups import ShareGroupConfig, ShareHeartbeatResult
from broker.group.share_records import (
    SHARE_GROUP_METADATA,
    SHARE_MEMBER_METADATA,
    SHARE_PARTITION_METADATA,
    share_group_epoch_record,
    share_member_record,
    share_partitions_record,
)
from broker.share.group import ShareMember
from tests.broker.group.fake import START_MS, Box, FakeContext, subscription
from wire.errors import ErrorCode
from wire.generated.coordinator.share_group_member_metadata_key import ShareGroupMemberMetadataKey
from wire.generated.coordinator.share_group_member_metadata_value import (
    ShareGroupMemberMetadataValue,
)
from wire.generated.coordinator.share_group_metadata_key import ShareGroupMetadataKey
from wire.generated.coordinator.share_group_metadata_value import ShareGroupMetadataValue
from wire.generated.coordinator.share_group_partition_metadata_key import (
    ShareGroupPartitionMetadataKey,
)
from wire.generated.coordinator.share_group_partition_metadata_value import (
    ShareGroupPartitionMetadataValue,
)
from wire.primitives import Message

A, B = uuid.UUID(int=0xA), uuid.UUID(int=0xB)
TOPICS = {"a": (A, 3), "b": (B, 2)}
NAMES = {A: "a", B: "b"}
SESSION_MS = 45_000


class ShareDriver:
    """A group coordinator shard and its fake context, driven as share consumers do."""

    def __init__(self, ctx: FakeContext | None = None, topics: dict[str, tuple[uuid.UUID, int]] | None = None) -> None:
        self.ctx = ctx or FakeContext()
        self.topics = dict(TOPICS if topics is None else topics)
        self.shard = GroupCoordinatorShard(
            self.ctx, GroupConfig(initial_rebalance_delay_ms=0),
            share_config=ShareGroupConfig(session_timeout_ms=SESSION_MS, heartbeat_interval_ms=5_000, max_size=3),
            share_topics=lambda names: {n: self.topics[n] for n in names if n in self.topics},
            topic_name=NAMES.get)
        self.removed: list[tuple[str, str]] = []
        self.shard.share.on_member_removed = lambda g, m: self.removed.append((g, m))

    def load(self, records: list[ReplayedRecord]) -> ShareDriver:
        for r in records:
            self.shard.replay(r)
        self.shard.on_loaded()
        return self

    def heartbeat(self, member: str, epoch: int, topics: list[str] | None = None, group: str = "g",
                  rack: str | None = None) -> ShareHeartbeatResult:
        out: list[ShareHeartbeatResult] = []
        self.shard.share_heartbeat(group, member, epoch, rack, topics, "client-" + member, "/127.0.0.1", out.append)
        self.ctx.after_op()
        assert len(out) == 1
        return out[0]

    def taken_over(self) -> ShareDriver:
        """A new coordinator that loaded this partition's log."""
        return ShareDriver(FakeContext(), self.topics).load(self.ctx.replayed())


def decoded(record_key: bytes, record_value: bytes | None) -> tuple[int, object, object]:
    (version,) = struct.unpack_from(">h", record_key)
    key_type: type[Message] = {SHARE_PARTITION_METADATA: ShareGroupPartitionMetadataKey, SHARE_MEMBER_METADATA:
                ShareGroupMemberMetadataKey, SHARE_GROUP_METADATA: ShareGroupMetadataKey}[version]
    value_type: type[Message] = {SHARE_PARTITION_METADATA: ShareGroupPartitionMetadataValue, SHARE_MEMBER_METADATA:
                  ShareGroupMemberMetadataValue, SHARE_GROUP_METADATA: ShareGroupMetadataValue}[version]
    key = key_type.decode(record_key[2:], version)
    value = None
    if record_value is not None:
        assert struct.unpack_from(">h", record_value) == (0,)
        value = value_type.decode(record_value[2:], 0)
    return version, key, value


def test_the_records_are_kafkas_share_group_records() -> None:
    epoch = share_group_epoch_record("g", 7)
    assert decoded(epoch.key, epoch.value) == (SHARE_GROUP_METADATA, ShareGroupMetadataKey(group_id="g"),
                                               ShareGroupMetadataValue(epoch=7))
    member = share_member_record("g", "m1", ShareMember("m1", 3, "cid", "/10.0.0.1", "r1", ("b", "a")))
    assert decoded(member.key, member.value) == (
        SHARE_MEMBER_METADATA, ShareGroupMemberMetadataKey(group_id="g", member_id="m1"),
        ShareGroupMemberMetadataValue(rack_id="r1", client_id="cid", client_host="/10.0.0.1",
                                      subscribed_topic_names=["a", "b"]))
    parts = share_partitions_record("g", {(B, 1), (A, 2), (A, 0)}, NAMES.get)
    version, key, value = decoded(parts.key, parts.value)
    assert (version, key) == (SHARE_PARTITION_METADATA, ShareGroupPartitionMetadataKey(group_id="g"))
    assert isinstance(value, ShareGroupPartitionMetadataValue)
    assert [(t.topic_id, t.topic_name, t.partitions) for t in value.initialized_topics] == [
        (A, "a", [0, 2]), (B, "b", [1])]
    assert value.deleting_topics == []
    # tombstones
    assert share_group_epoch_record("g", None).value is None
    assert share_member_record("g", "m1", None).value is None
    assert share_partitions_record("g", None).value is None


def test_heartbeats_write_records_and_a_new_coordinator_has_the_same_group() -> None:
    d = ShareDriver()
    r1 = d.heartbeat("m1", 0, ["a"], rack="r1")
    assert (r1.error, r1.member_epoch, r1.assignment) == (ErrorCode.NONE, 1, frozenset({(A, 0), (A, 1), (A, 2)}))
    assert r1.heartbeat_interval_ms == 5_000
    r2 = d.heartbeat("m2", 0, ["a", "b"])
    assert r2.member_epoch == 2
    r1 = d.heartbeat("m1", 1)
    assert r1.member_epoch == 2 and r1.assignment is not None and len(r1.assignment) < 3
    m2_assignment = d.shard.share.groups["g"].members["m2"].assignment
    d.shard.share.cover("g", [(A, 0), (B, 1)])
    d.ctx.flush()
    kinds = [struct.unpack_from(">h", a.record.key)[0] for a in d.ctx.log]
    assert kinds == [SHARE_MEMBER_METADATA, SHARE_GROUP_METADATA] * 2 + [SHARE_PARTITION_METADATA]

    new = d.taken_over()
    group = new.shard.share.groups["g"]
    before = d.shard.share.groups["g"]
    assert group.group_epoch == before.group_epoch == 2
    assert group.state_partitions == {(A, 0), (B, 1)}
    assert {m: (x.subscribed_topics, x.rack_id, x.client_id, x.assignment) for m, x in group.members.items()} == {
        m: (x.subscribed_topics, x.rack_id, x.client_id, x.assignment) for m, x in before.members.items()}
    # the members carry on with the epochs they have: no rejoin, the same assignment
    r1 = new.heartbeat("m1", 2)
    assert (r1.error, r1.member_epoch) == (ErrorCode.NONE, 2)
    r2 = new.heartbeat("m2", 2)
    assert (r2.error, r2.member_epoch, r2.assignment) == (ErrorCode.NONE, 2, m2_assignment)
    # from then on a member is held to its epoch again
    assert new.heartbeat("m1", 1).error is ErrorCode.FENCED_MEMBER_EPOCH
    assert new.heartbeat("m2", 2).assignment is None
    # sessions restarted with the load: a member that never comes back is removed
    new.heartbeat("m1", 2)
    new.ctx.advance(SESSION_MS - 1)
    new.heartbeat("m1", 2)
    new.ctx.advance(2)
    assert set(new.shard.share.groups["g"].members) == {"m1"}
    assert new.removed == [("g", "m2")]
    assert new.heartbeat("m1", 2).member_epoch == 3


def test_a_loaded_member_may_bring_only_an_epoch_it_can_have_had() -> None:
    d = ShareDriver()
    d.heartbeat("m1", 0, ["a"])
    d.heartbeat("m2", 0, ["a"])  # m1 is still at epoch 1, the group at 2
    new = d.taken_over()
    assert new.heartbeat("m2", 3).error is ErrorCode.FENCED_MEMBER_EPOCH  # beyond the group epoch
    assert new.heartbeat("m2", 0, ["a"]).error is ErrorCode.NONE  # a rejoin is always fine
    new = d.taken_over()
    assert new.heartbeat("m1", 1).member_epoch == 2
    new = d.taken_over()
    assert new.heartbeat("m2", 1).error is ErrorCode.FENCED_MEMBER_EPOCH  # m2 joined at epoch 2


def test_leaving_expiring_and_deleting_are_replayed() -> None:
    d = ShareDriver()
    d.heartbeat("m1", 0, ["a"])
    d.heartbeat("m2", 0, ["b"])
    d.heartbeat("m3", 0, ["b"])
    assert d.heartbeat("m4", 0, ["b"]).error is ErrorCode.GROUP_MAX_SIZE_REACHED
    assert d.heartbeat("m1", -1).member_epoch == -1
    d.ctx.advance(SESSION_MS + 1)  # m2 and m3 expire too
    assert d.removed == [("g", "m1"), ("g", "m2"), ("g", "m3")]
    new = d.taken_over()
    group = new.shard.share.groups["g"]
    assert (group.members, group.group_epoch, group.state) == ({}, 6, "Empty")
    assert new.heartbeat("m2", 4).error is ErrorCode.UNKNOWN_MEMBER_ID
    d.shard.share.cover("g", [(A, 1)])
    assert d.shard.delete_groups(["g", "nope"]) == {"g": ErrorCode.NONE, "nope": ErrorCode.GROUP_ID_NOT_FOUND}
    assert "g" not in d.taken_over().shard.share.groups
    # a group of the same id afterwards starts afresh
    assert d.heartbeat("m9", 0, ["a"]).member_epoch == 1
    again = d.taken_over().shard.share.groups["g"]
    assert (again.group_epoch, set(again.members), again.state_partitions) == (1, {"m9"}, set())


def test_share_group_offsets_are_tracked_in_partition_metadata() -> None:
    d = ShareDriver()
    d.heartbeat("m1", 0, ["a", "b"])
    assert d.shard.share.delete_topic_state("g", A) == (ErrorCode.NON_EMPTY_GROUP, [])
    d.heartbeat("m1", -1)
    assert d.shard.share.cover("g", [(A, 0), (A, 1), (B, 0)]) == [(A, 0), (A, 1), (B, 0)]
    assert d.shard.share.cover("g", [(A, 0)]) == []
    assert d.shard.share.delete_topic_state("g", A) == (ErrorCode.NONE, [(A, 0), (A, 1)])
    assert d.taken_over().shard.share.groups["g"].state_partitions == {(B, 0)}
    assert d.shard.delete_groups(["g"]) == {"g": ErrorCode.NONE}


def test_topic_changes_move_the_group_epoch_durably() -> None:
    d = ShareDriver(topics={"a": (A, 1)})
    d.heartbeat("m1", 0, ["a"])
    d.heartbeat("m2", 0, ["a"])
    d.topics["a"] = (A, 2)
    d.shard.share.refresh_assignments()
    assert d.shard.share.groups["g"].group_epoch == 3
    new = d.taken_over()
    r = new.heartbeat("m1", 2)
    assert r.error is ErrorCode.NONE and r.member_epoch == 3 and r.assignment == frozenset({(A, 0)})


def test_one_namespace_with_classic_and_consumer_groups() -> None:
    d = ShareDriver()
    d.heartbeat("m1", 0, ["a"], group="share")
    # a consumer group: not a share group, and the share group is not a consumer group
    box: list[ConsumerHeartbeatResult] = []
    d.shard.consumer_heartbeat(ConsumerHeartbeat("consumer", "c1", 0, None, None, 30_000, ["a"], None, None, []),
                               d.shard._topic_lookup or (lambda names, regexes: {}), box.append)
    d.ctx.flush()
    assert box[0].error is ErrorCode.NONE
    refused = d.heartbeat("x", 0, ["a"], group="consumer")
    assert (refused.error, refused.message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group consumer is not a share group.")
    box.clear()
    d.shard.consumer_heartbeat(ConsumerHeartbeat("share", "c1", 0, None, None, 30_000, ["a"], None, None, []),
                               lambda names, regexes: {}, box.append)
    assert (box[0].error, box[0].message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group share is not a consumer group.")
    # classic: JoinGroup on a share group, and a share member on a classic group's id
    joined = Box()
    d.shard.join_group(JoinRequest("share", "", None, False, False, "c", "/h", 30_000, 10_000, "consumer",
                                   [("range", subscription("a"))]), joined)
    d.ctx.after_op()
    assert isinstance(joined.value, JoinResult) and joined.value.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    committed = Box()
    d.shard.commit_offsets("share", "", None, -1, {("a", 0): OffsetAndMetadata(5, None, "", START_MS)}, committed)
    d.ctx.after_op()
    assert committed.value == {("a", 0): ErrorCode.GROUP_ID_NOT_FOUND}
    classic = Box()
    d.shard.join_group(JoinRequest("classic", "", None, False, False, "c", "/h", 30_000, 10_000, "consumer",
                                   [("range", subscription("a"))]), classic)
    d.ctx.advance(1)
    assert d.heartbeat("x", 0, ["a"], group="classic").error is ErrorCode.GROUP_ID_NOT_FOUND
    listed = {(g.group_id, g.group_type) for g in d.shard.list_groups(set(), set())}
    assert {("share", "share"), ("consumer", "consumer"), ("classic", "classic")} <= listed
    assert [g.group_id for g in d.shard.list_groups(set(), {"Share"})] == ["share"]
    assert [g.group_id for g in d.shard.list_groups({"empty"}, {"share"})] == []


def test_an_unreadable_share_record_is_skipped() -> None:
    d = ShareDriver()
    d.heartbeat("m1", 0, ["a"])
    records = d.ctx.replayed()
    broken = ReplayedRecord(99, START_MS, struct.pack(">h", SHARE_MEMBER_METADATA) + b"\x00", b"\x00\x00\xff",
                            -1, -1, False)
    new = ShareDriver().load([*records, broken])
    assert set(new.shard.share.groups["g"].members) == {"m1"}


def test_a_groups_own_session_timeout_and_heartbeat_interval() -> None:
    """share.session.timeout.ms / share.heartbeat.interval.ms of a share group (its group
    configs) decide its members' expiry and the interval they are given."""
    configs = {"short": {"share.session.timeout.ms": "8000", "share.heartbeat.interval.ms": "1000"}}
    d = ShareDriver()
    d.shard.share.config = ShareGroupConfig(session_timeout_ms=SESSION_MS, heartbeat_interval_ms=5_000, max_size=3,
                                            group_configs=lambda group_id: configs.get(group_id, {}))
    assert d.heartbeat("s1", 0, ["a"], group="short").heartbeat_interval_ms == 1_000
    assert d.heartbeat("o1", 0, ["a"], group="other").heartbeat_interval_ms == 5_000
    d.ctx.advance(8_001)
    assert d.removed == [("short", "s1")]
    d.ctx.advance(SESSION_MS)
    assert d.removed == [("short", "s1"), ("other", "o1")]
