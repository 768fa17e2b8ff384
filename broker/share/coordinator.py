"""ShareCoordinator: the share-partitions (KIP-932) of this broker.

Kafka's split: a share group's membership (heartbeats, assignment) is its group
coordinator's, the leader of its ``__consumer_offsets`` partition
(broker/group/share_groups.py), which calls this side through
:class:`~broker.group.share_groups.SharePartitionHooks`. Share-partitions live at
each topic partition's leader (broker/share/leader.py), which persists their state
through the persister at the share coordinator of ``groupId:topicId:partition``:
the leader of the ``__share_group_state`` partition that key hashes to (created on
first use, compacted, ``share.coordinator.state.topic.*``; state_service.py). The
group's settings are its group configs, read from the metadata image by every broker
(broker/share/group_configs.py); a JSON ``config`` record of an earlier data dir is
migrated to them once when its shard loads here.

Share sessions (ShareSessionEpoch) are kept per (group, member) at the broker the
member fetches from: 0 opens one with the partitions named, later epochs add and
forget partitions, -1 closes it and releases the member's acquired records.
"""

from __future__ import annotations

import math
import random
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

import structlog
import trio

from broker.coordinator import (
    CoordinatorRuntime,
    InternalTopic,
    ShardContext,
    await_callback,
)
from broker.observability.share_metrics import ShareMetrics
from broker.replication.replica_manager import ReplicaManager
from broker.share.acquire_mode import BATCH_OPTIMIZED
from broker.share.dead_letters import DeadLetterWriter
from broker.share.feature import dead_letter_queues_enabled
from broker.share.group import TopicIdPartition
from broker.share.group_configs import legacy_configs, share_settings
from broker.share.leader import AckBatch, PartitionOutcome, SharePartitionManager
from broker.share.partition import ArchivedRecord
from broker.share.persister import PeerRequester, SharePersister
from broker.share.shard import ShareDefaults, ShareGroupShard
from broker.share.state_service import ShareStateService
from config.broker import BrokerConfig
from config.group import ShareGroupSettings
from controller.delta import MetadataDelta
from controller.image import GROUP_RESOURCE, MetadataImage
from controller.service import CreateTopicResult, TopicRequest
from wire.errors import ErrorCode
from wire.generated.api_002_list_offsets import (
    ListOffsetsRequest,
    ListOffsetsRequestListOffsetsPartition,
    ListOffsetsRequestListOffsetsTopic,
    ListOffsetsResponse,
)

if TYPE_CHECKING:
    from broker.node import BrokerNode

log = structlog.get_logger(__name__)

SHARE_STATE_TOPIC = "__share_group_state"
FINAL_EPOCH = -1
INITIAL_EPOCH = 0
EARLIEST_TIMESTAMP = -2
#: One request to another broker (ListOffsets of a partition's leader).
PEER_TIMEOUT_S = 5.0
#: How long a heartbeat waits for a new ``__share_group_state`` to show, or a loading shard.
CREATE_WAIT_S = 5.0


@dataclass(slots=True)
class ShareSession:
    epoch: int
    partitions: set[TopicIdPartition] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class ShareServices:
    """What the share coordinator uses of its broker, named one by one."""

    config: BrokerConfig
    node_id: int
    image: Callable[[], MetadataImage]
    replica_manager: ReplicaManager
    clock_ms: Callable[[], int]
    rng: random.Random
    create_topics: Callable[[Sequence[TopicRequest]], Awaitable[list[CreateTopicResult]]]
    #: At the group coordinator of a share group, whether a member is in it (None: yes, or
    #: another broker coordinates the group), see ShareGroupService.member_status.
    member_status: Callable[[str, str], ErrorCode | None]
    #: The inter-broker channel (made after the coordinator, hence a callable).
    peers: Callable[[], PeerRequester]
    #: Sets (value) or deletes (None) a group's group configs at the controller.
    alter_group_configs: Callable[[str, dict[str, str | None]], Awaitable[ErrorCode]]
    metrics: ShareMetrics = field(default_factory=ShareMetrics)


def defaults_from(c: BrokerConfig) -> ShareDefaults:
    return ShareDefaults(
        record_lock_duration_ms=c.group_share_record_lock_duration_ms,
        delivery_count_limit=c.group_share_delivery_count_limit,
        partition_max_record_locks=c.group_share_partition_max_record_locks,
    )


