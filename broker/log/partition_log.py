"""The log of one partition: the owner of its offsets.

Mirrors Kafka's UnifiedLog and LocalLog (local storage only) and LogLoader.
A partition directory ``<topic>-<partition>`` holds segments in offset
order; the last one is active and takes appends. This class assigns offsets
on the leader (rewriting each batch's base offset and leader epoch in its
header, in place, never decompressing), keeps the log start offset, the log
end offset and the recovery point, rolls segments, applies retention,
truncates for replication and recovers after a crash.

Offsets:
- ``log_start_offset``: the first offset a client may fetch;
- ``log_end_offset``: the offset the next record gets;
- ``recovery_point``: everything below it has been fsynced. After an unclean
  shutdown, segments from the one holding the recovery point onwards are
  re-validated and cut at the first bad batch.

The high watermark is the replica manager's: methods that need it
(retention, DeleteRecords) take it as an argument.

Concurrency: one writer at a time. The caller serialises every method that
changes the log (appends, truncation, retention, flushes, close); from Trio,
call from one task at a time, or hold a per-partition lock around calls
sent to a worker thread. ``read`` and the lookups may run beside that
writer: they use the segment tuple and log end captured when they start.

Deleted segments (retention, truncation) are renamed ``.deleted`` and
unlinked once ``file.delete.delay.ms`` has passed and the next
:meth:`apply_retention` runs. A :class:`FileRegion` handed to a fetch pins its
file in the broker's :class:`~broker.log.file_cache.FileCache`, so it stays
readable while it is being sent, even past an eviction or a deletion.
"""

from __future__ import annotations

import bisect
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import structlog

from broker.log.config import LogConfig
from broker.log.errors import (
    CorruptIndexError,
    OffsetOutOfRangeError,
    OffsetsOutOfOrderError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
)
from broker.log.file_cache import DEFAULT_FILE_CACHE, FileCache
from broker.log.files import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIXES,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TopicPartition,
    fsync_dir,
    offset_from_file_name,
    parse_partition_dir_name,
)
from broker.log.leader_epoch import LEADER_EPOCH_CHECKPOINT, LeaderEpochCache
from broker.log.segment import LogSegment, TimestampAndOffset
from wire.exceptions import CorruptRecordError
from wire.records import (
    NO_TIMESTAMP,
    RecordBatchHeader,
    TimestampType,
    read_batch_header,
    set_base_offset,
    set_max_timestamp_and_type,
    set_partition_leader_epoch,
    validate_batch,
)
from wire.regions import FileRegion

log = structlog.get_logger(__name__)

Buffer = bytes | bytearray | memoryview


@dataclass(frozen=True, slots=True)
class AppendInfo:
    """What an append wrote; offsets are -1 when nothing was appended.

    ``offset_of_max_timestamp`` is the last offset of the batch with the
    largest timestamp (Kafka's "shallow" offset). ``log_append_time_ms`` is
    -1 unless the topic uses LogAppendTime.
    """

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time_ms: int
    log_start_offset: int
    record_count: int
    batch_count: int
    valid_bytes: int


@dataclass(frozen=True, slots=True)
class FetchData:
    """A fetch answer: whole batches in ``region`` (None for nothing), starting at ``first_offset``.

    ``region`` is a region of the segment file, or its bytes when the descriptor
    budget is taken up by other regions being sent.

    ``first_offset`` is the base offset of the first batch returned, which may
    be below the fetch offset when that falls inside a batch; for an empty
    answer it is the fetch offset.
    """

    region: FileRegion | bytes | None
    first_offset: int


class _LogEnd(NamedTuple):
    """The log end offset with the active segment and its size at that moment."""

    offset: int
    segment: LogSegment
    position: int


@dataclass(frozen=True, slots=True)
class _Batch:
    position: int  # in the caller's buffer
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int


