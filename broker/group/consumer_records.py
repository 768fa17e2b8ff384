"""The ``__consumer_offsets`` records of consumer-protocol groups, as Kafka writes them.

Key version = record type, as for offsets and classic groups: ConsumerGroupMetadata
(3), ConsumerGroupPartitionMetadata (4), ConsumerGroupMemberMetadata (5),
ConsumerGroupTargetAssignmentMetadata (6), ConsumerGroupTargetAssignmentMember
(7), ConsumerGroupCurrentMemberAssignment (8); values are version 0. A null value
is a tombstone. Replaying them in order rebuilds every group
(:class:`ConsumerGroupLoader`), so a new coordinator takes a group over as it was.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from broker.coordinator.runtime import CoordinatorRecord
from broker.group.consumer_group import (
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    FrozenAssignment,
    MemberState,
    TopicMetadata,
    freeze,
)
from broker.group.records import RecordFormatError
from wire.exceptions import DecodeError
from wire.generated.coordinator.consumer_group_current_member_assignment_key import (
    ConsumerGroupCurrentMemberAssignmentKey,
)
from wire.generated.coordinator.consumer_group_current_member_assignment_value import (
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupCurrentMemberAssignmentValueTopicPartitions,
)
from wire.generated.coordinator.consumer_group_member_metadata_key import (
    ConsumerGroupMemberMetadataKey,
)
from wire.generated.coordinator.consumer_group_member_metadata_value import (
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMemberMetadataValueClassicMemberMetadata,
    ConsumerGroupMemberMetadataValueClassicProtocol,
)
from wire.generated.coordinator.consumer_group_metadata_key import ConsumerGroupMetadataKey
from wire.generated.coordinator.consumer_group_metadata_value import ConsumerGroupMetadataValue
from wire.generated.coordinator.consumer_group_partition_metadata_key import (
    ConsumerGroupPartitionMetadataKey,
)
from wire.generated.coordinator.consumer_group_partition_metadata_value import (
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupPartitionMetadataValuePartitionMetadata,
    ConsumerGroupPartitionMetadataValueTopicMetadata,
)
from wire.generated.coordinator.consumer_group_target_assignment_member_key import (
    ConsumerGroupTargetAssignmentMemberKey,
)
from wire.generated.coordinator.consumer_group_target_assignment_member_value import (
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMemberValueTopicPartition,
)
from wire.generated.coordinator.consumer_group_target_assignment_metadata_key import (
    ConsumerGroupTargetAssignmentMetadataKey,
)
from wire.generated.coordinator.consumer_group_target_assignment_metadata_value import (
    ConsumerGroupTargetAssignmentMetadataValue,
)
from wire.primitives import Message

_VERSION = struct.Struct(">h")

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_METADATA = 6
TARGET_MEMBER = 7
CURRENT_ASSIGNMENT = 8
CONSUMER_GROUP_KEY_VERSIONS = range(GROUP_METADATA, CURRENT_ASSIGNMENT + 1)
_KEYS: dict[int, type[Message]] = {
    GROUP_METADATA: ConsumerGroupMetadataKey,
    PARTITION_METADATA: ConsumerGroupPartitionMetadataKey,
    MEMBER_METADATA: ConsumerGroupMemberMetadataKey,
    TARGET_METADATA: ConsumerGroupTargetAssignmentMetadataKey,
    TARGET_MEMBER: ConsumerGroupTargetAssignmentMemberKey,
    CURRENT_ASSIGNMENT: ConsumerGroupCurrentMemberAssignmentKey,
}
_VALUES: dict[int, type[Message]] = {
    GROUP_METADATA: ConsumerGroupMetadataValue,
    PARTITION_METADATA: ConsumerGroupPartitionMetadataValue,
    MEMBER_METADATA: ConsumerGroupMemberMetadataValue,
    TARGET_METADATA: ConsumerGroupTargetAssignmentMetadataValue,
    TARGET_MEMBER: ConsumerGroupTargetAssignmentMemberValue,
    CURRENT_ASSIGNMENT: ConsumerGroupCurrentMemberAssignmentValue,
}


def _record(key_version: int, key: Message, value: Message | None) -> CoordinatorRecord:
    return CoordinatorRecord(_VERSION.pack(key_version) + key.encode(key_version),
                             None if value is None else _VERSION.pack(0) + value.encode(0))


def _sorted_parts(assignment: FrozenAssignment) -> list[tuple[uuid.UUID, list[int]]]:
    return [(t, sorted(ps)) for t, ps in sorted(assignment.items()) if ps]


def group_epoch_record(group_id: str, epoch: int | None) -> CoordinatorRecord:
    value = None if epoch is None else ConsumerGroupMetadataValue(epoch=epoch)
    return _record(GROUP_METADATA, ConsumerGroupMetadataKey(group_id=group_id), value)


def subscription_metadata_record(group_id: str, topics: Mapping[str, TopicMetadata] | None) -> CoordinatorRecord:
    value = None if topics is None else ConsumerGroupPartitionMetadataValue(topics=[
        ConsumerGroupPartitionMetadataValueTopicMetadata(
            topic_id=t.topic_id, topic_name=t.name, num_partitions=t.num_partitions,
            partition_metadata=[ConsumerGroupPartitionMetadataValuePartitionMetadata(partition=p, racks=list(racks))
                                for p, racks in enumerate(t.partition_racks) if racks])
        for _, t in sorted(topics.items())])
    return _record(PARTITION_METADATA, ConsumerGroupPartitionMetadataKey(group_id=group_id), value)


def member_metadata_record(group_id: str, member_id: str, m: ConsumerGroupMember | None) -> CoordinatorRecord:
    value = None if m is None else ConsumerGroupMemberMetadataValue(
        instance_id=m.instance_id, rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
        subscribed_topic_names=list(m.subscribed_topic_names), subscribed_topic_regex=m.subscribed_topic_regex,
        rebalance_timeout_ms=m.rebalance_timeout_ms, server_assignor=m.server_assignor,
        classic_member_metadata=None if m.classic is None else ConsumerGroupMemberMetadataValueClassicMemberMetadata(
            session_timeout_ms=m.classic.session_timeout_ms, supported_protocols=[
                ConsumerGroupMemberMetadataValueClassicProtocol(name=n, metadata=d) for n, d in m.classic.protocols]))
    return _record(MEMBER_METADATA, ConsumerGroupMemberMetadataKey(group_id=group_id, member_id=member_id), value)


def target_epoch_record(group_id: str, epoch: int | None) -> CoordinatorRecord:
    value = None if epoch is None else ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=epoch)
    return _record(TARGET_METADATA, ConsumerGroupTargetAssignmentMetadataKey(group_id=group_id), value)


def target_member_record(group_id: str, member_id: str, target: FrozenAssignment | None) -> CoordinatorRecord:
    value = None if target is None else ConsumerGroupTargetAssignmentMemberValue(topic_partitions=[
        ConsumerGroupTargetAssignmentMemberValueTopicPartition(topic_id=t, partitions=ps)
        for t, ps in _sorted_parts(target)])
    return _record(TARGET_MEMBER, ConsumerGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id),
                   value)


def current_assignment_record(group_id: str, member_id: str, m: ConsumerGroupMember | None) -> CoordinatorRecord:
    def parts(a: FrozenAssignment) -> list[ConsumerGroupCurrentMemberAssignmentValueTopicPartitions]:
        return [ConsumerGroupCurrentMemberAssignmentValueTopicPartitions(topic_id=t, partitions=ps)
                for t, ps in _sorted_parts(a)]

    value = None if m is None else ConsumerGroupCurrentMemberAssignmentValue(
        member_epoch=m.member_epoch, previous_member_epoch=m.previous_member_epoch, state=m.state.value,
        assigned_partitions=parts(m.assigned), partitions_pending_revocation=parts(m.pending_revocation))
    return _record(CURRENT_ASSIGNMENT,
                   ConsumerGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id), value)


def member_records(group_id: str, before: ConsumerGroupMember | None,
                   after: ConsumerGroupMember) -> list[CoordinatorRecord]:
    """What changed in a member: its metadata, its current assignment, or both."""
    out = []
    if before is None or not before.same_metadata(after):
        out.append(member_metadata_record(group_id, after.member_id, after))
    if before is None or not before.same_assignment(after):
        out.append(current_assignment_record(group_id, after.member_id, after))
    return out


def member_removal_records(group_id: str, member_id: str) -> list[CoordinatorRecord]:
    """Kafka's order: current assignment, target assignment, then the member."""
    return [current_assignment_record(group_id, member_id, None), target_member_record(group_id, member_id, None),
            member_metadata_record(group_id, member_id, None)]


