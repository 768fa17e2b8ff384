"""GroupCoordinator: what the group API handlers call.

Routes each group to the shard of its ``__consumer_offsets`` partition on the
:class:`~broker.coordinator.CoordinatorRuntime`, after Kafka's checks
(``validateGroupStatus``): an invalid group id is INVALID_GROUP_ID, a
partition still loading COORDINATOR_LOAD_IN_PROGRESS, one led elsewhere
NOT_COORDINATOR. Requests that wait (JoinGroup, SyncGroup, OffsetCommit) are
answered when their shard calls back.

``__consumer_offsets`` is created on the first FindCoordinator for a group,
with ``offsets.topic.num.partitions`` partitions, ``cleanup.policy=compact``
and ``offsets.topic.segment.bytes``. Its replication factor is
``offsets.topic.replication.factor`` (3 by default, as Kafka) lowered to the
number of live brokers, with a warning: Kafka would refuse to create it until
that many brokers exist, which leaves a single-node setup without groups
unless its config says 1 (as Kafka's sample server.properties does).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog
import trio

from broker.coordinator import (
    KEY_TYPE_GROUP,
    CoordinatorRuntime,
    InternalTopic,
    ShardContext,
    await_callback,
)
from broker.eventloop.pacing import off_loop
from broker.group.consumer_group import ConsumerGroup, TopicMetadata
from broker.group.consumer_shard import (
    ConsumerGroupConfig,
    ConsumerHeartbeat,
    ConsumerHeartbeatResult,
)
from broker.group.coordinator_shard import GroupCoordinatorShard
from broker.group.group import GroupOverview, GroupSummary, JoinResult, SyncResult
from broker.group.offset_commits import LARGE_COMMIT, prepare_commit
from broker.group.records import OffsetAndMetadata
from broker.group.shard_types import (
    FetchedOffset,
    GroupConfig,
    GroupObserver,
    JoinRequest,
    LeavingMember,
    NullObserver,
    SyncRequest,
    TopicPartition,
)
from broker.group.share_groups import ShareGroupConfig
from broker.group.share_service import ShareGroupService
from broker.group.topic_regex import resolve
from broker.observability.share_metrics import ShareMetrics
from controller.delta import MetadataDelta
from controller.image import MetadataImage
from controller.service import TopicRequest
from wire.errors import ErrorCode

if TYPE_CHECKING:
    import random

    from broker.cluster.controller_api import TopicCreator
    from broker.replication.replica_manager import ReplicaManager
    from config import BrokerConfig

log = structlog.get_logger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"


@dataclass(slots=True)
class GroupCounters:
    """Totals since start; forwards each event to ``delegate`` (the metrics layer) as well."""

    rebalances: int = 0
    committed: int = 0
    removed: int = 0
    delegate: GroupObserver | None = None

    def rebalance_completed(self, group_id: str, generation: int, members: int, duration_ms: int) -> None:
        self.rebalances += 1
        if self.delegate is not None:
            self._forward(self.delegate.rebalance_completed, group_id, generation, members, duration_ms)

    def offsets_committed(self, group_id: str, count: int) -> None:
        self.committed += count
        if self.delegate is not None:
            self._forward(self.delegate.offsets_committed, group_id, count)

    def offsets_removed(self, group_id: str, count: int, reason: str) -> None:
        self.removed += count
        if self.delegate is not None:
            self._forward(self.delegate.offsets_removed, group_id, count, reason)

    @staticmethod
    def _forward(method: Callable[..., None], *args: Any) -> None:
        # Metrics must never break a rebalance or a commit.
        try:
            method(*args)
        except Exception:
            log.exception("group_metrics_failed", hook=getattr(method, "__name__", "?"))


class _BrokerMetricsObserver:
    """Group events into the broker's metrics (``broker.observability.metrics``, docs/metrics.md)."""

    def __init__(self, metrics: Any) -> None:
        self.metrics = metrics

    def rebalance_completed(self, group_id: str, generation: int, members: int, duration_ms: int) -> None:
        self.metrics.group_rebalance(duration_ms / 1000)

    def offsets_committed(self, group_id: str, count: int) -> None:
        self.metrics.offset_commit(count)

    def offsets_removed(self, group_id: str, count: int, reason: str) -> None:
        pass


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    """One group as metrics see it."""

    group_id: str
    state: str
    members: int
    generation: int
    committed: dict[TopicPartition, int]


