"""What the share-group API handlers call at the group coordinator (KIP-932).

A share group is coordinated, as every group, by the leader of its ``__consumer_offsets``
partition (FindCoordinator key type GROUP): ShareGroupHeartbeat, ShareGroupDescribe,
and the group side of Describe/Alter/DeleteShareGroupOffsets and DeleteGroups. The
share-partitions' state is kept by the share coordinators (``__share_group_state``),
reached through :class:`~broker.group.share_groups.SharePartitionHooks`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable

import trio

from broker.coordinator import await_callback
from broker.group.coordinator_shard import GroupCoordinatorShard
from broker.group.share_groups import (
    JOIN_GROUP_MEMBER_EPOCH,
    ShareHeartbeatResult,
    SharePartitionHooks,
)
from broker.observability.share_metrics import ShareMetrics
from broker.share.group import ShareGroup, TopicIdPartition
from wire.errors import ErrorCode

Locate = Callable[[str | None], tuple[ErrorCode, GroupCoordinatorShard | None]]


class ShareGroupService:
    def __init__(self, locate: Locate) -> None:
        self._locate = locate
        #: Set by the share coordinator once it exists (it is made after the group coordinator).
        self.hooks: SharePartitionHooks | None = None
        #: Rebalances (group epoch changes at a heartbeat) are counted here.
        self.metrics = ShareMetrics()
        #: Share-partitions whose state a heartbeat is initializing, set when done.
        self._initializing: dict[tuple[str, TopicIdPartition], trio.Event] = {}

    async def heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                        subscribed: list[str] | None, client_id: str, client_host: str) -> ShareHeartbeatResult:
        if member_epoch == JOIN_GROUP_MEMBER_EPOCH and self.hooks is not None:
            await self.hooks.prepare()
        error, shard = self._locate(group_id)
        if shard is None:
            return ShareHeartbeatResult(error)
        before = self._group_epoch(shard, group_id)
        result: ShareHeartbeatResult = await await_callback(lambda cb: shard.share_heartbeat(
            group_id, member_id, member_epoch, rack_id, subscribed, client_id, client_host, cb))
        if self._group_epoch(shard, group_id) != before:
            self.metrics.rebalance()
        if result.error is ErrorCode.NONE and result.assignment:
            await self._initialize(shard, group_id, result.assignment)
        return result

    @staticmethod
    def _group_epoch(shard: GroupCoordinatorShard, group_id: str) -> int:
        group = shard.share.groups.get(group_id)
        return 0 if group is None else group.group_epoch

    async def _initialize(self, shard: GroupCoordinatorShard, group_id: str,
                          assignment: Iterable[TopicIdPartition]) -> None:
        """Share-partitions assigned for the first time: the group covers them (its
        ShareGroupPartitionMetadata) and their state is started, before the member hears of
        them, so that no member fetches a share-partition before it starts where it should."""
        assigned = set(assignment)
        new = shard.share.cover(group_id, assigned)
        if new and self.hooks is not None:
            for tp in new:
                self._initializing[(group_id, tp)] = trio.Event()
            try:
                await self.hooks.initialize(group_id, new)
            finally:
                for tp in new:
                    self._initializing.pop((group_id, tp)).set()
        # Another member's heartbeat may be initializing what this one is assigned.
        for tp in assigned:
            pending = self._initializing.get((group_id, tp))
            if pending is not None:
                await pending.wait()

    def group(self, group_id: str) -> tuple[ErrorCode, ShareGroup | None]:
        """The share group (GROUP_ID_NOT_FOUND when this coordinator has no share group of that id)."""
        error, shard = self._locate(group_id)
        if shard is None:
            return error, None
        group = shard.share.groups.get(group_id)
        return (ErrorCode.GROUP_ID_NOT_FOUND, None) if group is None else (ErrorCode.NONE, group)

    def member_status(self, group_id: str, member_id: str) -> ErrorCode | None:
        """UNKNOWN_MEMBER_ID when this broker coordinates the group and the member is not in
        it; None when it is, or when another broker coordinates the group (or it is loading):
        a partition leader then trusts the member's share session, as Kafka's does."""
        _, shard = self._locate(group_id)
        if shard is None:
            return None
        group = shard.share.groups.get(group_id)
        return None if group is not None and member_id in group.members else ErrorCode.UNKNOWN_MEMBER_ID

    def cover_for_reset(self, group_id: str, partitions: Iterable[TopicIdPartition]) -> ErrorCode:
        """AlterShareGroupOffsets: the group (created empty if needed) covers ``partitions``;
        NON_EMPTY_GROUP while it has members."""
        error, shard = self._locate(group_id)
        if shard is None:
            return error
        error = shard.ensure_share_group(group_id)
        if error is not ErrorCode.NONE:
            return error
        if shard.share.groups[group_id].members:
            return ErrorCode.NON_EMPTY_GROUP
        shard.share.cover(group_id, partitions)
        return ErrorCode.NONE

    def delete_offsets(self, group_id: str, topic_id: uuid.UUID) -> ErrorCode:
        """DeleteShareGroupOffsets of one topic: the group stops covering it and its state goes."""
        error, shard = self._locate(group_id)
        if shard is None:
            return error
        error, gone = shard.share.delete_topic_state(group_id, topic_id)
        if gone and self.hooks is not None:
            self.hooks.group_state_deleted(group_id, gone)
        return error

    def member_removed(self, group_id: str, member_id: str) -> None:
        if self.hooks is not None:
            self.hooks.member_removed(group_id, member_id)

    def group_deleted(self, group_id: str, partitions: list[TopicIdPartition]) -> None:
        if self.hooks is not None:
            self.hooks.group_state_deleted(group_id, partitions)
