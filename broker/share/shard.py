"""The share groups of one ``__share_group_state`` partition: membership, and the
share-partition states the share coordinator keeps.

Kafka keeps share-group membership in ``__consumer_offsets`` and each
share-partition's state in ``__share_group_state`` (keyed by
``groupId:topicId:partition``, see broker/share/state_store.py). Cormorant keeps
a group's membership and settings in the shard of the group's
``__share_group_state`` partition, and the states in the shards their keys hash
to. Records (JSON, compacted by key; see docs/share-groups.md):

- key ``{"type":"config","group":G}``: the group's ``share.*`` settings as data dirs
  written before kept them; now group configs in the metadata log
  (broker/share/group_configs.py), to which a loaded one is migrated, then removed;
- key ``{"type":"initialized","group":G}``, value ``{"partitions":[[T,P],...]}``:
  the share-partitions the group has state for (Kafka's
  ShareGroupStatePartitionMetadata), what describing and deleting it cover;
- key ``{"type":"state",...}``: a share-partition's state (state_store.py);
- a tombstone of any removes it (a deleted group).

Membership is not persisted: after a coordinator change members rejoin with
epoch 0 (they are answered UNKNOWN_MEMBER_ID), as their assignment is
recomputed from subscriptions anyway. The live share-partitions (acquired
records, locks) are kept by the partition leaders (broker/share/leader.py).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import structlog

from broker.coordinator import AppendResult, CoordinatorRecord, ReplayedRecord, ShardContext
from broker.share.group import ShareGroup, ShareMember, TopicIdPartition, assign
from broker.share.state_store import ShareStateStore
from wire.errors import ErrorCode

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ShareDefaults:
    """Broker-level ``group.share.*`` settings."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    record_lock_duration_ms: int = 30_000
    delivery_count_limit: int = 5
    partition_max_record_locks: int = 2_000
    max_size: int = 200


@dataclass(frozen=True, slots=True)
class ShareHeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_epoch: int = 0
    assignment: frozenset[TopicIdPartition] | None = None


