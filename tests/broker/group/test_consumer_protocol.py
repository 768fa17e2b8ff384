"""The consumer rebalance protocol (KIP-848): assignors, reconciliation, fencing, records.

Driven through :class:`ConsumerGroupShard` with explicit time (FakeContext); the
randomized test is seeded and checks the protocol's safety rule at every step:
no partition is held by two members at once.
"""

from __future__ import annotations

import random
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.group.assignors import MemberSpec, RangeAssignor, UniformAssignor
from broker.group.consumer_group import MemberState, TopicMetadata
from broker.group.consumer_shard import (
    ConsumerGroupConfig,
    ConsumerGroupShard,
    ConsumerHeartbeat,
    ConsumerHeartbeatResult,
)
from broker.group.records import OffsetAndMetadata
from broker.group.shard_types import GroupConfig
from tests.broker.group.fake import Box, FakeContext
from wire.errors import ErrorCode

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
TOPICS = {"t1": TopicMetadata(T1, "t1", 4), "t2": TopicMetadata(T2, "t2", 3)}


def lookup(names: set[str], regexes: set[str] | None = None) -> dict[str, TopicMetadata]:
    return {n: TOPICS[n] for n in names if n in TOPICS}


class CDriver:
    def __init__(self, ctx: FakeContext | None = None, **config: object) -> None:
        self.ctx = ctx or FakeContext()
        self.shard = ConsumerGroupShard(self.ctx, GroupConfig(initial_rebalance_delay_ms=0),
                                        None, ConsumerGroupConfig(**config))  # type: ignore[arg-type]
        self.shard.on_loaded()
        #: member id -> (epoch, partitions the client holds)
        self.clients: dict[str, tuple[int, dict[uuid.UUID, set[int]]]] = {}

    def hb(self, member_id: str, epoch: int, *, topics: list[str] | None = None, instance_id: str | None = None,
           owned: dict[uuid.UUID, set[int]] | None = None, group: str = "g",
           assignor: str | None = None) -> ConsumerHeartbeatResult:
        box = Box()
        self.shard.consumer_heartbeat(ConsumerHeartbeat(
            group_id=group, member_id=member_id, member_epoch=epoch, instance_id=instance_id, rack_id=None,
            rebalance_timeout_ms=30_000 if epoch == 0 else -1,
            subscribed_topic_names=topics if topics is not None else (["t1"] if epoch == 0 else None),
            subscribed_topic_regex=None, server_assignor=assignor,
            owned=None if owned is None else [(t, sorted(ps)) for t, ps in owned.items()]), lookup, box)
        self.ctx.flush()
        result = box.value
        assert isinstance(result, ConsumerHeartbeatResult)
        return result

    def client_step(self, member_id: str, **kwargs: object) -> ConsumerHeartbeatResult:
        """A client's heartbeat: reports what it holds, applies what it is told."""
        epoch, held = self.clients.get(member_id, (0, {}))
        result = self.hb(member_id, epoch, owned=held if epoch else None, **kwargs)  # type: ignore[arg-type]
        if result.error is ErrorCode.NONE:
            if result.assignment is not None:
                held = {t: set(ps) for t, ps in result.assignment.items()}
            self.clients[member_id] = (result.member_epoch, held)
        return result

    def group(self, group: str = "g"):  # type: ignore[no-untyped-def]
        return self.shard.consumer_groups[group]


def held_by_clients(d: CDriver) -> list[tuple[uuid.UUID, int]]:
    """What members hold; a member fenced by its session timeout holds nothing any more
    (its commits are refused and it must rejoin), whatever it still believes."""
    group = d.shard.consumer_groups.get("g")
    members = {} if group is None else group.members
    return [(t, p) for m, (_, held) in d.clients.items() if m in members for t, ps in held.items() for p in ps]


# ---------------------------------------------------------------- assignors

