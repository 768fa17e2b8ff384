"""The log cleaner: compaction of every partition whose ``cleanup.policy`` has ``compact``.

Mirrors Kafka's LogCleaner, LogCleanerManager and Cleaner; the record-level
rules are in :mod:`broker.log.clean_records`, the steps a worker thread runs
(snapshot reads, planning, writing cleaned segments) in :mod:`broker.log.cleaner_worker`.
One Trio task (:meth:`LogCleaner.run`)
repeatedly picks the dirtiest compacted log and cleans it, or sleeps
``log.cleaner.backoff.ms`` when none qualifies.

A log splits at the cleaner's checkpoint (``cleaner-offset-checkpoint`` in
each log directory) into a clean head, already compacted, and a dirty tail.
The dirty part ends at the first uncleanable offset: the active segment, the
last stable offset, and segments younger than ``min.compaction.lag.ms`` are
never cleaned. A log qualifies when its dirty share of bytes exceeds
``min.cleanable.dirty.ratio``, or when it has dirty data older than
``max.compaction.lag.ms``. A clean maps each key of the dirty part to its
latest offset (at most ``log.cleaner.dedupe.buffer.size`` of keys; a bigger
dirty part takes several rounds), then rewrites every segment below the
mapped range, in groups that fit one segment, keeping offsets as they were.
One clean runs at a time whatever ``log.cleaner.threads`` says (0 turns the
cleaner off); ``log.cleaner.io.max.bytes.per.second`` paces its reads and
writes.

Concurrency with the partition's single writer. Appends, rolls, retention
and truncation all run on the broker's Trio thread, each synchronously. A
clean runs in three kinds of steps:

- on the Trio thread: choose the log and snapshot it — its segments, their
  sizes, a duplicate of each ``.log`` descriptor, its truncation count;
- in a worker thread (``trio.to_thread``): read only bytes below the
  snapshot's sizes, through the duplicated descriptors, and write only new
  ``.cleaned`` files the log does not know of. Bytes below a size once seen
  change only by truncation, which the worker notices and gives up on;
- on the Trio thread, for each group: check the snapshot still holds (same
  log object, no truncation since, the group still consecutive segments
  below the active one) and swap the cleaned segment in with
  :meth:`PartitionLog.replace_segments`, synchronously, so it falls between
  two appends; otherwise the clean is abandoned and its files removed.

So the cleaner never writes a file an append writes, and changes the segment
list only while no append runs. Cancelling :meth:`LogCleaner.run` stops the
worker at its next batch and waits for it, so the log manager is never
closed under a running clean.

Crash safety: cleaned data is fsynced under the ``.cleaned`` suffix before
the swap protocol of :meth:`PartitionLog.replace_segments` starts, and
recovery at the next start removes or completes whatever a crash left.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import structlog
import trio

from broker.log.checkpoint import OffsetCheckpointFile
from broker.log.clean_records import (
    CleanCounts,
    LastRecord,
    OffsetMap,
    filter_batch,
)
from broker.log.cleaner_worker import (
    DOUBLE_MAX,
    CleaningAbortedError,
    CleanPlan,
    CleanSnapshot,
    SegmentSnapshot,
    ThreadRunner,
    Throttler,
    WorkerRunner,
    floor_index,
    plan_clean,
    read_batches,
    run_inline,
    segments_between,
    write_all,
)
from broker.log.errors import CheckpointError
from broker.log.files import (
    CLEANED_SUFFIX,
    LOG_SUFFIX,
    TopicPartition,
    segment_file_name,
)
from broker.log.manager import LogManager
from broker.log.partition_log import PartitionLog
from broker.log.segment import LogSegment
from wire.exceptions import CorruptRecordError
from wire.records import DEFAULT_MAX_DECOMPRESSED_BYTES, BytesLike

log = structlog.get_logger(__name__)

T = TypeVar("T")

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
#: Names of the fault-injection steps, in order: a group's ``.cleaned`` files are
#: written and fsynced; renamed ``.swap``; each replaced segment renamed
#: ``.deleted``; the new files renamed into place.
CLEAN_STEPS = ("cleaned", "swap", "retire", "swapped")
_HEADER_SCAN_BYTES = 16 * 1024
_MIN_IO_BYTES = 4096

FaultHook = Callable[[str, PartitionLog], None]


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The broker's ``log.cleaner.*`` settings, Kafka's defaults."""

    enable: bool = True
    threads: int = 1
    backoff_ms: int = 15_000
    #: Memory for the key map; one clean runs at a time, so it gets all of it.
    dedupe_buffer_size: int = 128 * 1024 * 1024
    dedupe_buffer_load_factor: float = 0.9
    #: Read and write buffers together, as Kafka splits ``log.cleaner.io.buffer.size``.
    io_buffer_size: int = 512 * 1024
    #: ``log.cleaner.io.max.bytes.per.second``: reads plus writes.
    io_max_bytes_per_second: float = DOUBLE_MAX
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES

    def __post_init__(self) -> None:
        if self.backoff_ms < 0 or self.threads < 0 or self.io_buffer_size < 0:
            raise ValueError("log.cleaner backoff, threads and io buffer size must not be negative")
        if not self.io_max_bytes_per_second > 0:
            raise ValueError("log.cleaner.io.max.bytes.per.second must be positive")
        OffsetMap(self.dedupe_buffer_size, self.dedupe_buffer_load_factor)  # big enough for a key

    @property
    def runs(self) -> bool:
        return self.enable and self.threads > 0


