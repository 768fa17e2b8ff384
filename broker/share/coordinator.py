"""ShareCoordinator: share groups (KIP-932) on this broker.

Groups are hashed onto the partitions of ``__share_group_state`` (created on
first use, compacted, ``share.coordinator.state.topic.*``); the leader of a
group's partition serves its heartbeats and its share-partitions (see
broker/share/shard.py for the records). ShareFetch reads the log of the topic
partition (this broker must lead it), acquires records for the member and
persists the new state before answering; acknowledgements are answered once
their state is committed (acks=all on ``__share_group_state``).

Share sessions (ShareSessionEpoch) are kept per (group, member): 0 opens one
with the partitions named, later epochs add and forget partitions, -1 closes it
and releases the member's acquired records.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog
import trio

from broker.coordinator import (
    AppendResult,
    CoordinatorRuntime,
    InternalTopic,
    ShardContext,
    await_callback,
)
from broker.group.group import GroupOverview
from broker.share.dead_letters import DeadLetterWriter
from broker.share.group import ShareGroup, ShareGroupSettings, TopicIdPartition
from broker.share.partition import AcquiredBatch, ArchivedRecord
from broker.share.persister import SharePersister
from broker.share.shard import ShareDefaults, ShareGroupShard, ShareHeartbeatResult
from broker.share.state_service import ShareStateService
from controller.image import MetadataImage
from controller.service import TopicRequest
from wire.errors import ErrorCode
from wire.records import iter_batch_headers

if TYPE_CHECKING:
    from broker.node import BrokerNode
    from broker.replica_manager import Partition

log = structlog.get_logger(__name__)

SHARE_STATE_TOPIC = "__share_group_state"
FINAL_EPOCH = -1
INITIAL_EPOCH = 0
#: How long a heartbeat waits for ``__share_group_state`` to be created and loaded.
LOAD_WAIT_S = 5.0


@dataclass(slots=True)
class ShareSession:
    epoch: int
    partitions: set[TopicIdPartition] = field(default_factory=set)


@dataclass(slots=True)
class PartitionOutcome:
    """What a ShareFetch/ShareAcknowledge did for one partition."""

    error: ErrorCode = ErrorCode.NONE
    acknowledge_error: ErrorCode = ErrorCode.NONE
    leader_id: int = -1
    leader_epoch: int = -1
    records: bytes = b""
    acquired: list[AcquiredBatch] = field(default_factory=list)
    acknowledged: bool = False


#: (first offset, last offset, acknowledge types)
AckBatch = tuple[int, int, list[int]]


def defaults_from(node: BrokerNode) -> ShareDefaults:
    c = node.config
    return ShareDefaults(
        session_timeout_ms=c.group_share_session_timeout_ms,
        heartbeat_interval_ms=c.group_share_heartbeat_interval_ms,
        record_lock_duration_ms=c.group_share_record_lock_duration_ms,
        delivery_count_limit=c.group_share_delivery_count_limit,
        partition_max_record_locks=c.group_share_partition_max_record_locks,
        max_size=c.group_share_max_size,
    )


class ShareCoordinator:
    def __init__(self, node: BrokerNode) -> None:
        self.node = node
        self.defaults = defaults_from(node)
        c = node.config
        topic = InternalTopic(
            name=SHARE_STATE_TOPIC,
            num_partitions=c.share_coordinator_state_topic_num_partitions,
            replication_factor=c.share_coordinator_state_topic_replication_factor,
            configs={"cleanup.policy": "compact",
                     "segment.bytes": str(c.share_coordinator_state_topic_segment_bytes),
                     "min.insync.replicas": str(c.share_coordinator_state_topic_min_isr)},
        )
        self.runtime: CoordinatorRuntime[ShareGroupShard] = CoordinatorRuntime(
            name="share", node_id=node.node_id, topic=topic, image=node.image,
            replica_manager=node.replica_manager, shard_factory=self._new_shard,
            create_topic=self._create_topic, clock_ms=node.clock_ms, rng=node.rng,
            append_timeout_ms=c.offsets_commit_timeout_ms)
        #: The inter-broker state APIs (83-87) served by this broker's shards.
        self.state_service = ShareStateService(self.runtime.shard_for)
        #: How share-partitions reach their state at the share coordinator, wherever it is.
        self.persister = SharePersister(
            node_id=node.node_id, image=lambda: node.image, state_topic=SHARE_STATE_TOPIC,
            local=self.state_service, peers=lambda: node.peers, ensure_topic=self.runtime.ensure_topic)
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self.dead_letters: Callable[[ShareGroup, str, int, list[ArchivedRecord]], None] | None = \
            DeadLetterWriter(node)
        self._active = False

    def _new_shard(self, ctx: ShardContext) -> ShareGroupShard:
        shard = ShareGroupShard(ctx, self.defaults, self._topic_partitions)
        shard.on_archived = self._archived
        shard.on_member_removed = self._drop_session
        return shard

    def _drop_session(self, group_id: str, member_id: str) -> None:
        self.sessions.pop((group_id, member_id), None)

    def _topic_partitions(self, names: Iterable[str]) -> dict[str, tuple[uuid.UUID, int]]:
        image = self.node.image
        out = {}
        for name in names:
            topic = image.topic(name)
            if topic is not None and topic.partitions:
                out[name] = (topic.topic_id, len(topic.partitions))
        return out

    def _archived(self, group: ShareGroup, tp: TopicIdPartition, records: list[ArchivedRecord]) -> None:
        log.info("share_records_archived", group_id=group.group_id, topic_id=str(tp[0]), partition=tp[1],
                 count=len(records))
        if group.settings.dead_letter_topic and self.dead_letters is not None:
            topic = self.node.image.topics_by_id.get(tp[0])
            if topic is not None:
                self.dead_letters(group, topic.name, tp[1], records)

    async def _create_topic(self, topic: InternalTopic) -> None:
        live = len(self.node.image.live_brokers())
        rf = min(topic.replication_factor, max(live, 1))
        configs = dict(topic.configs)
        configs["min.insync.replicas"] = str(min(int(configs["min.insync.replicas"]), rf))
        results = await self.node.controller.create_topics(
            [TopicRequest(topic.name, topic.num_partitions, rf, configs=configs)])
        for r in results:
            if r.error not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                log.error("share_state_topic_not_created", error=r.error.name, message=r.message)

    # ------------------------------------------------------------ lifecycle

    def on_image(self, image: MetadataImage) -> None:
        self.runtime.on_image(image)
        for shard in self.runtime.active_shards():
            shard.refresh_assignments()

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._active = True
        try:
            await self.runtime.run(task_status)
        finally:
            self._active = False

    def close(self) -> None:
        self._active = False
        self.runtime.close()

    async def _shard(self, group_id: str | None, *, create: bool = False) -> tuple[ErrorCode, ShareGroupShard | None]:
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, None
        if not self._active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        if create and self.node.image.topic(SHARE_STATE_TOPIC) is None:
            await self.runtime.ensure_topic()
            with trio.move_on_after(LOAD_WAIT_S):
                while self.runtime.shard_for(group_id)[0] is not ErrorCode.NONE:
                    await trio.sleep(0.05)
        return self.runtime.shard_for(group_id)

    # ------------------------------------------------------------ membership

    async def heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                        subscribed: list[str] | None, client_id: str, client_host: str) -> ShareHeartbeatResult:
        if self.node.group_coordinator.describe_consumer_group(group_id)[0] is ErrorCode.NONE or \
                self._is_classic_group(group_id):
            return ShareHeartbeatResult(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
        error, shard = await self._shard(group_id, create=True)
        if shard is None:
            return ShareHeartbeatResult(error)
        return shard.heartbeat(group_id, member_id, member_epoch, rack_id, subscribed, client_id, client_host)

    def _is_classic_group(self, group_id: str) -> bool:
        error, summary = self.node.group_coordinator.describe_group(group_id)
        return error is ErrorCode.NONE and summary.state not in ("", "Dead")

    def group(self, group_id: str) -> tuple[ErrorCode, ShareGroup | None]:
        error, shard = self.runtime.shard_for(group_id) if self._active else (ErrorCode.COORDINATOR_NOT_AVAILABLE, None)
        if shard is None:
            return error, None
        group = shard.groups.get(group_id)
        return (ErrorCode.GROUP_ID_NOT_FOUND, None) if group is None else (ErrorCode.NONE, group)

    def configured_group_ids(self) -> list[str]:
        """The groups coordinated here with a group config set (ListConfigResources' GROUP)."""
        if not self._active:
            return []
        unset = ShareGroupSettings()
        return sorted(g.group_id for shard in self.runtime.active_shards() for g in shard.groups.values()
                      if g.settings != unset)

    def list_groups(self, states: set[str], types: set[str]) -> list[GroupOverview]:
        if not self._active or (types and "share" not in {t.lower() for t in types}):
            return []
        out = []
        for shard in self.runtime.active_shards():
            for g in shard.groups.values():
                if not states or g.state.lower() in states:
                    out.append(GroupOverview(g.group_id, "share", g.state, "share"))
        return out

    def delete_group(self, group_id: str) -> ErrorCode:
        error, shard = self.runtime.shard_for(group_id) if self._active else (ErrorCode.COORDINATOR_NOT_AVAILABLE, None)
        if shard is None:
            return error
        return shard.delete_group(group_id)

    async def set_settings(self, group_id: str, settings: ShareGroupSettings) -> ErrorCode:
        error, shard = await self._shard(group_id, create=True)
        if shard is None:
            return error
        settled: AppendResult = await await_callback(lambda cb: shard.set_settings(group_id, settings, cb))
        return settled.error

    async def reset_offsets(self, group_id: str, offsets: dict[TopicIdPartition, int]) -> dict[TopicIdPartition, ErrorCode]:
        error, shard = await self._shard(group_id, create=True)
        if shard is None:
            return {tp: error for tp in offsets}
        return {tp: shard.reset_start_offset(group_id, tp, o) for tp, o in offsets.items()}

    def delete_offsets(self, group_id: str, topic_id: uuid.UUID) -> ErrorCode:
        error, shard = self.runtime.shard_for(group_id) if self._active else (ErrorCode.COORDINATOR_NOT_AVAILABLE, None)
        if shard is None:
            return error
        return shard.delete_topic_state(group_id, topic_id)

    # ------------------------------------------------------------ sessions

    def open_session(self, group_id: str, member_id: str, epoch: int,
                     add: Iterable[TopicIdPartition], forget: Iterable[TopicIdPartition],
                     ) -> tuple[ErrorCode, ShareSession | None]:
        key = (group_id, member_id)
        if epoch == INITIAL_EPOCH:
            session = self.sessions[key] = ShareSession(1, set(add))
            return ErrorCode.NONE, session
        existing = self.sessions.get(key)
        if existing is None:
            return ErrorCode.SHARE_SESSION_NOT_FOUND, None
        session = existing
        if epoch == FINAL_EPOCH:
            return ErrorCode.NONE, session
        if epoch != session.epoch:
            return ErrorCode.INVALID_SHARE_SESSION_EPOCH, None
        session.epoch = 1 if session.epoch == 2**31 - 1 else session.epoch + 1
        session.partitions.update(add)
        session.partitions.difference_update(forget)
        return ErrorCode.NONE, session

    async def close_session(self, group_id: str, member_id: str) -> None:
        session = self.sessions.pop((group_id, member_id), None)
        _, shard = self.runtime.shard_for(group_id)
        if session is None or shard is None or (group := shard.groups.get(group_id)) is None:
            return
        for tp in session.partitions:
            sp = group.partitions.get(tp)
            if sp is not None and sp.release_member(member_id):
                shard.persist(group, tp)

    # ------------------------------------------------------------ records

    def _partition(self, tp: TopicIdPartition, out: PartitionOutcome) -> Partition | None:
        topic = self.node.image.topics_by_id.get(tp[0])
        if topic is None:
            out.error = ErrorCode.UNKNOWN_TOPIC_ID
            return None
        partition = self.node.replica_manager.get(topic.name, tp[1])
        if partition is None:
            out.error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            return None
        out.leader_id, out.leader_epoch = partition.leader, partition.leader_epoch
        if partition.leader != self.node.node_id:
            out.error = ErrorCode.NOT_LEADER_OR_FOLLOWER
            return None
        return partition

    async def acknowledge(self, group_id: str, member_id: str,
                          acks: dict[TopicIdPartition, list[AckBatch]]) -> dict[TopicIdPartition, PartitionOutcome]:
        """Applies acknowledgements; answers once their new state is committed."""
        out: dict[TopicIdPartition, PartitionOutcome] = {}
        error, shard = self.runtime.shard_for(group_id)
        group = None if shard is None else shard.groups.get(group_id)
        for tp, batches in acks.items():
            o = out[tp] = PartitionOutcome(acknowledged=True)
            if self._partition(tp, o) is None:
                o.acknowledge_error = o.error
                continue
            if shard is None or group is None or tp not in group.partitions:
                o.acknowledge_error = error if shard is None else ErrorCode.INVALID_RECORD_STATE
                continue
            sp = group.partitions[tp]
            now = self.node.clock_ms()
            for first, last, types in batches:
                code = sp.acknowledge(member_id, first, last, types, now)
                if code is not ErrorCode.NONE:
                    o.acknowledge_error = code
            result: AppendResult = await await_callback(
                lambda cb, tp=tp: shard.persist(group, tp, cb))  # type: ignore[misc]
            if result.error is not ErrorCode.NONE and o.acknowledge_error is ErrorCode.NONE:
                o.acknowledge_error = result.error
        return out

    async def acquire(self, group_id: str, member_id: str, partitions: list[TopicIdPartition],
                      max_records: int, max_bytes: int, max_wait_ms: int) -> dict[TopicIdPartition, PartitionOutcome]:
        """Reads and acquires records of ``partitions``, waiting up to ``max_wait_ms`` for some."""
        deadline = trio.current_time() + max(max_wait_ms, 0) / 1000
        while True:
            out: dict[TopicIdPartition, PartitionOutcome] = {}
            live: list[Partition] = []
            error, shard = self.runtime.shard_for(group_id)
            group = None if shard is None else shard.groups.get(group_id)
            member = None if group is None else group.members.get(member_id)
            for tp in partitions:
                o = out[tp] = PartitionOutcome()
                partition = self._partition(tp, o)
                if partition is None:
                    continue
                if shard is None or group is None or member is None:
                    o.error = error if shard is None else ErrorCode.UNKNOWN_MEMBER_ID
                    continue
                live.append(partition)
                self._acquire_one(shard, group, member_id, tp, partition, o, max_records, max_bytes)
            got = any(o.acquired or o.error is not ErrorCode.NONE for o in out.values())
            if got or not live or trio.current_time() >= deadline:
                return out
            await self.node.replica_manager.wait_for_change(live, min(deadline, trio.current_time() + 0.5))

    def _acquire_one(self, shard: ShareGroupShard, group: ShareGroup, member_id: str, tp: TopicIdPartition,
                     partition: Partition, o: PartitionOutcome, max_records: int, max_bytes: int) -> None:
        sp = shard.share_partition(group, tp)
        if not sp.initialized:
            reset = group.settings.auto_offset_reset
            sp.initialize(partition.log_start_offset if reset == "earliest" else partition.high_watermark)
            shard.persist(group, tp)
        sp.skip_to(partition.log_start_offset)
        start = sp.first_available()
        if start >= partition.high_watermark:
            return
        data = partition.log.read(start, max(max_bytes, 1), partition.high_watermark, min_one_batch=True)
        if data.region is None:
            return
        # Past the descriptor budget a read comes back as bytes rather than a file region.
        raw = data.region if isinstance(data.region, bytes) else data.region.read()
        if not raw:
            return
        offsets: list[int] = []
        for _, header in iter_batch_headers(raw):
            if not header.is_control:
                offsets.extend(range(header.base_offset, header.last_offset + 1))
        acquired = sp.acquire(member_id, offsets, max_records, self.node.clock_ms())
        if acquired:
            o.acquired = acquired
            o.records = raw
            shard.persist(group, tp)
