"""All partition logs of this broker, across its log directories.

Mirrors Kafka's LogManager. At start it locks each log directory, loads
every ``<topic>-<partition>`` directory in it, and recovers past each
partition's recovery point unless the directory holds the
``.kafka_cleanshutdown`` marker that a clean :meth:`LogManager.close`
writes (the marker is removed once loading is done, so a later crash is
noticed). It keeps the per-directory checkpoints: recovery points and log
start offsets, which it owns, and high watermarks, which the replica
manager owns and hands in.

Housekeeping is driven by the caller's periodic tasks, never by threads
of our own: :meth:`LogManager.flush_dirty_logs`,
:meth:`LogManager.apply_retention` and :meth:`LogManager.checkpoint_all`.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import structlog
import trio

from broker.eventloop.limits import describe_error
from broker.log.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
)
from broker.log.config import LogConfig
from broker.log.errors import LogDirLockedError, LogError
from broker.log.file_cache import DEFAULT_FILE_CACHE, FileCache
from broker.log.files import (
    DELETE_DIR_SUFFIX,
    FUTURE_DIR_SUFFIX,
    STRAY_DIR_SUFFIX,
    TopicPartition,
    delete_dir_name,
    fsync_dir,
    parse_partition_dir_name,
    partition_dir_name,
    write_atomically,
)
from broker.log.partition_log import PartitionLog
from broker.log.shutdown_summary import (
    PartitionListing,
    SegmentSummary,
    list_partition_dir,
    remove_summary,
    take_summary,
    write_summary,
)

log = structlog.get_logger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
#: The KRaft metadata log's topic: its directory is not a partition this manager serves.
METADATA_TOPIC = "__cluster_metadata"
_CLEAN_SHUTDOWN_VERSION = 0
#: Partitions a recovery thread loads per task: few enough to share the work out evenly,
#: enough that handing out tasks costs nothing next to the loading.
LOAD_CHUNK_PARTITIONS = 256
#: Longest run of retention work on the event loop between two yields (as a request's).
RETENTION_SLICE_S = 0.005


class LogManager:
    """Every partition log on this broker. Not thread-safe: call from one task at a time."""

    def __init__(
        self,
        log_dirs: Sequence[Path | str],
        config: LogConfig,
        clock_ms: Callable[[], int],
        *,
        topic_config: Callable[[str], LogConfig] | None = None,
        files: FileCache | None = None,
        recovery_threads: int = 1,
    ) -> None:
        """Lock and load ``log_dirs``.

        ``config`` is the broker's default LogConfig; ``topic_config`` gives a
        topic's effective config (its overrides on top of the default) when
        the caller knows them at start. ``files`` holds the logs' open files
        (a cache of its own by default). ``recovery_threads`` is
        ``num.recovery.threads.per.data.dir``: the threads that load and recover each
        directory's partitions at start.
        """
        if not log_dirs:
            raise ValueError("at least one log directory is required")
        self._dirs = [Path(d).absolute() for d in log_dirs]
        if len(set(self._dirs)) != len(self._dirs):
            raise ValueError("log directories repeat")
        self._config = config
        self._clock_ms = clock_ms
        self._topic_config = topic_config
        self._recovery_threads = recovery_threads
        self._files = files if files is not None else FileCache(DEFAULT_FILE_CACHE.capacity)
        self._logs: dict[TopicPartition, PartitionLog] = {}
        # Partitions found at start whose loading hit a limit: opened again when asked for.
        self._unloaded: dict[TopicPartition, _Unloaded] = {}
        self._pending_deletes: list[tuple[int, PartitionLog]] = []
        self._dirs_to_sync: set[Path] = set()
        #: Logs truncated without fsyncs: the next :meth:`checkpoint_all` makes them durable.
        self._truncated: list[PartitionLog] = []
        #: Set by the broker: asks its checkpoint task to fsync and rewrite the checkpoints in a
        #: worker thread now. Without it (tools, tests) :meth:`delete_partitions` and the
        #: truncations do it themselves.
        self.request_checkpoint: Callable[[], None] | None = None
        self._lock_fds: list[int] = []
        self._clean_shutdown: dict[Path, bool] = {}
        self._closed = False
        try:
            for directory in self._dirs:
                directory.mkdir(parents=True, exist_ok=True)
                self._lock_fds.append(_lock(directory))
            for directory in self._dirs:
                self._load_dir(directory)
        except BaseException:
            for log_ in self._logs.values():
                log_.close_handles()
            self._release_locks()
            raise

    def _load_dir(self, directory: Path) -> None:
        started = time.monotonic()
        marker = directory / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        self._clean_shutdown[directory] = clean
        failures = 0
        recovery_points = OffsetCheckpointFile(directory / RECOVERY_POINT_CHECKPOINT).read()
        log_start_offsets = OffsetCheckpointFile(directory / LOG_START_OFFSET_CHECKPOINT).read()
        listings = take_summary(directory, clean)
        with os.scandir(directory) as entries:  # the entry types come with the listing: no stat each
            children = sorted(Path(entry.path) for entry in entries if entry.is_dir())
        found: list[tuple[TopicPartition, _Unloaded, PartitionListing | None]] = []
        seen: set[TopicPartition] = set()
        for child in children:
            try:
                tp = parse_partition_dir_name(child.name)
            except ValueError:
                log.warning("log_dir_entry_ignored", path=str(child))
                continue
            if child.name.endswith(DELETE_DIR_SUFFIX):
                # Deleted before the restart; its delay no longer protects any reader.
                log.info("partition_dir_removed", path=str(child))
                shutil.rmtree(child, ignore_errors=True)
                continue
            if tp.topic == METADATA_TOPIC:
                continue  # the metadata log's own directory: the quorum owns it
            if child.name.endswith((FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX)):
                log.warning("log_dir_entry_ignored", path=str(child))
                continue
            if tp in seen:
                raise LogError(f"partition {tp} found twice in {directory}")
            elsewhere = self._logs.get(tp) or self._unloaded.get(tp)
            if elsewhere is not None:
                raise LogError(f"partition {tp} found in both {elsewhere.dir.parent} and {directory}")
            unloaded = _Unloaded(child, recovery_points.get(tp, 0), log_start_offsets.get(tp, 0), clean)
            found.append((tp, unloaded, listings.get(child.name)))
            seen.add(tp)
        for (tp, unloaded, _), opened in zip(found, self._open_many(found), strict=True):
            if isinstance(opened, PartitionLog):
                self._logs[tp] = opened
                continue
            # A limit (descriptors, memory, a full disk) must not keep the broker from starting.
            self._unloaded[tp] = unloaded
            failures += 1
            if failures == 1:
                log.error("partition_log_not_loaded", topic=tp.topic, partition=tp.partition,
                          error=describe_error(opened), retry="when the partition is next used")
        remove_summary(directory)  # before the marker: it must not outlive it
        if clean:
            marker.unlink()
        fsync_dir(directory)
        loaded = sum(1 for partition_log in self._logs.values() if partition_log.dir.parent == directory)
        # One summary line; each partition's own lines are at debug level.
        log.info("log_dir_loaded", path=str(directory), clean_shutdown=clean, partitions=loaded,
                 recovered_from_recovery_point=0 if clean else loaded, not_loaded=failures,
                 from_summary=sum(1 for _, _, listing in found if listing is not None),
                 seconds=round(time.monotonic() - started, 3))

    def _open_many(
        self, found: Sequence[tuple[TopicPartition, _Unloaded, PartitionListing | None]]
    ) -> list[PartitionLog | OSError]:
        """Load ``found`` in order: each log, or the error (a limit) that kept it from loading.

        With ``num.recovery.threads.per.data.dir`` above 1, chunks of partitions load in that
        many worker threads, as Kafka's recovery threads do: what a load waits for (listing a
        directory, opening and reading files, the CRC of large batches) lets the others run.
        Any other failure closes what was loaded and is raised.
        """

        def load_chunk(
            chunk: Sequence[tuple[TopicPartition, _Unloaded, PartitionListing | None]],
        ) -> list[PartitionLog | OSError]:
            loaded: list[PartitionLog | OSError] = []
            try:
                for tp, unloaded, listing in chunk:
                    try:
                        loaded.append(self._open(tp, unloaded, listing))
                    except OSError as exc:
                        loaded.append(exc)
            except BaseException:
                _close_loaded(loaded)
                raise
            return loaded

        if self._recovery_threads <= 1 or len(found) <= LOAD_CHUNK_PARTITIONS:
            return load_chunk(found)
        chunks = [found[i : i + LOAD_CHUNK_PARTITIONS] for i in range(0, len(found), LOAD_CHUNK_PARTITIONS)]
        results: list[PartitionLog | OSError] = []
        failure: BaseException | None = None
        with ThreadPoolExecutor(self._recovery_threads, thread_name_prefix="log-recovery") as pool:
            for future in [pool.submit(load_chunk, chunk) for chunk in chunks]:
                try:
                    results.extend(future.result())
                except BaseException as exc:
                    failure = failure or exc
        if failure is not None:
            _close_loaded(results)
            raise failure
        return results

    def _open(self, tp: TopicPartition, unloaded: _Unloaded, listing: PartitionListing | None = None) -> PartitionLog:
        return PartitionLog.open(
            unloaded.dir,
            self._config_for(tp.topic),
            self._clock_ms,
            unloaded.recovery_point,
            log_start_offset=unloaded.log_start_offset,
            had_clean_shutdown=unloaded.clean_shutdown,
            files=self._files,
            existing=True,
            listing=listing,
        )

    def _config_for(self, topic: str) -> LogConfig:
        return self._topic_config(topic) if self._topic_config is not None else self._config

    # -- lookups -----------------------------------------------------------------

    @property
    def log_dirs(self) -> tuple[Path, ...]:
        return tuple(self._dirs)

    @property
    def file_cache(self) -> FileCache:
        """The open files of every log here, held to the cache's capacity."""
        return self._files

    @property
    def logs(self) -> Mapping[TopicPartition, PartitionLog]:
        return MappingProxyType(self._logs)

    @property
    def had_clean_shutdown(self) -> bool:
        """Whether every log directory had the clean shutdown marker at start."""
        return all(self._clean_shutdown.values())

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get(TopicPartition(topic, partition))

    # -- partitions ----------------------------------------------------------------

    def get_or_create(
        self, topic: str, partition: int, config: LogConfig | None = None
    ) -> PartitionLog:
        """The partition's log, created in the log directory with the fewest partitions if new.

        ``config`` applies to a log created here; an existing log keeps its own
        (use :meth:`PartitionLog.update_config` to change it).
        """
        self._check_open()
        tp = TopicPartition(topic, partition)
        existing = self._logs.get(tp)
        if existing is not None:
            return existing
        unloaded = self._unloaded.get(tp)
        if unloaded is not None:
            partition_log = self._open(tp, unloaded)
            if config is not None:
                partition_log.update_config(config)
            del self._unloaded[tp]
            self._logs[tp] = partition_log
            log.info("partition_log_loaded_after_retry", topic=topic, partition=partition)
            return partition_log
        if not _valid_partition(tp):
            raise ValueError(f"invalid partition {tp}")
        directory = self._next_log_dir()
        partition_log = PartitionLog.open(
            directory / partition_dir_name(tp),
            config if config is not None else self._config_for(topic),
            self._clock_ms,
            files=self._files,
        )
        # One fsync of the log directory per checkpoint pass, not one per partition created.
        self._dirs_to_sync.add(directory)
        self._logs[tp] = partition_log
        log.debug("partition_log_created", topic=topic, partition=partition, log_dir=str(directory))
        return partition_log

    # -- creating many at once ------------------------------------------------------------

    def plan_new_logs(self, specs: Sequence[tuple[str, int, LogConfig]]) -> list[NewLog]:
        """Where the logs of new partitions go (the partitions this manager has no log of).

        With :meth:`open_new_logs` (in a worker thread) and :meth:`adopt_new_logs` (back
        here) thousands of partitions are created without a directory or file created on
        the caller's event loop; :meth:`get_or_create` then finds them.
        """
        self._check_open()
        counts = dict.fromkeys(self._dirs, 0)
        if len(self._dirs) > 1:
            for partition_log in self._logs.values():
                counts[partition_log.dir.parent] += 1
            for unloaded in self._unloaded.values():
                counts[unloaded.dir.parent] += 1
        planned: list[NewLog] = []
        for topic, partition, config in specs:
            tp = TopicPartition(topic, partition)
            if tp in self._logs or tp in self._unloaded or not _valid_partition(tp):
                continue
            if len(counts) > 1:
                directory = min(self._dirs, key=lambda d: counts[d])
                counts[directory] += 1
            else:
                directory = self._dirs[0]
            planned.append(NewLog(tp, directory, config))
        return planned

    def open_new_logs(self, planned: Sequence[NewLog]) -> list[PartitionLog]:
        """Create the planned logs; safe in a worker thread (it changes nothing here).

        A log that cannot be created (a limit) is left out: :meth:`get_or_create` tries it
        again and reports why.
        """
        created: list[PartitionLog] = []
        for new in planned:
            try:
                created.append(PartitionLog.open(new.dir, new.config, self._clock_ms, files=self._files))
            except OSError as exc:
                log.debug("partition_log_not_created", path=str(new.dir), error=describe_error(exc))
        return created

    def adopt_new_logs(self, created: Sequence[PartitionLog]) -> None:
        """Take the logs :meth:`open_new_logs` made."""
        if self._closed:
            for partition_log in created:
                partition_log.close_handles()
            return
        for partition_log in created:
            tp = partition_log.topic_partition
            if tp in self._logs:  # made meanwhile by get_or_create (cannot happen: same directory)
                partition_log.close_handles()
                continue
            self._logs[tp] = partition_log
        if created:
            # Every log directory, rather than each new log's parent: a path's parent and hash
            # per log were a third of adopting thousands of logs on the event loop.
            self._dirs_to_sync.update(self._dirs)
        log.debug("partition_logs_created", partitions=len(created))

    def _next_log_dir(self) -> Path:
        if len(self._dirs) == 1:
            return self._dirs[0]
        counts = dict.fromkeys(self._dirs, 0)
        for partition_log in self._logs.values():
            counts[partition_log.dir.parent] += 1
        for unloaded in self._unloaded.values():
            counts[unloaded.dir.parent] += 1
        # min() keeps the first of equals, so ties go to the earlier directory.
        return min(self._dirs, key=lambda d: counts[d])

    def delete_partition(self, topic: str, partition: int) -> bool:
        """Remove a partition's log; False if there was none.

        The directory is renamed ``<topic>-<partition>.<id>-delete`` at once and
        removed after ``file.delete.delay.ms``, by :meth:`apply_retention`.
        """
        return bool(self.delete_partitions([TopicPartition(topic, partition)]))

    def delete_partitions(self, partitions: Sequence[TopicPartition]) -> int:
        """:meth:`delete_partition` of several; one fsync and one checkpoint per log directory
        (a topic of thousands of partitions deleted must not rewrite them thousands of times).
        With :attr:`request_checkpoint` set, the fsyncs and checkpoints are the broker's
        checkpoint task's, off the event loop: each is a disk wait (one took 640 ms on a
        busy disk, holding every connection). Returns how many logs there were."""
        self._check_open()
        parents: set[Path] = set()
        deleted = 0
        for tp in partitions:
            partition_log = self._logs.pop(tp, None)
            if partition_log is None:
                continue
            parent = partition_log.dir.parent
            target = parent / delete_dir_name(tp)
            os.rename(partition_log.dir, target)
            parents.add(parent)
            partition_log.move_to(target)
            due = self._clock_ms() + partition_log.config.file_delete_delay_ms
            self._pending_deletes.append((due, partition_log))
            deleted += 1
            log.debug("partition_log_deleted", topic=tp.topic, partition=tp.partition, renamed_to=target.name)
        if self.request_checkpoint is not None:
            if parents:
                self._dirs_to_sync.update(parents)
                self.request_checkpoint()
            return deleted
        for parent in parents:
            fsync_dir(parent)
            self._checkpoint_dir(parent)
        return deleted

    def truncate_to(self, topic: str, partition: int, offset: int) -> bool:
        """Truncate a partition for replication and rewrite its directory's recovery points.

        The checkpoint must be rewritten before the log takes another append: left higher
        than the new log end, a crash could skip recovery of the offsets written after the
        truncation. Without :attr:`request_checkpoint` that happens here; with it, the fsyncs
        and the checkpoint are the checkpoint task's next round (a leader change truncates
        many partitions, each a disk wait on the event loop), which the follower awaits
        before it appends again (see :meth:`checkpoint_all`).
        """
        partition_log = self._require(topic, partition)
        truncated = partition_log.truncate_to(offset, sync=self.request_checkpoint is None)
        if truncated:
            self._after_truncation(partition_log)
        return truncated

    def truncate_fully_and_start_at(self, topic: str, partition: int, offset: int) -> None:
        partition_log = self._require(topic, partition)
        partition_log.truncate_fully_and_start_at(offset, sync=self.request_checkpoint is None)
        self._after_truncation(partition_log)

    def _after_truncation(self, partition_log: PartitionLog) -> None:
        if self.request_checkpoint is None:
            self._checkpoint_recovery_points(partition_log.dir.parent)
            return
        self._truncated.append(partition_log)
        self.request_checkpoint()

    def _require(self, topic: str, partition: int) -> PartitionLog:
        self._check_open()
        partition_log = self._logs.get(TopicPartition(topic, partition))
        if partition_log is None:
            raise KeyError(f"no log for {topic}-{partition}")
        return partition_log

    # -- housekeeping --------------------------------------------------------------------

    def flush_dirty_logs(self, now_ms: int) -> None:
        """fsync rolled segments and logs whose ``flush.ms`` has passed."""
        for partition_log in self._logs.values():
            partition_log.maybe_flush(now_ms)

    def apply_retention(
        self, now_ms: int, high_watermark_of: Callable[[TopicPartition], int | None]
    ) -> int:
        """Apply retention to every log; returns the segments deleted.

        ``high_watermark_of`` gives each partition's high watermark (None to
        skip a partition whose high watermark is not known). Also finishes
        partition deletions whose delay has passed.
        """
        self._check_open()
        deleted = 0
        for tp, partition_log in list(self._logs.items()):
            high_watermark = high_watermark_of(tp)
            if high_watermark is not None:
                deleted += partition_log.apply_retention(now_ms, high_watermark)
        for partition_log in self._take_due_deletes(now_ms):
            partition_log.delete()
        return deleted

    async def apply_retention_paced(
        self,
        now_ms: int,
        high_watermark_of: Callable[[TopicPartition], int | None],
        *,
        slice_s: float = RETENTION_SLICE_S,
        clock: Callable[[], float] = time.perf_counter,
    ) -> int:
        """:meth:`apply_retention` from the event loop, which it gives back at least every
        ``slice_s`` of work: with a hundred thousand partitions one pass is seconds of
        looking at segments (and their time indexes, first read from disk). Each partition
        is done in one go, as the appends to it that run in between would see it; one deleted
        or replaced meanwhile is skipped. Deleted partitions' directories are removed in a
        worker thread."""
        self._check_open()
        deleted = 0
        slice_end = clock() + slice_s
        for tp, partition_log in list(self._logs.items()):
            if clock() >= slice_end:
                await trio.lowlevel.checkpoint()
                slice_end = clock() + slice_s
                if self._closed:
                    return deleted
            if self._logs.get(tp) is not partition_log:
                continue  # deleted (or deleted and made again) while the loop ran others
            high_watermark = high_watermark_of(tp)
            if high_watermark is not None:
                deleted += partition_log.apply_retention(now_ms, high_watermark)
        due = self._take_due_deletes(now_ms)
        if due:
            for partition_log in due:
                partition_log.close_handles()
            await trio.to_thread.run_sync(_remove_dirs, [partition_log.dir for partition_log in due])
        return deleted

    def _take_due_deletes(self, now_ms: int) -> list[PartitionLog]:
        """The deleted partitions whose ``file.delete.delay.ms`` has passed, no longer pending."""
        due = [partition_log for at, partition_log in self._pending_deletes if at <= now_ms]
        if due:
            self._pending_deletes = [(at, pl) for at, pl in self._pending_deletes if at > now_ms]
        return due

    # -- checkpoints -----------------------------------------------------------------------

    def checkpoint_all(self) -> None:
        """Write the recovery point and log start offset checkpoints of every log directory,
        after making the truncations and deletions since the last round durable."""
        truncated, self._truncated = self._truncated, []
        for done, partition_log in enumerate(truncated):
            try:
                partition_log.sync_truncation()
            except FileNotFoundError:  # deleted meanwhile: its rename is its parent's fsync
                log.debug("truncation_sync_skipped", partition=partition_log.dir.name)
            except OSError:  # the disk refused: the next round tries these again
                self._truncated[:0] = truncated[done:]
                raise
        while self._dirs_to_sync:
            fsync_dir(self._dirs_to_sync.pop())
        for directory in self._dirs:
            self._checkpoint_dir(directory)

    def _checkpoint_dir(self, directory: Path) -> None:
        self._checkpoint_recovery_points(directory)
        # As Kafka: only logs whose start moved past their first segment need the entry.
        offsets = {
            tp: partition_log.log_start_offset
            for tp, partition_log in self._logs_in(directory).items()
            if partition_log.log_start_offset > partition_log.segments[0].base_offset
        }
        # Logs not loaded keep what the last checkpoint said of them.
        for tp, unloaded in self._unloaded.items():
            if unloaded.dir.parent == directory and unloaded.log_start_offset:
                offsets[tp] = unloaded.log_start_offset
        OffsetCheckpointFile(directory / LOG_START_OFFSET_CHECKPOINT).write(offsets)

    def _checkpoint_recovery_points(self, directory: Path) -> None:
        points = {tp: partition_log.recovery_point for tp, partition_log in self._logs_in(directory).items()}
        for tp, unloaded in self._unloaded.items():
            if unloaded.dir.parent == directory:
                points[tp] = unloaded.recovery_point
        OffsetCheckpointFile(directory / RECOVERY_POINT_CHECKPOINT).write(points)

    def write_high_watermarks(self, high_watermarks: Mapping[TopicPartition, int]) -> None:
        """Write ``replication-offset-checkpoint`` in each log directory.

        The values are the replica manager's; each directory gets the
        partitions whose logs it holds.
        """
        for directory in self._dirs:
            here = self._logs_in(directory)
            OffsetCheckpointFile(directory / REPLICATION_OFFSET_CHECKPOINT).write(
                {tp: offset for tp, offset in high_watermarks.items() if tp in here}
            )

    def read_high_watermarks(self) -> dict[tuple[str, int], int]:
        """The high watermarks checkpointed in every log directory, keyed by ``(topic, partition)``
        as the replica manager keeps them."""
        merged: dict[tuple[str, int], int] = {}
        for directory in self._dirs:
            merged.update(OffsetCheckpointFile(directory / REPLICATION_OFFSET_CHECKPOINT).read_entries())
        return merged

    def _logs_in(self, directory: Path) -> dict[TopicPartition, PartitionLog]:
        if len(self._dirs) == 1:
            return dict(self._logs)  # no Path comparison per partition on every checkpoint
        return {tp: pl for tp, pl in self._logs.items() if pl.dir.parent == directory}

    # -- shutdown ------------------------------------------------------------------------------

    def close(self, broker_epoch: int = -1) -> None:
        """Flush and close every log, write the checkpoints, then the clean shutdown markers.

        ``broker_epoch`` is recorded in the marker as Kafka does (KIP-966).
        """
        if self._closed:
            return
        # One sync makes every log durable, rather than an fsync per file of every partition;
        # the checkpoints, the summaries and the clean shutdown marker are written after it.
        segments: dict[TopicPartition, list[SegmentSummary]] = {}
        for tp, partition_log in self._logs.items():
            segments[tp] = [SegmentSummary(s.base_offset, s.size, s.next_offset) for s in partition_log.segments]
            partition_log.close(sync=False)
        for _, partition_log in self._pending_deletes:
            partition_log.delete()
        self._pending_deletes = []
        os.sync()
        self.checkpoint_all()
        for directory in self._dirs:
            self._write_summary(directory, segments)
        marker = json.dumps(
            {"version": _CLEAN_SHUTDOWN_VERSION, "brokerEpoch": broker_epoch}
        ).encode()
        for directory in self._dirs:
            write_atomically(directory / CLEAN_SHUTDOWN_FILE, marker)
        self._release_locks()
        self._closed = True
        log.info("log_manager_closed", log_dirs=len(self._dirs), partitions=len(self._logs))

    def _write_summary(self, directory: Path, segments: Mapping[TopicPartition, Sequence[SegmentSummary]]) -> None:
        """The clean shutdown's summary of ``directory`` (see :mod:`broker.log.shutdown_summary`);
        a partition that cannot be listed is left out (listed again at start)."""
        listings: dict[str, PartitionListing] = {}
        for tp, partition_log in self._logs_in(directory).items():
            try:
                listing = list_partition_dir(partition_log.dir, segments[tp])
            except OSError as exc:
                log.debug("partition_not_summarised", path=str(partition_log.dir), error=describe_error(exc))
                continue
            if listing is not None:
                listings[partition_log.dir.name] = listing
        try:
            write_summary(directory, listings)
        except OSError as exc:  # the next start lists every partition: slower, nothing lost
            log.warning("clean_shutdown_summary_not_written", path=str(directory), error=describe_error(exc))

    def _release_locks(self) -> None:
        for fd in self._lock_fds:
            os.close(fd)  # closing the descriptor releases its flock
        self._lock_fds = []

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("log manager is closed")