def _check_complete(result: dict[str, dict[uuid.UUID, set[int]]], members: dict[str, MemberSpec],
                    partitions: dict[uuid.UUID, int]) -> None:
    seen: list[tuple[uuid.UUID, int]] = []
    for member_id, a in result.items():
        for t, ps in a.items():
            assert t in members[member_id].subscribed_topic_ids
            seen.extend((t, p) for p in ps)
    assert len(seen) == len(set(seen))
    wanted = {(t, p) for t, n in partitions.items() for p in range(n)
              if any(t in m.subscribed_topic_ids for m in members.values())}
    assert set(seen) == wanted


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 8), st.lists(st.integers(0, 12), min_size=1, max_size=4), st.randoms(use_true_random=False))
def test_uniform_assignor_is_complete_balanced_and_sticky(n_members: int, counts: list[int],
                                                         rnd: random.Random) -> None:
    partitions = {uuid.UUID(int=i + 1): c for i, c in enumerate(counts)}
    topic_ids = frozenset(partitions)
    members = {f"m{i}": MemberSpec(f"m{i}", topic_ids) for i in range(n_members)}
    first = UniformAssignor().assign(members, partitions)
    _check_complete(first, members, partitions)
    sizes = [sum(len(ps) for ps in a.values()) for a in first.values()]
    assert max(sizes) - min(sizes) <= 1
    # A new member: the others keep what they can (nothing moves between old members).
    current = {m: {t: frozenset(ps) for t, ps in a.items()} for m, a in first.items()}
    members2 = {m: MemberSpec(m, topic_ids, current[m]) for m in members}
    members2["new"] = MemberSpec("new", topic_ids)
    second = UniformAssignor().assign(members2, partitions)
    _check_complete(second, members2, partitions)
    for m in members:
        gained = {(t, p) for t, ps in second[m].items() for p in ps} - {(t, p) for t, ps in first[m].items() for p in ps}
        assert not gained, f"{m} took partitions from others: {gained}"
    sizes = [sum(len(ps) for ps in a.values()) for a in second.values()]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 6), st.lists(st.integers(1, 10), min_size=1, max_size=3), st.data())
def test_uniform_assignor_with_different_subscriptions(n_members: int, counts: list[int], data: st.DataObject) -> None:
    partitions = {uuid.UUID(int=i + 1): c for i, c in enumerate(counts)}
    members = {}
    for i in range(n_members):
        subs = data.draw(st.sets(st.sampled_from(sorted(partitions)), min_size=1))
        members[f"m{i}"] = MemberSpec(f"m{i}", frozenset(subs))
    _check_complete(UniformAssignor().assign(members, partitions), members, partitions)


def test_range_assignor_gives_co_partitioned_topics_the_same_partitions() -> None:
    members = {m: MemberSpec(m, frozenset({T1, T2})) for m in ("a", "b")}
    result = RangeAssignor().assign(members, {T1: 5, T2: 5})
    assert result["a"] == {T1: {0, 1, 2}, T2: {0, 1, 2}}
    assert result["b"] == {T1: {3, 4}, T2: {3, 4}}


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 6), st.lists(st.integers(0, 10), min_size=1, max_size=3))
def test_range_assignor_is_complete_and_balanced_per_topic(n_members: int, counts: list[int]) -> None:
    partitions = {uuid.UUID(int=i + 1): c for i, c in enumerate(counts)}
    members = {f"m{i}": MemberSpec(f"m{i}", frozenset(partitions)) for i in range(n_members)}
    result = RangeAssignor().assign(members, partitions)
    _check_complete(result, members, partitions)
    for t in partitions:
        sizes = [len(a.get(t, ())) for a in result.values()]
        assert max(sizes) - min(sizes) <= 1


# ---------------------------------------------------------------- protocol