def group_config_from(c: BrokerConfig) -> GroupConfig:
    return GroupConfig(
        min_session_timeout_ms=c.group_min_session_timeout_ms,
        max_session_timeout_ms=c.group_max_session_timeout_ms,
        max_size=c.group_max_size,
        initial_rebalance_delay_ms=c.group_initial_rebalance_delay_ms,
        offset_metadata_max_bytes=c.offset_metadata_max_bytes,
        offsets_retention_ms=c.offsets_retention_minutes * 60_000,
        offsets_retention_check_interval_ms=c.offsets_retention_check_interval_ms,
    )


def share_group_config_from(c: BrokerConfig, group_configs: Callable[[str], Mapping[str, str]]) -> ShareGroupConfig:
    return ShareGroupConfig(
        session_timeout_ms=c.group_share_session_timeout_ms,
        heartbeat_interval_ms=c.group_share_heartbeat_interval_ms,
        max_size=c.group_share_max_size,
        group_configs=group_configs,
    )


def consumer_group_config_from(c: BrokerConfig,
                               group_configs: Callable[[str], Mapping[str, str]]) -> ConsumerGroupConfig:
    return ConsumerGroupConfig(
        session_timeout_ms=c.group_consumer_session_timeout_ms,
        heartbeat_interval_ms=c.group_consumer_heartbeat_interval_ms,
        max_size=c.group_consumer_max_size,
        assignors=c.group_consumer_assignors,
        group_configs=group_configs,
    )


