"""The log of one partition: the owner of its offsets.

Mirrors Kafka's UnifiedLog and LocalLog (local storage only); loading and crash
recovery are :mod:`broker.log.loader` (Kafka's LogLoader), retention, DeleteRecords,
the cleaner's swaps and replication truncation :mod:`broker.log.segment_changes`.
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

import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from broker.log.config import LogConfig
from broker.log.errors import (
    OffsetOutOfRangeError,
    OffsetsOutOfOrderError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
)
from broker.log.file_cache import DEFAULT_FILE_CACHE, FileCache
from broker.log.files import (
    TopicPartition,
    fsync_dir,
    parse_partition_dir_name,
)
from broker.log.leader_epoch import LeaderEpochCache
from broker.log.segment import LogSegment, TimestampAndOffset
from broker.log.segment_changes import LogEnd as _LogEnd
from broker.log.segment_changes import SegmentChanges, _floor_index
from broker.log.shutdown_summary import PartitionListing
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


@dataclass(frozen=True, slots=True)
class _Batch:
    position: int  # in the caller's buffer
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int


class PartitionLog(SegmentChanges):
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
        dir_needs_fsync: bool = False,
        file_names: Sequence[str] | None = None,
    ) -> None:
        self._dir = directory
        # The directory's file names as the loader listed them, for the producer state's load.
        self._file_names = file_names
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
        # A new partition's directory is made durable by its first flush, as Kafka's LocalLog does.
        self._dir_needs_fsync = dir_needs_fsync
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        # Counts truncations, so work prepared from older contents (the cleaner's) sees it is stale.
        self._truncations = 0
        self._closed = False
        #: Run by :meth:`flush` before it fsyncs the directory: the producer state's snapshots
        #: written at a roll without an fsync (Kafka's flushProducerStateSnapshot).
        self.before_flush: Callable[[], None] | None = None

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
        existing: bool = False,
        listing: PartitionListing | None = None,
    ) -> PartitionLog:
        """Load (or create) the partition in ``directory`` (:func:`broker.log.loader.load_log`)."""
        from broker.log.loader import load_log  # the loader builds this class

        return load_log(directory, config, clock_ms, recovery_point, log_start_offset=log_start_offset,
                        had_clean_shutdown=had_clean_shutdown, files=files, existing=existing,
                        listing=listing)

    # -- state -------------------------------------------------------------------

    @property
    def dir(self) -> Path:
        return self._dir

    @property
    def file_cache(self) -> FileCache:
        """The cache that holds this log's open files."""
        return self._files

    def take_loaded_file_names(self) -> Sequence[str] | None:
        """The directory's file names as listed when the log was loaded (empty for a new
        log), once: whoever loads state kept beside the log (producer snapshots,
        transaction indexes) needs no listing of its own. None after the first call."""
        names, self._file_names = self._file_names, None
        return names

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
        self,
        batches: Buffer,
        leader_epoch: int,
        *,
        validated: bool = False,
        headers: Sequence[tuple[int, RecordBatchHeader]] | None = None,
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
        still checked. ``headers`` (with ``validated``) are the validated
        batches' positions and headers, which are then not read again.
        Record-level validation (counts, sequences, timestamp bounds, control
        batches) is always the produce path's job.
        """
        self._check_open()
        buffer: bytearray | memoryview
        if isinstance(batches, bytearray) or (
            isinstance(batches, memoryview) and not batches.readonly
        ):
            buffer = batches
        else:
            buffer = bytearray(batches)
        if validated and headers is not None:
            headers = self._check_sizes(headers, len(buffer))
        else:
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
            self._check_size(header.size_in_bytes, check_max_message_bytes)
            headers.append((position, header))
            position += header.size_in_bytes
        return headers

    def _check_sizes(
        self, headers: Sequence[tuple[int, RecordBatchHeader]], end: int
    ) -> list[tuple[int, RecordBatchHeader]]:
        """:meth:`_validate`'s checks of batches whose headers were read already."""
        expected = 0
        for position, header in headers:
            if position != expected or header.size_in_bytes > end - position:
                raise CorruptRecordError("batches do not tile the data", offset=position)
            self._check_size(header.size_in_bytes, True)
            expected = position + header.size_in_bytes
        if expected != end:
            raise CorruptRecordError("batch length mismatch: trailing bytes", offset=expected)
        return list(headers)

    def _check_size(self, size: int, check_max_message_bytes: bool) -> None:
        if check_max_message_bytes and size > self._config.max_message_bytes:
            raise RecordTooLargeError(f"batch of {size} bytes exceeds max.message.bytes {self._config.max_message_bytes}")
        if size > self._config.segment_bytes:
            raise RecordBatchTooLargeError(f"batch of {size} bytes exceeds segment.bytes {self._config.segment_bytes}")

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
        segment.append(group[-1].last_offset, max_timestamp, offset_of_max, view[start:end], group[0].base_offset)
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
        log.info("segment_rolled", topic=self._tp.topic, partition=self._tp.partition, base_offset=base_offset,
                 previous_base_offset=previous.base_offset, previous_size=previous.size, reason=reason)

    # -- flushing -------------------------------------------------------------------

    def flush(self, up_to_offset: int | None = None) -> None:
        """fsync the segments holding offsets below ``up_to_offset`` (default: all), then
        move the recovery point there."""
        end = self._end.offset
        offset = end if up_to_offset is None else min(up_to_offset, end)
        self._epoch_cache.flush()
        if self.before_flush is not None:
            self.before_flush()
        if offset <= self._recovery_point:
            if self._dir_needs_fsync:
                fsync_dir(self._dir)
                self._dir_needs_fsync = False
            return
        segments = self._segments
        for segment in segments[_floor_index(segments, self._recovery_point) :]:
            if segment.base_offset >= offset:
                break
            if segment.flush():
                self._dir_needs_fsync = True  # an index file was created
        if self._dir_needs_fsync:
            fsync_dir(self._dir)
            self._dir_needs_fsync = False
        self._recovery_point = offset
        self._last_flush_ms = self._clock_ms()
        if self._roll_flush_offset is not None and self._roll_flush_offset <= offset:
            self._roll_flush_offset = None

    def directory_changed(self) -> None:
        """A file was created in the log's directory: the next flush fsyncs the directory."""
        self._dir_needs_fsync = True

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
        self._release_hooks()

    def close_handles(self) -> None:
        """Close every file without flushing or writing (a failed disk, or a crash in tests)."""
        for segment in self._segments:
            segment.close_handles()
        for _, segment in self._pending_deletes:
            segment.close_handles()
        self._closed = True
        self._release_hooks()

    def _release_hooks(self) -> None:
        """A closed log lets go of the producer state's hook, which refers back to this log:
        that cycle held every object of a deleted partition for ever once the heap had been
        frozen (settle_heap), since frozen cycles are never collected."""
        self.before_flush = None

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
