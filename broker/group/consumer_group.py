"""A consumer group of the consumer rebalance protocol (KIP-848) and its members.

The coordinator owns the assignment. A group has an epoch, bumped whenever what
the assignment depends on changes (members, their subscriptions, the
partitions of subscribed topics); the target assignment is computed for an
epoch; each member then reconciles towards its target at its own pace
(Kafka's CurrentAssignmentBuilder, :func:`reconcile`):

- a member first gives up what its target no longer has (UNREVOKED_PARTITIONS,
  keeping its epoch) and says so in a later heartbeat;
- it takes a new partition only once no other member owns it or is still
  revoking it (UNRELEASED_PARTITIONS until then), so a partition is never
  consumed by two members at once;
- then it is STABLE at the target epoch.

A member's epoch fences it: a heartbeat or an offset commit with an epoch the
member no longer has is refused (FENCED_MEMBER_EPOCH, STALE_MEMBER_EPOCH).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

#: Member epochs with a meaning in ConsumerGroupHeartbeat (Kafka's ConsumerGroupHeartbeatRequest).
JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

FrozenAssignment = Mapping[uuid.UUID, frozenset[int]]


class MemberState(enum.Enum):
    """Kafka's MemberState; the values are those of ConsumerGroupCurrentMemberAssignmentValue.State."""

    UNREVOKED_PARTITIONS = 0
    UNRELEASED_PARTITIONS = 1
    STABLE = 2
    UNKNOWN = 127


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


def freeze(assignment: Mapping[uuid.UUID, Iterable[int]]) -> dict[uuid.UUID, frozenset[int]]:
    return {t: frozenset(ps) for t, ps in assignment.items() if ps}


def assignment_size(assignment: FrozenAssignment) -> int:
    return sum(len(ps) for ps in assignment.values())


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """A member that speaks the classic protocol inside a consumer group (online migration)."""

    session_timeout_ms: int
    #: (protocol name, subscription metadata) as its JoinGroup listed them
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: FrozenAssignment = field(default_factory=dict)
    pending_revocation: FrozenAssignment = field(default_factory=dict)
    classic: ClassicMemberMetadata | None = None

    @property
    def is_static(self) -> bool:
        return self.instance_id is not None

    def same_metadata(self, other: ConsumerGroupMember) -> bool:
        """Whether what :meth:`metadata_record` stores is unchanged."""
        return (self.instance_id, self.rack_id, self.client_id, self.client_host, self.subscribed_topic_names,
                self.subscribed_topic_regex, self.rebalance_timeout_ms, self.server_assignor, self.classic) == (
            other.instance_id, other.rack_id, other.client_id, other.client_host, other.subscribed_topic_names,
            other.subscribed_topic_regex, other.rebalance_timeout_ms, other.server_assignor, other.classic)

    def same_assignment(self, other: ConsumerGroupMember) -> bool:
        return (self.member_epoch, self.previous_member_epoch, self.state, self.assigned,
                self.pending_revocation) == (other.member_epoch, other.previous_member_epoch, other.state,
                                             other.assigned, other.pending_revocation)


def owns_any(owned: Iterable[tuple[uuid.UUID, Iterable[int]]], partitions: FrozenAssignment) -> bool:
    return any(p in partitions.get(t, frozenset()) for t, ps in owned for p in ps)


def is_subset(owned: Iterable[tuple[uuid.UUID, Iterable[int]]] | None, assigned: FrozenAssignment) -> bool:
    if owned is None:
        return False
    return all(p in assigned.get(t, frozenset()) for t, ps in owned for p in ps)


def reconcile(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: FrozenAssignment,
    owner_epoch: Callable[[uuid.UUID, int], int],
    owned: list[tuple[uuid.UUID, list[int]]] | None,
) -> ConsumerGroupMember:
    """The member's next state (Kafka's CurrentAssignmentBuilder).

    ``owner_epoch(topic, partition)``: the epoch of the member that holds or is
    revoking the partition, -1 if it is free. ``owned``: the partitions the
    member reports owning in this heartbeat (None: not reported).
    """
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if owned is None or owns_any(owned, member.pending_revocation):
            return member
        return _next_assignment(member, member.member_epoch, target_epoch, target, owner_epoch)
    if member.state is MemberState.STABLE and member.member_epoch == target_epoch:
        return member
    return _next_assignment(member, member.member_epoch, target_epoch, target, owner_epoch)