class PartitionLog:
    """The segments and offsets of one partition. Open with :meth:`open`."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        clock_ms: Callable[[], int],
        segments: Sequence[LogSegment],
        *,
        log_start_offset: int,
        recovery_point: int,
        epoch_cache: LeaderEpochCache,
        files: FileCache = DEFAULT_FILE_CACHE,
    ) -> None:
        self._dir = directory
        self._files = files
        self._tp = parse_partition_dir_name(directory.name)
        self._config = config
        self._clock_ms = clock_ms
        self._segments = tuple(segments)
        active = self._segments[-1]
        self._end = _LogEnd(active.next_offset, active, active.size)
        self._log_start_offset = log_start_offset
        self._recovery_point = recovery_point
        self._epoch_cache = epoch_cache
        self._last_flush_ms = clock_ms()
        # Kafka fsyncs a rolled segment soon after the roll, off the append path.
        self._roll_flush_offset: int | None = None
        self._dir_needs_fsync = False
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        # Counts truncations, so work prepared from older contents (the cleaner's) sees it is stale.
        self._truncations = 0
        self._closed = False

    # -- loading ---------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        clock_ms: Callable[[], int],
        recovery_point: int = 0,
        *,
        log_start_offset: int = 0,
        had_clean_shutdown: bool = False,
        files: FileCache = DEFAULT_FILE_CACHE,
    ) -> PartitionLog:
        """Load (or create) the partition in ``directory``.

        ``recovery_point`` and ``log_start_offset`` come from the log
        directory's checkpoints. Stray files from interrupted deletes and
        cleanings are removed or completed as Kafka does; segments with
        missing or corrupt indexes are rebuilt; without a clean shutdown,
        everything from the recovery point on is re-validated and cut at the
        first bad batch.
        """
        parse_partition_dir_name(directory.name)  # refuse a directory that is not a partition's
        try:
            directory.mkdir(parents=True)
            fresh = True
        except FileExistsError:
            fresh = False
        if fresh:
            segments: list[LogSegment] = []
            needs_rebuild: set[LogSegment] = set()
        else:
            names = _remove_temp_files_and_complete_swaps(directory)
            segments, needs_rebuild = _open_segments(directory, names, config, clock_ms, files)
        try:
            return cls._load(
                directory,
                config,
                clock_ms,
                segments,
                needs_rebuild,
                recovery_point=recovery_point,
                log_start_offset=log_start_offset,
                had_clean_shutdown=had_clean_shutdown,
                files=files,
                fresh=fresh,
            )
        except BaseException:
            for segment in segments:
                segment.close_handles()
            raise

    @classmethod
    def _load(
        cls,
        directory: Path,
        config: LogConfig,
        clock_ms: Callable[[], int],
        segments: list[LogSegment],
        needs_rebuild: set[LogSegment],
        *,
        recovery_point: int,
        log_start_offset: int,
        had_clean_shutdown: bool,
        files: FileCache,
        fresh: bool,
    ) -> PartitionLog:
        tp = parse_partition_dir_name(directory.name)
        epoch_cache = LeaderEpochCache(directory / LEADER_EPOCH_CHECKPOINT)
        if not had_clean_shutdown and segments:
            segments = _recover_from(segments, recovery_point, epoch_cache, tp, needs_rebuild)
        for segment in segments:
            if segment in needs_rebuild:
                log.warning(
                    "index_rebuilt",
                    topic=tp.topic,
                    partition=tp.partition,
                    base_offset=segment.base_offset,
                )
                segment.recover(on_batch=_epoch_restorer(epoch_cache))

        if segments and segments[-1].next_offset < log_start_offset:
            # The segments are older than the checkpointed log start: files were removed by hand.
            log.warning(
                "log_behind_log_start_offset",
                topic=tp.topic,
                partition=tp.partition,
                log_end_offset=segments[-1].next_offset,
                log_start_offset=log_start_offset,
            )
            for segment in segments:
                segment.delete()
            segments = []
            epoch_cache.clear()
        if not segments:
            segments = [
                LogSegment.create(
                    directory,
                    log_start_offset,
                    index_interval_bytes=config.index_interval_bytes,
                    max_index_bytes=config.segment_index_bytes,
                    clock_ms=clock_ms,
                    files=files,
                    fresh_directory=fresh,
                )
            ]
            if not fresh:
                fsync_dir(directory)

        log_end_offset = segments[-1].next_offset
        start = min(max(log_start_offset, segments[0].base_offset), log_end_offset)
        recovery_point = (
            log_end_offset if had_clean_shutdown else min(recovery_point, log_end_offset)
        )
        epoch_cache.truncate_from_end(log_end_offset, sync=False)
        epoch_cache.truncate_from_start(start, sync=False)
        segments[-1].load_indexes()  # now, rather than in the middle of the first append
        partition_log = cls(
            directory,
            config,
            clock_ms,
            segments,
            log_start_offset=start,
            recovery_point=recovery_point,
            epoch_cache=epoch_cache,
            files=files,
        )
        # A new partition's directory is made durable by its first flush, as Kafka's LocalLog does.
        partition_log._dir_needs_fsync = fresh
        log.debug(
            "log_loaded",
            topic=tp.topic,
            partition=tp.partition,
            segments=len(segments),
            log_start_offset=start,
            log_end_offset=log_end_offset,
            recovery_point=recovery_point,
            clean_shutdown=had_clean_shutdown,
        )
        return partition_log

    # -- state -------------------------------------------------------------------

    @property
    def dir(self) -> Path:
        return self._dir

    @property
    def file_cache(self) -> FileCache:
        """The cache that holds this log's open files."""
        return self._files

    @property
    def topic_partition(self) -> TopicPartition:
        return self._tp

    @property
    def config(self) -> LogConfig:
        return self._config

    def update_config(self, config: LogConfig) -> None:
        """Apply changed topic configs; index sizes apply from the next segment on."""
        self._config = config

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record will get."""
        return self._end.offset

    @property
    def recovery_point(self) -> int:
        """Every offset below this one is on disk (fsynced)."""
        return self._recovery_point

    @property
    def unflushed_messages(self) -> int:
        return self._end.offset - self._recovery_point

    @property
    def size(self) -> int:
        """Bytes in all live segments."""
        return sum(segment.size for segment in self._segments)

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return self._segments

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def truncation_count(self) -> int:
        """How many truncations this log object has seen; segments change in place only then."""
        return self._truncations

    @property
    def leader_epoch_cache(self) -> LeaderEpochCache:
        return self._epoch_cache

    @property
    def latest_epoch(self) -> int | None:
        return self._epoch_cache.latest_epoch

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """``(epoch, end_offset)`` for OffsetForLeaderEpoch; ``(-1, -1)`` if unknown."""
        return self._epoch_cache.end_offset_for(leader_epoch, self._end.offset)

    # -- appending -------------------------------------------------------------------

    def append_as_leader(
        self, batches: Buffer, leader_epoch: int, *, validated: bool = False
    ) -> AppendInfo:
        """Assign offsets to ``batches`` and append them.

        Each batch's base offset and partition leader epoch are rewritten in
        its header, which the CRC does not cover. Pass a ``bytearray`` (or a
        writable memoryview) to have that done in the caller's buffer;
        immutable bytes are copied once.

        By default the log checks what storage depends on (whole v2 batches,
        CRC, ``max.message.bytes``, ``segment.bytes``) and, for LogAppendTime
        topics, stamps each batch's max timestamp and timestamp type (which
        recomputes the CRC). ``validated=True`` says the produce path has
        already run ``validate_batch`` on every batch and applied
        LogAppendTime, so neither CRC pass is repeated; the size limits are
        still checked. Record-level validation (counts, sequences, timestamp
        bounds, control batches) is always the produce path's job.
        """
        self._check_open()
        buffer: bytearray | memoryview
        if isinstance(batches, bytearray) or (
            isinstance(batches, memoryview) and not batches.readonly
        ):
            buffer = batches
        else:
            buffer = bytearray(batches)
        headers = self._validate(buffer, check_crc=not validated, check_max_message_bytes=True)
        if not headers:
            return self._nothing_appended()
        now = self._clock_ms()
        stamp = self._config.log_append_time and not validated
        log_append_time_ms = -1
        offset = self._end.offset
        placed = []
        for position, header in headers:
            set_base_offset(buffer, position, offset)
            set_partition_leader_epoch(buffer, position, leader_epoch)
            max_timestamp = header.max_timestamp
            if stamp:
                set_max_timestamp_and_type(buffer, position, now, TimestampType.LOG_APPEND_TIME)
                max_timestamp = log_append_time_ms = now
            elif header.timestamp_type is TimestampType.LOG_APPEND_TIME:
                log_append_time_ms = max_timestamp
            last_offset = offset + header.last_offset_delta
            placed.append(
                _Batch(position, header.size_in_bytes, offset, last_offset, max_timestamp)
            )
            offset = last_offset + 1
        if leader_epoch >= 0:
            # Before the write, as Kafka: a failed write leaves an entry at the log end, never a gap.
            self._epoch_cache.assign(leader_epoch, placed[0].base_offset)
        return self._append(buffer, placed, headers, now, log_append_time_ms=log_append_time_ms)

    def append_as_follower(self, batches: Buffer) -> AppendInfo:
        """Append batches replicated from the leader, keeping their offsets and epochs.

        The first batch must start at or after the log end offset
        (:class:`UnexpectedAppendOffsetError`) and offsets must increase from
        batch to batch (:class:`OffsetsOutOfOrderError`).
        """
        self._check_open()
        headers = self._validate(batches, check_crc=True, check_max_message_bytes=False)
        if not headers:
            return self._nothing_appended()
        first = headers[0][1].base_offset
        if first < self._end.offset:
            raise UnexpectedAppendOffsetError(first, self._end.offset)
        placed = []
        previous_last = first - 1
        for position, header in headers:
            if header.base_offset <= previous_last:
                raise OffsetsOutOfOrderError(
                    f"batch at offset {header.base_offset} follows offset {previous_last}"
                )
            placed.append(
                _Batch(
                    position,
                    header.size_in_bytes,
                    header.base_offset,
                    header.last_offset,
                    header.max_timestamp,
                )
            )
            previous_last = header.last_offset
        for _, header in headers:
            if header.partition_leader_epoch >= 0:
                self._epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
        return self._append(batches, placed, headers, self._clock_ms(), log_append_time_ms=-1)

    def _validate(
        self, buffer: Buffer, *, check_crc: bool, check_max_message_bytes: bool
    ) -> list[tuple[int, RecordBatchHeader]]:
        # Kafka's analyzeAndValidateRecords: every batch whole, v2, CRC-valid, and of a size that fits.
        headers = []
        position = 0
        end = len(buffer)
        while position < end:
            if check_crc:
                header = validate_batch(buffer, position)
            else:
                header = read_batch_header(buffer, position)
                if header.size_in_bytes > end - position:
                    raise CorruptRecordError("batch runs past the end of the data", offset=position)
            size = header.size_in_bytes
            if check_max_message_bytes and size > self._config.max_message_bytes:
                raise RecordTooLargeError(
                    f"batch of {size} bytes exceeds max.message.bytes {self._config.max_message_bytes}"
                )
            if size > self._config.segment_bytes:
                raise RecordBatchTooLargeError(
                    f"batch of {size} bytes exceeds segment.bytes {self._config.segment_bytes}"
                )
            headers.append((position, header))
            position += size
        return headers

    def _nothing_appended(self) -> AppendInfo:
        return AppendInfo(-1, -1, NO_TIMESTAMP, -1, -1, self._log_start_offset, 0, 0, 0)

    def _append(
        self,
        buffer: Buffer,
        placed: list[_Batch],
        headers: list[tuple[int, RecordBatchHeader]],
        now_ms: int,
        *,
        log_append_time_ms: int,
    ) -> AppendInfo:
        view = memoryview(buffer)
        group: list[_Batch] = []
        group_bytes = 0
        for batch in placed:
            reason = self._roll_reason(batch, group, group_bytes, now_ms)
            if reason is not None:
                if group:
                    self._append_to_active(view, group)
                    group, group_bytes = [], 0
                self._roll(max(batch.base_offset, self._end.offset), reason)
            group.append(batch)
            group_bytes += batch.size
        self._append_to_active(view, group)

        max_timestamp, offset_of_max = _largest_timestamp(placed, -1)
        info = AppendInfo(
            first_offset=placed[0].base_offset,
            last_offset=placed[-1].last_offset,
            max_timestamp=max_timestamp,
            offset_of_max_timestamp=offset_of_max,
            log_append_time_ms=log_append_time_ms,
            log_start_offset=self._log_start_offset,
            record_count=sum(header.records_count for _, header in headers),
            batch_count=len(placed),
            valid_bytes=sum(batch.size for batch in placed),
        )
        if self.unflushed_messages >= self._config.flush_messages:
            self.flush()
        return info

    def _roll_reason(
        self, batch: _Batch, group: list[_Batch], group_bytes: int, now_ms: int
    ) -> str | None:
        """Why ``batch`` cannot join the active segment (Kafka's shouldRoll), or None."""
        segment = self._segments[-1]
        size = segment.size + group_bytes
        if size == 0:
            # An empty segment takes any batch, except one whose offsets it cannot index.
            return (
                None
                if segment.can_convert_to_relative_offset(batch.last_offset)
                else "offset_overflow"
            )
        if size > self._config.segment_bytes - batch.size:
            return "segment_bytes"
        first_timestamp = segment.first_batch_timestamp if segment.size else group[0].max_timestamp
        if first_timestamp is not None and first_timestamp >= 0:
            waited = batch.max_timestamp - first_timestamp
        else:
            waited = now_ms - segment.created_ms
        if waited > self._config.max_segment_ms:
            return "segment_ms"
        if segment.index_is_full:
            return "index_full"
        if not segment.can_convert_to_relative_offset(batch.last_offset):
            return "offset_overflow"
        return None

    def _append_to_active(self, view: memoryview, group: list[_Batch]) -> None:
        segment = self._segments[-1]
        max_timestamp, offset_of_max = _largest_timestamp(group, segment.base_offset)
        start = group[0].position
        end = group[-1].position + group[-1].size
        segment.append(group[-1].last_offset, max_timestamp, offset_of_max, view[start:end])
        self._end = _LogEnd(group[-1].last_offset + 1, segment, segment.size)

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset (for tests and admin tools)."""
        self._check_open()
        self._roll(self._end.offset, "requested")
        return self._segments[-1]

    def _roll(self, base_offset: int, reason: str) -> None:
        previous = self._segments[-1]
        kept = self._segments
        if previous.size == 0 and previous.base_offset == base_offset:
            # Rolling onto an empty active segment with the same name: replace it.
            kept = kept[:-1]
            previous.delete()
        else:
            previous.on_become_inactive()
            self._roll_flush_offset = base_offset
        segment = LogSegment.create(
            self._dir,
            base_offset,
            index_interval_bytes=self._config.index_interval_bytes,
            max_index_bytes=self._config.segment_index_bytes,
            clock_ms=self._clock_ms,
            files=self._files,
        )
        segment.load_indexes()
        self._segments = (*kept, segment)
        self._end = _LogEnd(self._end.offset, segment, 0)
        self._dir_needs_fsync = True
        log.info(
            "segment_rolled",
            topic=self._tp.topic,
            partition=self._tp.partition,
            base_offset=base_offset,
            previous_base_offset=previous.base_offset,
            previous_size=previous.size,
            reason=reason,
        )

    # -- flushing -------------------------------------------------------------------

    def flush(self, up_to_offset: int | None = None) -> None:
        """fsync the segments holding offsets below ``up_to_offset`` (default: all), then
        move the recovery point there."""
        end = self._end.offset
        offset = end if up_to_offset is None else min(up_to_offset, end)
        self._epoch_cache.flush()
        if offset <= self._recovery_point:
            if self._dir_needs_fsync:
                fsync_dir(self._dir)
                self._dir_needs_fsync = False
            return
        segments = self._segments
        for segment in segments[_floor_index(segments, self._recovery_point) :]:
            if segment.base_offset >= offset:
                break
            segment.flush()
        if self._dir_needs_fsync:
            fsync_dir(self._dir)
            self._dir_needs_fsync = False
        self._recovery_point = offset
        self._last_flush_ms = self._clock_ms()
        if self._roll_flush_offset is not None and self._roll_flush_offset <= offset:
            self._roll_flush_offset = None

    def maybe_flush(self, now_ms: int) -> None:
        """Periodic flushing: a segment rolled since the last call, or ``flush.ms`` elapsed."""
        if self._roll_flush_offset is not None:
            self.flush(self._roll_flush_offset)
        if self.unflushed_messages > 0 and now_ms - self._last_flush_ms >= self._config.flush_ms:
            self.flush()

    # -- reading ---------------------------------------------------------------------

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> FetchData:
        """Whole batches from the one holding ``fetch_offset``, at most ``max_bytes`` of them.

        ``max_offset`` is an exclusive upper bound (the high watermark for
        consumers, None for followers, which read to the log end): a batch is
        returned only if it lies wholly below it, so reading at the high
        watermark returns nothing. With ``min_one_batch`` the first batch is
        returned even if larger than ``max_bytes``. The region never spans
        two segments. Raises :class:`OffsetOutOfRangeError` outside
        ``[log_start_offset, log_end_offset]``.
        """
        end = self._end
        segments = self._segments
        start_offset = self._log_start_offset
        if fetch_offset < start_offset or fetch_offset > end.offset:
            raise OffsetOutOfRangeError(fetch_offset, start_offset, end.offset)
        limit = end.offset if max_offset is None else min(max_offset, end.offset)
        empty = FetchData(None, fetch_offset)
        if fetch_offset >= limit:
            return empty
        index = _floor_index(segments, fetch_offset)
        while index < len(segments):
            segment = segments[index]
            if segment.base_offset >= limit:
                return empty
            if segment is end.segment:
                # Bytes past end.position were appended after this read began.
                max_position = end.position if limit >= end.offset else segment.position_of(limit)
            else:
                upper = segments[index + 1].base_offset if index + 1 < len(segments) else end.offset
                max_position = segment.size if limit >= upper else segment.position_of(limit)
            found = segment.read(fetch_offset, max_bytes, max_position, min_one_batch)
            if found is not None:
                return (
                    empty if found.region is None else FetchData(found.region, found.first_offset)
                )
            index += 1
        return empty

    def offset_for_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """The first record at or after the log start with a timestamp at or above ``timestamp``.

        For ListOffsets with a real timestamp; the special targets (latest,
        earliest, max timestamp) are the caller's, using the log's offsets and
        :meth:`max_timestamp_offset`.
        """
        if timestamp < 0:
            raise ValueError(f"not a timestamp: {timestamp}")
        start_offset = self._log_start_offset
        for segment in self._segments:
            if segment.largest_timestamp >= timestamp:
                return segment.find_offset_by_timestamp(timestamp, start_offset)
        return None

    def max_timestamp_offset(self) -> TimestampAndOffset | None:
        """The record with the largest timestamp (ListOffsets MAX_TIMESTAMP, KIP-734); None for an empty log."""
        segment = max(self._segments, key=lambda s: s.max_timestamp_so_far.timestamp)
        if segment.size == 0:
            return None
        return segment.max_timestamp_record()

    # -- retention and deletion -----------------------------------------------------------

    def apply_retention(self, now_ms: int, high_watermark: int) -> int:
        """Delete old segments; returns how many went.

        Only segments wholly below ``high_watermark`` are candidates. In
        Kafka's order: segments below the log start offset, then (with
        ``cleanup.policy=delete``) by ``retention.bytes`` and by
        ``retention.ms`` against each segment's largest timestamp. If every
        segment qualifies, the log first rolls so an empty active segment
        remains. Also unlinks deleted segments whose delay has passed.
        """
        self._check_open()
        self._delete_expired_files(now_ms)
        deleted = self._delete_old_segments(
            lambda segment, following: (
                following is not None and following.base_offset <= self._log_start_offset
            ),
            high_watermark,
            "log_start_offset",
        )
        if not self._config.delete_enabled:
            return deleted
        retention_bytes = self._config.retention_bytes
        if retention_bytes >= 0:
            excess = self.size - retention_bytes

            def over_size(segment: LogSegment, following: LogSegment | None) -> bool:
                nonlocal excess
                if excess - segment.size < 0:
                    return False
                excess -= segment.size
                return True

            if excess >= 0:
                deleted += self._delete_old_segments(over_size, high_watermark, "retention_bytes")
        retention_ms = self._config.retention_ms
        if retention_ms >= 0:
            deleted += self._delete_old_segments(
                lambda segment, following: now_ms - segment.largest_timestamp > retention_ms,
                high_watermark,
                "retention_ms",
            )
        return deleted

    def delete_records_before(self, offset: int, high_watermark: int) -> int:
        """DeleteRecords: move the log start offset up to ``offset``; returns the new log start offset.

        Segments wholly below it are deleted. ``offset`` may not pass the high
        watermark (:class:`OffsetOutOfRangeError`).
        """
        self._check_open()
        if offset < 0:
            raise ValueError(f"negative offset {offset}")
        if offset > high_watermark:
            raise OffsetOutOfRangeError(offset, self._log_start_offset, high_watermark)
        self._increment_log_start_offset(offset, "delete_records")
        self._delete_old_segments(
            lambda segment, following: (
                following is not None and following.base_offset <= self._log_start_offset
            ),
            high_watermark,
            "log_start_offset",
        )
        return self._log_start_offset

    def _delete_old_segments(
        self,
        predicate: Callable[[LogSegment, LogSegment | None], bool],
        high_watermark: int,
        reason: str,
    ) -> int:
        segments = self._segments
        deletable: list[LogSegment] = []
        for index, segment in enumerate(segments):
            following = segments[index + 1] if index + 1 < len(segments) else None
            upper = following.base_offset if following is not None else self._end.offset
            if following is None and segment.size == 0:
                break
            if high_watermark < upper or not predicate(segment, following):
                break
            deletable.append(segment)
        if not deletable:
            return 0
        if len(deletable) == len(segments):
            # A log always keeps one segment: roll so the new, empty one stays.
            self._roll(self._end.offset, reason)
        self._segments = self._segments[len(deletable) :]
        self._retire(deletable)
        log.info(
            "segments_deleted",
            topic=self._tp.topic,
            partition=self._tp.partition,
            reason=reason,
            base_offsets=[segment.base_offset for segment in deletable],
        )
        self._increment_log_start_offset(self._segments[0].base_offset, reason)
        return len(deletable)

    def _increment_log_start_offset(self, offset: int, reason: str) -> None:
        if offset <= self._log_start_offset:
            return
        self._log_start_offset = offset
        self._epoch_cache.truncate_from_start(offset)
        log.info(
            "log_start_offset_incremented",
            topic=self._tp.topic,
            partition=self._tp.partition,
            log_start_offset=offset,
            reason=reason,
        )

    def _retire(self, segments: Sequence[LogSegment]) -> None:
        """Take segments out of the log: renamed ``.deleted`` now, unlinked after the delay."""
        due = self._clock_ms() + self._config.file_delete_delay_ms
        for segment in segments:
            segment.rename_to_deleted()
            self._pending_deletes.append((due, segment))
        self._dir_needs_fsync = True

    def _delete_expired_files(self, now_ms: int) -> None:
        keep = []
        for due, segment in self._pending_deletes:
            if due <= now_ms:
                segment.delete()
            else:
                keep.append((due, segment))
        self._pending_deletes = keep

    # -- compaction ---------------------------------------------------------------------------

    def replace_segments(
        self,
        new_segment: LogSegment,
        old_segments: Sequence[LogSegment],
        on_step: Callable[[str], None] | None = None,
    ) -> None:
        """Swap a cleaned segment in for ``old_segments`` (Kafka's LocalLog.replaceSegments).

        ``old_segments`` are consecutive segments of this log below the active
        one; ``new_segment`` starts at the first one's base offset, holds what
        the cleaner kept of them, and its files carry the ``.cleaned`` suffix,
        fsynced. The steps keep every crash recoverable by
        :func:`_remove_temp_files_and_complete_swaps`:

        1. the new files are renamed ``.cleaned`` → ``.swap`` (the ``.log``
           first: a ``.swap`` next to a ``.cleaned`` is discarded), then the
           directory is fsynced, so the renames below can never be durable
           while this one is not; from here a restart completes the swap;
        2. the new segment replaces the old ones in memory;
        3. each old segment is renamed ``.deleted`` and unlinked after
           ``file.delete.delay.ms``, so reads already under way finish;
        4. the new files lose ``.swap`` and the directory is fsynced.

        ``on_step`` (fault injection for tests) is called after step 1
        (``"swap"``), after each old segment in step 3 (``"retire"``) and after
        step 4 (``"swapped"``). If this raises part-way, the files on disk are
        still complete at the next start, but the log in memory must not be
        cleaned again before then.
        """
        self._check_open()
        segments = self._segments
        if not old_segments or new_segment.base_offset != old_segments[0].base_offset:
            raise ValueError("a cleaned segment must start where the segments it replaces start")
        start = next((i for i, s in enumerate(segments) if s is old_segments[0]), None)
        end = None if start is None else start + len(old_segments)
        if (
            start is None
            or end is None
            or end >= len(segments)
            or any(a is not b for a, b in zip(segments[start:end], old_segments, strict=True))
        ):
            raise ValueError("only consecutive segments below the active one can be replaced")
        new_segment.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
        fsync_dir(self._dir)
        if on_step is not None:
            on_step("swap")
        self._segments = (*segments[:start], new_segment, *segments[end:])
        due = self._clock_ms() + self._config.file_delete_delay_ms
        for segment in old_segments:
            segment.rename_to_deleted()
            self._pending_deletes.append((due, segment))
            if on_step is not None:
                on_step("retire")
        new_segment.change_file_suffixes(SWAP_SUFFIX, "")
        fsync_dir(self._dir)
        if on_step is not None:
            on_step("swapped")
        log.info(
            "segments_replaced",
            topic=self._tp.topic,
            partition=self._tp.partition,
            base_offset=new_segment.base_offset,
            replaced=[segment.base_offset for segment in old_segments],
            size=new_segment.size,
        )

    # -- truncation (replication) ---------------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Remove every batch holding an offset at or above ``offset``; True if the log changed.

        A batch straddling ``offset`` goes entirely, so the log end offset can
        end up below ``offset`` (never above). The leader epoch cache is cut
        at the new log end. The caller must then rewrite the recovery point
        checkpoint (the manager's ``truncate_to`` does), or a crash could
        skip recovery of offsets rewritten after the truncation.
        """
        self._check_open()
        if offset < 0:
            raise ValueError(f"negative offset {offset}")
        if offset >= self._end.offset:
            # A leader that assigned an epoch but appended nothing leaves an entry at the log end.
            self._epoch_cache.truncate_from_end(self._end.offset)
            return False
        segments = self._segments
        if segments[0].base_offset > offset:
            self.truncate_fully_and_start_at(offset)
            return True
        keep = tuple(segment for segment in segments if segment.base_offset <= offset)
        removed = segments[len(keep) :]
        self._truncations += 1
        self._segments = keep
        self._retire(removed)
        active = keep[-1]
        active.truncate_to(offset)
        self._end = _LogEnd(active.next_offset, active, active.size)
        self._epoch_cache.truncate_from_end(self._end.offset)
        self._log_start_offset = min(self._log_start_offset, self._end.offset)
        self._recovery_point = min(self._recovery_point, self._end.offset)
        if self._roll_flush_offset is not None and self._roll_flush_offset > self._end.offset:
            self._roll_flush_offset = None
        log.info(
            "log_truncated",
            topic=self._tp.topic,
            partition=self._tp.partition,
            target_offset=offset,
            log_end_offset=self._end.offset,
            segments_removed=len(removed),
        )
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log and restart it at ``offset`` (a follower far behind the leader's log start)."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"negative offset {offset}")
        self._truncations += 1
        self._retire(self._segments)
        segment = LogSegment.create(
            self._dir,
            offset,
            index_interval_bytes=self._config.index_interval_bytes,
            max_index_bytes=self._config.segment_index_bytes,
            clock_ms=self._clock_ms,
            files=self._files,
        )
        segment.load_indexes()
        self._segments = (segment,)
        self._end = _LogEnd(offset, segment, 0)
        self._log_start_offset = offset
        self._recovery_point = offset
        self._roll_flush_offset = None
        self._epoch_cache.clear()
        fsync_dir(self._dir)
        self._dir_needs_fsync = False
        log.info(
            "log_truncated_fully",
            topic=self._tp.topic,
            partition=self._tp.partition,
            log_start_offset=offset,
        )

    # -- lifecycle ---------------------------------------------------------------------

    def close(self, *, sync: bool = True) -> None:
        """Flush everything, close the segments and unlink segments awaiting deletion.

        Without ``sync`` nothing is fsynced: the caller makes every log durable with one
        ``sync`` afterwards (a broker's shutdown), and the recovery point moves to the end.
        """
        if self._closed:
            return
        if sync:
            self.flush()
        else:
            self._epoch_cache.flush(sync=False)
            self._recovery_point = self._end.offset
            self._dir_needs_fsync = False
        for segment in self._segments:
            segment.close()
        for _, segment in self._pending_deletes:
            segment.delete()
        self._pending_deletes = []
        self._closed = True

    def close_handles(self) -> None:
        """Close every file without flushing or writing (a failed disk, or a crash in tests)."""
        for segment in self._segments:
            segment.close_handles()
        for _, segment in self._pending_deletes:
            segment.close_handles()
        self._closed = True

    def delete(self) -> None:
        """Close everything and remove the partition's directory."""
        self.close_handles()
        shutil.rmtree(self._dir, ignore_errors=True)

    def move_to(self, directory: Path) -> None:
        """Note that the partition's directory was renamed (to its ``-delete`` name)."""
        self._dir = directory

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"log {self._tp} is closed")

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self._tp}, log_start_offset={self._log_start_offset},"
            f" log_end_offset={self._end.offset}, segments={len(self._segments)})"
        )


