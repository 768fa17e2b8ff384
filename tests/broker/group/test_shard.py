"""The classic group protocol, driven with explicit time (no sockets, no Trio).

Each test plays the requests real clients send and checks the answers and
states Kafka 3.9's coordinator gives.
"""

from __future__ import annotations

from broker.group.group import GroupState
from broker.group.records import (
    GroupKey,
    OffsetAndMetadata,
    OffsetKey,
    parse_group_value,
    parse_key,
    parse_offset_value,
)
from broker.group.shard import GroupShard
from broker.group.shard_types import GroupConfig, LeavingMember
from tests.broker.group.fake import Driver, FakeContext, assignment, subscription
from wire.errors import ErrorCode

NONE = ErrorCode.NONE


# ---------------------------------------------------------------- joining


def test_first_join_needs_a_member_id_then_completes_after_the_initial_delay() -> None:
    d = Driver(GroupConfig(initial_rebalance_delay_ms=3000))
    first = d.join("g", client_id="consumer-1")
    assert first.join.error is ErrorCode.MEMBER_ID_REQUIRED
    member_id = first.join.member_id
    assert member_id.startswith("consumer-1-") and len(member_id) == len("consumer-1-") + 36
    assert d.state() == "Empty"  # a pending member does not start a rebalance

    second = d.join("g", member_id, client_id="consumer-1")
    assert not second.done and d.state() == "PreparingRebalance"
    d.ctx.advance(2999)
    assert not second.done
    d.ctx.advance(1)
    r = second.join
    assert (r.error, r.generation_id, r.leader_id, r.member_id) == (NONE, 1, member_id, member_id)
    assert (r.protocol_type, r.protocol_name) == ("consumer", "range")
    assert [m[0] for m in r.members] == [member_id]  # the leader gets everyone's metadata
    assert d.state() == "CompletingRebalance"

    sync = d.sync("g", member_id, 1, {member_id: assignment({"t": [0, 1]})})
    assert sync.sync.error is NONE and sync.sync.assignment == assignment({"t": [0, 1]})
    assert (sync.sync.protocol_type, sync.sync.protocol_name) == ("consumer", "range")
    assert d.state() == "Stable"
    # The assignment was persisted before it was handed out.
    key = parse_key(d.ctx.log[-1].record.key)
    assert key == GroupKey("g")
    version, value = parse_group_value(d.ctx.log[-1].record.value or b"")
    assert version == 3 and value.generation == 1 and value.leader == member_id
    assert [m.assignment for m in value.members] == [assignment({"t": [0, 1]})]


def test_initial_delay_waits_for_more_members_while_they_keep_coming() -> None:
    d = Driver(GroupConfig(initial_rebalance_delay_ms=3000))
    a = d.join_new("g", rebalance_timeout_ms=10_000)
    d.ctx.advance(2000)
    b = d.join_new("g", rebalance_timeout_ms=10_000)
    d.ctx.advance(1000)  # the first delay ends, a member came: wait again
    assert not a.done and not b.done
    d.ctx.advance(2999)
    assert not a.done
    d.ctx.advance(1)
    assert a.join.generation_id == b.join.generation_id == 1
    assert {a.join.member_id, b.join.member_id} == {m[0] for m in (a.join.members or b.join.members)}


def test_join_with_the_wrong_protocol_type_or_bad_session_timeout_is_refused() -> None:
    d = Driver(GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=6000, max_session_timeout_ms=30_000))
    d.stable_group("g", 1)
    assert d.join("g", session_timeout_ms=5999).join.error is ErrorCode.INVALID_SESSION_TIMEOUT
    assert d.join("g", session_timeout_ms=30_001).join.error is ErrorCode.INVALID_SESSION_TIMEOUT
    r = d.join("g", protocol_type="connect", require_known_member_id=False).join
    assert r.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    r = d.join("g", protocols=[("roundrobin", b"x")], require_known_member_id=False).join
    assert r.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert d.join("g", "no-such-member").join.error is ErrorCode.UNKNOWN_MEMBER_ID
    assert d.join("other", "no-such-member").join.error is ErrorCode.UNKNOWN_MEMBER_ID


def test_group_max_size() -> None:
    d = Driver(GroupConfig(initial_rebalance_delay_ms=0, max_size=2))
    d.stable_group("g", 2)
    r = d.join("g").join
    assert (r.error, r.member_id) == (ErrorCode.GROUP_MAX_SIZE_REACHED, "")


