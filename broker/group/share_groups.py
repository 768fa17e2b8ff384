"""Share groups (KIP-932) in a ``__consumer_offsets`` shard: membership at the group coordinator.

ShareGroupHeartbeat joins (epoch 0), heartbeats and leaves (-1) members; each answer
carries the member's epoch and, when it changed, its assignment (broker/share/group.py:
no revocation, the target at once). The group epoch moves when a member joins or leaves
or changes its subscription, and when the subscribed topics' partitions change. Every
change is written as Kafka's records (broker/group/share_records.py) and the heartbeat
answered once they are committed; a new coordinator replays them and has every group,
member and subscription, the same assignment, and the share-partitions each group
covers.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

import structlog

from broker.coordinator.runtime import AppendResult, CoordinatorRecord, ShardContext
from broker.group.consumer_shard import write_error
from broker.group.share_records import (
    ShareGroupLoader,
    share_group_epoch_record,
    share_group_tombstones,
    share_member_record,
    share_partitions_record,
)
from broker.share.group import ShareGroup, ShareMember, TopicIdPartition, assign
from config.group import SHARE_HEARTBEAT_INTERVAL_MS, SHARE_SESSION_TIMEOUT_MS, int_config
from wire.errors import ErrorCode

log = structlog.get_logger(__name__)

_SEP = "\x00"
SHARE_GROUP_TYPE = "share"
SHARE_PROTOCOL_TYPE = "share"
LEAVE_GROUP_MEMBER_EPOCH = -1
JOIN_GROUP_MEMBER_EPOCH = 0
#: topic names -> (topic id, partition count) of those that exist
TopicPartitionCounts = Callable[[Iterable[str]], dict[str, tuple[uuid.UUID, int]]]


@dataclass(frozen=True, slots=True)
class ShareGroupConfig:
    """``group.share.*`` settings of membership (Kafka's names and defaults), which a group's
    own group configs (``share.session.timeout.ms``, ``share.heartbeat.interval.ms``) override."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 200
    #: group id -> its group configs (from the metadata image)
    group_configs: Callable[[str], Mapping[str, str]] = lambda group_id: {}

    def session_timeout_for(self, group_id: str) -> int:
        return int_config(self.group_configs(group_id), SHARE_SESSION_TIMEOUT_MS, self.session_timeout_ms)

    def heartbeat_interval_for(self, group_id: str) -> int:
        return int_config(self.group_configs(group_id), SHARE_HEARTBEAT_INTERVAL_MS, self.heartbeat_interval_ms)


@dataclass(frozen=True, slots=True)
class ShareHeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_epoch: int = 0
    #: The member's assignment when it changed (or the member joined), else None.
    assignment: frozenset[TopicIdPartition] | None = None
    heartbeat_interval_ms: int = 0


ShareHeartbeatCallback = Callable[[ShareHeartbeatResult], None]


class SharePartitionHooks(Protocol):
    """What the group coordinator needs of the share-partitions' side (broker/share/coordinator.py)."""

    async def prepare(self) -> None:
        """A member joins: ``__share_group_state`` is created if it is not there yet."""

    async def initialize(self, group_id: str, partitions: list[TopicIdPartition]) -> None:
        """Share-partitions the group covers for the first time: their state is started
        where the group's ``share.auto.offset.reset`` says."""

    def member_removed(self, group_id: str, member_id: str) -> None:
        """A member left or was fenced: its share sessions end, its records are released."""

    def group_state_deleted(self, group_id: str, partitions: list[TopicIdPartition]) -> None:
        """The group or some of its share-partitions were deleted: their state goes."""


class ShareGroups:
    """The share groups of one ``__consumer_offsets`` partition."""

    def __init__(self, ctx: ShardContext, config: ShareGroupConfig, topics: TopicPartitionCounts,
                 topic_name: Callable[[uuid.UUID], str | None]) -> None:
        self.ctx = ctx
        self.config = config
        self.groups: dict[str, ShareGroup] = {}
        self._topics = topics
        self._topic_name = topic_name
        self._loader = ShareGroupLoader()
        #: (group id, member id): a member left or was fenced
        self.on_member_removed: Callable[[str, str], None] | None = None

    # ================================================================ loading

    def replay(self, key_version: int, key: bytes, value: bytes | None) -> None:
        self._loader.replay(key_version, key, value)

    def on_loaded(self) -> None:
        for group in self._loader.groups():
            self._reassign(group)
            self.groups[group.group_id] = group
            log.info("share_group_loaded", group_id=group.group_id, epoch=group.group_epoch,
                     members=len(group.members), share_partitions=len(group.state_partitions))
            for member_id in group.members:
                self._schedule_session(group.group_id, member_id)

    def on_unloaded(self) -> None:
        for group in self.groups.values():
            for member_id in group.members:
                self.ctx.cancel(self._session_key(group.group_id, member_id))
        self.groups.clear()

    # ================================================================ heartbeat

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                  subscribed: list[str] | None, client_id: str, client_host: str,
                  callback: ShareHeartbeatCallback) -> None:
        group = self.groups.get(group_id)
        if member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
            if group is None or member_id not in group.members:
                callback(ShareHeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID,
                                              f"Member {member_id} is not a member of group {group_id}."))
                return
            left = ShareHeartbeatResult(ErrorCode.NONE, member_epoch=LEAVE_GROUP_MEMBER_EPOCH)
            self._write(self.remove_member(group, member_id, "the member left the group"), left, callback)
            return
        records: list[CoordinatorRecord] = []
        bump = False
        if member_epoch == JOIN_GROUP_MEMBER_EPOCH:
            if group is None:
                group = self.groups[group_id] = ShareGroup(group_id)
            member = group.members.get(member_id)
            if member is None:
                if len(group.members) >= self.config.max_size:
                    callback(ShareHeartbeatResult(
                        ErrorCode.GROUP_MAX_SIZE_REACHED,
                        f"The share group has reached its maximum capacity of {self.config.max_size} members."))
                    return
                member = group.members[member_id] = ShareMember(member_id, 0, client_id, client_host, rack_id, ())
                bump = True
        else:
            member = None if group is None else group.members.get(member_id)
            if group is None or member is None:
                callback(ShareHeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID,
                                              f"Member {member_id} is not a member of group {group_id}."))
                return
            if not self._epoch_valid(group, member, member_epoch):
                callback(ShareHeartbeatResult(
                    ErrorCode.FENCED_MEMBER_EPOCH,
                    f"The share group member has a member epoch ({member_epoch}) other than the one known by "
                    f"the group coordinator ({member.member_epoch})."))
                return
        member.loaded_epoch_floor = None
        metadata = (member.rack_id, member.client_id, member.client_host, member.subscribed_topics)
        if subscribed is not None and tuple(sorted(subscribed)) != tuple(sorted(member.subscribed_topics)):
            member.subscribed_topics = tuple(sorted(subscribed))
            bump = True
        if rack_id is not None:
            member.rack_id = rack_id
        member.client_id, member.client_host = client_id, client_host
        if bump or metadata != (member.rack_id, member.client_id, member.client_host, member.subscribed_topics):
            records.append(share_member_record(group_id, member_id, member))
        if bump:
            group.group_epoch += 1
            records.append(share_group_epoch_record(group_id, group.group_epoch))
            log.info("share_group_epoch_bumped", group_id=group_id, epoch=group.group_epoch, member_id=member_id)
        self._reassign(group)
        member.member_epoch = group.group_epoch
        self._schedule_session(group_id, member_id)
        changed = member_epoch == JOIN_GROUP_MEMBER_EPOCH or member.assignment != member.sent_assignment
        member.sent_assignment = member.assignment
        result = ShareHeartbeatResult(ErrorCode.NONE, member_epoch=member.member_epoch,
                                      assignment=member.assignment if changed else None,
                                      heartbeat_interval_ms=self.config.heartbeat_interval_for(group_id))
        self._write(records, result, callback)

    @staticmethod
    def _epoch_valid(group: ShareGroup, member: ShareMember, epoch: int) -> bool:
        """The member's own epoch; for a member loaded from the records (which keep no member
        epoch) any epoch it can have had since its record was written."""
        floor = member.loaded_epoch_floor
        if floor is not None:
            return floor <= epoch <= group.group_epoch
        return epoch == member.member_epoch

    def _reassign(self, group: ShareGroup) -> None:
        topics = self._topics({t for m in group.members.values() for t in m.subscribed_topics})
        target = assign(list(group.members.values()), topics)
        for m in group.members.values():
            m.assignment = target.get(m.member_id, frozenset())

    def remove_member(self, group: ShareGroup, member_id: str, reason: str) -> list[CoordinatorRecord]:
        """Removes the member; returns the records saying so (the caller writes them)."""
        group.members.pop(member_id, None)
        self.ctx.cancel(self._session_key(group.group_id, member_id))
        if self.on_member_removed is not None:
            self.on_member_removed(group.group_id, member_id)
        group.group_epoch += 1
        self._reassign(group)
        log.info("share_group_member_removed", group_id=group.group_id, member_id=member_id, reason=reason,
                 epoch=group.group_epoch)
        return [share_member_record(group.group_id, member_id, None),
                share_group_epoch_record(group.group_id, group.group_epoch)]

    def _session_expired(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is not None and member_id in group.members:
            self.ctx.append(self.remove_member(group, member_id, "session timeout"))

    def _schedule_session(self, group_id: str, member_id: str) -> None:
        self.ctx.schedule(self._session_key(group_id, member_id), self.config.session_timeout_for(group_id),
                          lambda: self._session_expired(group_id, member_id))

    @staticmethod
    def _session_key(group_id: str, member_id: str) -> str:
        return f"share-session{_SEP}{group_id}{_SEP}{member_id}"

    def refresh_assignments(self) -> None:
        """Topics changed (created, deleted, grown): every group's assignment is recomputed,
        at a new group epoch where it changed."""
        for group in self.groups.values():
            if group.members:
                before = {m: x.assignment for m, x in group.members.items()}
                self._reassign(group)
                if any(before[m] != x.assignment for m, x in group.members.items()):
                    group.group_epoch += 1
                    self.ctx.append([share_group_epoch_record(group.group_id, group.group_epoch)])

    def _write(self, records: list[CoordinatorRecord], result: ShareHeartbeatResult,
               callback: ShareHeartbeatCallback) -> None:
        if not records:
            callback(result)
            return

        def written(appended: AppendResult) -> None:
            if appended.error is not ErrorCode.NONE:
                log.info("share_group_write_failed", partition=self.ctx.partition, error=appended.error.name)
                callback(ShareHeartbeatResult(write_error(appended.error)))
            else:
                callback(result)

        self.ctx.append(records, written)

    # ================================================================ share-partitions

    def ensure_group(self, group_id: str) -> ShareGroup:
        """The group, created empty if it is not there (AlterShareGroupOffsets)."""
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = ShareGroup(group_id)
            self.ctx.append([share_group_epoch_record(group_id, group.group_epoch)])
        return group

    def cover(self, group_id: str, partitions: Iterable[TopicIdPartition]) -> list[TopicIdPartition]:
        """Records that the group has state for ``partitions``; returns the new ones."""
        group = self.groups.get(group_id)
        if group is None:
            return []
        new = sorted(set(partitions) - group.state_partitions)
        if new:
            group.state_partitions.update(new)
            self.ctx.append([share_partitions_record(group_id, group.state_partitions, self._topic_name)])
        return new

    def delete_group(self, group_id: str) -> tuple[ErrorCode, list[TopicIdPartition]]:
        """DeleteGroups of a share group (empty ones only); returns the share-partitions whose
        state the caller deletes."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND, []
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP, []
        self.ctx.append(share_group_tombstones(group))
        del self.groups[group_id]
        log.info("share_group_deleted", group_id=group_id, share_partitions=len(group.state_partitions))
        return ErrorCode.NONE, sorted(group.state_partitions)

    def delete_topic_state(self, group_id: str, topic_id: uuid.UUID) -> tuple[ErrorCode, list[TopicIdPartition]]:
        """DeleteShareGroupOffsets: the group no longer covers the topic (empty groups only);
        returns the share-partitions whose state the caller deletes."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND, []
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP, []
        gone = sorted(tp for tp in group.state_partitions if tp[0] == topic_id)
        if gone:
            group.state_partitions.difference_update(gone)
            self.ctx.append([share_partitions_record(group_id, group.state_partitions, self._topic_name)])
        return ErrorCode.NONE, gone