@dataclass(frozen=True, slots=True)
class LogToClean:
    """A compacted log and its cleanable range (Kafka's LogToClean)."""

    topic_partition: TopicPartition
    log: PartitionLog
    first_dirty_offset: int
    #: Segment-aligned: the base offset of the first segment that is not cleaned.
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    #: ``max.compaction.lag.ms`` has passed for some dirty data.
    needs_compaction_now: bool

    @property
    def cleanable_ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0


@dataclass(frozen=True, slots=True)
class CleanerStats:
    """One cleaning of one log. ``completed`` is False if it was abandoned or failed;
    then ``end_offset`` is the unchanged first dirty offset."""

    topic_partition: TopicPartition
    first_dirty_offset: int
    end_offset: int
    dirty_ratio: float
    bytes_read: int
    bytes_written: int
    records_read: int
    records_written: int
    segments_replaced: int
    buffer_utilization: float
    duration_ms: int
    completed: bool


class _SwapFailedError(Exception):
    """A swap that failed part-way: the log in memory must not be cleaned again before a restart."""


@dataclass(frozen=True, slots=True)
class _Checkpoint:
    """The first dirty offset of a log; bound to the log object so a re-created
    partition does not inherit it."""

    log: PartitionLog
    offset: int
    truncations: int


class LogCleaner:
    """Compacts the logs of ``log_manager``.

    ``last_stable_offset_of`` gives a partition's last stable offset (None to
    leave it alone); nothing at or above it is cleaned. ``active_producers_of``
    gives the producer state's active producers and their last batches; when
    it is missing (or returns None), every producer found in the log counts as
    active. ``on_cleaned`` sees the stats of every clean (metrics).
    ``fault_hook`` is called with a step of :data:`CLEAN_STEPS` and the log;
    tests make it raise to inject failures.
    """

    def __init__(
        self,
        log_manager: LogManager,
        config: CleanerConfig,
        clock_ms: Callable[[], int],
        *,
        last_stable_offset_of: Callable[[TopicPartition], int | None],
        active_producers_of: Callable[[TopicPartition], Mapping[int, LastRecord] | None]
        | None = None,
        on_cleaned: Callable[[CleanerStats], None] | None = None,
        fault_hook: FaultHook | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``monotonic`` paces ``log.cleaner.io.max.bytes.per.second`` in the worker."""
        self._log_manager = log_manager
        self._config = config
        self._clock_ms = clock_ms
        self._last_stable_offset_of = last_stable_offset_of
        self._active_producers_of = active_producers_of
        self._on_cleaned = on_cleaned
        self._fault_hook = fault_hook
        self._monotonic = monotonic
        self._uncleanable: dict[TopicPartition, PartitionLog] = {}
        self._checkpoints = self._read_checkpoints()
        self._busy = False
        #: The dirty ratio of the dirtiest compacted log at the last look (Kafka's max-dirty-percent).
        self.max_dirty_ratio = 0.0
        self.last_run_ms = clock_ms()

    @property
    def config(self) -> CleanerConfig:
        return self._config

    # -- checkpoints -------------------------------------------------------------------

    def _read_checkpoints(self) -> dict[TopicPartition, _Checkpoint]:
        logs = self._log_manager.logs
        checkpoints: dict[TopicPartition, _Checkpoint] = {}
        for directory in self._log_manager.log_dirs:
            try:
                offsets = OffsetCheckpointFile(directory / CLEANER_CHECKPOINT).read()
            except CheckpointError as exc:
                # As Kafka: an unreadable checkpoint means the logs there get cleaned from their start.
                log.warning("cleaner_checkpoint_unreadable", log_dir=str(directory), error=str(exc))
                continue
            for tp, offset in offsets.items():
                partition_log = logs.get(tp)
                if partition_log is not None and partition_log.dir.parent == directory:
                    checkpoints[tp] = _Checkpoint(partition_log, offset, partition_log.truncation_count)
        return checkpoints

    def checkpointed_offset(self, tp: TopicPartition) -> int | None:
        """The first dirty offset recorded for ``tp``, None if it was never cleaned."""
        checkpoint = self._checkpoints.get(tp)
        if checkpoint is None or self._log_manager.logs.get(tp) is not checkpoint.log:
            return None
        return checkpoint.offset

    def maybe_truncate_checkpoint(self, tp: TopicPartition, offset: int) -> None:
        """Call right before truncating a log to ``offset`` (Kafka's maybeTruncateCheckpoint):
        the offsets above it are about to get new contents, which are dirty.

        Without this call a truncation still makes the whole log dirty again."""
        checkpoint = self._checkpoints.get(tp)
        partition_log = self._log_manager.logs.get(tp)
        if checkpoint is None or partition_log is not checkpoint.log:
            return
        # Expect the truncation about to happen, so it does not reset the checkpoint.
        self._checkpoints[tp] = _Checkpoint(
            checkpoint.log, min(checkpoint.offset, offset), partition_log.truncation_count + 1
        )
        if checkpoint.offset > offset:
            self._write_checkpoint_file(checkpoint.log.dir.parent)

    def _checkpoint_entries(self, directory: Path) -> dict[TopicPartition, int]:
        logs = self._log_manager.logs
        return {
            tp: checkpoint.offset
            for tp, checkpoint in self._checkpoints.items()
            if logs.get(tp) is checkpoint.log and checkpoint.log.dir.parent == directory
        }

    def _write_checkpoint_file(self, directory: Path) -> None:
        OffsetCheckpointFile(directory / CLEANER_CHECKPOINT).write(self._checkpoint_entries(directory))

    # -- choosing a log (Kafka's LogCleanerManager) ------------------------------------------

    def grab_filthiest_log(self, now_ms: int) -> LogToClean | None:
        """The compacted log most in need of cleaning, None if none needs it."""
        self.last_run_ms = now_ms
        candidates = []
        for tp, partition_log in self._log_manager.logs.items():
            if not partition_log.config.compact_enabled:
                continue
            if self._uncleanable.get(tp) is partition_log:
                continue
            last_stable_offset = self._last_stable_offset_of(tp)
            if last_stable_offset is None:
                continue
            candidate = self._cleanable_range(tp, partition_log, last_stable_offset, now_ms)
            if candidate.clean_bytes + candidate.cleanable_bytes > 0:
                candidates.append(candidate)
        self.max_dirty_ratio = max((c.cleanable_ratio for c in candidates), default=0.0)
        cleanable = [
            c
            for c in candidates
            if (c.needs_compaction_now and c.cleanable_bytes > 0)
            or c.cleanable_ratio > c.log.config.min_cleanable_dirty_ratio
        ]
        return max(cleanable, key=lambda c: c.cleanable_ratio, default=None)

    def _cleanable_range(
        self, tp: TopicPartition, partition_log: PartitionLog, last_stable_offset: int, now_ms: int
    ) -> LogToClean:
        config = partition_log.config
        segments = partition_log.segments
        first_dirty = self._first_dirty_offset(tp, partition_log)
        non_active_dirty = segments[floor_index(segments, first_dirty) : -1]

        uncleanable = min(last_stable_offset, segments[-1].base_offset)
        min_lag_ms = max(config.min_compaction_lag_ms, 0)
        if min_lag_ms > 0:
            for segment in non_active_dirty:
                if segment.largest_timestamp > now_ms - min_lag_ms:
                    uncleanable = min(uncleanable, segment.base_offset)
                    break
        uncleanable = max(first_dirty, uncleanable)

        # Kafka's maxCompactionDelay: dirty data whose first batch is older than the lag.
        clean_until_ms = now_ms - max(config.max_compaction_lag_ms, 0)
        needs_now = False
        if clean_until_ms > 0:
            stamps = [segment.first_batch_timestamp for segment in non_active_dirty]
            earliest = min((t for t in stamps if t is not None and t > 0), default=None)
            needs_now = earliest is not None and earliest < clean_until_ms

        # The first uncleanable offset rounds down to the segment holding it (the active one at most).
        index = floor_index(segments, uncleanable)
        first_uncleanable = segments[min(index, len(segments) - 1)].base_offset
        cleanable_bytes = sum(
            s.size for s in segments_between(segments, min(first_dirty, first_uncleanable), first_uncleanable)
        )
        clean_bytes = sum(s.size for s in segments if s.base_offset < first_dirty)
        return LogToClean(
            tp, partition_log, first_dirty, first_uncleanable, clean_bytes, cleanable_bytes, needs_now
        )

    def _first_dirty_offset(self, tp: TopicPartition, partition_log: PartitionLog) -> int:
        log_start = partition_log.log_start_offset
        checkpoint = self._checkpoints.get(tp)
        if checkpoint is None or checkpoint.log is not partition_log:
            return log_start
        offset = checkpoint.offset
        if offset < log_start or offset > partition_log.log_end_offset:
            # Records were deleted, or the log lost its tail: clean it all again (Kafka's reset).
            if offset > partition_log.log_end_offset:
                log.warning(
                    "cleaner_checkpoint_reset",
                    topic=tp.topic,
                    partition=tp.partition,
                    checkpoint=offset,
                    log_end_offset=partition_log.log_end_offset,
                )
            return log_start
        if checkpoint.truncations != partition_log.truncation_count:
            # Truncated since without maybe_truncate_checkpoint: offsets below the
            # checkpoint may hold new, dirty records.
            return log_start
        return offset

    # -- the loop ----------------------------------------------------------------------

    async def run(self) -> None:
        """Clean forever; a Trio task of the broker."""
        if not self._config.runs:
            log.info("log_cleaner_disabled")
            return
        log.info("log_cleaner_started", backoff_ms=self._config.backoff_ms)
        while True:
            try:
                stats = await self.clean_filthiest_log()
            except Exception:
                # A failure outside one log's clean (choosing a log) must not stop the broker.
                log.error("log_cleaner_error", exc_info=True)
                stats = None
            if stats is None or not stats.completed:
                await trio.sleep(self._config.backoff_ms / 1000)

    async def clean_filthiest_log(self, *, in_thread: bool = True) -> CleanerStats | None:
        """Clean the dirtiest log once; None if no log needs it.

        With ``in_thread=False`` the file work runs on the calling thread
        (tests); otherwise in a worker thread.
        """
        if self._busy:
            raise RuntimeError("the log cleaner cleans one log at a time")
        now_ms = self._clock_ms()
        chosen = self.grab_filthiest_log(now_ms)
        if chosen is None:
            return None
        stop = threading.Event()
        runner: WorkerRunner = ThreadRunner(stop) if in_thread else run_inline
        self._busy = True
        try:
            return await self._clean(chosen, now_ms, stop, runner)
        finally:
            self._busy = False

    async def _clean(
        self, chosen: LogToClean, now_ms: int, stop: threading.Event, run: WorkerRunner
    ) -> CleanerStats:
        tp = chosen.topic_partition
        partition_log = chosen.log
        started_ms = self._clock_ms()
        log.info(
            "cleaning_started",
            topic=tp.topic,
            partition=tp.partition,
            first_dirty_offset=chosen.first_dirty_offset,
            first_uncleanable_offset=chosen.first_uncleanable_offset,
            dirty_ratio=round(chosen.cleanable_ratio, 4),
        )
        snapshot: CleanSnapshot | None = None
        counts = CleanCounts()
        end_offset = chosen.first_dirty_offset
        replaced = 0
        utilization = 0.0
        completed = False
        try:
            snapshot = self._snapshot(chosen, now_ms, stop)
            plan = await run(functools.partial(self._plan, chosen, snapshot))
            counts = plan.counts
            utilization = plan.cleaning.offset_map.utilization
            for group in plan.groups:
                cleaned = await run(functools.partial(self._write_cleaned, snapshot, plan, group))
                self._swap(snapshot, cleaned, group)
                replaced += len(group)
            end_offset = plan.end_offset
            self._checkpoints[tp] = _Checkpoint(partition_log, end_offset, snapshot.truncations)
            # On this thread, like every other writer of the file: a small write and fsync.
            self._write_checkpoint_file(partition_log.dir.parent)
            completed = True
        except CleaningAbortedError as exc:
            log.info("cleaning_aborted", topic=tp.topic, partition=tp.partition, reason=str(exc))
        except (trio.Cancelled, KeyboardInterrupt):
            raise
        except Exception as exc:
            changed = snapshot is not None and not self._log_unchanged(snapshot)
            if changed and not isinstance(exc, _SwapFailedError):
                # A read raced a truncation or deletion before the clean noticed it.
                log.info("cleaning_aborted", topic=tp.topic, partition=tp.partition, reason=repr(exc))
            else:
                # As Kafka's markPartitionUncleanable: left alone until the broker restarts.
                self._uncleanable[tp] = partition_log
                log.error(
                    "cleaning_failed",
                    topic=tp.topic,
                    partition=tp.partition,
                    error=repr(exc),
                    exc_info=True,
                )
        finally:
            if snapshot is not None:
                for segment in snapshot.segments:
                    os.close(segment.fd)
        stats = CleanerStats(
            topic_partition=tp,
            first_dirty_offset=chosen.first_dirty_offset,
            end_offset=end_offset,
            dirty_ratio=chosen.cleanable_ratio,
            bytes_read=counts.bytes_read,
            bytes_written=counts.bytes_written,
            records_read=counts.records_read,
            records_written=counts.records_written,
            segments_replaced=replaced,
            buffer_utilization=utilization,
            duration_ms=max(self._clock_ms() - started_ms, 0),
            completed=completed,
        )
        if completed:
            log.info(
                "cleaning_finished",
                topic=tp.topic,
                partition=tp.partition,
                first_dirty_offset=stats.first_dirty_offset,
                end_offset=end_offset,
                bytes_read=stats.bytes_read,
                bytes_written=stats.bytes_written,
                records_read=stats.records_read,
                records_written=stats.records_written,
                segments_replaced=replaced,
                keyless_records_removed=counts.keyless_records,
                buffer_utilization=round(utilization, 4),
                duration_ms=stats.duration_ms,
            )
        if self._on_cleaned is not None:
            try:
                self._on_cleaned(stats)
            except Exception:
                log.error("cleaner_stats_hook_failed", exc_info=True)
        return stats

    # -- Trio-thread steps -------------------------------------------------------------

    def _snapshot(self, chosen: LogToClean, now_ms: int, stop: threading.Event) -> CleanSnapshot:
        partition_log = chosen.log
        tp = chosen.topic_partition
        producers = self._active_producers_of(tp) if self._active_producers_of is not None else None
        segments = partition_log.segments
        first_dirty_segment = segments[floor_index(segments, chosen.first_dirty_offset)]
        snapshots: list[SegmentSnapshot] = []
        try:
            for segment in segments:
                dirty_position = 0
                if segment is first_dirty_segment:
                    dirty_position = segment.offset_index.lookup(chosen.first_dirty_offset).position
                fd = segment.dup_log_fd()
                snapshots.append(
                    SegmentSnapshot(segment, segment.base_offset, segment.size, fd, dirty_position)
                )
        except BaseException:
            for taken in snapshots:
                os.close(taken.fd)
            raise
        return CleanSnapshot(
            partition_log,
            snapshots,
            partition_log.truncation_count,
            dict(producers) if producers is not None else None,
            now_ms,
            stop,
            Throttler(self._config.io_max_bytes_per_second, stop, self._monotonic),
        )

    def _swap(self, snapshot: CleanSnapshot, cleaned: LogSegment, group: list[SegmentSnapshot]) -> None:
        partition_log = snapshot.log
        try:
            self._step("cleaned", partition_log)
            if not self._still_current(snapshot, group):
                raise CleaningAbortedError("the segments changed while they were cleaned")
        except BaseException:
            cleaned.delete()  # not swapped in: the .cleaned files are ours to remove
            raise
        try:
            partition_log.replace_segments(
                cleaned,
                [s.segment for s in group],
                on_step=functools.partial(self._step, log_=partition_log),
            )
        except Exception as exc:
            # The new files may be live now; recovery at the next start sorts them out.
            raise _SwapFailedError(f"swapping in {cleaned.log_path.name} failed") from exc

    def _step(self, step: str, log_: PartitionLog) -> None:
        if self._fault_hook is not None:
            self._fault_hook(step, log_)

    def _log_unchanged(self, snapshot: CleanSnapshot) -> bool:
        """Still the manager's log for its partition, and not truncated since the snapshot."""
        partition_log = snapshot.log
        return (
            self._log_manager.logs.get(partition_log.topic_partition) is partition_log
            and partition_log.truncation_count == snapshot.truncations
        )

    def _still_current(self, snapshot: CleanSnapshot, group: list[SegmentSnapshot]) -> bool:
        partition_log = snapshot.log
        if not self._log_unchanged(snapshot):
            return False
        below_active = partition_log.segments[:-1]
        first = group[0].segment
        start = next((i for i, s in enumerate(below_active) if s is first), None)
        if start is None or start + len(group) > len(below_active):
            return False
        return all(below_active[start + i] is s.segment for i, s in enumerate(group))

    # -- worker-thread steps -----------------------------------------------------------

    def _plan(self, chosen: LogToClean, snapshot: CleanSnapshot) -> CleanPlan:
        return plan_clean(chosen, snapshot, self._config, self._io_chunk_bytes)

    @property
    def _io_chunk_bytes(self) -> int:
        return max(self._config.io_buffer_size // 2, _MIN_IO_BYTES)

    def _write_cleaned(
        self, snapshot: CleanSnapshot, plan: CleanPlan, group: list[SegmentSnapshot]
    ) -> LogSegment:
        """Write what ``group`` keeps into a ``.cleaned`` segment, indexed and fsynced (Kafka's cleanSegments)."""
        partition_log = snapshot.log
        config = partition_log.config
        directory = partition_log.dir
        base_offset = group[0].base_offset
        path = directory / (segment_file_name(base_offset, LOG_SUFFIX) + CLEANED_SUFFIX)
        for stale in directory.glob(f"{segment_file_name(base_offset, '')}.*{CLEANED_SUFFIX}"):
            stale.unlink()  # left by a clean that failed
        chunk = self._io_chunk_bytes
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            pending: list[BytesLike] = []
            pending_bytes = 0
            for segment in group:
                for buf, pos, header in read_batches(segment, 0, chunk, snapshot):
                    kept = filter_batch(plan.cleaning, plan.transactions, buf, pos, header, plan.counts)
                    if kept is None:
                        continue
                    pending.append(kept)
                    pending_bytes += len(kept)
                    if pending_bytes >= chunk:
                        write_all(fd, pending)
                        snapshot.throttler.maybe_throttle(pending_bytes)
                        pending, pending_bytes = [], 0
            write_all(fd, pending)
            os.fsync(fd)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)
        cleaned = LogSegment.open(
            directory,
            base_offset,
            index_interval_bytes=config.index_interval_bytes,
            max_index_bytes=config.segment_index_bytes,
            clock_ms=self._clock_ms,
            suffix=CLEANED_SUFFIX,
            files=partition_log.file_cache,
        )
        try:
            # Re-reads and checks every batch written and builds both indexes, as a
            # segment's recovery does; a cut would mean the cleaner wrote something bad.
            if cleaned.recover():
                raise CorruptRecordError(f"{path.name}: the cleaned segment failed validation")
            modified_ns = os.fstat(group[-1].fd).st_mtime_ns
            # Retention falls back on the file time for batches without timestamps.
            os.utime(path, ns=(modified_ns, modified_ns))
            cleaned.flush()
        except BaseException:
            cleaned.delete()
            raise
        return cleaned