class GroupCoordinator:
    def __init__(
        self,
        config: BrokerConfig,
        node_id: int,
        image: Callable[[], MetadataImage],
        replica_manager: ReplicaManager,
        controller: TopicCreator,
        clock_ms: Callable[[], int],
        rng: random.Random,
        metrics: Any,
    ) -> None:
        self._image = image
        self._controller = controller
        self.config = group_config_from(config)
        self.consumer_config = consumer_group_config_from(config, lambda group_id: image().group_config(group_id))
        self.share_config = share_group_config_from(config, lambda group_id: image().group_config(group_id))
        self.migration_policy = config.group_consumer_migration_policy
        self.counters = GroupCounters()
        c = config
        topic = InternalTopic(
            name=OFFSETS_TOPIC,
            num_partitions=c.offsets_topic_num_partitions,
            replication_factor=c.offsets_topic_replication_factor,
            configs={
                "cleanup.policy": "compact",
                "segment.bytes": str(c.offsets_topic_segment_bytes),
                "compression.type": "producer",
            },
        )
        self.runtime: CoordinatorRuntime[GroupCoordinatorShard] = CoordinatorRuntime(
            name="group",
            node_id=node_id,
            topic=topic,
            image=image(),
            replica_manager=replica_manager,
            shard_factory=self._new_shard,
            create_topic=self._create_topic,
            clock_ms=clock_ms,
            rng=rng,
            append_timeout_ms=c.offsets_commit_timeout_ms,
        )
        #: The image the coordinator last heard of.
        self._seen = image()
        self._active = False
        #: Share groups (KIP-932): what their API handlers call.
        self.share = ShareGroupService(self._locate)
        self._watch_metrics(metrics)

    key_type = KEY_TYPE_GROUP

    def _new_shard(self, ctx: ShardContext) -> GroupCoordinatorShard:
        shard = GroupCoordinatorShard(ctx, self.config, self.counters, self.consumer_config, self.share_config,
                                      self._share_topics, self._topic_name)
        shard.migration_policy = self.migration_policy
        shard._topic_lookup = self._subscribed_topics
        shard.share.on_member_removed = self.share.member_removed
        shard.on_share_group_deleted = self.share.group_deleted
        return shard

    def _share_topics(self, names: Iterable[str]) -> dict[str, tuple[uuid.UUID, int]]:
        image = self._image()
        out = {}
        for name in names:
            topic = image.topic(name)
            if topic is not None and topic.partitions:
                out[name] = (topic.topic_id, len(topic.partitions))
        return out

    def _topic_name(self, topic_id: uuid.UUID) -> str | None:
        topic = self._image().topics_by_id.get(topic_id)
        return None if topic is None else topic.name

    def _watch_metrics(self, metrics: Any) -> None:
        # The metrics layer reads group state at collection time and counts events;
        # a metrics object without these hooks (an older or stub one) is left alone.
        share = getattr(metrics, "share", None)
        if isinstance(share, ShareMetrics):
            # share groups by state and their rebalances, counted where their membership is
            self.share.metrics = share
            share.watch_groups(lambda: [g.state for shard in self.runtime.active_shards()
                                        for g in shard.share.groups.values()] if self._active else [])
        if not all(hasattr(metrics, name) for name in ("watch_groups", "group_rebalance", "offset_commit")):
            return
        from broker.observability.metrics import CommittedOffset, GroupSample

        def groups() -> list[GroupSample]:
            return [GroupSample(s.group_id, s.state, s.members) for s in self.snapshots()]

        def committed() -> list[CommittedOffset]:
            return [CommittedOffset(s.group_id, t, p, o) for s in self.snapshots() for (t, p), o in s.committed.items()]

        metrics.watch_groups(groups, committed)
        self.set_observer(_BrokerMetricsObserver(metrics))

    def set_observer(self, observer: GroupObserver) -> None:
        """Where group events go besides the counters (the metrics layer plugs in here)."""
        self.counters.delegate = observer

    async def _create_topic(self, topic: InternalTopic) -> None:
        live = len(self._image().live_brokers())
        rf = min(topic.replication_factor, max(live, 1))
        if rf < topic.replication_factor:
            log.warning("offsets_topic_replication_lowered", topic=topic.name,
                        configured=topic.replication_factor, live_brokers=live, replication_factor=rf)
        results = await self._controller.create_topics(
            [TopicRequest(topic.name, topic.num_partitions, rf, configs=dict(topic.configs))])
        for r in results:
            if r.error not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                log.error("offsets_topic_not_created", topic=topic.name, error=r.error.name, message=r.message)

    # ------------------------------------------------------------ lifecycle

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        self.runtime.on_metadata_update(delta, image)
        self._forget_deleted(delta, image)

    def on_image(self, image: MetadataImage) -> None:
        """Every partition of the offsets topic followed anew (at start)."""
        self.runtime.on_image(image)
        self._forget_deleted(MetadataDelta.between(self._seen, image), image, refresh_all=True)

    def _forget_deleted(self, delta: MetadataDelta, image: MetadataImage, refresh_all: bool = False) -> None:
        self._seen = image
        topics = delta.topics
        deleted = {topic.name for topic in topics.deleted.values()} - image.topic_ids.keys()
        # Share-group assignments follow the topics' partitions, not their leaders.
        refresh = refresh_all or bool(deleted) or any(
            topic.created or any(topic.previous(i) is None for i in topic.partition_changes)
            for topic in topics.changed.values())
        for shard in self.runtime.active_shards():
            if deleted:
                shard.on_topics_deleted(deleted)
            if refresh:
                shard.share.refresh_assignments()

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._active = True
        try:
            await self.runtime.run(task_status)
        finally:
            self._active = False

    def close(self) -> None:
        """Stops serving groups: waiting JoinGroup/SyncGroup requests get NOT_COORDINATOR."""
        self._active = False
        self.runtime.close()

    # ------------------------------------------------------------ routing

    def partition_for(self, group_id: str) -> int:
        return self.runtime.partition_for(group_id)

    def _locate(self, group_id: str | None, *, allow_empty: bool = False
                ) -> tuple[ErrorCode, GroupCoordinatorShard | None]:
        if group_id is None or (not group_id and not allow_empty):
            return ErrorCode.INVALID_GROUP_ID, None
        if not self._active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        return self.runtime.shard_for(group_id)

    async def find_coordinator(self, key: str, listener: str) -> tuple[ErrorCode, int, str, int]:
        return await self.runtime.find_coordinator(key, listener)

    def group_status(self, group_id: str | None) -> ErrorCode:
        """NONE if this broker coordinates ``group_id`` and has loaded its partition, else the
        error a request about it gets (Kafka's validateGroupStatus)."""
        return self._locate(group_id)[0]

    # ------------------------------------------------------------ membership

    async def join_group(self, req: JoinRequest) -> JoinResult:
        error, shard = self._locate(req.group_id)
        if shard is None:
            return JoinResult(req.member_id, error)
        return await await_callback(lambda cb: shard.join_group(req, cb))

    async def sync_group(self, req: SyncRequest) -> SyncResult:
        error, shard = self._locate(req.group_id)
        if error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            # The rebalance in progress was lost with the old coordinator: rejoin, without
            # an error older clients do not expect here.
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        if shard is None:
            return SyncResult(error)
        return await await_callback(lambda cb: shard.sync_group(req, cb))

    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int) -> ErrorCode:
        error, shard = self._locate(group_id)
        if error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            return ErrorCode.NONE  # as Kafka: answer blindly while loading
        if shard is None:
            return error
        return shard.heartbeat(group_id, member_id, group_instance_id, generation_id)

    def leave_group(self, group_id: str, members: list[LeavingMember]) -> tuple[ErrorCode, list[ErrorCode]]:
        error, shard = self._locate(group_id)
        if shard is None:
            return error, []
        return shard.leave_group(group_id, members)

    async def consumer_group_heartbeat(self, req: ConsumerHeartbeat) -> ConsumerHeartbeatResult:
        """ConsumerGroupHeartbeat (KIP-848)."""
        error, shard = self._locate(req.group_id)
        if shard is None:
            return ConsumerHeartbeatResult(error)
        return await await_callback(lambda cb: shard.consumer_heartbeat(req, self._subscribed_topics, cb))

    def _subscribed_topics(self, names: set[str], regexes: set[str]) -> dict[str, TopicMetadata]:
        image = self._image()
        out = {}
        if regexes:
            names = names | {t for r in regexes for t in resolve(r, image.topic_ids)}
        for name in names:
            topic = image.topic(name)
            if topic is not None and topic.partitions:
                racks = tuple(
                    tuple(sorted({rack for r in part.replicas
                                  if (broker := image.brokers.get(r)) is not None and (rack := broker.rack)}))
                    for _, part in sorted(topic.partitions.items()))
                out[name] = TopicMetadata(topic.topic_id, name, len(topic.partitions),
                                          racks if any(racks) else ())
        return out

    def describe_consumer_group(self, group_id: str) -> tuple[ErrorCode, ConsumerGroup | None]:
        """ConsumerGroupDescribe: the group, or GROUP_ID_NOT_FOUND (also for a classic group)."""
        error, shard = self._locate(group_id)
        if shard is None:
            return error, None
        group = shard.consumer_group(group_id)
        return (ErrorCode.GROUP_ID_NOT_FOUND, None) if group is None else (ErrorCode.NONE, group)

    # ------------------------------------------------------------ offsets

    async def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: dict[TopicPartition, OffsetAndMetadata],
    ) -> dict[TopicPartition, ErrorCode]:
        error, shard = self._locate(group_id, allow_empty=True)
        if shard is None:
            return {tp: error for tp in offsets}
        if not offsets:
            return {}
        if len(offsets) < LARGE_COMMIT:
            return await await_callback(
                lambda cb: shard.commit_offsets(group_id, member_id, group_instance_id, generation_id, offsets, cb))
        # Built in a worker thread and applied a chunk at a time: no event-loop step grows with it.
        prepared = await off_loop(prepare_commit, group_id, offsets, self.config.offset_metadata_max_bytes,
                                  self.runtime.clock_ms(), lane="records")
        refused: dict[TopicPartition, ErrorCode] = await await_callback(lambda cb: shard.commit_offsets(
            group_id, member_id, group_instance_id, generation_id, offsets, cb, prepared))
        if prepared.result is None:
            return refused
        return await shard.finish_prepared_commit(prepared, offsets)

    async def commit_transactional_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: dict[TopicPartition, OffsetAndMetadata],
    ) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit, after the transaction coordinator verified the partition."""
        error, shard = self._locate(group_id)
        if shard is None:
            return {tp: error for tp in offsets}
        if not offsets:
            return {}
        return await await_callback(lambda cb: shard.commit_transactional_offsets(
            group_id, producer_id, producer_epoch, member_id, group_instance_id, generation_id, offsets, cb))

    def complete_transaction(self, producer_id: int, partitions: list[int], committed: bool) -> None:
        """A transaction marker was written to these ``__consumer_offsets`` partitions: the
        producer's pending offset commits there become visible (COMMIT) or are dropped."""
        for partition in partitions:
            _, shard = self.runtime.shard_at(partition)
            if shard is not None:
                shard.complete_transaction(producer_id, committed)

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None, require_stable: bool,
                      member: tuple[str | None, int] | None = None,
                      ) -> tuple[ErrorCode, dict[TopicPartition, FetchedOffset]]:
        """``member``: (member id, member epoch) of OffsetFetch v9+, checked for consumer-protocol groups."""
        error, shard = self._locate(group_id, allow_empty=True)
        if shard is None:
            return error, {}
        if member is not None:
            member_error = shard.validate_consumer_fetch(group_id, *member)
            if member_error is not None:
                return member_error, {}
        return ErrorCode.NONE, shard.fetch_offsets(group_id, partitions, require_stable)

    def delete_offsets(self, group_id: str,
                       partitions: list[TopicPartition]) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        error, shard = self._locate(group_id)
        if shard is None:
            return error, {}
        return shard.delete_offsets(group_id, partitions)

    # ------------------------------------------------------------ admin

    def describe_group(self, group_id: str) -> tuple[ErrorCode, GroupSummary]:
        error, shard = self._locate(group_id, allow_empty=True)
        if shard is None:
            return error, GroupSummary("", "", "", ())
        return ErrorCode.NONE, shard.describe_group(group_id)

    def list_groups(self, states: set[str], types: set[str]) -> tuple[ErrorCode, list[GroupOverview]]:
        if not self._active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self.runtime.is_loading() else ErrorCode.NONE
        lowered = {s.lower() for s in states}
        groups: list[GroupOverview] = []
        for shard in self.runtime.active_shards():
            groups.extend(shard.list_groups(lowered, types))
        return error, groups

    def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        by_shard: dict[int, tuple[GroupCoordinatorShard, list[str]]] = {}
        for group_id in group_ids:
            error, shard = self._locate(group_id, allow_empty=True)
            if shard is None:
                results[group_id] = error
            else:
                by_shard.setdefault(id(shard), (shard, []))[1].append(group_id)
        for shard, ids in by_shard.values():
            results.update(shard.delete_groups(ids))
        return {group_id: results[group_id] for group_id in group_ids}

    # ------------------------------------------------------------ metrics

    def snapshots(self) -> list[GroupSnapshot]:
        """Every group this broker coordinates, for gauges (members, lag)."""
        out = []
        for shard in self.runtime.active_shards():
            for cg in shard.consumer_groups.values():
                holder = shard.groups.get(cg.group_id)
                offsets = {} if holder is None else {tp: c.value.offset for tp, c in holder.offsets.items()}
                out.append(GroupSnapshot(cg.group_id, cg.state.value, len(cg.members), cg.group_epoch, offsets))
            for group in shard.groups.values():
                if group.group_id in shard.consumer_groups:
                    continue
                out.append(GroupSnapshot(group.group_id, group.state.value, group.size, group.generation_id,
                                         {tp: c.value.offset for tp, c in group.offsets.items()}))
        return out


__all__ = ["OFFSETS_TOPIC", "GroupCoordinator", "GroupCounters", "GroupSnapshot", "NullObserver"]