def test_a_partition_is_revoked_before_it_is_assigned_elsewhere() -> None:
    d = CDriver()
    r1 = d.client_step("m1")
    assert (r1.error, r1.member_epoch) == (ErrorCode.NONE, 1)
    assert r1.assignment == {T1: frozenset({0, 1, 2, 3})}
    assert r1.heartbeat_interval_ms == 5000
    r2 = d.client_step("m2")
    assert r2.member_epoch == 2
    assert r2.assignment == {}  # its partitions are still m1's
    assert d.group().members["m2"].state is MemberState.UNRELEASED_PARTITIONS
    r1 = d.client_step("m1")  # told to give two up, same epoch
    assert r1.member_epoch == 1 and r1.assignment is not None and sum(map(len, r1.assignment.values())) == 2
    assert d.group().members["m1"].state is MemberState.UNREVOKED_PARTITIONS
    assert len(held_by_clients(d)) == len(set(held_by_clients(d)))
    r1 = d.client_step("m1")  # acknowledges the revocation
    assert r1.member_epoch == 2
    r2 = d.client_step("m2")
    assert r2.assignment is not None and sum(map(len, r2.assignment.values())) == 2
    assert sorted(held_by_clients(d)) == [(T1, p) for p in range(4)]
    assert d.group().state.value == "Stable"


def test_epochs_fence_members_and_a_lost_answer_is_forgiven() -> None:
    d = CDriver()
    d.client_step("m1")
    assert d.hb("m1", 5).error is ErrorCode.FENCED_MEMBER_EPOCH
    assert d.hb("nobody", 1).error is ErrorCode.UNKNOWN_MEMBER_ID
    d.client_step("m2")
    d.client_step("m1")
    d.client_step("m1")  # m1 now at epoch 2; previous epoch 1
    member = d.group().members["m1"]
    assert (member.member_epoch, member.previous_member_epoch) == (2, 1)
    # The member missed the answer that moved it to epoch 2: accepted with what it owns.
    ok = d.hb("m1", 1, owned={t: set(ps) for t, ps in member.assigned.items()})
    assert (ok.error, ok.member_epoch) == (ErrorCode.NONE, 2)
    assert d.hb("m1", 1, owned={T1: {0, 1, 2, 3}}).error is ErrorCode.FENCED_MEMBER_EPOCH


def test_session_timeout_fences_a_member_and_its_partitions_move() -> None:
    d = CDriver(session_timeout_ms=10_000)
    d.client_step("m1")
    d.client_step("m2")
    for _ in range(3):
        d.client_step("m1")
        d.client_step("m2")
    assert d.group().state.value == "Stable"
    for _ in range(3):  # m2 keeps heartbeating, m1 is silent
        d.ctx.advance(4_000)
        d.client_step("m2")
    assert "m1" not in d.group().members
    d.client_step("m2")
    assert d.clients["m2"][1] == {T1: {0, 1, 2, 3}}


def test_leaving_gives_the_partitions_back() -> None:
    d = CDriver()
    d.client_step("m1")
    d.client_step("m2")
    d.client_step("m1")
    d.client_step("m1")
    d.client_step("m2")
    left = d.hb("m1", -1)
    assert (left.error, left.member_epoch) == (ErrorCode.NONE, -1)
    d.client_step("m2")
    assert d.clients["m2"][1] == {T1: {0, 1, 2, 3}}
    assert d.hb("m2", -1).error is ErrorCode.NONE
    assert d.group().state.value == "Empty"


def test_a_static_member_returns_with_its_assignment_without_a_rebalance() -> None:
    d = CDriver()
    d.client_step("a", instance_id="i-a")
    d.client_step("b", instance_id="i-b")
    for _ in range(2):
        d.client_step("a", instance_id="i-a")
        d.client_step("b", instance_id="i-b")
    before = d.group().members["a"].assigned
    epoch = d.group().group_epoch
    assert d.hb("a", -2, instance_id="i-a").member_epoch == -2
    assert d.group().members["a"].assigned == before  # kept for the next instance
    # The instance is taken while the old member has not left: UNRELEASED_INSTANCE_ID.
    assert d.hb("b2", 0, instance_id="i-b").error is ErrorCode.UNRELEASED_INSTANCE_ID
    back = d.hb("a2", 0, instance_id="i-a")
    assert back.error is ErrorCode.NONE and back.assignment == before
    assert d.group().group_epoch == epoch and "a" not in d.group().members
    # Not coming back within the session timeout: the member is removed.
    d.hb("a2", -2, instance_id="i-a")
    for _ in range(5):
        d.ctx.advance(10_000)
        d.client_step("b", instance_id="i-b")
    assert "a2" not in d.group().members and "b" in d.group().members and d.group().group_epoch == epoch + 1