def _largest_timestamp(batches: Sequence[_Batch], no_timestamp_offset: int) -> tuple[int, int]:
    """The largest max timestamp and the last offset of the first batch holding it."""
    best = (NO_TIMESTAMP, no_timestamp_offset)
    for batch in batches:
        if batch.max_timestamp > best[0]:
            best = (batch.max_timestamp, batch.last_offset)
    return best


# -- loading helpers -------------------------------------------------------------------


def _floor_index(segments: Sequence[LogSegment], offset: int) -> int:
    """The index of the segment that would hold ``offset`` (the first one if it is below them all)."""
    return max(bisect.bisect_right(segments, offset, key=_base_offset) - 1, 0)


def _base_offset(segment: LogSegment) -> int:
    return segment.base_offset


def _file_names(directory: Path) -> list[str]:
    """The regular files of ``directory``, sorted (the entry types come with the listing: no stat each)."""
    with os.scandir(directory) as entries:
        return sorted(entry.name for entry in entries if entry.is_file())


def _remove_temp_files_and_complete_swaps(directory: Path) -> list[str]:
    """Kafka's handling of files left by an interrupted delete, clean or segment swap.

    ``.deleted`` and ``.cleaned`` files are removed. A ``.swap`` segment is a
    finished replacement: the segments it covers are removed and it is
    renamed into place, unless it belongs to an unfinished split (at or
    above the first ``.cleaned`` offset), in which case it is removed too.
    Index files without a ``.log`` are removed (the segment's are rebuilt).
    Returns the names of the files left.
    """
    min_cleaned_offset = None
    swap_files = []
    names = _file_names(directory)
    for name in names:
        path = directory / name
        if name.endswith(DELETED_SUFFIX):
            _remove(path, "deleted")
        elif name.endswith(CLEANED_SUFFIX):
            offset = _offset_or_none(name)
            if offset is not None:
                min_cleaned_offset = (
                    offset if min_cleaned_offset is None else min(min_cleaned_offset, offset)
                )
            _remove(path, "cleaned")
        elif name.endswith(SWAP_SUFFIX):
            swap_files.append(path)
    valid_swaps = []
    for path in swap_files:
        offset = _offset_or_none(path.name)
        if min_cleaned_offset is not None and offset is not None and offset >= min_cleaned_offset:
            _remove(path, "incomplete_split")
        else:
            valid_swaps.append(path)
    swap_logs = [p for p in valid_swaps if p.name.endswith(LOG_SUFFIX + SWAP_SUFFIX)]
    if swap_logs:
        lowest = min(offset_from_file_name(p.name) for p in swap_logs)
        highest = max(
            LogSegment.scan_next_offset(p, offset_from_file_name(p.name)) for p in swap_logs
        )
        for path in directory.iterdir():
            offset = _offset_or_none(path.name)
            if (
                path.is_file()
                and path.name.endswith(_SEGMENT_SUFFIXES)  # not, e.g., producer state snapshots
                and offset is not None
                and lowest <= offset < highest
            ):
                _remove(path, "replaced_by_swap")
    for path in valid_swaps:
        path.rename(path.with_name(path.name[: -len(SWAP_SUFFIX)]))
    if swap_files or any(n.endswith((DELETED_SUFFIX, CLEANED_SUFFIX)) for n in names):
        names = _file_names(directory)  # something was removed or renamed
    logs = {name[: -len(LOG_SUFFIX)] for name in names if name.endswith(LOG_SUFFIX)}
    left = []
    for name in names:
        orphan = any(name.endswith(suffix) and name[: -len(suffix)] not in logs for suffix in INDEX_SUFFIXES)
        if orphan:
            _remove(directory / name, "orphaned_index")
        else:
            left.append(name)
    return left