class ShareCoordinator:
    def __init__(self, services: ShareServices) -> None:
        self.services = sv = services
        self.defaults = defaults_from(sv.config)
        c = sv.config
        topic = InternalTopic(
            name=SHARE_STATE_TOPIC,
            num_partitions=c.share_coordinator_state_topic_num_partitions,
            replication_factor=c.share_coordinator_state_topic_replication_factor,
            configs={"cleanup.policy": "compact",
                     "segment.bytes": str(c.share_coordinator_state_topic_segment_bytes),
                     "min.insync.replicas": str(c.share_coordinator_state_topic_min_isr)},
        )
        self.runtime: CoordinatorRuntime[ShareGroupShard] = CoordinatorRuntime(
            name="share", node_id=sv.node_id, topic=topic, image=sv.image(),
            replica_manager=sv.replica_manager, shard_factory=self._new_shard,
            create_topic=self._create_topic, clock_ms=sv.clock_ms, rng=sv.rng,
            append_timeout_ms=c.offsets_commit_timeout_ms)
        #: The inter-broker state APIs (83-87) served by this broker's shards.
        self.state_service = ShareStateService(self.runtime.shard_for, sv.metrics)
        #: How share-partitions reach their state at the share coordinator, wherever it is.
        self.persister = SharePersister(
            node_id=sv.node_id, image=sv.image, state_topic=SHARE_STATE_TOPIC,
            local=self.state_service, peers=sv.peers, ensure_topic=self.runtime.ensure_topic)
        #: The share-partitions of the topic partitions this broker leads.
        self.partitions = SharePartitionManager(
            node_id=sv.node_id, image=sv.image, local_partition=sv.replica_manager.get,
            persister=self.persister, clock_ms=sv.clock_ms, defaults=self.defaults,
            settings=self._settings, on_archived=self._archived, metrics=sv.metrics)
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        #: Work a synchronous caller asked for (releases, state deletes), run by :meth:`run`.
        self._work_send, self._work_recv = trio.open_memory_channel[Callable[[], Awaitable[object]]](math.inf)
        self.dead_letters: Callable[[str, str, str, int, list[ArchivedRecord]], None] | None = \
            DeadLetterWriter(sv.node_id, sv.image, sv.replica_manager, sv.peers, self._later, sv.metrics,
                             topic_prefix=c.errors_deadletterqueue_topic_name_prefix,
                             auto_create=c.errors_deadletterqueue_auto_create_topics_enable,
                             create_topic=self._create_dead_letter_topic, clock_ms=sv.clock_ms)
        #: Group settings of legacy ``config`` records replayed and not migrated yet.
        self._legacy_pending: dict[str, dict[str, str]] = {}
        self._active = False

    @classmethod
    def from_node(cls, node: BrokerNode) -> ShareCoordinator:
        """The share coordinator of ``node``, hooked to its group coordinator (made before it)."""
        groups = node.group_coordinator

        async def alter_group_configs(group_id: str, changes: dict[str, str | None]) -> ErrorCode:
            return (await node.controller.alter_configs(GROUP_RESOURCE, group_id, changes, False, False))[0]

        coordinator = cls(ShareServices(
            config=node.config, node_id=node.node_id, image=lambda: node.image,
            replica_manager=node.replica_manager, clock_ms=node.clock_ms, rng=node.rng,
            create_topics=lambda requests: node.controller.create_topics(requests),
            member_status=groups.share.member_status, peers=lambda: node.peers,
            alter_group_configs=alter_group_configs, metrics=node.metrics.share))
        groups.share.hooks = coordinator
        return coordinator

    def _new_shard(self, ctx: ShardContext) -> ShareGroupShard:
        shard = ShareGroupShard(ctx)
        shard.on_legacy_config = self._legacy_config
        return shard

    def _legacy_config(self, group_id: str, value: dict[str, object] | None) -> None:
        """A group's settings in the JSON record data dirs written before kept them in: written
        once as group configs (unless the group has some already), then the record goes."""
        if value is None:  # removed (or the group deleted) later in the log
            self._legacy_pending.pop(group_id, None)
            return
        self._legacy_pending[group_id] = legacy_configs(value)

        async def migrate() -> None:
            configs = self._legacy_pending.pop(group_id, None)
            if configs is None:
                return
            if configs and not self.services.image().group_config(group_id):
                error = await self.services.alter_group_configs(group_id, dict(configs))
                if error is not ErrorCode.NONE:
                    log.warning("share_group_configs_not_migrated", group_id=group_id, error=error.name)
                    return
                log.info("share_group_configs_migrated", group_id=group_id, configs=sorted(configs))
            shard = await self._loaded_shard(group_id)
            if shard is not None:
                await await_callback(partial(shard.remove_legacy_config, group_id))
        self._later(migrate)

    async def _loaded_shard(self, group_id: str) -> ShareGroupShard | None:
        """The group's shard once loaded here (None if not within CREATE_WAIT_S)."""
        with trio.move_on_after(CREATE_WAIT_S):
            while (shard := self.runtime.shard_for(group_id)[1]) is None:
                await trio.sleep(0.05)
            return shard
        return None

    # ------------------------------------------------------------ what the group coordinator asks

    def member_removed(self, group_id: str, member_id: str) -> None:
        """A member left or expired: its session ends and the records it holds here are released."""
        self.sessions.pop((group_id, member_id), None)
        self._later(lambda: self.partitions.release_member(group_id, member_id))

    def _later(self, work: Callable[[], Awaitable[object]]) -> None:
        self._work_send.send_nowait(work)

    async def prepare(self) -> None:
        """A share group member joins: ``__share_group_state`` is created on first use."""
        if self._active and self.services.image().topic(SHARE_STATE_TOPIC) is None:
            await self.runtime.ensure_topic()
            with trio.move_on_after(CREATE_WAIT_S):
                while self.services.image().topic(SHARE_STATE_TOPIC) is None:
                    await trio.sleep(0.05)

    async def initialize(self, group_id: str, partitions: list[TopicIdPartition]) -> None:
        """Share-partitions a group is assigned for the first time: with
        ``share.auto.offset.reset=earliest`` their state starts at the log start offset (the
        leader starts a share-partition never initialized at the high watermark)."""
        if self._settings(group_id).auto_offset_reset != "earliest":
            return
        for tp in partitions:
            offset = await self._log_start_offset(tp)
            if offset is not None:
                # FENCED_STATE_EPOCH: the share-partition has state already, which stays.
                await self.persister.initialize((group_id, tp[0], tp[1]), 0, offset)

    def group_state_deleted(self, group_id: str, partitions: list[TopicIdPartition]) -> None:
        """The group or some of its share-partitions were deleted at the group coordinator (a
        deleted group's group configs are deleted at the controller by DeleteGroups)."""
        self._forget_state(group_id, partitions)

    # ------------------------------------------------------------ settings

    def _settings(self, group_id: str) -> ShareGroupSettings:
        """The group's settings in force (its group configs over this broker's defaults)."""
        return share_settings(self.services.image(), group_id, self.defaults)

    def _archived(self, group_id: str, tp: TopicIdPartition, records: list[ArchivedRecord]) -> None:
        log.info("share_records_archived", group_id=group_id, topic_id=str(tp[0]), partition=tp[1],
                 count=len(records))
        dead_letter_topic = self._settings(group_id).dead_letter_topic
        image = self.services.image()
        if not dead_letter_topic or self.dead_letters is None:
            return
        if not dead_letter_queues_enabled(image):
            log.warning("dead_letter_queue_disabled", group_id=group_id, topic=dead_letter_topic,
                        reason="share.version below 2")
            return
        topic = image.topics_by_id.get(tp[0])
        if topic is not None:
            self.dead_letters(group_id, dead_letter_topic, topic.name, tp[1], records)

    async def _create_topic(self, topic: InternalTopic) -> None:
        live = len(self.services.image().live_brokers())
        rf = min(topic.replication_factor, max(live, 1))
        configs = dict(topic.configs)
        configs["min.insync.replicas"] = str(min(int(configs["min.insync.replicas"]), rf))
        results = await self.services.create_topics(
            [TopicRequest(topic.name, topic.num_partitions, rf, configs=configs)])
        for r in results:
            if r.error not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                log.error("share_state_topic_not_created", error=r.error.name, message=r.message)

    async def _create_dead_letter_topic(self, name: str, configs: dict[str, str]) -> ErrorCode:
        results = await self.services.create_topics([TopicRequest(name, configs=configs)])
        return results[0].error if results else ErrorCode.UNKNOWN_SERVER_ERROR

    # ------------------------------------------------------------ lifecycle

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        self.runtime.on_metadata_update(delta, image)
        self.partitions.on_metadata_update(delta, image)

    def on_image(self, image: MetadataImage) -> None:
        self.runtime.on_image(image)
        self.partitions.on_image(image)

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._active = True
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.runtime.run)
                await nursery.start(self.partitions.run)
                nursery.start_soon(self._work_loop)
                task_status.started()
        finally:
            self._active = False

    async def _work_loop(self) -> None:
        async for work in self._work_recv:
            try:
                await work()
            except Exception:
                log.exception("share_background_work_failed")

    def close(self) -> None:
        self._active = False
        self.runtime.close()

    async def _log_start_offset(self, tp: TopicIdPartition) -> int | None:
        """The partition's log start offset, from its leader (ListOffsets, earliest)."""
        topic = self.services.image().topics_by_id.get(tp[0])
        part = None if topic is None else topic.partitions.get(tp[1])
        if topic is None or part is None or part.leader < 0:
            return None
        if part.leader == self.services.node_id:
            local = self.services.replica_manager.get(topic.name, tp[1])
            return None if local is None else local.log_start_offset
        response = await self.services.peers().request(part.leader, ListOffsetsRequest(replica_id=-1, topics=[
            ListOffsetsRequestListOffsetsTopic(name=topic.name, partitions=[
                ListOffsetsRequestListOffsetsPartition(partition_index=tp[1], timestamp=EARLIEST_TIMESTAMP)])]),
            ListOffsetsResponse, PEER_TIMEOUT_S)
        if response is None or not response.topics or not response.topics[0].partitions:
            return None
        answer = response.topics[0].partitions[0]
        return answer.offset if answer.error_code == ErrorCode.NONE else None

    def _forget_state(self, group_id: str, partitions: list[TopicIdPartition]) -> None:
        """Deletes the share-partitions' state at their coordinators (in the background)."""
        for topic_id in {tp[0] for tp in partitions}:
            self.partitions.forget(group_id, topic_id)

        async def delete() -> None:
            for tp in partitions:
                await self.persister.delete((group_id, tp[0], tp[1]))
        if partitions:
            self._later(delete)

    async def reset_offsets(self, group_id: str, offsets: dict[TopicIdPartition, int]) -> dict[TopicIdPartition, ErrorCode]:
        """AlterShareGroupOffsets, once the group coordinator checked the group is empty and
        covers them: each share-partition restarts at its offset, with nothing in flight (a new
        state epoch fences the leader's live state)."""
        out: dict[TopicIdPartition, ErrorCode] = {}
        for tp, offset in offsets.items():
            key = (group_id, tp[0], tp[1])
            summary = await self.persister.read_summary(key)
            if summary.error is not ErrorCode.NONE:
                out[tp] = summary.error
                continue
            out[tp] = await self.persister.initialize(key, summary.state_epoch + 1, offset)
            self.partitions.forget(group_id, tp[0])
        return out

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
        if session is not None:
            await self.partitions.release_member(group_id, member_id, session.partitions)

    # ------------------------------------------------------------ records

    async def acknowledge(self, group_id: str, member_id: str,
                          acks: dict[TopicIdPartition, list[AckBatch]]) -> dict[TopicIdPartition, PartitionOutcome]:
        """Applies acknowledgements at this partition leader; answers once their new state is written."""
        return await self.partitions.acknowledge(group_id, member_id, acks)

    async def acquire(self, group_id: str, member_id: str, partitions: list[TopicIdPartition],
                      max_records: int, max_bytes: int, max_wait_ms: int,
                      acquire_mode: int = BATCH_OPTIMIZED, batch_size: int = 0,
                      ) -> dict[TopicIdPartition, PartitionOutcome]:
        """Reads and acquires records of ``partitions``, waiting up to ``max_wait_ms`` for some."""
        return await self.partitions.acquire(group_id, member_id, partitions, max_records, max_bytes, max_wait_ms,
                                             refuse=lambda: self._unknown_member(group_id, member_id),
                                             acquire_mode=acquire_mode, batch_size=batch_size)

    def record_lock_duration_ms(self, group_id: str) -> int:
        """AcquisitionLockTimeoutMs of the group's ShareFetch/ShareAcknowledge responses."""
        return self._settings(group_id).record_lock_duration_ms

    def _unknown_member(self, group_id: str, member_id: str) -> ErrorCode | None:
        """UNKNOWN_MEMBER_ID when this broker is the group's coordinator and does not know the
        member; a leader that does not coordinate it trusts the share session, as Kafka's does."""
        return self.services.member_status(group_id, member_id)
