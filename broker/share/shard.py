"""The share groups of one ``__share_group_state`` partition: membership and share-partition state.

Kafka keeps share-group membership in ``__consumer_offsets`` and each
share-partition's state in ``__share_group_state`` (ShareSnapshot/ShareUpdate
records of its share coordinator). Cormorant keeps both for a group in the
shard of the group's ``__share_group_state`` partition. Its records (JSON,
compacted by key; see docs/share-groups.md):

- key ``{"type":"partition","group":G,"topic_id":T,"partition":P}``, value
  ``{"version":0,"start_offset":S,"state_batches":[[first,last,state,count],...]}``:
  a full snapshot of one share-partition after every change (acquisitions
  included, so delivery counts survive a restart; acquired records are
  persisted AVAILABLE since locks do not);
- key ``{"type":"config","group":G}``, value the group's ``share.*`` settings;
- a tombstone of either removes it (a deleted group).

Membership is not persisted: after a coordinator change members rejoin with
epoch 0 (they are answered UNKNOWN_MEMBER_ID), as their assignment is
recomputed from subscriptions anyway.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import structlog

from broker.coordinator import AppendResult, CoordinatorRecord, ReplayedRecord, ShardContext
from broker.share.group import ShareGroup, ShareGroupSettings, ShareMember, TopicIdPartition, assign
from broker.share.partition import ArchivedRecord, RecordState, SharePartition, StateBatch
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
        #: Records archived (rejected / out of deliveries), for the dead-letter writer.
        self.on_archived: Callable[[ShareGroup, TopicIdPartition, list[ArchivedRecord]], None] | None = None
        #: A member left or expired (the coordinator drops its share session).
        self.on_member_removed: Callable[[str, str], None] | None = None

    # ------------------------------------------------------------ replay

    def replay(self, record: ReplayedRecord) -> None:
        try:
            key = json.loads(record.key)
            value = None if record.value is None else json.loads(record.value)
            if key.get("type") == "state":
                self.state.replay(key, value)
            elif key.get("type") == "partition":
                tp = (uuid.UUID(key["topic_id"]), int(key["partition"]))
                group = self.groups.get(key["group"])
                if value is None:
                    if group is not None:
                        group.partitions.pop(tp, None)
                    return
                group = self._group(key["group"])
                sp = self._new_partition(group)
                sp.restore(int(value["start_offset"]),
                           (StateBatch(int(f), int(last), RecordState(int(s)), int(c))
                            for f, last, s, c in value["state_batches"]))
                group.partitions[tp] = sp
            elif key.get("type") == "config":
                if value is None:
                    self.groups.pop(key["group"], None)
                    return
                self._group(key["group"]).settings = ShareGroupSettings(**value)
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

    def _new_partition(self, group: ShareGroup) -> SharePartition:
        s = group.settings
        return SharePartition(
            lock_duration_ms=s.record_lock_duration_ms or self.defaults.record_lock_duration_ms,
            delivery_count_limit=s.delivery_count_limit or self.defaults.delivery_count_limit,
            max_in_flight=self.defaults.partition_max_record_locks)

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
        for tp, sp in group.partitions.items():
            if sp.release_member(member_id):
                self.persist(group, tp)

    def refresh_assignments(self) -> None:
        """Topics changed (created, deleted, grown): recompute every group's assignment."""
        for group in self.groups.values():
            if group.members:
                before = {m: x.assignment for m, x in group.members.items()}
                self._reassign(group)
                if any(before[m] != x.assignment for m, x in group.members.items()):
                    group.group_epoch += 1

    # ------------------------------------------------------------ share-partitions

    def share_partition(self, group: ShareGroup, tp: TopicIdPartition) -> SharePartition:
        sp = group.partitions.get(tp)
        if sp is None:
            sp = group.partitions[tp] = self._new_partition(group)
        return sp

    def persist(self, group: ShareGroup, tp: TopicIdPartition,
                on_complete: Callable[[AppendResult], None] | None = None) -> None:
        """Writes the share-partition's snapshot; hands new archived records to the DLQ writer."""
        sp = group.partitions[tp]
        key = _key({"type": "partition", "group": group.group_id, "topic_id": str(tp[0]), "partition": tp[1]})
        value = json.dumps({"version": 0, "start_offset": sp.start_offset,
                            "state_batches": [[b.first_offset, b.last_offset, int(b.state), b.delivery_count]
                                              for b in sp.state_batches()]},
                           separators=(",", ":")).encode()
        self.ctx.append([CoordinatorRecord(key, value)], on_complete)
        if sp.archived:
            archived, sp.archived = sp.archived, []
            if self.on_archived is not None:
                self.on_archived(group, tp, archived)
        self.schedule_lock_expiry(group, tp)

    def schedule_lock_expiry(self, group: ShareGroup, tp: TopicIdPartition) -> None:
        sp = group.partitions.get(tp)
        timer = f"share-locks:{group.group_id}:{tp[0]}:{tp[1]}"
        deadline = None if sp is None else sp.next_lock_deadline()
        if deadline is None:
            self.ctx.cancel(timer)
            return

        def expire() -> None:
            current = self.groups.get(group.group_id)
            if current is None or tp not in current.partitions:
                return
            if current.partitions[tp].expire_locks(self.ctx.now_ms()):
                self.persist(current, tp)
            else:
                self.schedule_lock_expiry(current, tp)

        self.ctx.schedule(timer, max(deadline - self.ctx.now_ms(), 0), expire)

    def set_settings(self, group_id: str, settings: ShareGroupSettings,
                     on_complete: Callable[[AppendResult], None] | None = None) -> None:
        group = self._group(group_id)
        group.settings = settings
        for sp in group.partitions.values():
            sp.lock_duration_ms = settings.record_lock_duration_ms or self.defaults.record_lock_duration_ms
            sp.delivery_count_limit = settings.delivery_count_limit or self.defaults.delivery_count_limit
        value = {"auto_offset_reset": settings.auto_offset_reset,
                 "record_lock_duration_ms": settings.record_lock_duration_ms,
                 "delivery_count_limit": settings.delivery_count_limit,
                 "dead_letter_topic": settings.dead_letter_topic}
        self.ctx.append([CoordinatorRecord(_key({"type": "config", "group": group_id}),
                                           json.dumps(value).encode())], on_complete)

    def delete_group(self, group_id: str) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP
        records = [CoordinatorRecord(_key({"type": "partition", "group": group_id, "topic_id": str(t),
                                           "partition": p}), None) for t, p in group.partitions]
        records.append(CoordinatorRecord(_key({"type": "config", "group": group_id}), None))
        self.ctx.append(records)
        del self.groups[group_id]
        return ErrorCode.NONE

    def delete_topic_state(self, group_id: str, topic_id: uuid.UUID) -> ErrorCode:
        """DeleteShareGroupOffsets: forgets the group's state of one topic (empty groups only)."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP
        gone = [tp for tp in group.partitions if tp[0] == topic_id]
        for tp in gone:
            del group.partitions[tp]
        self.ctx.append([CoordinatorRecord(_key({"type": "partition", "group": group_id, "topic_id": str(t),
                                                 "partition": p}), None) for t, p in gone])
        return ErrorCode.NONE

    def reset_start_offset(self, group_id: str, tp: TopicIdPartition, offset: int) -> ErrorCode:
        """AlterShareGroupOffsets: only an empty group may move its start offsets."""
        group = self.groups.get(group_id)
        if group is not None and group.members:
            return ErrorCode.NON_EMPTY_GROUP
        group = self._group(group_id)
        self.share_partition(group, tp).initialize(offset)
        self.persist(group, tp)
        return ErrorCode.NONE
