"""The ``__consumer_offsets`` records of share groups (KIP-932), as Kafka writes them.

Key version = record type, as for the other group records: ShareGroupPartitionMetadata
(9), ShareGroupMemberMetadata (10), ShareGroupMetadata (11); values are version 0 and a
null value is a tombstone.

- ShareGroupMetadata: the group epoch; its tombstone deletes the group.
- ShareGroupMemberMetadata: a member's rack, client id, client host and subscribed topics.
- ShareGroupPartitionMetadata: the share-partitions the group has state for
  (InitializedTopics: topic id, name, partitions), what describing its offsets and
  deleting it reach. Kafka 4.1+ keeps this in ShareGroupStatePartitionMetadata (15,
  with initializing, initialized and deleting topics), a schema not among those used
  here; ShareGroupPartitionMetadata's value has the same InitializedTopics and
  DeletingTopics.

Replaying them in order rebuilds every share group (:class:`ShareGroupLoader`). A
member's epoch and assignment are not among them: the assignment is recomputed from the
members' subscriptions (it depends on nothing else), and a loaded member's first
heartbeat may bring any epoch it can have had (``ShareMember.loaded_epoch_floor``): from
the group epoch its metadata record was written at (the epoch of the group epoch record
right after it, when it joined or changed its subscription) up to the group epoch.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from broker.coordinator.runtime import CoordinatorRecord
from broker.group.records import RecordFormatError
from broker.share.group import ShareGroup, ShareMember, TopicIdPartition
from wire.exceptions import DecodeError
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
    ShareGroupPartitionMetadataValueTopicPartitionsInfo,
)
from wire.primitives import Message

_VERSION = struct.Struct(">h")

SHARE_PARTITION_METADATA = 9
SHARE_MEMBER_METADATA = 10
SHARE_GROUP_METADATA = 11
SHARE_GROUP_KEY_VERSIONS = range(SHARE_PARTITION_METADATA, SHARE_GROUP_METADATA + 1)
_KEYS: dict[int, type[Message]] = {
    SHARE_PARTITION_METADATA: ShareGroupPartitionMetadataKey,
    SHARE_MEMBER_METADATA: ShareGroupMemberMetadataKey,
    SHARE_GROUP_METADATA: ShareGroupMetadataKey,
}
_VALUES: dict[int, type[Message]] = {
    SHARE_PARTITION_METADATA: ShareGroupPartitionMetadataValue,
    SHARE_MEMBER_METADATA: ShareGroupMemberMetadataValue,
    SHARE_GROUP_METADATA: ShareGroupMetadataValue,
}


def _record(key_version: int, key: Message, value: Message | None) -> CoordinatorRecord:
    return CoordinatorRecord(_VERSION.pack(key_version) + key.encode(key_version),
                             None if value is None else _VERSION.pack(0) + value.encode(0))


def share_group_epoch_record(group_id: str, epoch: int | None) -> CoordinatorRecord:
    value = None if epoch is None else ShareGroupMetadataValue(epoch=epoch)
    return _record(SHARE_GROUP_METADATA, ShareGroupMetadataKey(group_id=group_id), value)


def share_member_record(group_id: str, member_id: str, member: ShareMember | None) -> CoordinatorRecord:
    value = None if member is None else ShareGroupMemberMetadataValue(
        rack_id=member.rack_id, client_id=member.client_id, client_host=member.client_host,
        subscribed_topic_names=sorted(member.subscribed_topics))
    return _record(SHARE_MEMBER_METADATA, ShareGroupMemberMetadataKey(group_id=group_id, member_id=member_id), value)


def share_partitions_record(group_id: str, partitions: Iterable[TopicIdPartition] | None,
                            topic_name: Callable[[uuid.UUID], str | None] = lambda _: None) -> CoordinatorRecord:
    """The share-partitions the group has state for (None: the tombstone)."""
    value = None
    if partitions is not None:
        by_topic: dict[uuid.UUID, list[int]] = {}
        for topic_id, partition in sorted(partitions):
            by_topic.setdefault(topic_id, []).append(partition)
        value = ShareGroupPartitionMetadataValue(initialized_topics=[
            ShareGroupPartitionMetadataValueTopicPartitionsInfo(topic_id=t, topic_name=topic_name(t) or "",
                                                                partitions=ps)
            for t, ps in by_topic.items()])
    return _record(SHARE_PARTITION_METADATA, ShareGroupPartitionMetadataKey(group_id=group_id), value)


def share_group_tombstones(group: ShareGroup) -> list[CoordinatorRecord]:
    """Kafka's order when a group is deleted: members, partition metadata, then the group."""
    out = [share_member_record(group.group_id, m, None) for m in sorted(group.members)]
    out.append(share_partitions_record(group.group_id, None))
    out.append(share_group_epoch_record(group.group_id, None))
    return out


