"""Online upgrade of a classic group to the consumer protocol, with explicit time."""

from __future__ import annotations

import uuid

from broker.group.consumer_group import TopicMetadata
from broker.group.consumer_shard import (
    ConsumerGroupConfig,
    ConsumerHeartbeat,
    ConsumerHeartbeatResult,
)
from broker.group.group import JoinResult, SyncResult
from broker.group.migration import MigratingGroupShard, decode_assignment
from broker.group.shard_types import GroupConfig, JoinRequest, LeavingMember, SyncRequest
from tests.broker.group.fake import Box, Driver, FakeContext, assignment, subscription
from wire.errors import ErrorCode

T = uuid.UUID(int=9)
TOPICS = {"t": TopicMetadata(T, "t", 4)}


def lookup(names: set[str], regexes: set[str]) -> dict[str, TopicMetadata]:
    return {n: TOPICS[n] for n in names if n in TOPICS}


def shard(ctx: FakeContext | None = None) -> MigratingGroupShard:
    s = MigratingGroupShard(ctx or FakeContext(), GroupConfig(initial_rebalance_delay_ms=0), None,
                            ConsumerGroupConfig())
    s._topic_lookup = lookup
    s.on_loaded()
    return s


def join(s: MigratingGroupShard, member_id: str, owned: dict[str, list[int]] | None = None) -> JoinResult:
    box = Box()
    s.join_group(JoinRequest("g", member_id, None, False, True, "c", "/h", 30_000, 10_000, "consumer",
                             [("range", subscription("t", owned=owned))]), box)
    s.ctx.flush()  # type: ignore[attr-defined]
    return box.join


def sync(s: MigratingGroupShard, member_id: str, generation: int,
         assignments: dict[str, bytes] | None = None) -> Box:
    box = Box()
    s.sync_group(SyncRequest("g", generation, member_id, None, "consumer", "range", assignments or {}), box)
    s.ctx.flush()  # type: ignore[attr-defined]
    return box


def consumer_join(s: MigratingGroupShard, member_id: str) -> ConsumerHeartbeatResult:
    box = Box()
    s.consumer_heartbeat(ConsumerHeartbeat("g", member_id, 0, None, None, 30_000, ["t"], None, None, []),
                         lookup, box)
    s.ctx.flush()  # type: ignore[attr-defined]
    assert isinstance(box.value, ConsumerHeartbeatResult)
    return box.value


def classic_group(s: MigratingGroupShard) -> tuple[int, str, str]:
    """Two classic members (a, b) with partitions {0,1} and {2,3}: (generation, a, b)."""
    d = Driver()
    d.ctx, d.shard = s.ctx, s  # type: ignore[assignment]
    boxes = [d.join_new("g", protocols=[("range", subscription("t"))]) for _ in range(2)]
    d.ctx.advance(0)
    results = [b.join for b in boxes]
    generation, leader = results[-1].generation_id, results[0].leader_id
    a, b = leader, next(r.member_id for r in results if r.member_id != leader)
    syncs = [sync(s, a, generation, {a: assignment({"t": [0, 1]}), b: assignment({"t": [2, 3]})}),
             sync(s, b, generation)]
    assert all(isinstance(x.value, SyncResult) and x.value.error is ErrorCode.NONE for x in syncs), syncs
    return generation, a, b


def test_a_consumer_member_upgrades_the_group_and_the_classic_members_reconcile() -> None:
    s = shard()
    generation, a, b = classic_group(s)
    joined = consumer_join(s, "c")
    assert joined.error is ErrorCode.NONE
    group = s.consumer_groups["g"]
    assert group.members[a].assigned == {T: frozenset({0, 1})}
    assert group.members[a].classic is not None
    assert s.list_groups(set(), {"consumer"})[0].group_id == "g"
    # The new member waits: every partition is still a classic member's.
    assert joined.assignment == {}
    # Classic members learn they must rejoin; their partitions then move.
    assert s.heartbeat("g", a, None, generation) is ErrorCode.REBALANCE_IN_PROGRESS
    assert s.heartbeat("g", a, None, generation + 5) is ErrorCode.ILLEGAL_GENERATION
    rejoined = join(s, a, owned={"t": [0, 1]})  # cooperative: still owns both
    assert (rejoined.error, rejoined.leader_id, rejoined.skip_assignment) == (ErrorCode.NONE, a, True)
    got = sync(s, a, rejoined.generation_id).value
    assert isinstance(got, SyncResult) and got.error is ErrorCode.NONE
    kept = decode_assignment(got.assignment)
    assert set(kept["t"]) < {0, 1}  # one of them goes to the new member
    again = join(s, a, owned=kept)  # revoked: the epoch moves on
    assert again.generation_id == group.assignment_epoch
    assert s.heartbeat("g", a, None, again.generation_id) is ErrorCode.NONE
    # Leaving as a classic member hands its partitions over.
    error, results = s.leave_group("g", [LeavingMember(b, None)])
    assert (error, results) == (ErrorCode.NONE, [ErrorCode.NONE])
    assert b not in group.members


def test_the_upgraded_group_replays_with_its_classic_members() -> None:
    ctx = FakeContext()
    s = shard(ctx)
    classic_group(s)
    consumer_join(s, "c")
    replayed = shard(FakeContext())
    for record in ctx.replayed():
        replayed.replay(record)
    replayed.on_loaded()
    assert replayed.consumer_groups["g"].members == s.consumer_groups["g"].members
    # The classic group's metadata was deleted: only an offsets holder with no members is left.
    assert replayed.groups.get("g") is None or replayed.groups["g"].size == 0


def test_the_upgrade_can_be_disabled() -> None:
    s = shard()
    s.migration_policy = "disabled"
    classic_group(s)
    refused = consumer_join(s, "c")
    assert refused.error is ErrorCode.GROUP_ID_NOT_FOUND
    assert refused.message is not None and "online upgrade is disabled" in refused.message


def test_the_last_consumer_member_leaving_downgrades_the_group() -> None:
    ctx = FakeContext()
    s = shard(ctx)
    _, a, b = classic_group(s)
    consumer_join(s, "c")
    epoch = s.consumer_groups["g"].group_epoch
    box = Box()
    s.consumer_heartbeat(ConsumerHeartbeat("g", "c", -1, None, None, -1, None, None, None, None), lookup, box)
    ctx.flush()
    assert "g" not in s.consumer_groups
    classic = s.groups["g"]
    assert (classic.state.value, classic.generation_id, sorted(classic.members)) == (
        "PreparingRebalance", epoch + 1, sorted([a, b]))
    assert decode_assignment(classic.members[a].assignment) == {"t": [0, 1]}
    assert s.heartbeat("g", a, None, epoch + 1) is ErrorCode.REBALANCE_IN_PROGRESS
    assert [g.group_type for g in s.list_groups(set(), set())] == ["classic"]
    # Both rejoin on the classic protocol and the rebalance completes.
    boxes = [Box(), Box()]
    for member_id, target in zip((a, b), boxes, strict=True):
        s.join_group(JoinRequest("g", member_id, None, False, True, "c", "/h", 30_000, 10_000, "consumer",
                                 [("range", subscription("t"))]), target)
    ctx.advance(0)
    assert all(x.join.error is ErrorCode.NONE for x in boxes)
    assert boxes[0].join.generation_id == epoch + 2
    # A new coordinator finds a classic group (the consumer group's records are tombstones).
    replayed = shard(FakeContext())
    for record in ctx.replayed():
        replayed.replay(record)
    replayed.on_loaded()
    assert "g" not in replayed.consumer_groups and replayed.groups["g"].size == 2