def test_protocol_is_the_one_every_member_supports_chosen_by_vote() -> None:
    d = Driver()
    a = d.join_new("g", protocols=[("cooperative-sticky", b"a1"), ("range", b"a2")])
    b = d.join_new("g", protocols=[("range", b"b2"), ("roundrobin", b"b3")])
    d.ctx.advance(0)
    assert a.join.protocol_name == b.join.protocol_name == "range"
    leader = a.join if a.join.members else b.join
    assert sorted(md for _, _, md in leader.members) == [b"a2", b"b2"]


# ---------------------------------------------------------------- rebalances


def test_a_new_member_rebalances_a_stable_group() -> None:
    d = Driver()
    [a] = d.stable_group("g", 1)
    b = d.join_new("g")
    assert not b.done and d.state() == "PreparingRebalance"
    assert d.heartbeat("g", a, 1) is ErrorCode.REBALANCE_IN_PROGRESS
    ra = d.join("g", a)  # a rejoins: everyone is in, the rebalance completes at once
    assert ra.join.generation_id == b.join.generation_id == 2
    assert ra.join.leader_id == a and len(ra.join.members) == 2 and b.join.members == ()
    # A follower's SyncGroup waits for the leader's.
    sb = d.sync("g", b.join.member_id, 2)
    assert not sb.done
    sa = d.sync("g", a, 2, {a: b"A", b.join.member_id: b"B"})
    assert sa.sync.assignment == b"A" and sb.sync.assignment == b"B"
    assert d.heartbeat("g", a, 2) is NONE and d.heartbeat("g", b.join.member_id, 2) is NONE


def test_the_leader_rejoining_a_stable_group_rebalances_but_a_follower_with_the_same_metadata_does_not() -> None:
    d = Driver()
    leader, follower = d.stable_group("g", 2)
    r = d.join("g", follower)
    assert r.join.generation_id == 1 and r.join.error is NONE and d.state() == "Stable"
    d.join("g", leader)
    assert d.state() == "PreparingRebalance"


def test_session_expiry_removes_the_member_and_rebalances() -> None:
    d = Driver()
    a, b = d.stable_group("g", 2, session_timeout_ms=10_000)
    for _ in range(3):
        d.ctx.advance(3000)
        assert d.heartbeat("g", a, 1) is NONE
    d.ctx.advance(3000)
    # b has been silent for 12 s: it expired at 10 s and the group is rebalancing.
    assert d.heartbeat("g", a, 1) is ErrorCode.REBALANCE_IN_PROGRESS
    assert d.state() == "PreparingRebalance"
    assert d.heartbeat("g", b, 1) is ErrorCode.UNKNOWN_MEMBER_ID
    r = d.join("g", a).join
    assert r.generation_id == 2 and [m[0] for m in r.members] == [a]


def test_members_that_do_not_rejoin_within_the_rebalance_timeout_are_removed() -> None:
    d = Driver()
    a, b = d.stable_group("g", 2, session_timeout_ms=10_000, rebalance_timeout_ms=20_000)
    c = d.join_new("g", session_timeout_ms=10_000, rebalance_timeout_ms=20_000)
    ra = d.join("g", a, session_timeout_ms=10_000, rebalance_timeout_ms=20_000)
    for _ in range(6):  # b keeps its session alive but never rejoins (a poll loop stuck in user code)
        d.ctx.advance(3000)
        assert d.heartbeat("g", b, 1) is ErrorCode.REBALANCE_IN_PROGRESS
    assert not ra.done
    d.ctx.advance(2000)
    assert ra.join.generation_id == c.join.generation_id == 2
    assert {m[0] for m in ra.join.members} == {a, c.join.member_id}
    assert d.heartbeat("g", b, 1) is ErrorCode.UNKNOWN_MEMBER_ID


def test_a_pending_member_that_never_rejoins_expires() -> None:
    d = Driver()
    [a] = d.stable_group("g", 1, session_timeout_ms=10_000)
    pending = d.join("g", session_timeout_ms=10_000).join
    assert pending.error is ErrorCode.MEMBER_ID_REQUIRED
    ra = d.join("g", a, session_timeout_ms=10_000)  # leader rejoin starts a rebalance...
    assert not ra.done  # ...which waits for the pending member
    d.ctx.advance(10_000)
    assert ra.join.generation_id == 2 and [m[0] for m in ra.join.members] == [a]


def test_members_that_never_sync_are_removed_after_the_rebalance_timeout() -> None:
    d = Driver()
    a = d.join_new("g", rebalance_timeout_ms=5000)
    b = d.join_new("g", rebalance_timeout_ms=5000)
    d.ctx.advance(0)
    leader = a.join.leader_id
    follower = b.join.member_id if leader == a.join.member_id else a.join.member_id
    s = d.sync("g", leader, 1, {leader: b"L", follower: b"F"})
    assert s.sync.error is NONE and d.state() == "Stable"
    d.ctx.advance(4999)
    assert d.state() == "Stable"
    d.ctx.advance(1)
    assert d.state() == "PreparingRebalance"
    assert not d.shard.groups["g"].has(follower)


