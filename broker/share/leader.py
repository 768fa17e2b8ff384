"""Share-partitions at the topic partition's leader (Kafka's SharePartitionManager).

ShareFetch and ShareAcknowledge go to the leader of each topic partition, which
keeps the live share-partition (broker/share/partition.py) of every group reading
it: acquired records, locks, delivery counts. Its durable state lives at the
share coordinator and is reached through the persister: the first use of a
share-partition reads it (ReadShareGroupState with the partition's leader epoch,
which fences the previous leader), and every change is written back
(WriteShareGroupState) before the request that made it is answered. A record
acquired but not acknowledged is written AVAILABLE with its delivery count, so a
new leader redelivers it and never an acknowledged one.

A share-partition is dropped when this broker stops leading the partition or its
leader epoch changes (the next use reads the state again), and when the
coordinator answers a write with a fence (FENCED_LEADER_EPOCH: another leader
took over; FENCED_STATE_EPOCH: the state was reset).

The group's settings (lock duration, delivery count limit, dead-letter topic,
``share.auto.offset.reset`` for a share-partition never initialized) are its group
configs in the metadata image over this broker's defaults: the same at every leader,
and applied to the live share-partitions when they change.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import structlog
import trio

from broker.observability.share_metrics import ShareMetrics
from broker.replication import delayed_produce
from broker.replication.partition import Partition
from broker.share.acquire_mode import BATCH_OPTIMIZED, RECORD_LIMIT
from broker.share.group import TopicIdPartition
from broker.share.isolation import acquirable_batches, fetch_upper_bound
from broker.share.partition import GAP, RENEW, AcquiredBatch, ArchivedRecord, SharePartition
from broker.share.persister import SharePersister
from broker.share.shard import ShareDefaults
from config.group import ShareGroupSettings
from controller.delta import MetadataDelta
from controller.image import GROUP_RESOURCE, MetadataImage
from wire.errors import ErrorCode

log = structlog.get_logger(__name__)

#: (first offset, last offset, acknowledge types)
AckBatch = tuple[int, int, list[int]]
#: How often acquisition locks are checked for expiry.
LOCK_CHECK_S = 0.1
_FENCES = frozenset({ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.FENCED_STATE_EPOCH})


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


@dataclass(eq=False, slots=True)
class LeaderSharePartition:
    group_id: str
    tp: TopicIdPartition
    leader_epoch: int
    state_epoch: int
    sp: SharePartition
    #: Writes of one share-partition go one at a time, each with the state as it is then.
    write_lock: trio.Lock = field(default_factory=trio.Lock)


class SharePartitionManager:
    def __init__(self, *, node_id: int, image: Callable[[], MetadataImage],
                 local_partition: Callable[[str, int], Partition | None], persister: SharePersister,
                 clock_ms: Callable[[], int], defaults: ShareDefaults,
                 settings: Callable[[str], ShareGroupSettings],
                 on_archived: Callable[[str, TopicIdPartition, list[ArchivedRecord]], None],
                 metrics: ShareMetrics | None = None) -> None:
        self.node_id = node_id
        self._image = image
        self._local_partition = local_partition
        self.persister = persister
        self.clock_ms = clock_ms
        self.defaults = defaults
        self._settings = settings
        self._on_archived = on_archived
        self.metrics = metrics or ShareMetrics()
        self.entries: dict[tuple[str, TopicIdPartition], LeaderSharePartition] = {}
        self._loading: dict[tuple[str, TopicIdPartition], trio.Event] = {}
        #: The configs of the last image seen (replaced as a whole when any config changes).
        self._configs: object = None

    # ------------------------------------------------------------ lookups

    def _partition(self, tp: TopicIdPartition, out: PartitionOutcome) -> Partition | None:
        topic = self._image().topics_by_id.get(tp[0])
        if topic is None:
            out.error = ErrorCode.UNKNOWN_TOPIC_ID
            return None
        partition = self._local_partition(topic.name, tp[1])
        if partition is None:
            part = topic.partitions.get(tp[1])
            out.error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if part is None else ErrorCode.NOT_LEADER_OR_FOLLOWER
            if part is not None:
                out.leader_id, out.leader_epoch = part.leader, part.leader_epoch
            return None
        out.leader_id, out.leader_epoch = partition.leader, partition.leader_epoch
        if partition.leader != self.node_id:
            out.error = ErrorCode.NOT_LEADER_OR_FOLLOWER
            return None
        return partition

    def _new_partition(self, group_id: str) -> SharePartition:
        s = self._settings(group_id)
        return SharePartition(lock_duration_ms=s.record_lock_duration_ms, delivery_count_limit=s.delivery_count_limit,
                              max_in_flight=s.partition_max_record_locks)

    async def _entry(self, group_id: str, tp: TopicIdPartition, partition: Partition
                     ) -> tuple[ErrorCode, LeaderSharePartition | None]:
        """The live share-partition, read from the share coordinator on first use."""
        key = (group_id, tp)
        while True:
            entry = self.entries.get(key)
            if entry is not None and entry.leader_epoch == partition.leader_epoch:
                return ErrorCode.NONE, entry
            loading = self._loading.get(key)
            if loading is None:
                break
            await loading.wait()
        done = self._loading[key] = trio.Event()
        try:
            epoch = partition.leader_epoch
            started = trio.current_time()
            state = await self.persister.read((group_id, tp[0], tp[1]), epoch)
            if state.error is not ErrorCode.NONE:
                log.info("share_partition_read_failed", group_id=group_id, topic_id=str(tp[0]), partition=tp[1],
                         error=state.error.name)
                code = ErrorCode.NOT_LEADER_OR_FOLLOWER if state.error in _FENCES else state.error
                return code, None
            if partition.leader != self.node_id or partition.leader_epoch != epoch:
                return ErrorCode.NOT_LEADER_OR_FOLLOWER, None
            sp = self._new_partition(group_id)
            if state.start_offset >= 0:
                sp.restore(state.start_offset, state.batches)
            entry = self.entries[key] = LeaderSharePartition(group_id, tp, epoch, state.state_epoch, sp)
            self.metrics.partition_loaded(trio.current_time() - started)
            log.info("share_partition_loaded", group_id=group_id, topic_id=str(tp[0]), partition=tp[1],
                     leader_epoch=epoch, start_offset=sp.start_offset, in_flight=len(sp.records))
            return ErrorCode.NONE, entry
        finally:
            del self._loading[key]
            done.set()

    async def persist(self, entry: LeaderSharePartition) -> ErrorCode:
        """Writes the share-partition's state; hands newly archived records on."""
        sp = entry.sp
        if sp.archived:
            archived, sp.archived = sp.archived, []
            for record in archived:
                self.metrics.archived(record.reason)
            self._on_archived(entry.group_id, entry.tp, archived)
        async with entry.write_lock:
            if self.entries.get((entry.group_id, entry.tp)) is not entry:
                return ErrorCode.NOT_LEADER_OR_FOLLOWER
            error = await self.persister.write((entry.group_id, entry.tp[0], entry.tp[1]), entry.state_epoch,
                                               entry.leader_epoch, sp.start_offset, sp.state_batches())
        if error in _FENCES:
            log.info("share_partition_fenced", group_id=entry.group_id, topic_id=str(entry.tp[0]),
                     partition=entry.tp[1], error=error.name)
            self._drop(entry)
        return error

    def _drop(self, entry: LeaderSharePartition) -> None:
        if self.entries.get((entry.group_id, entry.tp)) is entry:
            del self.entries[(entry.group_id, entry.tp)]

    # ------------------------------------------------------------ requests

    async def acknowledge(self, group_id: str, member_id: str,
                          acks: dict[TopicIdPartition, list[AckBatch]]) -> dict[TopicIdPartition, PartitionOutcome]:
        """Applies acknowledgements; answers once their new state is written."""
        out: dict[TopicIdPartition, PartitionOutcome] = {}
        if acks:
            self.metrics.acknowledge_request()
        for tp, batches in acks.items():
            o = out[tp] = PartitionOutcome(acknowledged=True)
            partition = self._partition(tp, o)
            if partition is None:
                o.acknowledge_error = o.error
                continue
            error, entry = await self._entry(group_id, tp, partition)
            if entry is None:
                o.acknowledge_error = error
                continue
            now = self.clock_ms()
            expired = entry.sp.expire_locks(now) > 0
            for first, last, types in batches:
                self.metrics.acknowledged(types, last - first + 1)
                code = entry.sp.acknowledge(member_id, first, last, types, now)
                if code is not ErrorCode.NONE:
                    o.acknowledge_error = code
            if not expired and all(t in (GAP, RENEW) for _, _, types in batches for t in types):
                continue  # a renewed lock is not part of the persisted state (no lock is)
            written = await self.persist(entry)
            if written is not ErrorCode.NONE and o.acknowledge_error is ErrorCode.NONE:
                o.acknowledge_error = ErrorCode.NOT_LEADER_OR_FOLLOWER if written in _FENCES else written
        return out

    async def acquire(self, group_id: str, member_id: str, partitions: list[TopicIdPartition],
                      max_records: int, max_bytes: int, max_wait_ms: int,
                      refuse: Callable[[], ErrorCode | None] | None = None,
                      acquire_mode: int = BATCH_OPTIMIZED, batch_size: int = 0,
                      ) -> dict[TopicIdPartition, PartitionOutcome]:
        """Reads and acquires records of ``partitions``, waiting up to ``max_wait_ms`` for some.
        ``refuse`` (if given) says why the member may not fetch at all (UNKNOWN_MEMBER_ID);
        ``acquire_mode`` is ShareFetch's ShareAcquireMode (broker/share/acquire_mode.py),
        ``batch_size`` its BatchSize (records per in-flight batch; 0: no split)."""
        deadline = trio.current_time() + max(max_wait_ms, 0) / 1000
        while True:
            out: dict[TopicIdPartition, PartitionOutcome] = {}
            live: list[Partition] = []
            refused = None if refuse is None else refuse()
            for tp in partitions:
                o = out[tp] = PartitionOutcome()
                partition = self._partition(tp, o)
                if partition is None:
                    continue
                if refused is not None:
                    o.error = refused
                    continue
                live.append(partition)
                await self._acquire_one(group_id, member_id, tp, partition, o, max_records, max_bytes, acquire_mode,
                                        batch_size)
            got = any(o.acquired or o.error is not ErrorCode.NONE for o in out.values())
            if got or not live or trio.current_time() >= deadline:
                return out
            await delayed_produce.wait_for_change(live, min(deadline, trio.current_time() + 0.5))

    async def _acquire_one(self, group_id: str, member_id: str, tp: TopicIdPartition, partition: Partition,
                           o: PartitionOutcome, max_records: int, max_bytes: int, acquire_mode: int,
                           batch_size: int) -> None:
        error, entry = await self._entry(group_id, tp, partition)
        if entry is None:
            o.error = error
            return
        sp = entry.sp
        changed = False
        settings = self._settings(group_id)
        if not sp.initialized:
            sp.initialize(self._reset_offset(settings, partition))
            changed = True
        sp.skip_to(partition.log_start_offset)
        start = sp.first_available()
        upper = fetch_upper_bound(partition, settings.read_committed)
        raw = b""
        if start < upper:
            data = partition.log.read(start, max(max_bytes, 1), upper, min_one_batch=True)
            if data.region is not None:
                # Past the descriptor budget a read comes back as bytes rather than a file region.
                raw = data.region if isinstance(data.region, bytes) else data.region.read()
        if raw:
            batches = acquirable_batches(partition, raw, start, upper, settings.read_committed)
            acquired = sp.acquire_fetched(member_id, batches, max_records=max_records, batch_size=batch_size,
                                          record_limit=acquire_mode == RECORD_LIMIT, now_ms=self.clock_ms())
            if acquired:
                self.metrics.acquired(sum(b.last_offset - b.first_offset + 1 for b in acquired))
                o.acquired = acquired
                o.records = raw
                changed = True
        if changed:
            written = await self.persist(entry)
            if written in _FENCES:
                o.error, o.acquired, o.records = ErrorCode.NOT_LEADER_OR_FOLLOWER, [], b""

    def _reset_offset(self, settings: ShareGroupSettings, partition: Partition) -> int:
        """Where a share-partition with no state starts (``share.auto.offset.reset``):
        by_duration as ListOffsets by timestamp (the end when no record is that recent)."""
        if settings.auto_offset_reset == "earliest":
            return partition.log_start_offset
        timestamp = settings.reset_timestamp(self.clock_ms())
        if timestamp is not None:
            found = partition.log.offset_for_timestamp(max(timestamp, 0))
            if found is not None and found.offset < partition.high_watermark:
                return found.offset
        return partition.high_watermark

    async def release_member(self, group_id: str, member_id: str,
                             partitions: Iterable[TopicIdPartition] | None = None) -> None:
        """The member closed its share session or left: its acquired records become available."""
        wanted = None if partitions is None else set(partitions)
        for (g, tp), entry in list(self.entries.items()):
            if g == group_id and (wanted is None or tp in wanted) and entry.sp.release_member(member_id):
                await self.persist(entry)

    def _apply_settings(self) -> None:
        """Group configs changed: the live share-partitions take their groups' new settings."""
        settings: dict[str, ShareGroupSettings] = {}
        for (group_id, _), entry in self.entries.items():
            s = settings.get(group_id)
            if s is None:
                s = settings[group_id] = self._settings(group_id)
            entry.sp.lock_duration_ms = s.record_lock_duration_ms
            entry.sp.delivery_count_limit = s.delivery_count_limit
            entry.sp.max_in_flight = s.partition_max_record_locks

    def forget(self, group_id: str, topic_id: uuid.UUID | None = None) -> None:
        """The group's state was reset or deleted: drop the live share-partitions (read again
        on next use)."""
        for key in [k for k in self.entries if k[0] == group_id and (topic_id is None or k[1][0] == topic_id)]:
            del self.entries[key]

    # ------------------------------------------------------------ lifecycle

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """Drops the share-partitions of the partitions the delta moved away from this broker's
        leadership (or to a new epoch), or whose topic it deleted; applies changed group configs."""
        if any(resource_type == GROUP_RESOURCE for resource_type, _ in delta.configs):
            self._configs = image.configs
            self._apply_settings()
        topics = delta.topics
        if not topics:
            return
        for key, entry in list(self.entries.items()):
            topic_id, index = entry.tp
            changed = topics.changed.get(topic_id)
            part = None if changed is None else changed.partition_changes.get(index)
            if topic_id in topics.deleted or (part is not None and (
                    part.leader != self.node_id or part.leader_epoch != entry.leader_epoch)):
                del self.entries[key]

    def on_image(self, image: MetadataImage) -> None:
        """Drops the share-partitions of partitions this broker no longer leads (or leads
        with a new epoch); applies changed group configs."""
        for key, entry in list(self.entries.items()):
            topic = image.topics_by_id.get(entry.tp[0])
            part = None if topic is None else topic.partitions.get(entry.tp[1])
            if part is None or part.leader != self.node_id or part.leader_epoch != entry.leader_epoch:
                del self.entries[key]
        if image.configs is not self._configs:
            self._configs = image.configs
            self._apply_settings()

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Expires acquisition locks: the records become available again (or archived)."""
        task_status.started()
        while True:
            await trio.sleep(LOCK_CHECK_S)
            now = self.clock_ms()
            for entry in list(self.entries.values()):
                deadline = entry.sp.next_lock_deadline()
                if deadline is not None and deadline <= now and entry.sp.expire_locks(now):
                    await self.persist(entry)

