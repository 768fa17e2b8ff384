"""CoordinatorRuntime: shards of an internal topic, loaded where this broker leads.

Mirrors Kafka's ``CoordinatorRuntime`` (and the older ``GroupMetadataManager``
load/unload and append paths) for one internal topic. See the package
docstring for the contract shards see.

Ownership of a partition follows the metadata image: leading it starts a load
(the log is read from the log start to the log end seen when the load began,
in chunks, yielding to other tasks between them); losing it unloads the shard
at once. While a partition loads, requests for its keys are told
COORDINATOR_LOAD_IN_PROGRESS; when this broker does not lead it,
NOT_COORDINATOR.

Appends are written to the leader's log synchronously, in the order the shard
asks, so the log order is the order of state changes; completion (acks=all)
is reported when the high watermark passes the records, or with an error when
leadership goes, the ISR shrinks below ``min.insync.replicas`` or the timeout
(``offsets.commit.timeout.ms`` for groups) passes. Completion callbacks and
timers run from the runtime's own tasks, never inside the call that asked for
them, so a shard is never re-entered.
"""

from __future__ import annotations

import enum
import heapq
import math
import random
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Container, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import structlog
import trio

from broker.coordinator.hashing import partition_for
from broker.log.errors import LogError, RecordBatchTooLargeError, RecordTooLargeError
from broker.log.producer_state import AppendOrigin
from broker.replication.partition import AppendRefusedError, Partition
from broker.replication.replica_manager import ReplicaManager
from controller.delta import MetadataDelta
from controller.image import MetadataImage
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.exceptions import CorruptRecordError
from wire.records import (
    ControlRecordType,
    NewRecord,
    iter_batch_headers,
    iter_records,
    parse_control_record,
)

log = structlog.get_logger(__name__)

#: Bytes read from the log per step while loading (Kafka's offsets.load.buffer.size).
LOAD_BUFFER_BYTES = 5 * 1024 * 1024
#: Stale heap entries (rescheduled or cancelled timers) tolerated before the heap is rebuilt.
TIMER_HEAP_SLACK = 10_000


@dataclass(frozen=True, slots=True)
class InternalTopic:
    """How the internal topic is created on first use."""

    name: str
    num_partitions: int
    replication_factor: int
    configs: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class CoordinatorRecord:
    """A key and value (None: a tombstone) as the shard serialized them."""

    key: bytes
    value: bytes | None


@dataclass(frozen=True, slots=True)
class PreparedBatch:
    """Records already built into a batch (:func:`prepare_batch`): a shard whose write grows
    with a request builds it before it is called, off the event loop, and appends it as is."""

    data: bytearray
    count: int


#: Entries freed at a time by :func:`free_in_chunks`.
FREE_CHUNK = 4096


def prepare_batch(records: Sequence[CoordinatorRecord], timestamp_ms: int) -> PreparedBatch:
    """Builds ``records`` into one batch (pure work: safe in a worker thread)."""
    new = [NewRecord(r.key, r.value, timestamp=timestamp_ms) for r in records]
    batch = PreparedBatch(bytearray(build_batch(new)), len(new))
    free_in_chunks(new)
    return batch


def free_in_chunks(items: list[Any]) -> None:
    """Empties ``items`` a chunk at a time: freeing 100,000 objects is one C call that holds
    the GIL (and so the event loop, from a worker thread) for 10 ms and more."""
    while items:
        del items[-FREE_CHUNK:]


@dataclass(frozen=True, slots=True)
class ReplayedRecord:
    """A record read back from the log while loading."""

    offset: int
    timestamp: int
    key: bytes
    value: bytes | None
    producer_id: int
    producer_epoch: int
    is_transactional: bool


@dataclass(frozen=True, slots=True)
class AppendResult:
    error: ErrorCode
    base_offset: int = -1
    last_offset: int = -1


class Shard(Protocol):
    """A coordinator's state machine for one partition of its internal topic."""

    def replay(self, record: ReplayedRecord) -> None: ...

    def replay_end_transaction(self, producer_id: int, committed: bool, offset: int) -> None: ...

    def on_loaded(self) -> None: ...

    def on_unloaded(self) -> None: ...