def test_leave_group_rebalances_and_the_last_leave_empties_the_group() -> None:
    d = Driver()
    a, b = d.stable_group("g", 2)
    assert d.shard.leave_group("g", [LeavingMember(b, None)]) == (NONE, [NONE])
    assert d.state() == "PreparingRebalance"
    r = d.join("g", a).join
    assert r.generation_id == 2
    d.sync("g", a, 2, {a: b"x"})
    records_before = len(d.ctx.log)
    assert d.shard.leave_group("g", [LeavingMember(a, None, "closing")]) == (NONE, [NONE])
    d.ctx.after_op()
    assert d.state() == "Empty"
    g = d.shard.groups["g"]
    assert g.generation_id == 3 and g.protocol_name is None
    # The empty generation is stored, so its offsets' retention survives a restart.
    _version, value = parse_group_value(d.ctx.log[records_before].record.value or b"")
    assert value.generation == 3 and value.members == []
    assert d.shard.leave_group("g", [LeavingMember("ghost", None)]) == (NONE, [ErrorCode.UNKNOWN_MEMBER_ID])
    assert d.shard.leave_group("nope", [LeavingMember("x", None)]) == (NONE, [ErrorCode.UNKNOWN_MEMBER_ID])


def test_a_member_leaving_while_its_join_is_pending_is_answered() -> None:
    d = Driver()
    d.stable_group("g", 1)
    b = d.join_new("g")
    assert not b.done
    assert d.shard.leave_group("g", [LeavingMember(b.member_id, None)]) == (NONE, [NONE])
    assert b.join.error is ErrorCode.UNKNOWN_MEMBER_ID


# ---------------------------------------------------------------- fencing