_SEGMENT_SUFFIXES = (LOG_SUFFIX, *INDEX_SUFFIXES)


def _offset_or_none(name: str) -> int | None:
    try:
        return offset_from_file_name(name)
    except ValueError:
        return None


def _remove(path: Path, reason: str) -> None:
    log.info("stray_file_removed", file=str(path), reason=reason)
    path.unlink(missing_ok=True)


def _open_segments(
    directory: Path, names: Sequence[str], config: LogConfig, clock_ms: Callable[[], int], files: FileCache
) -> tuple[list[LogSegment], set[LogSegment]]:
    """Every ``.log`` among ``names`` in offset order, and those whose indexes need a rebuild."""
    bases = sorted(
        offset
        for name in names
        if name.endswith(LOG_SUFFIX) and (offset := _offset_or_none(name)) is not None
    )
    segments: list[LogSegment] = []
    needs_rebuild: set[LogSegment] = set()
    try:
        for base_offset in bases:
            segment = LogSegment.open(
                directory,
                base_offset,
                index_interval_bytes=config.index_interval_bytes,
                max_index_bytes=config.segment_index_bytes,
                clock_ms=clock_ms,
                files=files,
            )
            segments.append(segment)
            try:
                segment.sanity_check()
            except CorruptIndexError as exc:
                log.warning("index_corrupt", segment=str(segment.log_path), error=str(exc))
                needs_rebuild.add(segment)
    except BaseException:
        for segment in segments:
            segment.close_handles()
        raise
    return segments, needs_rebuild