def test_offset_commits_are_fenced_by_member_epoch() -> None:
    d = CDriver()
    d.client_step("m1")

    def commit(member_id: str, epoch: int) -> ErrorCode:
        box = Box()
        d.shard.commit_offsets("g", member_id, None, epoch, {("t1", 0): OffsetAndMetadata(5, None, "", 0)}, box)
        d.ctx.flush()
        result = box.value
        assert isinstance(result, dict)
        return result[("t1", 0)]  # type: ignore[no-any-return]

    assert commit("m1", 0) is ErrorCode.STALE_MEMBER_EPOCH
    assert commit("zz", 1) is ErrorCode.UNKNOWN_MEMBER_ID
    assert commit("", -1) is ErrorCode.UNKNOWN_MEMBER_ID  # the group has members
    assert commit("m1", 1) is ErrorCode.NONE
    assert d.shard.fetch_offsets("g", [("t1", 0)], False)[("t1", 0)].offset == 5
    assert [(g.group_id, g.group_type) for g in d.shard.list_groups(set(), set())] == [("g", "consumer")]
    assert d.shard.list_groups(set(), {"classic"}) == []
    d.hb("m1", -1)
    assert commit("", -1) is ErrorCode.NONE  # empty: an admin tool may


def test_a_new_coordinator_replays_the_group() -> None:
    d = CDriver()
    d.client_step("m1", instance_id="s1")
    d.client_step("m2")
    d.client_step("m1", instance_id="s1")
    before = d.group()
    replayed = CDriver(FakeContext())
    for record in d.ctx.replayed():
        replayed.shard.replay(record)
    replayed.shard.on_loaded()
    after = replayed.group()
    assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch, before.assignment_epoch)
    assert after.members == before.members
    assert after.target == before.target
    assert after.partition_epochs == before.partition_epochs
    assert after.subscription_metadata == before.subscription_metadata
    # Each member has a fresh session on the new coordinator.
    assert any("cg-session" in k for k in replayed.ctx.timer_keys())


def test_a_classic_group_with_members_is_not_a_consumer_group_and_vice_versa() -> None:
    d = CDriver()
    d.client_step("m1")
    from broker.group.shard_types import JoinRequest
    from tests.broker.group.fake import subscription
    box = Box()
    d.shard.join_group(JoinRequest("g", "", None, False, False, "c", "/h", 30_000, 10_000, "consumer",
                                   [("range", subscription("t1"))]), box)
    d.ctx.flush()
    assert box.join.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_new_topic_partitions_bump_the_epoch() -> None:
    d = CDriver()
    d.client_step("m1", topics=["t1", "t2"])
    assert d.clients["m1"][1] == {T1: {0, 1, 2, 3}, T2: {0, 1, 2}}
    TOPICS["t2"] = TopicMetadata(T2, "t2", 5)
    try:
        r = d.client_step("m1")
        assert r.member_epoch == 2 and d.clients["m1"][1][T2] == {0, 1, 2, 3, 4}
    finally:
        TOPICS["t2"] = TopicMetadata(T2, "t2", 3)


def assert_replays_to_the_same_group(d: CDriver) -> None:
    """Everything the coordinator holds in memory is in its records: a new coordinator
    replaying them has the same group."""
    replayed = CDriver(FakeContext())
    for record in d.ctx.replayed():
        replayed.shard.replay(record)
    replayed.shard.on_loaded()
    before, after = d.group(), replayed.group()
    assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch, before.assignment_epoch)
    assert after.members == before.members
    assert after.target == before.target
    assert after.partition_epochs == before.partition_epochs
    assert after.subscription_metadata == before.subscription_metadata