def _key(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


class ShareGroupShard:
    def __init__(self, ctx: ShardContext, defaults: ShareDefaults,
                 topics: Callable[[Iterable[str]], dict[str, tuple[uuid.UUID, int]]]) -> None:
        self.ctx = ctx
        self.defaults = defaults
        self.groups: dict[str, ShareGroup] = {}
        #: The share-partition states this partition keeps for partition leaders (Read/WriteShareGroupState).
        self.state = ShareStateStore()
        self._topics = topics
        #: A member left or expired (the coordinator drops its share session).
        self.on_member_removed: Callable[[str, str], None] | None = None
        #: A group's settings in the record data dirs written before kept them in (migrated by the coordinator).
        self.on_legacy_config: Callable[[str, dict[str, Any] | None], None] | None = None

    # ------------------------------------------------------------ replay

    def replay(self, record: ReplayedRecord) -> None:
        try:
            key = json.loads(record.key)
            value = None if record.value is None else json.loads(record.value)
            if key.get("type") == "state":
                self.state.replay(key, value)
            elif key.get("type") == "initialized":
                if value is None:  # the group was deleted
                    self.groups.pop(key["group"], None)
                    return
                self._group(key["group"]).state_partitions = {
                    (uuid.UUID(t), int(p)) for t, p in value["partitions"]}
            elif key.get("type") == "partition":
                # Written before share-partitions moved to their leaders: only what the group covers is kept.
                if value is not None:
                    self._group(key["group"]).state_partitions.add((uuid.UUID(key["topic_id"]), int(key["partition"])))
            elif key.get("type") == "config":
                if self.on_legacy_config is not None:
                    self.on_legacy_config(key["group"], value)
        except (ValueError, KeyError, TypeError) as e:
            log.warning("share_state_record_skipped", offset=record.offset, error=str(e))

    def replay_end_transaction(self, producer_id: int, committed: bool, offset: int) -> None:
        pass

    def on_loaded(self) -> None:
        log.info("share_groups_loaded", partition=self.ctx.partition, groups=len(self.groups))

    def on_unloaded(self) -> None:
        self.groups.clear()
        self.state.states.clear()

    # ------------------------------------------------------------ groups

    def _group(self, group_id: str) -> ShareGroup:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = ShareGroup(group_id)
        return group

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                  subscribed: list[str] | None, client_id: str, client_host: str) -> ShareHeartbeatResult:
        group = self.groups.get(group_id)
        if member_epoch == -1:
            if group is None or member_id not in group.members:
                return ShareHeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID)
            self.remove_member(group, member_id)
            return ShareHeartbeatResult(ErrorCode.NONE, member_epoch=-1)
        if member_epoch == 0:
            group = self._group(group_id)
            member = group.members.get(member_id)
            if member is None:
                if len(group.members) >= self.defaults.max_size:
                    return ShareHeartbeatResult(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                                f"The share group has reached its maximum capacity of "
                                                f"{self.defaults.max_size} members.")
                member = ShareMember(member_id, 0, client_id, client_host, rack_id, tuple(subscribed or ()))
                group.members[member_id] = member
                group.group_epoch += 1
        else:
            member = None if group is None else group.members.get(member_id)
            if group is None or member is None:
                return ShareHeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID,
                                            f"Member {member_id} is not a member of group {group_id}.")
            if member_epoch != member.member_epoch:
                return ShareHeartbeatResult(ErrorCode.FENCED_MEMBER_EPOCH,
                                            f"The share group member has a member epoch ({member_epoch}) "
                                            f"other than the one known by the group coordinator "
                                            f"({member.member_epoch}).")
        if subscribed is not None and tuple(sorted(subscribed)) != tuple(sorted(member.subscribed_topics)):
            member.subscribed_topics = tuple(subscribed)
            group.group_epoch += 1
        if rack_id is not None:
            member.rack_id = rack_id
        self._reassign(group)
        member.member_epoch = group.group_epoch
        self.ctx.schedule(f"share-session:{group_id}:{member_id}", self.defaults.session_timeout_ms,
                          lambda: self._session_expired(group_id, member_id))
        changed = member_epoch == 0 or member.assignment != member.sent_assignment
        member.sent_assignment = member.assignment
        return ShareHeartbeatResult(ErrorCode.NONE, member_epoch=member.member_epoch,
                                    assignment=member.assignment if changed else None)

    def _reassign(self, group: ShareGroup) -> None:
        topics = self._topics({t for m in group.members.values() for t in m.subscribed_topics})
        target = assign(list(group.members.values()), topics)
        for m in group.members.values():
            m.assignment = target.get(m.member_id, frozenset())

    def _session_expired(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is not None and member_id in group.members:
            log.info("share_member_session_expired", group_id=group_id, member_id=member_id)
            self.remove_member(group, member_id)

    def remove_member(self, group: ShareGroup, member_id: str) -> None:
        group.members.pop(member_id, None)
        self.ctx.cancel(f"share-session:{group.group_id}:{member_id}")
        if self.on_member_removed is not None:
            self.on_member_removed(group.group_id, member_id)
        group.group_epoch += 1
        self._reassign(group)

    def refresh_assignments(self) -> None:
        """Topics changed (created, deleted, grown): recompute every group's assignment."""
        for group in self.groups.values():
            if group.members:
                before = {m: x.assignment for m, x in group.members.items()}
                self._reassign(group)
                if any(before[m] != x.assignment for m, x in group.members.items()):
                    group.group_epoch += 1

    # ------------------------------------------------------------ share-partitions

    def cover(self, group_id: str, partitions: Iterable[TopicIdPartition]) -> list[TopicIdPartition]:
        """Records that the group has state for ``partitions``; returns the new ones."""
        group = self._group(group_id)
        new = sorted(set(partitions) - group.state_partitions)
        if new:
            group.state_partitions.update(new)
            self._write_covered(group)
        return new

    def _write_covered(self, group: ShareGroup) -> None:
        value = {"partitions": [[str(t), p] for t, p in sorted(group.state_partitions)]}
        self.ctx.append([CoordinatorRecord(_key({"type": "initialized", "group": group.group_id}),
                                           json.dumps(value, separators=(",", ":")).encode())])

    def remove_legacy_config(self, group_id: str, on_complete: Callable[[AppendResult], None]) -> None:
        """Tombstones the group's ``config`` record once its settings are group configs."""
        self.ctx.append([CoordinatorRecord(_key({"type": "config", "group": group_id}), None)], on_complete)

    def delete_group(self, group_id: str) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP
        records = [CoordinatorRecord(_key({"type": "partition", "group": group_id, "topic_id": str(t),
                                           "partition": p}), None) for t, p in group.state_partitions]
        records.append(CoordinatorRecord(_key({"type": "initialized", "group": group_id}), None))
        records.append(CoordinatorRecord(_key({"type": "config", "group": group_id}), None))
        self.ctx.append(records)
        del self.groups[group_id]
        return ErrorCode.NONE

    def delete_topic_state(self, group_id: str, topic_id: uuid.UUID) -> tuple[ErrorCode, list[TopicIdPartition]]:
        """DeleteShareGroupOffsets: the group no longer covers the topic (empty groups only);
        returns the share-partitions whose state the caller deletes."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND, []
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP, []
        gone = sorted(tp for tp in group.state_partitions if tp[0] == topic_id)
        group.state_partitions.difference_update(gone)
        self._write_covered(group)
        return ErrorCode.NONE, gone