class ShardContext(Protocol):
    """Everything a shard may do besides changing its own state."""

    @property
    def partition(self) -> int: ...

    def now_ms(self) -> int: ...

    def random_uuid(self) -> uuid.UUID: ...

    def schedule(self, key: str, delay_ms: int, callback: Callable[[], None]) -> None:
        """Run ``callback`` after ``delay_ms``; a timer with the same key is replaced."""
        ...

    def cancel(self, key: str) -> None: ...

    def append(
        self,
        records: Sequence[CoordinatorRecord] | PreparedBatch,
        on_complete: Callable[[AppendResult], None] | None = None,
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        transactional: bool = False,
    ) -> None:
        """Write ``records`` as one batch now; ``on_complete`` (if given) runs once they
        are committed or have failed. Without ``on_complete`` nothing waits (acks=0). A
        :class:`PreparedBatch` is appended as built (no producer id, not transactional)."""
        ...


S = TypeVar("S", bound=Shard)


_V = TypeVar("_V")


async def await_callback(start: Callable[[Callable[[_V], None]], None]) -> _V:
    """Runs ``start(callback)`` (a shard operation that answers once its records are
    written) and waits for the callback's value."""
    box: list[_V] = []
    done = trio.Event()

    def callback(value: _V) -> None:
        if not box:
            box.append(value)
            done.set()

    start(callback)
    await done.wait()
    return box[0]


