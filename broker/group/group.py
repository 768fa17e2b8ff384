"""A classic consumer group and its members: Kafka's GroupMetadata and MemberMetadata.

Pure data with the bookkeeping Kafka keeps next to it (who is awaiting a
JoinGroup or SyncGroup answer, pending members, the static-member map, the
committed-offset cache). No I/O and no timers: :mod:`broker.group.shard`
drives it.

States and transitions (Kafka's GroupState):

- Empty: no members (possibly committed offsets). -> PreparingRebalance on a
  join; -> Dead when its last offsets go.
- PreparingRebalance: waiting for members to (re)join. -> CompletingRebalance
  when all joined or the rebalance timeout passed; -> Empty if none are left.
- CompletingRebalance: waiting for the leader's assignment (SyncGroup).
  -> Stable once it is stored; -> PreparingRebalance on any membership change.
- Stable: -> PreparingRebalance on a join of a new member, the leader
  rejoining, changed metadata, a leave or an expiry.
- Dead: unloaded or deleted; answers COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from broker.group.records import OffsetAndMetadata
from wire.errors import ErrorCode
from wire.exceptions import DecodeError
from wire.generated.data.consumer_protocol_subscription import ConsumerProtocolSubscription

CONSUMER_PROTOCOL_TYPE = "consumer"
MEMBER_ID_DELIMITER = "-"
UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
}


class IllegalStateError(Exception):
    """A transition or operation the group state machine does not allow (a bug)."""


@dataclass(frozen=True, slots=True)
class JoinResult:
    member_id: str
    error: ErrorCode
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    skip_assignment: bool = False
    #: (member id, group instance id, metadata) — only for the leader.
    members: tuple[tuple[str, str | None, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


JoinCallback = Callable[[JoinResult], None]
SyncCallback = Callable[[SyncResult], None]


@dataclass(frozen=True, slots=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSummary:
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberSummary, ...]


@dataclass(frozen=True, slots=True)
class GroupOverview:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """A cached offset and the log offset of the batch that stored it (None: not yet written)."""

    record_offset: int | None
    value: OffsetAndMetadata


@dataclass(eq=False, slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    supported_protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    awaiting_join: JoinCallback | None = None
    awaiting_sync: SyncCallback | None = None
    #: Joined but not yet part of a generation: its session cannot be checked yet.
    is_new: bool = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync is not None

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.supported_protocols:
            if name == protocol:
                return data
        raise IllegalStateError(f"member {self.member_id} does not support protocol {protocol}")

    def has_satisfied_heartbeat(self) -> bool:
        """At a session expiry: whether the member is still alive anyway."""
        if self.is_new:
            return False  # a new member can expire while awaiting its join
        return self.is_awaiting_join or self.is_awaiting_sync

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.supported_protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.supported_protocols:
            if name in candidates:
                return name
        raise IllegalStateError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def summary(self, protocol: str | None) -> MemberSummary:
        if protocol is None:
            return MemberSummary(self.member_id, self.group_instance_id, self.client_id, self.client_host, b"", b"")
        return MemberSummary(self.member_id, self.group_instance_id, self.client_id, self.client_host,
                             self.metadata(protocol), self.assignment)


def consumer_subscription_topics(metadata: bytes) -> set[str]:
    """The topics of a consumer-protocol subscription (its v0 prefix, as Kafka reads it)."""
    if len(metadata) < 2:
        raise DecodeError("consumer protocol subscription shorter than its version", 0)
    return set(ConsumerProtocolSubscription.decode(metadata[2:], 0).topics)


@dataclass(eq=False)
class ClassicGroup:
    group_id: str
    state: GroupState
    state_timestamp_ms: int | None
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    #: group.instance.id -> member id
    static_members: dict[str, str] = field(default_factory=dict)
    pending_members: set[str] = field(default_factory=set)
    pending_sync_members: set[str] = field(default_factory=set)
    supported_protocol_counts: dict[str, int] = field(default_factory=dict)
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    pending_offset_commits: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)
    #: producer id -> offsets written in a transaction not yet committed
    pending_txn_offsets: dict[int, dict[tuple[str, int], CommittedOffset]] = field(default_factory=dict)
    #: None: unknown (not a consumer group, or metadata that does not parse)
    subscribed_topics: set[str] | None = None
    new_member_added: bool = False
    #: Whether the join timer running now is the initial (new group) delay.
    initial_join_delay: bool = False
    #: When the rebalance in progress began (wall clock), for metrics.
    rebalance_started_ms: int = 0

    # ------------------------------------------------------------ queries

    def is_state(self, *states: GroupState) -> bool:
        return self.state in states

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> Member:
        return self.members[member_id]

    @property
    def size(self) -> int:
        return len(self.members)

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    @property
    def is_consumer_group(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    @property
    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.is_awaiting_join)

    def has_all_members_joined(self) -> bool:
        return self.num_awaiting_join == len(self.members) and not self.pending_members

    def not_yet_rejoined_members(self) -> list[Member]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def current_static_member_id(self, group_instance_id: str) -> str | None:
        return self.static_members.get(group_instance_id)

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return True if self.subscribed_topics is None else topic in self.subscribed_topics

    def has_offsets(self) -> bool:
        return bool(self.offsets or self.pending_offset_commits or self.pending_txn_offsets)

    def has_pending_offset_commit(self, tp: tuple[str, int]) -> bool:
        return tp in self.pending_offset_commits or any(tp in p for p in self.pending_txn_offsets.values())

    # ------------------------------------------------------------ membership

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise IllegalStateError(f"group {self.group_id} cannot go from {self.state.value} to {state.value}")
        self.state = state
        self.state_timestamp_ms = now_ms

    def supports_protocols(self, protocol_type: str, protocols: Iterable[str]) -> bool:
        names = set(protocols)
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(names)
        n = len(self.members)
        return self.protocol_type == protocol_type and any(
            self.supported_protocol_counts.get(p, 0) == n for p in names)

    def _count_protocols(self, member: Member, delta: int) -> None:
        for name, _ in member.supported_protocols:
            self.supported_protocol_counts[name] = self.supported_protocol_counts.get(name, 0) + delta

    def add(self, member: Member, callback: JoinCallback | None = None) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise IllegalStateError(f"static member {member.group_instance_id} is already in {self.group_id}")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self._count_protocols(member, 1)
        member.awaiting_join = callback
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._count_protocols(member, -1)
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync_members.discard(member_id)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep a leader that rejoined, else pick any member that did; False if none did."""
        if self.leader_id is None:
            return False
        leader = self.members[self.leader_id]
        if leader.is_awaiting_join:
            return True
        for member_id, member in self.members.items():
            if member.is_awaiting_join:
                self.leader_id = member_id
                return True
        return False

    def replace_static_member(self, group_instance_id: str, old_member_id: str, new_member_id: str) -> Member:
        member = self.members.pop(old_member_id, None)
        if member is None:
            raise IllegalStateError(f"cannot replace unknown member {old_member_id}")
        # The old incarnation is fenced at once if it is waiting for an answer.
        self.maybe_invoke_join_callback(member, JoinResult(old_member_id, ErrorCode.FENCED_INSTANCE_ID))
        self.maybe_invoke_sync_callback(member, SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        return member

    def add_pending_member(self, member_id: str) -> None:
        if member_id in self.members:
            raise IllegalStateError(f"pending member {member_id} is already a member")
        self.pending_members.add(member_id)

    def update_member(
        self,
        member: Member,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        callback: JoinCallback | None,
    ) -> None:
        self._count_protocols(member, -1)
        member.supported_protocols = protocols
        self._count_protocols(member, 1)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if callback is not None and member.awaiting_join is not None:
            # The same member joined again (a retry on another connection): the older
            # request is answered so its connection is not held up behind it.
            member.awaiting_join(JoinResult(member.member_id, ErrorCode.REBALANCE_IN_PROGRESS))
        member.awaiting_join = callback

    def maybe_invoke_join_callback(self, member: Member, result: JoinResult) -> None:
        callback = member.awaiting_join
        if callback is not None:
            member.awaiting_join = None
            callback(result)

    def maybe_invoke_sync_callback(self, member: Member, result: SyncResult) -> bool:
        callback = member.awaiting_sync
        if callback is None:
            return False
        member.awaiting_sync = None
        callback(result)
        return True

    def select_protocol(self) -> str:
        if not self.members:
            raise IllegalStateError("cannot select a protocol for an empty group")
        n = len(self.members)
        candidates = {p for p, count in self.supported_protocol_counts.items() if count == n}
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=lambda p: votes[p])  # ties: the first voted for

    def compute_subscribed_topics(self) -> set[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        try:
            topics: set[str] = set()
            for member in self.members.values():
                topics |= consumer_subscription_topics(member.metadata(self.protocol_name))
            return topics
        except (DecodeError, ValueError, IllegalStateError):
            return None

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.EMPTY, now_ms)
        self.pending_sync_members.clear()

    def current_member_metadata(self) -> tuple[tuple[str, str | None, bytes], ...]:
        if self.state in (GroupState.DEAD, GroupState.PREPARING_REBALANCE) or self.protocol_name is None:
            raise IllegalStateError(f"no member metadata for group {self.group_id} in state {self.state.value}")
        protocol = self.protocol_name
        return tuple((m.member_id, m.group_instance_id, m.metadata(protocol)) for m in self.members.values())

    def summary(self) -> GroupSummary:
        if self.state is GroupState.STABLE:
            protocol = self.protocol_name or ""
            return GroupSummary(self.state.value, self.protocol_type or "", protocol,
                                tuple(m.summary(protocol) for m in self.members.values()))
        return GroupSummary(self.state.value, self.protocol_type or "", "",
                            tuple(m.summary(None) for m in self.members.values()))

    def overview(self) -> GroupOverview:
        return GroupOverview(self.group_id, self.protocol_type or "", self.state.value)

    # ------------------------------------------------------------ offsets

    def offset(self, tp: tuple[str, int]) -> OffsetAndMetadata | None:
        committed = self.offsets.get(tp)
        return None if committed is None else committed.value

    def prepare_offset_commit(self, offsets: dict[tuple[str, int], OffsetAndMetadata]) -> None:
        self.pending_offset_commits.update(offsets)

    def on_offset_commit_append(self, tp: tuple[str, int], committed: CommittedOffset) -> None:
        if tp in self.pending_offset_commits:
            current = self.offsets.get(tp)
            if current is None or _older(current, committed):
                self.offsets[tp] = committed
        if self.pending_offset_commits.get(tp) == committed.value:
            del self.pending_offset_commits[tp]

    def fail_pending_offset_write(self, tp: tuple[str, int], value: OffsetAndMetadata) -> None:
        if self.pending_offset_commits.get(tp) == value:
            del self.pending_offset_commits[tp]

    # Transactional commits (TxnOffsetCommit) stay pending until the transaction's marker.

    def prepare_txn_offset_commit(self, producer_id: int, offsets: dict[tuple[str, int], OffsetAndMetadata]) -> None:
        pending = self.pending_txn_offsets.setdefault(producer_id, {})
        for tp, value in offsets.items():
            pending[tp] = CommittedOffset(None, value)

    def on_txn_offset_commit_append(self, producer_id: int, tp: tuple[str, int], committed: CommittedOffset) -> None:
        pending = self.pending_txn_offsets.get(producer_id)
        if pending is not None and tp in pending and pending[tp].value == committed.value:
            pending[tp] = committed

    def fail_pending_txn_offset_commit(self, producer_id: int, tp: tuple[str, int]) -> None:
        pending = self.pending_txn_offsets.get(producer_id)
        if pending is not None:
            pending.pop(tp, None)
            if not pending:
                del self.pending_txn_offsets[producer_id]

    def complete_pending_txn_offset_commit(self, producer_id: int, committed: bool) -> None:
        """The producer's marker is written: a COMMIT makes its offsets the group's (unless a
        newer commit is already there), an ABORT drops them."""
        pending = self.pending_txn_offsets.pop(producer_id, {})
        if not committed:
            return
        for tp, c in pending.items():
            current = self.offsets.get(tp)
            if current is None or _older(current, c):
                self.offsets[tp] = c

    def has_pending_txn_offsets(self, producer_id: int) -> bool:
        return producer_id in self.pending_txn_offsets

    def remove_offsets(self, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int], OffsetAndMetadata]:
        removed: dict[tuple[str, int], OffsetAndMetadata] = {}
        for tp in tps:
            self.pending_offset_commits.pop(tp, None)
            for pending in self.pending_txn_offsets.values():
                pending.pop(tp, None)
            committed = self.offsets.pop(tp, None)
            if committed is not None:
                removed[tp] = committed.value
        return removed

    def remove_expired_offsets(self, now_ms: int, retention_ms: int) -> dict[tuple[str, int], OffsetAndMetadata]:
        """Kafka 3.9's expiry: an Empty group's offsets go ``retention_ms`` after it became
        Empty; a standalone (no protocol) group's, after each commit; a Stable consumer
        group's, after their commit for topics it no longer subscribes to."""

        def expired(base_of: Callable[[CommittedOffset], int], subscribed: set[str]) -> list[tuple[str, int]]:
            out = []
            for tp, committed in self.offsets.items():
                if tp[0] in subscribed or tp in self.pending_offset_commits:
                    continue
                expire_at = committed.value.expire_timestamp_ms
                if expire_at is None:
                    if now_ms - base_of(committed) >= retention_ms:
                        out.append(tp)
                elif now_ms >= expire_at:
                    out.append(tp)
            return out

        if self.protocol_type is not None and self.state is GroupState.EMPTY:
            state_ts = self.state_timestamp_ms
            tps = expired(lambda c: state_ts if state_ts is not None else c.value.commit_timestamp_ms, set())
        elif (self.protocol_type == CONSUMER_PROTOCOL_TYPE and self.subscribed_topics is not None
              and self.state is GroupState.STABLE):
            tps = expired(lambda c: c.value.commit_timestamp_ms, self.subscribed_topics)
        elif self.protocol_type is None:
            tps = expired(lambda c: c.value.commit_timestamp_ms, set())
        else:
            tps = []
        return {tp: self.offsets.pop(tp).value for tp in tps}


def _older(a: CommittedOffset, b: CommittedOffset) -> bool:
    """Whether ``a`` was written before ``b`` (an unwritten one counts as newest)."""
    if a.record_offset is None:
        return False
    if b.record_offset is None:
        return True
    return a.record_offset < b.record_offset