@dataclass(slots=True)
class _LoadingGroup:
    epoch: int = 0
    assignment_epoch: int = 0
    topics: dict[str, TopicMetadata] = field(default_factory=dict)
    metadata: dict[str, ConsumerGroupMemberMetadataValue] = field(default_factory=dict)
    target: dict[str, FrozenAssignment] = field(default_factory=dict)
    current: dict[str, ConsumerGroupCurrentMemberAssignmentValue] = field(default_factory=dict)
    exists: bool = False


class ConsumerGroupLoader:
    """Collects the consumer-group records of one partition while it loads."""

    def __init__(self) -> None:
        self._groups: dict[str, _LoadingGroup] = {}

    def replay(self, key_version: int, key_data: bytes, value_data: bytes | None) -> None:
        try:
            key = _KEYS[key_version].decode(key_data[2:], key_version)
            value = None
            if value_data is not None:
                (value_version,) = _VERSION.unpack_from(value_data)
                value = _VALUES[key_version].decode(value_data[2:], value_version)
        except (DecodeError, ValueError, struct.error) as ex:
            raise RecordFormatError(f"bad consumer group record of type {key_version}: {ex}") from ex
        group_id: str = key.group_id  # type: ignore[attr-defined]
        member_id: str = getattr(key, "member_id", "")
        g = self._groups.setdefault(group_id, _LoadingGroup())
        if isinstance(value, ConsumerGroupMetadataValue):
            g.epoch, g.exists = value.epoch, True
        elif key_version == GROUP_METADATA:
            self._groups.pop(group_id, None)
        elif isinstance(value, ConsumerGroupPartitionMetadataValue):
            g.topics = {}
            for t in value.topics:
                racks: list[tuple[str, ...]] = [() for _ in range(max(t.num_partitions, 0))]
                for pm in t.partition_metadata:
                    if 0 <= pm.partition < len(racks):
                        racks[pm.partition] = tuple(pm.racks)
                g.topics[t.topic_name] = TopicMetadata(t.topic_id, t.topic_name, t.num_partitions,
                                                       tuple(racks) if any(racks) else ())
        elif isinstance(value, ConsumerGroupTargetAssignmentMetadataValue):
            g.assignment_epoch = value.assignment_epoch
        elif isinstance(value, ConsumerGroupMemberMetadataValue):
            g.metadata[member_id] = value
        elif isinstance(value, ConsumerGroupTargetAssignmentMemberValue):
            g.target[member_id] = freeze({tp.topic_id: tp.partitions for tp in value.topic_partitions})
        elif isinstance(value, ConsumerGroupCurrentMemberAssignmentValue):
            g.current[member_id] = value
        elif key_version == MEMBER_METADATA:
            g.metadata.pop(member_id, None)
        elif key_version == TARGET_MEMBER:
            g.target.pop(member_id, None)
        elif key_version == CURRENT_ASSIGNMENT:
            g.current.pop(member_id, None)

    def groups(self) -> list[ConsumerGroup]:
        out = []
        for group_id, g in self._groups.items():
            if not g.exists:
                continue
            group = ConsumerGroup(group_id, group_epoch=g.epoch, assignment_epoch=g.assignment_epoch,
                                  subscription_metadata=dict(g.topics))
            for member_id, md in g.metadata.items():
                member = ConsumerGroupMember(
                    member_id=member_id, instance_id=md.instance_id, rack_id=md.rack_id, client_id=md.client_id,
                    client_host=md.client_host, subscribed_topic_names=tuple(md.subscribed_topic_names),
                    subscribed_topic_regex=md.subscribed_topic_regex, rebalance_timeout_ms=md.rebalance_timeout_ms,
                    server_assignor=md.server_assignor,
                    classic=None if md.classic_member_metadata is None else ClassicMemberMetadata(
                        md.classic_member_metadata.session_timeout_ms,
                        tuple((p.name, bytes(p.metadata)) for p in md.classic_member_metadata.supported_protocols)))
                cur = g.current.get(member_id)
                if cur is not None:
                    try:
                        state = MemberState(cur.state)
                    except ValueError:
                        state = MemberState.UNKNOWN
                    member = replace(
                        member, member_epoch=cur.member_epoch, previous_member_epoch=cur.previous_member_epoch,
                        state=state,
                        assigned=freeze({tp.topic_id: tp.partitions for tp in cur.assigned_partitions}),
                        pending_revocation=freeze({tp.topic_id: tp.partitions
                                                   for tp in cur.partitions_pending_revocation}))
                group.put_member(member)
            group.target = {m: t for m, t in g.target.items() if m in group.members}
            out.append(group)
        self._groups.clear()
        return out