class _State(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"


@dataclass(eq=False, slots=True)
class _Owned(Generic[S]):
    partition: int
    leader_epoch: int
    state: _State = _State.LOADING
    shard: S | None = None
    timer_keys: set[str] = field(default_factory=set)


@dataclass(eq=False, slots=True)
class _PendingAppend:
    owner: _Owned[Any]
    log_partition: Partition
    required_high_watermark: int
    deadline: float
    on_complete: Callable[[AppendResult], None]
    result: AppendResult


class _PartitionContext(Generic[S]):
    def __init__(self, runtime: CoordinatorRuntime[S], owner: _Owned[S]) -> None:
        self._runtime = runtime
        self._owner = owner

    @property
    def partition(self) -> int:
        return self._owner.partition

    def now_ms(self) -> int:
        return self._runtime.clock_ms()

    def random_uuid(self) -> uuid.UUID:
        return uuid.UUID(int=self._runtime.rng.getrandbits(128), version=4)

    def schedule(self, key: str, delay_ms: int, callback: Callable[[], None]) -> None:
        self._runtime._schedule(self._owner, key, delay_ms, callback)

    def cancel(self, key: str) -> None:
        self._runtime._cancel(self._owner, key)

    def append(
        self,
        records: Sequence[CoordinatorRecord] | PreparedBatch,
        on_complete: Callable[[AppendResult], None] | None = None,
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        transactional: bool = False,
    ) -> None:
        self._runtime._append(self._owner, records, on_complete, producer_id, producer_epoch, transactional)


class CoordinatorRuntime(Generic[S]):
    """Loads, serves and unloads the shards of one internal topic on this broker."""

    def __init__(
        self,
        *,
        name: str,
        node_id: int,
        topic: InternalTopic,
        image: MetadataImage,
        replica_manager: ReplicaManager,
        shard_factory: Callable[[ShardContext], S],
        create_topic: Callable[[InternalTopic], Awaitable[None]],
        clock_ms: Callable[[], int],
        rng: random.Random,
        append_timeout_ms: int,
    ) -> None:
        self.name = name
        self.node_id = node_id
        self.topic = topic
        self.replica_manager = replica_manager
        self.shard_factory = shard_factory
        self.clock_ms = clock_ms
        self.rng = rng
        self.append_timeout_ms = append_timeout_ms
        self._create_topic = create_topic
        self._image = image
        self._owned: dict[int, _Owned[S]] = {}
        self._load_queue: deque[_Owned[S]] = deque()
        self._load_wake = trio.Event()
        self._create_lock = trio.Lock()
        self._closed = False
        # timers: (partition, key) -> (deadline, seq, callback)
        self._timers: dict[tuple[int, str], tuple[float, int, Callable[[], None]]] = {}
        self._timer_heap: list[tuple[float, int, tuple[int, str]]] = []
        self._timer_seq = 0
        self._timer_wake = trio.Event()
        self._next_timer_deadline = math.inf
        # appends waiting for the high watermark, and results to deliver
        self._pending: list[_PendingAppend] = []
        self._completions: list[tuple[Callable[[AppendResult], None], AppendResult]] = []
        self._append_wake = trio.Event()

    # ------------------------------------------------------------ lookups

    def partition_count(self) -> int:
        topic = self._image.topic(self.topic.name)
        if topic is not None and topic.partitions:
            return len(topic.partitions)
        return self.topic.num_partitions

    def partition_for(self, key: str) -> int:
        return partition_for(key, self.partition_count())

    def shard_for(self, key: str) -> tuple[ErrorCode, S | None]:
        """The active shard serving ``key`` here, or why there is none."""
        return self.shard_at(self.partition_for(key))

    def shard_at(self, partition: int) -> tuple[ErrorCode, S | None]:
        owned = self._owned.get(partition)
        if owned is None:
            return ErrorCode.NOT_COORDINATOR, None
        if owned.state is _State.LOADING or owned.shard is None:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, None
        return ErrorCode.NONE, owned.shard

    def active_shards(self) -> list[S]:
        return [o.shard for _, o in sorted(self._owned.items()) if o.state is _State.ACTIVE and o.shard is not None]

    def is_loading(self) -> bool:
        return any(o.state is _State.LOADING for o in self._owned.values())

    def owns(self, partition: int) -> bool:
        return partition in self._owned

    # ------------------------------------------------------------ FindCoordinator

    async def find_coordinator(self, key: str, listener: str) -> tuple[ErrorCode, int, str, int]:
        """(error, node id, host, port) of the coordinator for ``key`` on ``listener``.

        The internal topic is created on first use. Kafka answers that first
        request with COORDINATOR_NOT_AVAILABLE and lets the client retry; this
        waits for the creation and answers with the new leader instead.
        """
        if self._image.topic(self.topic.name) is None:
            await self.ensure_topic()
        image = self._image
        topic = image.topic(self.topic.name)
        none = (ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1)
        if topic is None:
            return none
        part = topic.partitions.get(self.partition_for(key))
        if part is None or part.leader < 0:
            return none
        broker = image.brokers.get(part.leader)
        if broker is None or broker.fenced:
            return none
        endpoint = broker.endpoint(listener)
        if endpoint is None:
            return none
        return ErrorCode.NONE, broker.broker_id, endpoint.host, endpoint.port

    async def ensure_topic(self) -> None:
        async with self._create_lock:
            if self._image.topic(self.topic.name) is None:
                try:
                    await self._create_topic(self.topic)
                except Exception:
                    log.exception("internal_topic_creation_failed", coordinator=self.name, topic=self.topic.name)

    # ------------------------------------------------------------ metadata image

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """Load the partitions of the internal topic this broker now leads, unload the ones
        it stopped leading: only when the delta changed that topic, only its changed partitions."""
        self._image = image
        if self._closed:
            return
        changed = delta.topics.changed_named(self.topic.name)
        if delta.topics.deleted_named(self.topic.name) is not None:
            self.on_image(image)  # deleted (and maybe created anew): every partition
        elif changed is not None:
            self._follow({index: part.leader_epoch for index, part in changed.partition_changes.items()
                          if part.leader == self.node_id}, changed.partition_changes)

    def on_image(self, image: MetadataImage) -> None:
        """Load the partitions this broker now leads, unload the ones it stopped leading."""
        self._image = image
        if self._closed:
            return
        led: dict[int, int] = {}
        topic = image.topic(self.topic.name)
        if topic is not None:
            for part in topic.partitions.values():
                if part.leader == self.node_id:
                    led[part.partition] = part.leader_epoch
        self._follow(led, None)

    def _follow(self, led: Mapping[int, int], among: Container[int] | None) -> None:
        """``led``: partition -> leader epoch of those this broker leads, among ``among`` (None: all)."""
        for partition in [p for p in self._owned if p not in led and (among is None or p in among)]:
            self._unload(partition)
        elected = 0
        for partition, epoch in sorted(led.items()):
            if partition not in self._owned:
                owned: _Owned[S] = _Owned(partition, epoch)
                self._owned[partition] = owned
                self._load_queue.append(owned)
                self._load_wake.set()
                elected += 1
                log.debug("coordinator_partition_elected", coordinator=self.name, topic=self.topic.name,
                          partition=partition, leader_epoch=epoch)
        if elected:
            # One line for a whole start-up or failover; each partition's at debug.
            log.info("coordinator_partitions_elected", coordinator=self.name, topic=self.topic.name,
                     partitions=elected, owned=len(self._owned))

    def close(self) -> None:
        """Unloads every shard (their waiting requests are answered); no more loads."""
        self._closed = True
        for partition in list(self._owned):
            self._unload(partition)

    def _unload(self, partition: int) -> None:
        owned = self._owned.pop(partition)
        for key in owned.timer_keys:
            self._timers.pop((partition, key), None)
        owned.timer_keys.clear()
        if owned.state is _State.ACTIVE and owned.shard is not None:
            try:
                owned.shard.on_unloaded()
            except Exception:
                log.exception("coordinator_unload_failed", coordinator=self.name, partition=partition)
        owned.state = _State.LOADING
        owned.shard = None
        self._append_wake.set()  # pending appends of this partition now fail
        log.debug("coordinator_partition_resigned", coordinator=self.name, topic=self.topic.name,
                  partition=partition)

    # ------------------------------------------------------------ background tasks

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._loader_loop)
            nursery.start_soon(self._timer_loop)
            nursery.start_soon(self._completion_loop)
            task_status.started()

    async def _loader_loop(self) -> None:
        loaded = records = 0
        while True:
            if not self._load_queue and loaded:
                log.info("coordinator_partitions_loaded", coordinator=self.name, topic=self.topic.name,
                         partitions=loaded, records=records)
                loaded = records = 0
            while not self._load_queue:
                self._load_wake = trio.Event()
                await self._load_wake.wait()
            owned = self._load_queue.popleft()
            if self._owned.get(owned.partition) is owned:
                records += await self._load(owned)
                loaded += 1

    async def _load(self, owned: _Owned[S]) -> int:
        """Loads a partition's shard from its log; returns the records replayed."""
        started = trio.current_time()
        partition = owned.partition
        plog = self.replica_manager.get(self.topic.name, partition)
        shard = self.shard_factory(_PartitionContext(self, owned))
        records = 0
        if plog is not None:
            try:
                records = await self._replay_log(owned, plog, shard)
            except Exception:
                # As Kafka: what was read stays loaded and the partition is served.
                log.exception("coordinator_load_failed", coordinator=self.name, partition=partition)
        if self._owned.get(partition) is not owned:
            return records  # unloaded while loading
        owned.shard = shard
        owned.state = _State.ACTIVE
        try:
            shard.on_loaded()
        except Exception:
            log.exception("coordinator_on_loaded_failed", coordinator=self.name, partition=partition)
        log.debug("coordinator_partition_loaded", coordinator=self.name, topic=self.topic.name,
                  partition=partition, records=records,
                  load_ms=round((trio.current_time() - started) * 1000, 1))
        return records

    async def _replay_log(self, owned: _Owned[S], plog: Partition, shard: S) -> int:
        offset = plog.log_start_offset
        end = plog.log_end_offset
        records = 0
        while offset < end:
            data = plog.log.read(offset, LOAD_BUFFER_BYTES, end, min_one_batch=True)
            if data.region is None or len(data.region) == 0:
                break
            buf = data.region if isinstance(data.region, bytes) else data.region.read()
            for pos, header in iter_batch_headers(buf):
                if header.is_control:
                    for record in iter_records(buf, pos):
                        control_type, _ = parse_control_record(record)
                        shard.replay_end_transaction(
                            header.producer_id, control_type is ControlRecordType.COMMIT, record.offset)
                else:
                    for record in iter_records(buf, pos):
                        if record.key is None:
                            raise CorruptRecordError("coordinator record without a key", offset=record.offset)
                        shard.replay(ReplayedRecord(
                            record.offset, record.timestamp, record.key, record.value,
                            header.producer_id, header.producer_epoch, header.is_transactional))
                        records += 1
                offset = header.next_offset
            await trio.sleep(0)  # let requests for other partitions run
            if self._owned.get(owned.partition) is not owned:
                break
        return records

    # ------------------------------------------------------------ timers

    def _schedule(self, owner: _Owned[S], key: str, delay_ms: int, callback: Callable[[], None]) -> None:
        if self._owned.get(owner.partition) is not owner:
            return
        self._timer_seq += 1
        deadline = trio.current_time() + max(delay_ms, 0) / 1000
        full = (owner.partition, key)
        self._timers[full] = (deadline, self._timer_seq, callback)
        owner.timer_keys.add(key)
        heapq.heappush(self._timer_heap, (deadline, self._timer_seq, full))
        if len(self._timer_heap) > 2 * len(self._timers) + TIMER_HEAP_SLACK:
            self._timer_heap = [(d, s, k) for k, (d, s, _) in self._timers.items()]
            heapq.heapify(self._timer_heap)
        if deadline < self._next_timer_deadline:
            self._timer_wake.set()

    def _cancel(self, owner: _Owned[S], key: str) -> None:
        if self._owned.get(owner.partition) is owner:
            self._timers.pop((owner.partition, key), None)
            owner.timer_keys.discard(key)

    async def _timer_loop(self) -> None:
        while True:
            self._timer_wake = trio.Event()
            now = trio.current_time()
            while self._timer_heap and self._timer_heap[0][0] <= now:
                _, seq, full = heapq.heappop(self._timer_heap)
                entry = self._timers.get(full)
                if entry is None or entry[1] != seq:
                    continue  # rescheduled or cancelled
                del self._timers[full]
                owner = self._owned.get(full[0])
                if owner is not None:
                    owner.timer_keys.discard(full[1])
                try:
                    entry[2]()
                except Exception:
                    log.exception("coordinator_timer_failed", coordinator=self.name, partition=full[0], timer=full[1])
            self._next_timer_deadline = self._timer_heap[0][0] if self._timer_heap else math.inf
            with trio.move_on_at(self._next_timer_deadline):
                await self._timer_wake.wait()

    # ------------------------------------------------------------ appends

    def _append(
        self,
        owner: _Owned[S],
        records: Sequence[CoordinatorRecord] | PreparedBatch,
        on_complete: Callable[[AppendResult], None] | None,
        producer_id: int,
        producer_epoch: int,
        transactional: bool,
    ) -> None:
        partition = self.replica_manager.get(self.topic.name, owner.partition)
        result: AppendResult | None = None
        if (self._owned.get(owner.partition) is not owner or partition is None
                or partition.leader != self.node_id):
            result = AppendResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        elif (records.count if isinstance(records, PreparedBatch) else len(records)) == 0:
            result = AppendResult(ErrorCode.NONE)
        else:
            if isinstance(records, PreparedBatch):
                batch = records.data
            else:
                now = self.clock_ms()
                batch = bytearray(build_batch(
                    [NewRecord(r.key, r.value, timestamp=now) for r in records],
                    producer_id=producer_id, producer_epoch=producer_epoch, is_transactional=transactional,
                ))
            try:
                info = partition.append_records_to_leader(batch, origin=AppendOrigin.COORDINATOR)
            except AppendRefusedError as ex:
                result = AppendResult(ex.code)
            except RecordTooLargeError:
                result = AppendResult(ErrorCode.MESSAGE_TOO_LARGE)
            except RecordBatchTooLargeError:
                result = AppendResult(ErrorCode.RECORD_LIST_TOO_LARGE)
            except (LogError, OSError):
                log.exception("coordinator_append_failed", coordinator=self.name, partition=owner.partition)
                result = AppendResult(ErrorCode.KAFKA_STORAGE_ERROR)
            else:
                if on_complete is not None:
                    self._pending.append(_PendingAppend(
                        owner, partition, info.last_offset + 1,
                        trio.current_time() + self.append_timeout_ms / 1000, on_complete,
                        AppendResult(ErrorCode.NONE, info.first_offset, info.last_offset)))
        if on_complete is not None and result is not None:
            self._completions.append((on_complete, result))
        if on_complete is not None:
            self._append_wake.set()

    async def _completion_loop(self) -> None:
        while True:
            # A new event before the callbacks run, so appends they make wake the next wait.
            wake = self._append_wake = trio.Event()
            now = trio.current_time()
            ready = self._completions
            self._completions = []
            waiting: list[_PendingAppend] = []
            for pa in self._pending:
                # The partition's own delayed-produce check, as Produce and markers use.
                outcome = pa.log_partition.replication_outcome(pa.required_high_watermark)
                if self._owned.get(pa.owner.partition) is not pa.owner:
                    ready.append((pa.on_complete, AppendResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)))
                elif outcome is ErrorCode.NONE:
                    ready.append((pa.on_complete, pa.result))
                elif outcome is not None:
                    ready.append((pa.on_complete, AppendResult(outcome)))
                elif now >= pa.deadline:
                    ready.append((pa.on_complete, AppendResult(ErrorCode.REQUEST_TIMED_OUT)))
                else:
                    waiting.append(pa)
            self._pending = waiting
            for callback, result in ready:
                try:
                    callback(result)
                except Exception:
                    log.exception("coordinator_append_callback_failed", coordinator=self.name)
            if self._completions or wake.is_set():
                continue
            partitions = {id(pa.log_partition): pa.log_partition for pa in self._pending}
            for p in partitions.values():
                p.waiters.add(wake)
            deadline = min((pa.deadline for pa in self._pending), default=math.inf)
            try:
                with trio.move_on_at(deadline):
                    await wake.wait()
            finally:
                for p in partitions.values():
                    p.waiters.discard(wake)