@pytest.mark.parametrize("seed", [848, 1, 2, 3, 4, 5])
def test_random_membership_changes_never_give_a_partition_to_two_members(seed: int) -> None:
    rng = random.Random(seed)
    d = CDriver(session_timeout_ms=20_000)
    alive: set[str] = set()
    next_id = 0
    for step in range(400):
        action = rng.random()
        if action < 0.12 and len(alive) < 6:
            next_id += 1
            alive.add(f"m{next_id}")
            d.client_step(f"m{next_id}", topics=["t1", "t2"])
        elif action < 0.18 and alive:
            gone = rng.choice(sorted(alive))
            alive.discard(gone)
            d.hb(gone, d.clients[gone][0])
            d.hb(gone, -1)
            d.clients.pop(gone, None)
        elif action < 0.22 and alive:  # a crash: silent until the session expires
            gone = rng.choice(sorted(alive))
            alive.discard(gone)
            d.clients.pop(gone, None)
        elif alive:
            member_id = rng.choice(sorted(alive))
            if member_id in d.group().members:
                r = d.client_step(member_id)
                assert r.error is ErrorCode.NONE, r
            else:  # fenced (session expired while "paused"): rejoin
                d.clients.pop(member_id, None)
                d.client_step(member_id, topics=["t1", "t2"])
        d.ctx.advance(rng.randrange(0, 3_000))
        held = held_by_clients(d)
        assert len(held) == len(set(held)), "a partition is held by two members"
        if step % 40 == 39 and "g" in d.shard.consumer_groups:
            assert_replays_to_the_same_group(d)
    for _ in range(5):  # everyone heartbeats a few more times: the group converges
        for member_id in sorted(alive):
            d.client_step(member_id)
    if alive:
        assert d.group().state.value == "Stable"
        assert sorted(held_by_clients(d)) == sorted([(T1, p) for p in range(4)] + [(T2, p) for p in range(3)])


def test_uniform_assignor_places_partitions_in_the_members_racks() -> None:
    racks = {(T1, p): frozenset({"r0" if p % 2 == 0 else "r1"}) for p in range(6)}
    members = {"a": MemberSpec("a", frozenset({T1}), rack_id="r1"), "b": MemberSpec("b", frozenset({T1}), rack_id="r0")}
    result = UniformAssignor().assign(members, {T1: 6}, racks)
    assert result == {"a": {T1: {1, 3, 5}}, "b": {T1: {0, 2, 4}}}
    # Without racks it is balanced all the same.
    plain = UniformAssignor().assign(members, {T1: 6})
    assert sorted(len(a[T1]) for a in plain.values()) == [3, 3]


def test_replica_racks_are_part_of_the_replayed_subscription_metadata() -> None:
    racked = TopicMetadata(T1, "t1", 4, (("r0",), ("r1",), ("r0",), ("r1",)))
    d = CDriver()
    box = Box()
    d.shard.consumer_heartbeat(ConsumerHeartbeat("g", "m1", 0, None, "r1", 30_000, ["t1"], None, None, []),
                               lambda names, regexes: {"t1": racked}, box)
    d.ctx.flush()
    assert isinstance(box.value, ConsumerHeartbeatResult) and box.value.error is ErrorCode.NONE
    replayed = CDriver(FakeContext())
    for record in d.ctx.replayed():
        replayed.shard.replay(record)
    replayed.shard.on_loaded()
    assert replayed.group().subscription_metadata == {"t1": racked}