def _next_assignment(member: ConsumerGroupMember, member_epoch: int, target_epoch: int, target: FrozenAssignment,
                     owner_epoch: Callable[[uuid.UUID, int], int]) -> ConsumerGroupMember:
    assigned: dict[uuid.UUID, set[int]] = {}
    revoke: dict[uuid.UUID, set[int]] = {}
    unreleased = False
    for topic_id in set(target) | set(member.assigned):
        want = target.get(topic_id, frozenset())
        have = member.assigned.get(topic_id, frozenset())
        keep = set(have & want)
        for p in sorted(want - have):
            if owner_epoch(topic_id, p) == -1:
                keep.add(p)
            else:
                unreleased = True
        if keep:
            assigned[topic_id] = keep
        if have - want:
            revoke[topic_id] = set(have - want)
    if revoke:
        return replace(member, state=MemberState.UNREVOKED_PARTITIONS, member_epoch=member_epoch,
                       assigned=freeze(assigned), pending_revocation=freeze(revoke))
    return replace(member, state=MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE,
                   previous_member_epoch=member_epoch, member_epoch=target_epoch, assigned=freeze(assigned),
                   pending_revocation={})


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """A subscribed topic as the group last saw it (ConsumerGroupPartitionMetadata)."""

    topic_id: uuid.UUID
    name: str
    num_partitions: int
    #: per partition, the racks of its replicas (sorted; empty where brokers have no rack)
    partition_racks: tuple[tuple[str, ...], ...] = ()


@dataclass(eq=False, slots=True)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerGroupMember] = field(default_factory=dict)
    #: member id -> target assignment (at ``assignment_epoch``)
    target: dict[str, FrozenAssignment] = field(default_factory=dict)
    #: subscribed topic name -> metadata, as of the last epoch bump
    subscription_metadata: dict[str, TopicMetadata] = field(default_factory=dict)
    #: (topic id, partition) -> epoch of the member holding it or revoking it
    partition_epochs: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)
    #: the assignor of the last target assignment ("" before the first one on this coordinator)
    assignor: str = ""
    dead: bool = False

    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(m.state is not MemberState.STABLE or m.member_epoch != self.assignment_epoch
               for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def static_member_id(self, instance_id: str) -> str | None:
        for m in self.members.values():
            if m.instance_id == instance_id:
                return m.member_id
        return None

    def owner_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        return self.partition_epochs.get((topic_id, partition), -1)

    def subscribed_topic_names(self) -> set[str]:
        """Topics subscribed by name (regex subscriptions are in :meth:`subscribed_regexes`)."""
        return {t for m in self.members.values() for t in m.subscribed_topic_names}

    def subscribed_regexes(self) -> set[str]:
        return {m.subscribed_topic_regex for m in self.members.values() if m.subscribed_topic_regex}

    def subscribed_topics(self) -> set[str]:
        """Every topic some member subscribes to, by name or by regex, as last resolved."""
        return self.subscribed_topic_names() | set(self.subscription_metadata)

    def put_member(self, member: ConsumerGroupMember) -> None:
        """Adds or replaces a member, keeping the partition-epoch index in step."""
        old = self.members.get(member.member_id)
        if old is not None:
            self._release(old)
        self.members[member.member_id] = member
        for source in (member.assigned, member.pending_revocation):
            for t, ps in source.items():
                for p in ps:
                    self.partition_epochs[(t, p)] = member.member_epoch

    def remove_member(self, member_id: str) -> ConsumerGroupMember | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._release(member)
        self.target.pop(member_id, None)
        return member

    def _release(self, member: ConsumerGroupMember) -> None:
        for source in (member.assigned, member.pending_revocation):
            for t, ps in source.items():
                for p in ps:
                    self.partition_epochs.pop((t, p), None)
