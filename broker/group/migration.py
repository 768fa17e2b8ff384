"""Online migration between the classic and the consumer rebalance protocol (KIP-848).

A rolling upgrade restarts the members of a classic group one by one with
``group.protocol=consumer``. When the first of them heartbeats, the coordinator
converts the group (``group.consumer.migration.policy`` upgrade or bidirectional,
as Kafka 4): every classic member becomes a member of the consumer group with its
subscription, its current assignment and the generation as its epoch, so nobody
loses a partition. The members still on the classic protocol keep using
JoinGroup/SyncGroup/Heartbeat/LeaveGroup, answered from the consumer group: a
heartbeat says REBALANCE_IN_PROGRESS when the member has something to reconcile;
its JoinGroup reconciles it (what it still owns is in its subscription's owned
partitions; an eager member owns nothing when it rejoins) and makes it its own
leader with nothing to assign; its SyncGroup gets its assignment. Offsets stay
where they are.

The downgrade (``downgrade`` or ``bidirectional``): when the last consumer-protocol
member leaves or is fenced and only classic members are left, the group turns classic
again with their assignments and generation, and rebalances. Not done: fencing a
static classic member's old incarnation inside a consumer group (a new one takes over
the instance's member id).
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import replace

import structlog

from broker.coordinator.runtime import CoordinatorRecord
from broker.group.consumer_group import (
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    FrozenAssignment,
    MemberState,
    freeze,
)
from broker.group.consumer_records import (
    group_epoch_record,
    member_records,
    member_removal_records,
    subscription_metadata_record,
    target_epoch_record,
    target_member_record,
)
from broker.group.consumer_shard import (
    CONSUMER_PROTOCOL_TYPE,
    ConsumerGroupShard,
    ConsumerHeartbeat,
    ConsumerHeartbeatResult,
    HeartbeatCallback,
    TopicLookup,
)
from broker.group.group import (
    UNKNOWN_MEMBER_ID,
    ClassicGroup,
    GroupState,
    JoinCallback,
    JoinResult,
    Member,
    SyncCallback,
    SyncResult,
)
from broker.group.records import group_metadata_key
from broker.group.shard_types import JoinRequest, LeavingMember, SyncRequest
from wire.errors import ErrorCode
from wire.exceptions import DecodeError
from wire.generated.data.consumer_protocol_assignment import (
    ConsumerProtocolAssignment,
    ConsumerProtocolAssignmentTopicPartition,
)
from wire.generated.data.consumer_protocol_subscription import ConsumerProtocolSubscription

log = structlog.get_logger(__name__)

_VERSION = struct.Struct(">h")
UPGRADE_POLICIES = frozenset({"upgrade", "bidirectional"})
DOWNGRADE_POLICIES = frozenset({"downgrade", "bidirectional"})


def decode_subscription(metadata: bytes) -> tuple[int, ConsumerProtocolSubscription] | None:
    if len(metadata) < 2:
        return None
    (version,) = _VERSION.unpack_from(metadata)
    try:
        return version, ConsumerProtocolSubscription.decode(
            metadata[2:], max(0, min(version, ConsumerProtocolSubscription.MAX_VERSION)))
    except (DecodeError, ValueError):
        return None


def decode_assignment(data: bytes) -> dict[str, list[int]]:
    if len(data) < 2:
        return {}
    (version,) = _VERSION.unpack_from(data)
    try:
        a = ConsumerProtocolAssignment.decode(data[2:], max(0, min(version, ConsumerProtocolAssignment.MAX_VERSION)))
    except (DecodeError, ValueError):
        return {}
    return {tp.topic: list(tp.partitions) for tp in a.assigned_partitions}


class MigratingGroupShard(ConsumerGroupShard):
    """A :class:`ConsumerGroupShard` whose classic groups upgrade online."""

    migration_policy = "bidirectional"

    # ================================================================ the upgrade

    def consumer_heartbeat(self, req: ConsumerHeartbeat, topics: TopicLookup, callback: HeartbeatCallback) -> None:
        classic = self.groups.get(req.group_id)
        if (classic is not None and classic.size > 0 and req.group_id not in self.consumer_groups
                and req.member_epoch == 0):
            error = self._upgrade_error(classic)
            if error is not None:
                callback(self._refusal(error))
                return
            self._convert(classic, topics)
        super().consumer_heartbeat(req, topics, callback)

    @staticmethod
    def _refusal(message: str) -> ConsumerHeartbeatResult:
        return ConsumerHeartbeatResult(ErrorCode.GROUP_ID_NOT_FOUND, message)

    def _upgrade_error(self, classic: ClassicGroup) -> str | None:
        """Kafka's validateOnlineUpgrade."""
        group_id = classic.group_id
        if self.migration_policy not in UPGRADE_POLICIES:
            return f"Cannot upgrade classic group {group_id} to consumer group because the online upgrade is disabled."
        if classic.protocol_type != CONSUMER_PROTOCOL_TYPE or classic.protocol_name is None:
            return (f"Cannot upgrade classic group {group_id} to consumer group because the group does not use "
                    "the consumer embedded protocol.")
        if classic.size >= self.consumer_config.max_size:
            return (f"Cannot upgrade classic group {group_id} to consumer group because the group size exceeds "
                    "the consumer group maximum size.")
        return None

    def _convert(self, classic: ClassicGroup, topics: TopicLookup) -> None:
        group_id = classic.group_id
        protocol = classic.protocol_name or ""
        group = ConsumerGroup(group_id, group_epoch=classic.generation_id, assignment_epoch=classic.generation_id)
        subscriptions: dict[str, tuple[str, ...]] = {}
        assignments: dict[str, dict[str, list[int]]] = {}
        for m in classic.members.values():
            decoded = decode_subscription(m.metadata(protocol))
            subscriptions[m.member_id] = tuple(sorted(decoded[1].topics)) if decoded else ()
            assignments[m.member_id] = decode_assignment(m.assignment)
        group.subscription_metadata = topics({t for ts in subscriptions.values() for t in ts}, set())
        ids = {name: t.topic_id for name, t in group.subscription_metadata.items()}
        records: list[CoordinatorRecord] = [CoordinatorRecord(group_metadata_key(group_id), None)]
        records.append(group_epoch_record(group_id, group.group_epoch))
        records.append(subscription_metadata_record(group_id, group.subscription_metadata))
        for m in classic.members.values():
            assigned = freeze({ids[t]: ps for t, ps in assignments[m.member_id].items() if t in ids})
            member = ConsumerGroupMember(
                m.member_id, instance_id=m.group_instance_id, client_id=m.client_id, client_host=m.client_host,
                subscribed_topic_names=subscriptions[m.member_id], rebalance_timeout_ms=m.rebalance_timeout_ms,
                member_epoch=classic.generation_id, previous_member_epoch=classic.generation_id,
                state=MemberState.STABLE, assigned=assigned,
                classic=ClassicMemberMetadata(m.session_timeout_ms, tuple(m.supported_protocols)))
            group.put_member(member)
            group.target[m.member_id] = assigned
            records.extend(member_records(group_id, None, member))
            records.append(target_member_record(group_id, m.member_id, assigned))
            # The classic member's pending join or sync learns it must join again.
            classic.maybe_invoke_join_callback(m, JoinResult(m.member_id, ErrorCode.REBALANCE_IN_PROGRESS))
            classic.maybe_invoke_sync_callback(m, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
            self.ctx.cancel(self._heartbeat_key(classic, m.member_id))
        records.append(target_epoch_record(group_id, group.assignment_epoch))
        for key in (self._join_key(classic), self._sync_key(classic)):
            self.ctx.cancel(key)
        # The offsets stay with an offsets-only classic group of the same id.
        holder = ClassicGroup(group_id, GroupState.EMPTY, self.ctx.now_ms())
        holder.offsets.update(classic.offsets)
        holder.pending_txn_offsets.update(classic.pending_txn_offsets)
        classic.transition_to(GroupState.DEAD, self.ctx.now_ms())
        self.groups[group_id] = holder
        self.consumer_groups[group_id] = group
        for member_id in group.members:
            self._schedule_session(group, member_id)
        self.ctx.append(records)
        log.info("classic_group_upgraded", group_id=group_id, generation=classic.generation_id,
                 members=len(group.members))

    # ================================================================ the downgrade

    def _remove_member(self, group: ConsumerGroup, member_id: str, reason: str) -> list[CoordinatorRecord]:
        records = super()._remove_member(group, member_id, reason)
        if (self.migration_policy in DOWNGRADE_POLICIES and group.members
                and all(m.classic is not None for m in group.members.values())):
            records.extend(self._downgrade(group))
        return records

    def _downgrade(self, group: ConsumerGroup) -> list[CoordinatorRecord]:
        """Only classic members are left: the group turns classic again (Kafka's
        convertToClassicGroup) and rebalances, its members keeping what they own meanwhile."""
        members = list(group.members.values())
        common = set.intersection(*({n for n, _ in m.classic.protocols} for m in members if m.classic))
        first = members[0]
        assert first.classic is not None
        protocol = next((n for n, _ in first.classic.protocols if n in common), None)
        if protocol is None:
            return []  # no protocol every member supports: it stays a consumer group
        now = self.ctx.now_ms()
        classic = ClassicGroup(group.group_id, GroupState.STABLE, now, protocol_type=CONSUMER_PROTOCOL_TYPE,
                               protocol_name=protocol, generation_id=group.group_epoch, leader_id=first.member_id)
        records: list[CoordinatorRecord] = []
        assignments: dict[str, bytes] = {}
        for m in members:
            assert m.classic is not None
            metadata = dict(m.classic.protocols)[protocol]
            decoded = decode_subscription(metadata)
            version = min(decoded[0] if decoded else 0, ConsumerProtocolAssignment.MAX_VERSION)
            assignments[m.member_id] = self._encode_assignment(group, m.assigned, max(version, 0))
            classic.add(Member(
                member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id,
                client_host=m.client_host, rebalance_timeout_ms=max(m.rebalance_timeout_ms, 0),
                session_timeout_ms=m.classic.session_timeout_ms, protocol_type=CONSUMER_PROTOCOL_TYPE,
                supported_protocols=list(m.classic.protocols), assignment=assignments[m.member_id]))
            self._cancel_timers(group, m.member_id)
            records.extend(member_removal_records(group.group_id, m.member_id))
        classic.subscribed_topics = classic.compute_subscribed_topics()
        records += [target_epoch_record(group.group_id, None), subscription_metadata_record(group.group_id, None),
                    group_epoch_record(group.group_id, None)]
        holder = self.groups.get(group.group_id)
        if holder is not None:
            classic.offsets.update(holder.offsets)
            classic.pending_txn_offsets.update(holder.pending_txn_offsets)
        group.dead = True
        del self.consumer_groups[group.group_id]
        self._rebalancing_since.pop(group.group_id, None)
        self.groups[group.group_id] = classic
        self._store_group(classic, assignments, lambda error: None)
        for member in classic.members.values():
            self._schedule_heartbeat(classic, member)
        self._prepare_rebalance(classic, "the last consumer-protocol member left: downgraded to a classic group")
        log.info("consumer_group_downgraded", group_id=group.group_id, generation=classic.generation_id,
                 members=classic.size)
        return records

    # ================================================================ classic members in a consumer group

    def _classic_member(self, group_id: str, member_id: str,
                        instance_id: str | None) -> tuple[ConsumerGroup | None, ConsumerGroupMember | None, ErrorCode]:
        group = self.consumer_groups.get(group_id)
        if group is None:
            return None, None, ErrorCode.NONE
        member = group.members.get(member_id)
        if member is None or member.classic is None:
            return group, None, ErrorCode.UNKNOWN_MEMBER_ID
        if instance_id is not None and member.instance_id != instance_id:
            return group, None, ErrorCode.FENCED_INSTANCE_ID
        return group, member, ErrorCode.NONE

    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int) -> ErrorCode:
        group, member, error = self._classic_member(group_id, member_id, group_instance_id)
        if group is None or not group.members:
            return super().heartbeat(group_id, member_id, group_instance_id, generation_id)
        if member is None:
            return error
        if generation_id != member.member_epoch:
            return ErrorCode.ILLEGAL_GENERATION
        self._schedule_session(group, member_id)
        if member.state is not MemberState.STABLE or member.member_epoch != group.assignment_epoch:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave_group(self, group_id: str, members: list[LeavingMember]) -> tuple[ErrorCode, list[ErrorCode]]:
        group = self.consumer_groups.get(group_id)
        if group is None or not group.members:
            return super().leave_group(group_id, members)
        results = []
        records: list[CoordinatorRecord] = []
        for i, leaving in enumerate(members):
            if group.dead:  # downgraded by an earlier leave: the classic group takes the rest
                _, rest = super().leave_group(group_id, members[i:])
                results.extend(rest)
                break
            member_id = leaving.member_id
            if member_id == UNKNOWN_MEMBER_ID and leaving.group_instance_id is not None:
                member_id = group.static_member_id(leaving.group_instance_id) or ""
            if member_id not in group.members:
                results.append(ErrorCode.UNKNOWN_MEMBER_ID)
                continue
            records.extend(self._remove_member(group, member_id, leaving.reason or "the classic member left"))
            results.append(ErrorCode.NONE)
        self._write(records, lambda error: None)
        return ErrorCode.NONE, results

    def join_group(self, req: JoinRequest, callback: JoinCallback) -> None:
        group = self.consumer_groups.get(req.group_id)
        if group is None or not group.members or self.migration_policy not in UPGRADE_POLICIES:
            super().join_group(req, callback)
            return
        if req.protocol_type != CONSUMER_PROTOCOL_TYPE or not req.protocols:
            callback(JoinResult(req.member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        member_id = req.member_id
        if req.group_instance_id is not None and member_id == UNKNOWN_MEMBER_ID:
            member_id = group.static_member_id(req.group_instance_id) or ""
        if member_id == UNKNOWN_MEMBER_ID:
            member_id = f"{req.client_id}-{self.ctx.random_uuid()}"
            if req.require_known_member_id:
                callback(JoinResult(member_id, ErrorCode.MEMBER_ID_REQUIRED))
                return
        existing = group.members.get(member_id)
        if existing is not None and existing.classic is None:
            callback(JoinResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID))
            return
        if existing is None and len(group.members) >= self.consumer_config.max_size:
            callback(JoinResult(member_id, ErrorCode.GROUP_MAX_SIZE_REACHED))
            return
        name, metadata = req.protocols[0]
        decoded = decode_subscription(metadata)
        if decoded is None:
            callback(JoinResult(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        _, subscription = decoded
        ids = {n: t.topic_id for n, t in group.subscription_metadata.items()}
        owned = [(ids[tp.topic], list(tp.partitions)) for tp in subscription.owned_partitions if tp.topic in ids]
        member = existing or ConsumerGroupMember(member_id, instance_id=req.group_instance_id)
        updated = replace(
            member, client_id=req.client_id, client_host=req.client_host,
            subscribed_topic_names=tuple(sorted(subscription.topics)), rebalance_timeout_ms=req.rebalance_timeout_ms,
            classic=ClassicMemberMetadata(req.session_timeout_ms, tuple(req.protocols)))
        records: list[CoordinatorRecord] = []
        bump = existing is None or updated.subscribed_topic_names != member.subscribed_topic_names
        group.put_member(updated)
        lookup = self._topic_lookup
        if lookup is not None:
            bump = self._refresh_subscription_metadata(group, lookup, records) or bump
        if bump:
            group.group_epoch += 1
            self._rebalancing_since.setdefault(group.group_id, self.ctx.now_ms())
            records.append(group_epoch_record(group.group_id, group.group_epoch))
        if group.group_epoch > group.assignment_epoch:
            self._compute_target(group, records)
        reconciled = self._reconcile(group, updated, owned, records, existing)
        self._schedule_session(group, member_id)
        self._maybe_rebalance_completed(group)
        # Its own leader, with nothing to assign: JoinGroup v9+ says so (skip_assignment); an
        # older client runs its assignor over itself alone, and the SyncGroup ignores the result.
        skip = req.support_skip_assignment
        result = JoinResult(member_id, ErrorCode.NONE, reconciled.member_epoch, CONSUMER_PROTOCOL_TYPE, name,
                            leader_id=member_id, skip_assignment=skip,
                            members=() if skip else ((member_id, req.group_instance_id, metadata),))
        log.info("classic_member_joined_consumer_group", group_id=group.group_id, member_id=member_id,
                 epoch=reconciled.member_epoch, state=reconciled.state.name)
        self._write(records, lambda error: callback(result if error is ErrorCode.NONE
                                                    else JoinResult(member_id, error)))

    def sync_group(self, req: SyncRequest, callback: SyncCallback) -> None:
        group, member, error = self._classic_member(req.group_id, req.member_id, req.group_instance_id)
        if group is None or not group.members:
            super().sync_group(req, callback)
            return
        if member is None or member.classic is None:
            callback(SyncResult(error))
            return
        if req.generation_id != member.member_epoch:
            callback(SyncResult(ErrorCode.ILLEGAL_GENERATION))
            return
        protocols = dict(member.classic.protocols)
        name = req.protocol_name if req.protocol_name in protocols else next(iter(protocols), None)
        decoded = decode_subscription(protocols.get(name or "", b""))
        version = min(decoded[0] if decoded else 0, ConsumerProtocolAssignment.MAX_VERSION)
        self._schedule_session(group, member.member_id)
        callback(SyncResult(ErrorCode.NONE, CONSUMER_PROTOCOL_TYPE, name,
                            self._encode_assignment(group, member.assigned, max(version, 0))))

    @staticmethod
    def _encode_assignment(group: ConsumerGroup, assigned: FrozenAssignment, version: int) -> bytes:
        names: dict[uuid.UUID, str] = {t.topic_id: n for n, t in group.subscription_metadata.items()}
        assignment = ConsumerProtocolAssignment(assigned_partitions=[
            ConsumerProtocolAssignmentTopicPartition(names[t], sorted(ps))
            for t, ps in sorted(assigned.items(), key=lambda kv: names.get(kv[0], "")) if t in names])
        return _VERSION.pack(version) + assignment.encode(version)