def test_a_regex_subscription_takes_topics_as_they_appear() -> None:
    topics = {"orders-eu": TopicMetadata(T1, "orders-eu", 2), "__consumer_offsets": TopicMetadata(T2, "x", 5)}

    def regex_lookup(names: set[str], regexes: set[str]) -> dict[str, TopicMetadata]:
        from broker.group.topic_regex import resolve

        wanted = names | {t for r in regexes for t in resolve(r, topics)}
        return {n: topics[n] for n in wanted if n in topics}

    d = CDriver()

    def hb(epoch: int) -> ConsumerHeartbeatResult:
        box = Box()
        d.shard.consumer_heartbeat(ConsumerHeartbeat(
            "g", "m1", epoch, None, None, 30_000 if epoch == 0 else -1, None if epoch else [],
            "orders-.*" if epoch == 0 else None, None, [] if epoch == 0 else None), regex_lookup, box)
        d.ctx.flush()
        assert isinstance(box.value, ConsumerHeartbeatResult)
        return box.value

    first = hb(0)
    assert first.assignment == {T1: frozenset({0, 1})}  # never the internal topic
    T3 = uuid.UUID(int=3)
    topics["orders-us"] = TopicMetadata(T3, "orders-us", 1)
    second = hb(first.member_epoch)
    assert second.member_epoch == first.member_epoch + 1
    assert second.assignment == {T1: frozenset({0, 1}), T3: frozenset({0})}


def test_a_rebalance_is_counted_when_every_member_reconciled() -> None:
    completed: list[tuple[str, int, int, int]] = []

    class Observer:
        def rebalance_completed(self, group_id: str, generation: int, members: int, duration_ms: int) -> None:
            completed.append((group_id, generation, members, duration_ms))

        def offsets_committed(self, group_id: str, count: int) -> None:
            pass

        def offsets_removed(self, group_id: str, count: int, reason: str) -> None:
            pass

    d = CDriver()
    d.shard.observer = Observer()
    d.client_step("m1")
    assert completed == [("g", 1, 1, 0)]
    d.client_step("m2")
    d.ctx.advance(700)
    d.client_step("m1")  # revokes
    assert len(completed) == 1
    d.client_step("m1")
    d.client_step("m2")
    assert completed[-1] == ("g", 2, 2, 700)


def test_transactional_offset_commits_are_fenced_by_member_epoch() -> None:
    d = CDriver()
    d.client_step("m1")

    def txn_commit(member_id: str, epoch: int) -> ErrorCode:
        box = Box()
        d.shard.commit_transactional_offsets("g", 7, 0, member_id, None, epoch,
                                             {("t1", 0): OffsetAndMetadata(3, None, "", 0)}, box)
        d.ctx.flush()
        result = box.value
        assert isinstance(result, dict)
        return result[("t1", 0)]  # type: ignore[no-any-return]

    assert txn_commit("m1", 0) is ErrorCode.ILLEGAL_GENERATION
    assert txn_commit("zz", 1) is ErrorCode.UNKNOWN_MEMBER_ID
    assert txn_commit("m1", 1) is ErrorCode.NONE
    assert txn_commit("", -1) is ErrorCode.NONE  # TxnOffsetCommit before v3 names no member
    d.shard.complete_transaction(7, committed=True)
    assert d.shard.fetch_offsets("g", [("t1", 0)], True)[("t1", 0)].offset == 3


def test_a_groups_own_session_timeout_and_heartbeat_interval() -> None:
    """consumer.session.timeout.ms / consumer.heartbeat.interval.ms of a group (its group
    configs) decide its members' expiry and the interval they are given; other groups keep
    the broker's."""
    configs = {"short": {"consumer.session.timeout.ms": "6000", "consumer.heartbeat.interval.ms": "2000"}}
    d = CDriver(session_timeout_ms=45_000, heartbeat_interval_ms=5_000,
                group_configs=lambda group_id: configs.get(group_id, {}))
    assert d.hb("s1", 0, group="short").heartbeat_interval_ms == 2_000
    assert d.hb("o1", 0, group="other").heartbeat_interval_ms == 5_000
    d.ctx.advance(6_001)
    assert "s1" not in d.group("short").members
    assert "o1" in d.group("other").members
    # A change of the group's configs holds from the next heartbeat on.
    configs["short"] = {"consumer.heartbeat.interval.ms": "3000"}
    assert d.hb("s2", 0, group="short").heartbeat_interval_ms == 3_000
    d.ctx.advance(40_000)
    assert "s2" in d.group("short").members