def _remove_dirs(dirs: Sequence[Path]) -> None:
    for directory in dirs:
        shutil.rmtree(directory, ignore_errors=True)


def _close_loaded(loaded: Sequence[PartitionLog | OSError]) -> None:
    for partition_log in loaded:
        if isinstance(partition_log, PartitionLog):
            partition_log.close_handles()


def _valid_partition(tp: TopicPartition) -> bool:
    topic = tp.topic
    return tp.partition >= 0 and bool(topic) and topic not in (".", "..") and "/" not in topic and "\0" not in topic


@dataclass(frozen=True, slots=True)
class NewLog:
    """A log :meth:`LogManager.plan_new_logs` placed: its log directory and config."""

    tp: TopicPartition
    log_dir: Path
    config: LogConfig

    @property
    def dir(self) -> Path:
        """The partition's own directory (joined where the log is made, off the event loop)."""
        return self.log_dir / partition_dir_name(self.tp)


@dataclass(frozen=True, slots=True)
class _Unloaded:
    """A partition directory found at start, with its checkpointed offsets."""

    dir: Path
    recovery_point: int
    log_start_offset: int
    clean_shutdown: bool


def _lock(directory: Path) -> int:
    """Hold an exclusive ``flock`` on ``<dir>/.lock`` while the manager lives."""
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise LogDirLockedError(f"log directory {directory} is in use by another broker") from None
    return fd
