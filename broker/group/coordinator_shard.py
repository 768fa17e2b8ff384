"""One ``__consumer_offsets`` partition with every group type of Kafka 4: classic, consumer
(KIP-848, with online migration) and share (KIP-932).

Group ids are one namespace across the three types, with Kafka's errors when a request
names a group of another type: ShareGroupHeartbeat on a classic or consumer group and
ConsumerGroupHeartbeat on a share group are GROUP_ID_NOT_FOUND ("Group G is not a share
group." / "... not a consumer group."), JoinGroup on a share group
INCONSISTENT_GROUP_PROTOCOL, an offset commit for a share group GROUP_ID_NOT_FOUND.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import structlog

from broker.coordinator.runtime import ReplayedRecord, ShardContext
from broker.group.consumer_shard import (
    ConsumerGroupConfig,
    ConsumerHeartbeat,
    ConsumerHeartbeatResult,
    HeartbeatCallback,
    TopicLookup,
)
from broker.group.group import GroupOverview, GroupState, JoinCallback, JoinResult
from broker.group.migration import MigratingGroupShard
from broker.group.offset_commits import PreparedCommit
from broker.group.records import OffsetAndMetadata, RecordFormatError
from broker.group.shard_types import (
    CommitCallback,
    GroupConfig,
    GroupObserver,
    JoinRequest,
    TopicPartition,
)
from broker.group.share_groups import (
    SHARE_GROUP_TYPE,
    SHARE_PROTOCOL_TYPE,
    ShareGroupConfig,
    ShareGroups,
    ShareHeartbeatCallback,
    ShareHeartbeatResult,
    TopicPartitionCounts,
)
from broker.group.share_records import SHARE_GROUP_KEY_VERSIONS
from broker.share.group import TopicIdPartition
from wire.errors import ErrorCode

log = structlog.get_logger(__name__)


class GroupCoordinatorShard(MigratingGroupShard):
    """Classic, consumer and share groups of one ``__consumer_offsets`` partition."""

    def __init__(self, ctx: ShardContext, config: GroupConfig, observer: GroupObserver | None = None,
                 consumer_config: ConsumerGroupConfig | None = None, share_config: ShareGroupConfig | None = None,
                 share_topics: TopicPartitionCounts = lambda names: {},
                 topic_name: Callable[[uuid.UUID], str | None] = lambda topic_id: None) -> None:
        super().__init__(ctx, config, observer, consumer_config)
        self.share = ShareGroups(ctx, share_config or ShareGroupConfig(), share_topics, topic_name)
        #: (group id, its share-partitions): a share group was deleted
        self.on_share_group_deleted: Callable[[str, list[TopicIdPartition]], None] | None = None

    # ================================================================ loading

    def replay(self, record: ReplayedRecord) -> None:
        version = int.from_bytes(record.key[:2], "big", signed=True) if len(record.key) >= 2 else -1
        if version not in SHARE_GROUP_KEY_VERSIONS:
            super().replay(record)
            return
        try:
            self.share.replay(version, record.key, record.value)
        except RecordFormatError as ex:
            log.warning("coordinator_record_unreadable", partition=self.ctx.partition, offset=record.offset,
                        error=str(ex))

    def on_loaded(self) -> None:
        super().on_loaded()
        self.share.on_loaded()

    def on_unloaded(self) -> None:
        self.share.on_unloaded()
        super().on_unloaded()

    # ================================================================ one namespace

    def _other_type(self, group_id: str) -> bool:
        """Whether a classic or consumer group holds ``group_id``."""
        classic = self.groups.get(group_id)
        return group_id in self.consumer_groups or (classic is not None and classic.state is not GroupState.DEAD)

    def share_heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                        subscribed: list[str] | None, client_id: str, client_host: str,
                        callback: ShareHeartbeatCallback) -> None:
        if self._other_type(group_id):
            callback(ShareHeartbeatResult(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group."))
            return
        self.share.heartbeat(group_id, member_id, member_epoch, rack_id, subscribed, client_id, client_host,
                             callback)

    def consumer_heartbeat(self, req: ConsumerHeartbeat, topics: TopicLookup, callback: HeartbeatCallback) -> None:
        if req.group_id in self.share.groups:
            callback(ConsumerHeartbeatResult(ErrorCode.GROUP_ID_NOT_FOUND,
                                             f"Group {req.group_id} is not a consumer group."))
            return
        super().consumer_heartbeat(req, topics, callback)

    def join_group(self, req: JoinRequest, callback: JoinCallback) -> None:
        if req.group_id in self.share.groups:
            callback(JoinResult(req.member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        super().join_group(req, callback)

    def commit_offsets(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int,
                       offsets: dict[TopicPartition, OffsetAndMetadata], callback: CommitCallback,
                       prepared: PreparedCommit | None = None) -> None:
        if group_id in self.share.groups:
            callback({tp: ErrorCode.GROUP_ID_NOT_FOUND for tp in offsets})
            return
        super().commit_offsets(group_id, member_id, group_instance_id, generation_id, offsets, callback, prepared)

    def commit_transactional_offsets(self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
                                     group_instance_id: str | None, generation_id: int,
                                     offsets: dict[TopicPartition, OffsetAndMetadata],
                                     callback: CommitCallback) -> None:
        if group_id in self.share.groups:
            callback({tp: ErrorCode.GROUP_ID_NOT_FOUND for tp in offsets})
            return
        super().commit_transactional_offsets(group_id, producer_id, producer_epoch, member_id, group_instance_id,
                                             generation_id, offsets, callback)

    def ensure_share_group(self, group_id: str) -> ErrorCode:
        """The share group exists afterwards (AlterShareGroupOffsets), unless another type has the id."""
        if group_id not in self.share.groups and self._other_type(group_id):
            return ErrorCode.GROUP_ID_NOT_FOUND
        self.share.ensure_group(group_id)
        return ErrorCode.NONE

    # ================================================================ admin

    def list_groups(self, states: set[str], types: set[str]) -> list[GroupOverview]:
        out = super().list_groups(states, types)
        if not types or SHARE_GROUP_TYPE in {t.lower() for t in types}:
            out.extend(GroupOverview(g.group_id, SHARE_PROTOCOL_TYPE, g.state, SHARE_GROUP_TYPE)
                       for g in self.share.groups.values() if not states or g.state.lower() in states)
        return out

    def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        others: list[str] = []
        for group_id in group_ids:
            if group_id not in self.share.groups:
                others.append(group_id)
                continue
            error, covered = self.share.delete_group(group_id)
            results[group_id] = error
            if error is ErrorCode.NONE and self.on_share_group_deleted is not None:
                self.on_share_group_deleted(group_id, covered)
        if others:
            results.update(super().delete_groups(others))
        return results