def test_fencing_by_generation_and_member_id() -> None:
    d = Driver()
    a, b = d.stable_group("g", 2)
    assert d.heartbeat("g", a, 0) is ErrorCode.ILLEGAL_GENERATION
    assert d.heartbeat("g", "ghost", 1) is ErrorCode.UNKNOWN_MEMBER_ID
    assert d.heartbeat("nope", a, 1) is ErrorCode.UNKNOWN_MEMBER_ID
    assert d.sync("g", a, 7).sync.error is ErrorCode.ILLEGAL_GENERATION
    assert d.sync("g", a, 1, protocol_type="consumer", protocol_name="roundrobin").sync.error \
        is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert d.commit("g", {("t", 0): 5}, member_id=a, generation=0).value == {("t", 0): ErrorCode.ILLEGAL_GENERATION}
    assert d.commit("g", {("t", 0): 5}, member_id="ghost", generation=1).value == {
        ("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    # Only members commit while the group has members.
    assert d.commit("g", {("t", 0): 5}).value == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    assert d.commit("g", {("t", 0): 5}, member_id=a, generation=1).value == {("t", 0): NONE}
    # Between JoinGroup and SyncGroup a commit is told to wait for the rebalance.
    d.join("g", a)
    d.join("g", b)
    assert d.state() == "CompletingRebalance"
    assert d.commit("g", {("t", 0): 6}, member_id=a, generation=2).value == {
        ("t", 0): ErrorCode.REBALANCE_IN_PROGRESS}
    assert d.commit("other", {("t", 0): 1}, member_id="x", generation=3).value == {
        ("t", 0): ErrorCode.ILLEGAL_GENERATION}


def test_sync_and_heartbeat_in_the_wrong_state() -> None:
    d = Driver()
    a, b = d.stable_group("g", 2)
    d.join("g", a)  # leader rejoins
    assert d.sync("g", b, 1).sync.error is ErrorCode.REBALANCE_IN_PROGRESS
    d.shard.leave_group("g", [LeavingMember(b, None)])
    assert d.sync("g", "ghost", 2).sync.error is ErrorCode.UNKNOWN_MEMBER_ID


# ---------------------------------------------------------------- static membership


def static_group(d: Driver, *, skip: bool = False) -> tuple[str, str]:
    a = d.join("g", instance_id="i-a")
    b = d.join("g", instance_id="i-b")
    d.ctx.advance(0)
    leader = a.join.leader_id
    ids = {a.join.member_id: "i-a", b.join.member_id: "i-b"}
    follower = next(m for m in ids if m != leader)
    d.sync("g", leader, 1, {leader: b"L", follower: b"F"}, instance_id=ids[leader])
    d.sync("g", follower, 1, instance_id=ids[follower])
    assert d.state() == "Stable"
    return a.join.member_id, b.join.member_id


def test_static_member_restart_keeps_the_generation_and_fences_the_old_incarnation() -> None:
    d = Driver()
    a, b = static_group(d)
    assert a.startswith("i-a-")
    leader = d.shard.groups["g"].leader_id
    restarted = d.join("g", instance_id="i-b")  # unknown member id, known instance id
    r = restarted.join
    assert r.error is NONE and r.member_id != b and r.generation_id == 1
    assert d.state() == "Stable"
    # Before v9 the old leader id comes back, so nobody reassigns.
    assert r.leader_id == leader and r.members == ()
    # It picks up its assignment without a rebalance.
    s = d.sync("g", r.member_id, 1, instance_id="i-b")
    assert s.sync.error is NONE and s.sync.assignment in (b"L", b"F")
    assert d.heartbeat("g", b, 1, instance_id="i-b") is ErrorCode.FENCED_INSTANCE_ID
    assert d.commit("g", {("t", 0): 1}, member_id=b, generation=1, instance_id="i-b").value == {
        ("t", 0): ErrorCode.FENCED_INSTANCE_ID}
    assert d.heartbeat("g", r.member_id, 1, instance_id="i-b") is NONE
    assert d.heartbeat("g", a, 1, instance_id="i-x") is ErrorCode.UNKNOWN_MEMBER_ID
    # The new member id was persisted.
    _, value = parse_group_value(d.ctx.log[-1].record.value or b"")
    assert {m.member_id for m in value.members} == {a, r.member_id}


def test_static_leader_rejoining_v9_is_told_to_skip_assignment() -> None:
    d = Driver()
    a, _ = static_group(d)
    leader_instance = "i-a" if d.shard.groups["g"].leader_id == a else "i-b"
    r = d.join("g", instance_id=leader_instance, skip_assignment=True).join
    assert r.skip_assignment and r.leader_id == r.member_id and len(r.members) == 2
    assert d.state() == "Stable"


def test_old_incarnation_waiting_on_join_is_fenced() -> None:
    d = Driver()
    a, _b = static_group(d)
    leader = d.shard.groups["g"].leader_id
    instance = "i-a" if leader == a else "i-b"
    pending = d.join("g", leader, instance_id=instance)  # the leader rejoins: a rebalance starts
    assert not pending.done
    restarted = d.join("g", instance_id=instance)  # the same instance starts again elsewhere
    assert pending.join.error is ErrorCode.FENCED_INSTANCE_ID
    assert not restarted.done and d.state() == "PreparingRebalance"


def test_static_members_that_do_not_rejoin_are_kept_until_their_session_expires() -> None:
    d = Driver()
    a, b = static_group(d)
    d.join_new("g", session_timeout_ms=30_000, rebalance_timeout_ms=5000)  # a dynamic member triggers a rebalance
    g = d.shard.groups["g"]
    assert g.state is GroupState.PREPARING_REBALANCE
    d.ctx.advance(5000)  # static members did not rejoin: they stay; no leader rejoined yet...
    assert g.has(a) and g.has(b)


# ---------------------------------------------------------------- cooperative rebalancing


def test_cooperative_incremental_rebalance_takes_two_generations() -> None:
    """cooperative-sticky: the coordinator only runs eager rounds; clients revoke, then rejoin."""
    d = Driver()
    sub_a = subscription("t", owned={"t": [0, 1, 2, 3]})
    [a] = d.stable_group("g", 1, protocols=[("cooperative-sticky", sub_a)])
    # b joins; a rejoins still owning everything (no eager revocation).
    b = d.join_new("g", protocols=[("cooperative-sticky", subscription("t"))])
    ra = d.join("g", a, protocols=[("cooperative-sticky", sub_a)])
    assert ra.join.generation_id == 2
    bid = b.join.member_id
    # The leader keeps b empty until a has revoked what moves.
    d.sync("g", a, 2, {a: assignment({"t": [0, 1]}), bid: assignment({})})
    assert d.sync("g", bid, 2).sync.assignment == assignment({})
    assert d.state() == "Stable"
    # a revoked partitions 2 and 3, so its subscription changed: its rejoin starts round two.
    sub_a2 = subscription("t", owned={"t": [0, 1]})
    ra2 = d.join("g", a, protocols=[("cooperative-sticky", sub_a2)])
    assert d.state() == "PreparingRebalance"
    assert d.heartbeat("g", bid, 2) is ErrorCode.REBALANCE_IN_PROGRESS
    rb2 = d.join("g", bid, protocols=[("cooperative-sticky", subscription("t"))])
    assert ra2.join.generation_id == rb2.join.generation_id == 3
    # The leader saw the owned partitions in the subscriptions.
    owned = dict((m, md) for m, _, md in ra2.join.members)
    assert owned[a] == sub_a2
    d.sync("g", a, 3, {a: assignment({"t": [0, 1]}), bid: assignment({"t": [2, 3]})})
    assert d.sync("g", bid, 3).sync.assignment == assignment({"t": [2, 3]})
    # Commits of the surviving partitions were accepted throughout with the current generation.
    assert d.commit("g", {("t", 0): 9}, member_id=a, generation=3).value == {("t", 0): NONE}


# ---------------------------------------------------------------- offsets


def test_simple_consumer_commits_and_fetches() -> None:
    d = Driver()
    r = d.commit("solo", {("t", 0): 42, ("t", 1): 7}, metadata="meta", leader_epoch=3)
    assert r.value == {("t", 0): NONE, ("t", 1): NONE}
    got = d.shard.fetch_offsets("solo", [("t", 0), ("t", 1), ("t", 2)], False)
    assert (got[("t", 0)].offset, got[("t", 0)].leader_epoch, got[("t", 0)].metadata) == (42, 3, "meta")
    assert got[("t", 2)].offset == -1
    assert set(d.shard.fetch_offsets("solo", None, False)) == {("t", 0), ("t", 1)}
    assert d.shard.fetch_offsets("nobody", [("t", 0)], False)[("t", 0)].offset == -1
    assert d.state("solo") == "Empty"
    key = parse_key(d.ctx.log[0].record.key)
    assert key == OffsetKey("solo", "t", 0)
    assert parse_offset_value(d.ctx.log[0].record.value or b"").offset == 42


def test_commit_is_acknowledged_only_once_written_and_unstable_until_then() -> None:
    d = Driver()
    d.ctx.auto_commit = False
    r = d.commit("g", {("t", 0): 5})
    assert not r.done
    assert d.shard.fetch_offsets("g", [("t", 0)], True)[("t", 0)].error is ErrorCode.UNSTABLE_OFFSET_COMMIT
    assert d.shard.fetch_offsets("g", [("t", 0)], False)[("t", 0)].offset == -1
    d.ctx.flush()
    assert r.value == {("t", 0): NONE}
    assert d.shard.fetch_offsets("g", [("t", 0)], True)[("t", 0)].offset == 5


def test_failed_write_maps_errors_like_kafka() -> None:
    d = Driver()
    d.ctx.fail_with = ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert d.commit("g", {("t", 0): 5}).value == {("t", 0): ErrorCode.NOT_COORDINATOR}
    d.ctx.fail_with = ErrorCode.RECORD_LIST_TOO_LARGE
    assert d.commit("g", {("t", 0): 5}).value == {("t", 0): ErrorCode.INVALID_COMMIT_OFFSET_SIZE}
    assert d.shard.fetch_offsets("g", [("t", 0)], True)[("t", 0)].error is NONE


def test_a_large_commit_is_built_beforehand_and_applied_a_chunk_at_a_time() -> None:
    """A commit of 5,000 offsets (over LARGE_COMMIT): its batch is prepared outside the shard,
    appended as one write, and applied to the group by finish_prepared_commit; offsets with
    too long metadata are refused, and a failed write leaves nothing pending."""
    import trio

    from broker.group.offset_commits import LARGE_COMMIT, prepare_commit
    from broker.group.records import OffsetAndMetadata

    d = Driver(GroupConfig(offset_metadata_max_bytes=4))
    now = d.ctx.now_ms()
    n = LARGE_COMMIT + 3000
    offsets = {("t", p): OffsetAndMetadata(p + 10, None, "12345" if p == 7 else "", now) for p in range(n)}

    def commit() -> dict[tuple[str, int], ErrorCode]:
        prepared = prepare_commit("big", offsets, d.config.offset_metadata_max_bytes, now)
        refused: list[dict[tuple[str, int], ErrorCode]] = []
        d.shard.commit_offsets("big", "", None, -1, offsets, refused.append, prepared)
        d.ctx.after_op()
        assert refused == [{}] and prepared.result is not None
        return trio.run(d.shard.finish_prepared_commit, prepared, offsets)

    written = len(d.ctx.log)
    errors = commit()
    assert len(d.ctx.log) == written + n - 1  # one batch of every accepted offset
    assert errors[("t", 7)] is ErrorCode.OFFSET_METADATA_TOO_LARGE
    assert {e for tp, e in errors.items() if tp != ("t", 7)} == {NONE} and len(errors) == n
    got = d.shard.fetch_offsets("big", [("t", 0), ("t", 7), ("t", n - 1)], True)
    assert [(o.offset, o.error) for o in got.values()] == [(10, NONE), (-1, NONE), (n + 9, NONE)]
    d.ctx.fail_with = ErrorCode.RECORD_LIST_TOO_LARGE
    offsets = {tp: OffsetAndMetadata(1, None, "", now) for tp in offsets}
    errors = commit()
    assert set(errors.values()) == {ErrorCode.INVALID_COMMIT_OFFSET_SIZE}
    assert d.shard.fetch_offsets("big", [("t", 0)], True)[("t", 0)].offset == 10  # unchanged, not pending


def test_metadata_too_large() -> None:
    d = Driver(GroupConfig(offset_metadata_max_bytes=4))
    assert d.commit("g", {("t", 0): 1}, metadata="12345").value == {("t", 0): ErrorCode.OFFSET_METADATA_TOO_LARGE}
    assert d.commit("g", {("t", 0): 1}, metadata="1234").value == {("t", 0): NONE}


def test_leader_assignment_write_failure_sends_members_back_to_join() -> None:
    d = Driver()
    a = d.join_new("g")
    d.ctx.advance(0)
    d.ctx.fail_with = ErrorCode.NOT_LEADER_OR_FOLLOWER
    s = d.sync("g", a.join.member_id, 1, {a.join.member_id: b"x"})
    assert s.sync.error is ErrorCode.NOT_COORDINATOR
    assert d.state() == "PreparingRebalance"


RETENTION = 60_000


def test_offsets_of_an_empty_group_expire_retention_after_it_became_empty() -> None:
    d = Driver(GroupConfig(initial_rebalance_delay_ms=0, offsets_retention_ms=RETENTION,
                           offsets_retention_check_interval_ms=1000))
    # The commit is old by the time the group empties: what counts is when it became Empty.
    [m] = d.stable_group("g", 1, session_timeout_ms=600_000)
    d.commit("g", {("t", 0): 3}, member_id=m, generation=1)
    for _ in range(3):
        d.ctx.advance(RETENTION)
        assert d.heartbeat("g", m, 1) is NONE
    assert d.shard.fetch_offsets("g", [("t", 0)], False)[("t", 0)].offset == 3  # subscribed: kept
    d.shard.leave_group("g", [LeavingMember(m, None)])
    d.ctx.after_op()
    d.ctx.advance(RETENTION - 1000)
    assert d.shard.fetch_offsets("g", [("t", 0)], False)[("t", 0)].offset == 3
    d.ctx.advance(1000)
    assert d.shard.fetch_offsets("g", [("t", 0)], False)[("t", 0)].offset == -1
    assert "g" not in d.shard.groups  # Empty without offsets: dead and gone
    tombstones = [a.record for a in d.ctx.log if a.record.value is None]
    assert [parse_key(t.key) for t in tombstones] == [OffsetKey("g", "t", 0), GroupKey("g")]


def test_standalone_offsets_expire_retention_after_their_commit() -> None:
    d = Driver(GroupConfig(initial_rebalance_delay_ms=0, offsets_retention_ms=RETENTION,
                           offsets_retention_check_interval_ms=1000))
    d.commit("solo", {("t", 0): 1})
    d.ctx.advance(RETENTION // 2)
    d.commit("solo", {("t", 1): 1})
    d.ctx.advance(RETENTION // 2)
    assert set(d.shard.fetch_offsets("solo", None, False)) == {("t", 1)}
    d.ctx.advance(RETENTION // 2)
    assert "solo" not in d.shard.groups
    # A group that only ever stored offsets (generation 0) gets no group tombstone.
    assert all(parse_key(a.record.key) != GroupKey("solo") for a in d.ctx.log)


def test_stable_consumer_group_expires_offsets_of_topics_it_no_longer_subscribes_to() -> None:
    d = Driver(GroupConfig(initial_rebalance_delay_ms=0, offsets_retention_ms=RETENTION,
                           offsets_retention_check_interval_ms=1000))
    [m] = d.stable_group("g", 1, session_timeout_ms=600_000)
    d.commit("g", {("t", 0): 1, ("old", 0): 5}, member_id=m, generation=1)
    d.ctx.advance(RETENTION)
    assert set(d.shard.fetch_offsets("g", None, False)) == {("t", 0)}


def test_explicit_retention_time_from_old_commit_versions() -> None:
    d = Driver(GroupConfig(initial_rebalance_delay_ms=0, offsets_retention_check_interval_ms=1000))
    d.commit("solo", {("t", 0): 1}, expire_ms=d.ctx.now_ms() + 5000)
    d.ctx.advance(5000)
    assert d.shard.fetch_offsets("solo", None, False) == {}


# ---------------------------------------------------------------- admin


def test_delete_groups() -> None:
    d = Driver()
    [a] = d.stable_group("g", 1)
    d.commit("g", {("t", 0): 1}, member_id=a, generation=1)
    d.commit("solo", {("t", 0): 1})
    assert d.shard.delete_groups(["g", "solo", "nope"]) == {
        "g": ErrorCode.NON_EMPTY_GROUP, "solo": NONE, "nope": ErrorCode.GROUP_ID_NOT_FOUND}
    d.shard.leave_group("g", [LeavingMember(a, None)])
    d.ctx.after_op()
    before = len(d.ctx.log)
    assert d.shard.delete_groups(["g"]) == {"g": NONE}
    assert [parse_key(x.record.key) for x in d.ctx.log[before:]] == [OffsetKey("g", "t", 0), GroupKey("g")]
    assert all(x.record.value is None for x in d.ctx.log[before:])
    assert d.shard.describe_group("g").state == "Dead"
    assert d.shard.fetch_offsets("g", [("t", 0)], False)[("t", 0)].offset == -1


def test_offset_delete() -> None:
    d = Driver()
    [a] = d.stable_group("g", 1)  # subscribed to "t"
    d.commit("g", {("t", 0): 1, ("u", 0): 2}, member_id=a, generation=1)
    assert d.shard.delete_offsets("g", [("t", 0), ("u", 0)]) == (
        NONE, {("t", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): NONE})
    assert set(d.shard.fetch_offsets("g", None, False)) == {("t", 0)}
    assert d.shard.delete_offsets("nope", [("t", 0)]) == (ErrorCode.GROUP_ID_NOT_FOUND, {})
    d.join("other", protocol_type="connect", protocols=[("v0", b"")], require_known_member_id=False)
    d.ctx.advance(0)
    assert d.shard.delete_offsets("other", [("t", 0)]) == (ErrorCode.NON_EMPTY_GROUP, {})


def test_describe_and_list() -> None:
    d = Driver()
    [a] = d.stable_group("g", 1)
    d.commit("solo", {("t", 0): 1})
    s = d.shard.describe_group("g")
    assert (s.state, s.protocol_type, s.protocol) == ("Stable", "consumer", "range")
    [m] = s.members
    assert (m.member_id, m.client_id, m.client_host) == (a, "client", "/127.0.0.1")
    assert m.metadata == subscription("t") and m.assignment == b"a-" + a.encode()
    d.join("g", a)  # the leader rejoins: a new generation awaits its assignment
    s = d.shard.describe_group("g")
    assert s.state == "CompletingRebalance" and s.protocol == "" and s.members[0].metadata == b""
    listed = {(o.group_id, o.state, o.protocol_type) for o in d.shard.list_groups(set(), set())}
    assert listed == {("g", "CompletingRebalance", "consumer"), ("solo", "Empty", "")}
    assert [o.group_id for o in d.shard.list_groups({"empty"}, set())] == ["solo"]
    assert d.shard.list_groups(set(), {"consumer"}) == []
    assert len(d.shard.list_groups(set(), {"Classic"})) == 2


def test_deleted_topics_lose_their_offsets() -> None:
    d = Driver()
    d.commit("solo", {("t", 0): 1, ("gone", 0): 2})
    assert d.shard.on_topics_deleted({"gone"}) == 1
    assert set(d.shard.fetch_offsets("solo", None, False)) == {("t", 0)}


# ---------------------------------------------------------------- loading and unloading


def test_replaying_the_log_rebuilds_groups_and_offsets() -> None:
    d = Driver()
    a, b = d.stable_group("g", 2, session_timeout_ms=10_000)
    d.commit("g", {("t", 0): 10, ("t", 1): 20}, member_id=a, generation=1, metadata="m")
    d.commit("g", {("t", 0): 11}, member_id=b, generation=1)
    d.commit("solo", {("t", 0): 5})
    d.commit("gone", {("t", 0): 5})
    d.shard.delete_groups(["gone"])

    fresh_ctx = FakeContext()
    fresh_ctx.time_ms = d.ctx.time_ms
    fresh = GroupShard(fresh_ctx, d.config)  # type: ignore[arg-type]
    for record in d.ctx.replayed():
        fresh.replay(record)
    fresh.on_loaded()
    g = fresh.groups["g"]
    assert g.state is GroupState.STABLE and g.generation_id == 1 and set(g.members) == {a, b}
    assert g.leader_id == a and g.protocol_name == "range" and g.subscribed_topics == {"t"}
    assert g.members[b].assignment == b"a-" + b.encode()
    got = fresh.fetch_offsets("g", [("t", 0), ("t", 1)], False)
    assert (got[("t", 0)].offset, got[("t", 1)].offset, got[("t", 1)].metadata) == (11, 20, "m")
    assert fresh.fetch_offsets("solo", [("t", 0)], False)[("t", 0)].offset == 5
    assert "gone" not in fresh.groups
    # Members keep their generation if they heartbeat within their session...
    fresh_ctx.advance(9000)
    assert fresh.heartbeat("g", a, None, 1) is NONE
    # ...and the silent one expires.
    fresh_ctx.advance(2000)
    assert not g.has(b) and g.state is GroupState.PREPARING_REBALANCE


def test_unloading_answers_waiting_members_with_not_coordinator() -> None:
    d = Driver()
    [_a] = d.stable_group("g", 1)
    b = d.join_new("g")
    d.shard.on_unloaded()
    assert b.join.error is ErrorCode.NOT_COORDINATOR
    assert d.shard.groups == {}


# ---------------------------------------------------------------- transactional offsets


def txn_commit(d: Driver, group: str, producer_id: int, offsets: dict[tuple[str, int], int], *,
               member_id: str = "", generation: int = -1) -> dict[tuple[str, int], ErrorCode]:
    from tests.broker.group.fake import Box

    box = Box()
    now = d.ctx.now_ms()
    d.shard.commit_transactional_offsets(group, producer_id, 0, member_id, None, generation, {
        tp: OffsetAndMetadata(o, None, "", now) for tp, o in offsets.items()}, box)
    d.ctx.after_op()
    result = box.value
    assert isinstance(result, dict)
    return result


def test_transactional_offsets_count_only_after_the_commit_marker() -> None:
    d = Driver()
    d.commit("g", {("t", 0): 1})
    assert txn_commit(d, "g", 7, {("t", 0): 5, ("t", 1): 6}) == {("t", 0): NONE, ("t", 1): NONE}
    assert d.shard.fetch_offsets("g", [("t", 0)], False)[("t", 0)].offset == 1
    assert d.shard.fetch_offsets("g", [("t", 0)], True)[("t", 0)].error is ErrorCode.UNSTABLE_OFFSET_COMMIT
    d.shard.complete_transaction(7, committed=True)
    got = d.shard.fetch_offsets("g", [("t", 0), ("t", 1)], True)
    assert (got[("t", 0)].offset, got[("t", 1)].offset) == (5, 6)
    # An aborted transaction's offsets never show.
    txn_commit(d, "g", 8, {("t", 0): 99})
    d.shard.complete_transaction(8, committed=False)
    assert d.shard.fetch_offsets("g", [("t", 0)], True)[("t", 0)].offset == 5


def test_transactional_commit_fencing() -> None:
    d = Driver()
    [a] = d.stable_group("g", 1)
    # Before TxnOffsetCommit v3 there is no member: accepted even while the group has members.
    assert txn_commit(d, "g", 1, {("t", 0): 1}) == {("t", 0): NONE}
    assert txn_commit(d, "g", 1, {("t", 0): 1}, member_id=a, generation=0) == {("t", 0): ErrorCode.ILLEGAL_GENERATION}
    assert txn_commit(d, "g", 1, {("t", 0): 1}, member_id="ghost", generation=1) == {
        ("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    assert txn_commit(d, "g", 1, {("t", 0): 1}, member_id=a, generation=1) == {("t", 0): NONE}


def test_replay_applies_transactional_offsets_at_their_commit_marker() -> None:
    from broker.coordinator.runtime import ReplayedRecord
    from broker.group.records import offset_commit_key, offset_commit_value

    def rec(offset: int, value: int, producer_id: int) -> ReplayedRecord:
        return ReplayedRecord(offset, 0, offset_commit_key("g", "t", 0),
                              offset_commit_value(OffsetAndMetadata(value, None, "", 0)), producer_id, 0,
                              producer_id >= 0)

    ctx = FakeContext()
    shard = GroupShard(ctx, GroupConfig())  # type: ignore[arg-type]
    shard.replay(rec(0, 10, -1))
    shard.replay(rec(1, 20, 5))
    shard.replay_end_transaction(5, True, 2)
    shard.replay(rec(3, 30, 6))
    shard.replay_end_transaction(6, False, 4)
    shard.replay(rec(5, 40, 7))  # still open when the load ends
    shard.on_loaded()
    assert shard.fetch_offsets("g", [("t", 0)], False)[("t", 0)].offset == 20
    assert shard.fetch_offsets("g", [("t", 0)], True)[("t", 0)].error is ErrorCode.UNSTABLE_OFFSET_COMMIT
    shard.complete_transaction(7, committed=True)
    assert shard.fetch_offsets("g", [("t", 0)], True)[("t", 0)].offset == 40