@dataclass(slots=True)
class _LoadingGroup:
    epoch: int = 0
    exists: bool = False
    #: member id -> (its metadata, the group epoch when it was written)
    members: dict[str, tuple[ShareGroupMemberMetadataValue, int]] = field(default_factory=dict)
    initialized: set[TopicIdPartition] = field(default_factory=set)


class ShareGroupLoader:
    """Collects the share-group records of one partition while it loads."""

    def __init__(self) -> None:
        self._groups: dict[str, _LoadingGroup] = {}
        #: (group, member) of the record just replayed when it was a member's metadata: a
        #: group epoch record right after it is the epoch the member joined or resubscribed at
        self._last_member: tuple[str, str] | None = None

    def replay(self, key_version: int, key_data: bytes, value_data: bytes | None) -> None:
        try:
            key = _KEYS[key_version].decode(key_data[2:], key_version)
            value = None
            if value_data is not None:
                (value_version,) = _VERSION.unpack_from(value_data)
                value = _VALUES[key_version].decode(value_data[2:], value_version)
        except (DecodeError, ValueError, KeyError, struct.error) as ex:
            raise RecordFormatError(f"bad share group record of type {key_version}: {ex}") from ex
        group_id: str = key.group_id  # type: ignore[attr-defined]
        last_member, self._last_member = self._last_member, None
        if key_version == SHARE_GROUP_METADATA and value is None:
            self._groups.pop(group_id, None)
            return
        g = self._groups.setdefault(group_id, _LoadingGroup())
        if isinstance(value, ShareGroupMetadataValue):
            g.epoch, g.exists = value.epoch, True
            if last_member is not None and last_member[0] == group_id and last_member[1] in g.members:
                g.members[last_member[1]] = (g.members[last_member[1]][0], value.epoch)
        elif isinstance(value, ShareGroupMemberMetadataValue):
            g.members[key.member_id] = (value, g.epoch)  # type: ignore[attr-defined]
            self._last_member = (group_id, key.member_id)  # type: ignore[attr-defined]
        elif isinstance(value, ShareGroupPartitionMetadataValue):
            g.initialized = {(t.topic_id, p) for t in value.initialized_topics for p in t.partitions}
        elif key_version == SHARE_MEMBER_METADATA:
            g.members.pop(key.member_id, None)  # type: ignore[attr-defined]
        elif key_version == SHARE_PARTITION_METADATA:
            g.initialized = set()

    def groups(self) -> list[ShareGroup]:
        """The groups replayed (members without an epoch yet: see ``loaded_epoch_floor``)."""
        out = []
        for group_id, g in self._groups.items():
            if not g.exists:
                continue
            group = ShareGroup(group_id, group_epoch=g.epoch, state_partitions=set(g.initialized))
            for member_id, (md, floor) in g.members.items():
                group.members[member_id] = ShareMember(
                    member_id, g.epoch, md.client_id, md.client_host, md.rack_id,
                    tuple(md.subscribed_topic_names), loaded_epoch_floor=min(floor, g.epoch))
            out.append(group)
        self._groups.clear()
        return out