def _epoch_restorer(cache: LeaderEpochCache) -> Callable[[RecordBatchHeader], None]:
    """Recovery's hook: an epoch newer than the cache knows starts at this batch (as Kafka)."""

    def restore(header: RecordBatchHeader) -> None:
        epoch = header.partition_leader_epoch
        latest = cache.latest_epoch
        if epoch >= 0 and (latest is None or epoch > latest):
            cache.assign(epoch, header.base_offset)

    return restore


def _recover_from(
    segments: list[LogSegment],
    recovery_point: int,
    epoch_cache: LeaderEpochCache,
    tp: TopicPartition,
    needs_rebuild: set[LogSegment],
) -> list[LogSegment]:
    """Re-validate the segments from the one holding the recovery point; drop all after a cut."""
    restore = _epoch_restorer(epoch_cache)
    for index in range(_floor_index(segments, recovery_point), len(segments)):
        segment = segments[index]
        # At or past the recovery point: the log's next flush makes the rebuilt indexes durable.
        truncated = segment.recover(on_batch=restore, sync_indexes=False)
        needs_rebuild.discard(segment)
        log.debug(
            "segment_recovered",
            topic=tp.topic,
            partition=tp.partition,
            base_offset=segment.base_offset,
            bytes_truncated=truncated,
        )
        if truncated:
            for later in segments[index + 1 :]:
                later.delete()
            if index + 1 < len(segments):
                log.warning(
                    "segments_deleted",
                    topic=tp.topic,
                    partition=tp.partition,
                    reason="after_corruption",
                    base_offsets=[s.base_offset for s in segments[index + 1 :]],
                )
            return segments[: index + 1]
    return segments
