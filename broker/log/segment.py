"""One log segment: a ``.log`` file of record batches and its two indexes.

Mirrors Kafka's LogSegment. The ``.log`` holds v2 record batches exactly as
they travel on the wire. Its descriptor comes from the broker's
:class:`~broker.log.file_cache.FileCache`: opened when the segment is used,
pinned while an append or a read runs, and closed again when the cache needs
room. Appends go through ``O_APPEND`` writes, reads through ``os.pread``, and
fetches get a :class:`FileRegion` of it to hand to ``os.sendfile`` (the region
keeps the file pinned until it is dropped).

Index cadence is Kafka's: after more than ``index.interval.bytes`` have been
appended since the last entry, the next append adds an offset index entry
(the append's last offset at the append's first byte) and, if the largest
timestamp grew, a time index entry (that timestamp, and the last offset of
the batch that first reached it).

Not thread-safe for writers: the partition's log serialises appends,
truncation and recovery. Reads only look at bytes below the size they
sampled when they started, so they may run beside the single writer.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass
from pathlib import Path

import structlog

from broker.log.errors import CorruptIndexError
from broker.log.file_cache import DEFAULT_FILE_CACHE, CachedFile, FileCache
from broker.log.files import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    segment_file_name,
)
from broker.log.index import OffsetIndex, TimeIndex, TimestampOffset
from broker.log.segment_io import scan_headers, scan_pinned, write_all
from broker.log.segment_recovery import SegmentRecovery
from broker.log.shutdown_summary import SegmentSummary
from wire.exceptions import CorruptRecordError
from wire.records import (
    RecordBatchHeader,
    iter_records,
)
from wire.regions import FileRegion

log = structlog.get_logger(__name__)



@dataclass(frozen=True, slots=True)
class SegmentRead:
    """What a segment read found.

    ``region`` is None when nothing fits the limits; ``first_offset`` is the
    base offset of the first batch at or after the requested offset.
    """

    region: FileRegion | bytes | None
    first_offset: int


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    """A record found by timestamp, with the leader epoch of its batch (None if unknown)."""

    timestamp: int
    offset: int
    leader_epoch: int | None


class LogSegment(SegmentRecovery):
    """A ``.log`` file, its ``.index`` and ``.timeindex``, named by ``base_offset``.

    Create new segments with :meth:`create` and load existing ones with :meth:`open`;
    crash recovery is :class:`~broker.log.segment_recovery.SegmentRecovery`'s.
    """

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        log_file: CachedFile,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        *,
        size: int,
        index_interval_bytes: int,
        clock_ms: Callable[[], int],
        indexes_missing: bool,
    ) -> None:
        self._dir = directory
        self.base_offset = base_offset
        self._log = log_file
        self._offset_index = offset_index
        self._time_index = time_index
        self._index_interval_bytes = index_interval_bytes
        self._clock_ms = clock_ms
        self._indexes_missing = indexes_missing
        self._indexes_ready = False
        self._size = size
        self._created_ms = clock_ms()
        self._bytes_since_last_index_entry = 0
        # Each None below means "not read yet": derived from the files on first use.
        self._next_offset: int | None = None
        self._max_timestamp: TimestampOffset | None = None
        self._first_batch_timestamp: int | None = None
        self._max_timestamp_unindexed = False
        #: (first offset, position) of the last append: where a consumer at the log end reads.
        self._last_append: tuple[int, int] | None = None

    # -- construction -------------------------------------------------------

    @classmethod
    def create(
        cls,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_bytes: int,
        clock_ms: Callable[[], int],
        files: FileCache = DEFAULT_FILE_CACHE,
        fresh_directory: bool = False,
    ) -> LogSegment:
        """A new, empty segment; stale files with the same base offset are removed first
        (unless ``fresh_directory`` says the directory was just made)."""
        if not fresh_directory:
            for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                (directory / segment_file_name(base_offset, suffix)).unlink(missing_ok=True)
        return cls._open_files(
            directory, base_offset, index_interval_bytes, max_index_bytes, clock_ms, files, create=True
        )

    @classmethod
    def open(
        cls,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_bytes: int,
        clock_ms: Callable[[], int],
        suffix: str = "",
        files: FileCache = DEFAULT_FILE_CACHE,
        dir_names: Container[str] | None = None,
        known: SegmentSummary | None = None,
    ) -> LogSegment:
        """An existing segment. Missing index files are created empty and
        :meth:`sanity_check` then reports them, so the caller can :meth:`recover`.

        ``suffix`` opens files that carry one (the cleaner's ``.cleaned``). ``dir_names``,
        the directory's file names as just listed, saves looking for the index files;
        ``known``, the clean shutdown's summary of the segment, the look at the ``.log``."""
        segment = cls._open_files(
            directory,
            base_offset,
            index_interval_bytes,
            max_index_bytes,
            clock_ms,
            files,
            create=False,
            suffix=suffix,
            dir_names=dir_names,
            known_size=None if known is None else known.size,
        )
        if known is not None:
            segment._next_offset = known.next_offset
        return segment

    @classmethod
    def _open_files(
        cls,
        directory: Path,
        base_offset: int,
        index_interval_bytes: int,
        max_index_bytes: int,
        clock_ms: Callable[[], int],
        files: FileCache,
        *,
        create: bool,
        suffix: str = "",
        dir_names: Container[str] | None = None,
        known_size: int | None = None,
    ) -> LogSegment:
        # Plain strings: a Path each would be most of the work (and memory) of a partition's load.
        prefix = f"{directory}{os.sep}{base_offset:020d}"
        index_path = f"{prefix}{INDEX_SUFFIX}{suffix}"
        time_index_path = f"{prefix}{TIME_INDEX_SUFFIX}{suffix}"
        log_path = f"{prefix}{LOG_SUFFIX}{suffix}"
        flags = os.O_RDWR | os.O_APPEND | (os.O_CREAT | os.O_EXCL if create else 0)
        log_file = files.file(log_path, flags)
        index_exists: bool | None
        time_index_exists: bool | None
        if create:
            missing = False
            size = 0
            index_exists = time_index_exists = False
            with log_file.pinned():
                pass  # create the file now, so a full disk or a descriptor limit shows here
        else:
            size = os.stat(log_path).st_size if known_size is None else known_size
            if dir_names is not None:
                index_exists = os.path.basename(index_path) in dir_names
                time_index_exists = os.path.basename(time_index_path) in dir_names
            else:
                index_exists, time_index_exists = os.path.exists(index_path), os.path.exists(time_index_path)
            # An empty segment's index files are made when first written (a new partition's).
            missing = size > 0 and not (index_exists and time_index_exists)
        try:
            offset_index = OffsetIndex(index_path, base_offset, max_index_bytes, files, exists=index_exists)
            time_index = TimeIndex(time_index_path, base_offset, max_index_bytes, files, exists=time_index_exists)
        except BaseException:
            log_file.close()
            raise
        return cls(
            directory,
            base_offset,
            log_file,
            offset_index,
            time_index,
            size=size,
            index_interval_bytes=index_interval_bytes,
            clock_ms=clock_ms,
            indexes_missing=missing,
        )

    # -- state ----------------------------------------------------------------

    @property
    def log_file(self) -> CachedFile:
        """The ``.log`` file; pin it (``with segment.log_file.pinned() as fd``) to use its descriptor."""
        return self._log

    def dup_log_fd(self) -> int:
        """A descriptor of the ``.log`` of the caller's own, to close when done (the cleaner's snapshot)."""
        with self._log.pinned() as fd:
            return os.dup(fd)

    @property
    def log_path(self) -> Path:
        return self._log.path

    @property
    def size(self) -> int:
        """Bytes in the ``.log`` file."""
        return self._size

    @property
    def created_ms(self) -> int:
        """When this segment object was created or opened (Kafka's ``created``)."""
        return self._created_ms

    @property
    def last_modified_ms(self) -> int:
        return os.stat(self._log.path).st_mtime_ns // 1_000_000

    @property
    def offset_index(self) -> OffsetIndex:
        self._ensure_indexes()
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        self._ensure_indexes()
        return self._time_index

    @property
    def index_is_full(self) -> bool:
        return self._offset_index.is_full or self._time_index.is_full

    @property
    def next_offset(self) -> int:
        """The offset after the last batch here; the base offset if there is none."""
        if self._next_offset is None:
            self._next_offset = self._read_next_offset()
        return self._next_offset

    @property
    def max_timestamp_so_far(self) -> TimestampOffset:
        """The largest batch timestamp here and the last offset of the batch that reached it.

        ``(NO_TIMESTAMP, base_offset)`` if no batch carries a timestamp.
        """
        if self._max_timestamp is None:
            # A segment that was closed or rolled recorded its maximum as the last time index entry.
            self._max_timestamp = self._time_index.last_entry
        return self._max_timestamp

    @property
    def largest_record_timestamp(self) -> int | None:
        timestamp = self.max_timestamp_so_far.timestamp
        return timestamp if timestamp >= 0 else None

    @property
    def largest_timestamp(self) -> int:
        """The largest record timestamp, or the file's modification time if there is none (Kafka's rule for retention)."""
        timestamp = self.max_timestamp_so_far.timestamp
        return timestamp if timestamp >= 0 else self.last_modified_ms

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return self._offset_index.can_append_offset(offset)

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        """How long this segment has been collecting records, for ``segment.ms``.

        Measured in record time (the new batch's timestamp minus the first
        batch's) when the first batch has a timestamp, else in wall-clock time
        since the segment was created.
        """
        first = self.first_batch_timestamp
        if first is not None and first >= 0:
            return message_timestamp - first
        return now_ms - self._created_ms

    @property
    def first_batch_timestamp(self) -> int | None:
        """The max timestamp of the first batch, None for an empty segment."""
        if self._first_batch_timestamp is None and self._size:
            for _, header in self.iter_batches(0):
                self._first_batch_timestamp = header.max_timestamp
                break
        return self._first_batch_timestamp

    @property
    def indexes_missing(self) -> bool:
        """Whether an index file was missing when the segment was opened (rebuild it)."""
        return self._indexes_missing

    def sanity_check(self) -> None:
        """Cheap checks of the index files against the log; CorruptIndexError on failure."""
        if self._indexes_missing:
            raise CorruptIndexError(f"{self._log.path.name}: index files missing")
        self._offset_index.sanity_check(self._size)
        self._time_index.sanity_check()

    def load_indexes(self) -> None:
        """Load both indexes now (they load on first use otherwise); rebuilds corrupt ones."""
        self._ensure_indexes()

    def _ensure_indexes(self) -> None:
        if self._indexes_ready:
            return
        try:
            if self._indexes_missing:
                raise CorruptIndexError(f"{self._log.path.name}: index files missing")
            self._offset_index.load()
            self._time_index.load()
            # The load checked the order of the entries; these check them against the log.
            self._offset_index.sanity_check(self._size)
            self._time_index.sanity_check()
        except CorruptIndexError as exc:
            log.warning("index_corrupt", segment=str(self._log.path), error=str(exc))
            self.recover()
        self._indexes_ready = True

    # -- writing --------------------------------------------------------------

    def append(
        self,
        largest_offset: int,
        largest_timestamp: int,
        offset_of_max_timestamp: int,
        batches: bytes | bytearray | memoryview,
        first_offset: int | None = None,
    ) -> None:
        """Append whole, already validated batches ending at ``largest_offset``.

        ``largest_timestamp`` is their largest max timestamp and
        ``offset_of_max_timestamp`` the last offset of the batch holding it; ``first_offset``,
        their first offset, lets a read at or after it start there, without the index.
        """
        length = len(batches)
        if not length:
            return
        if not self.can_convert_to_relative_offset(largest_offset):
            raise ValueError(
                f"{self._log.path.name}: offset {largest_offset} does not fit a segment based at {self.base_offset}"
            )
        self._ensure_indexes()
        if self._max_timestamp_unindexed:
            self.index_max_timestamp()  # before any entry for this append
        position = self._size
        with self._log.pinned() as fd:
            write_all(fd, batches, position)
        self._size = position + length
        self._last_append = None if first_offset is None else (first_offset, position)
        if position == 0:
            self._first_batch_timestamp = largest_timestamp
        if largest_timestamp > self.max_timestamp_so_far.timestamp:
            self._max_timestamp = TimestampOffset(largest_timestamp, offset_of_max_timestamp)
        if self._bytes_since_last_index_entry > self._index_interval_bytes:
            self._offset_index.append(largest_offset, position)
            self._time_index.maybe_append(*self.max_timestamp_so_far)
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += length
        self._next_offset = largest_offset + 1

    def on_become_inactive(self) -> None:
        """Record the largest timestamp in the time index: retention reads it from there."""
        self._ensure_indexes()
        self._time_index.maybe_append(*self.max_timestamp_so_far, skip_full_check=True)
        self._max_timestamp_unindexed = False

    def truncate_to(self, offset: int) -> int:
        """Remove the batches holding offsets at or above ``offset``; returns the bytes removed.

        A batch that straddles ``offset`` goes entirely: a batch is never cut.
        """
        found = self.translate_offset(offset)
        self._offset_index.truncate_to(offset)
        self._time_index.truncate_to(offset)
        if found is None:
            return 0
        position = found[0]
        removed = self._size - position
        with self._log.pinned() as fd:
            os.ftruncate(fd, position)
        self._size = position
        self._bytes_since_last_index_entry = 0
        self._next_offset = None
        self._last_append = None
        if position == 0:
            self._created_ms = self._clock_ms()
            self._first_batch_timestamp = None
        self._max_timestamp = self._largest_timestamp_after_truncation()
        return removed

    def _largest_timestamp_after_truncation(self) -> TimestampOffset:
        # The last time index entry, unless a later batch (not indexed yet) went higher.
        best = self._time_index.last_entry
        start = self._offset_index.lookup(best.offset).position
        for _, header in self.iter_batches(start):
            if header.max_timestamp > best.timestamp:
                best = TimestampOffset(header.max_timestamp, header.last_offset)
        return best

    def flush(self) -> bool:
        """fsync the log and both indexes, creating index files never written; True if one
        was created (the directory then needs an fsync for it to last)."""
        with self._log.pinned() as fd:
            os.fsync(fd)
        created = self._offset_index.flush()
        return self._time_index.flush() or created

    # -- reading --------------------------------------------------------------

    def iter_batches(
        self, start_position: int = 0, end_position: int | None = None
    ) -> Iterator[tuple[int, RecordBatchHeader]]:
        """``(position, header)`` of each batch from ``start_position`` (a batch boundary).

        Stops before a batch that would end past ``end_position`` (default:
        the size when the scan started).
        """
        end = self._size if end_position is None else min(end_position, self._size)
        return scan_pinned(self._log, start_position, end)

    def translate_offset(
        self, offset: int, start_position: int = 0
    ) -> tuple[int, RecordBatchHeader] | None:
        """The first batch whose last offset is at or above ``offset``, with its position; None if none."""
        last_append = self._last_append
        if last_append is not None and offset >= last_append[0]:
            # Every batch before the last append ends below ``offset``: a consumer reading what
            # was just appended (every Fetch of a caught-up one) scans one header.
            start = max(last_append[1], start_position)
        else:
            start = max(self.offset_index.lookup(offset).position, start_position)
        for position, header in self.iter_batches(start):
            if header.last_offset >= offset:
                return position, header
        return None

    def position_of(self, offset: int) -> int:
        """Where the batch holding ``offset`` (or the first after it) starts; the size if none does."""
        found = self.translate_offset(offset)
        return self._size if found is None else found[0]

    def read(
        self,
        start_offset: int,
        max_size: int,
        max_position: int | None = None,
        min_one_batch: bool = False,
    ) -> SegmentRead | None:
        """Whole batches from the one holding ``start_offset``, within ``max_size`` bytes.

        Nothing at or past ``max_position`` (a batch boundary) is returned. With
        ``min_one_batch`` the first batch is returned even if larger than
        ``max_size``. Returns None if no batch here reaches ``start_offset``.
        """
        if max_size < 0:
            raise ValueError(f"negative max_size {max_size}")
        size = self._size
        limit = size if max_position is None else min(max_position, size)
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        position, header = found
        first_end = position + header.size_in_bytes
        budget = max(max_size, header.size_in_bytes) if min_one_batch else max_size
        if first_end > limit or first_end > position + budget:
            return SegmentRead(None, header.base_offset)
        end = self._last_boundary(position, min(limit, position + budget), limit)
        return SegmentRead(self._log.region(position, end - position), header.base_offset)

    def _last_boundary(self, start: int, bound: int, limit: int) -> int:
        """The end of the last whole batch from ``start`` that ends at or before ``bound``."""
        if bound >= limit:
            return limit  # the limit is itself a batch boundary
        # Jump close to the bound through the index instead of walking every header from start.
        end = max(start, self.offset_index.lookup_position(bound).position)
        for position, header in self.iter_batches(end, bound):
            end = position + header.size_in_bytes
        return end

    def read_batch(self, position: int, header: RecordBatchHeader) -> bytes:
        """The whole batch at ``position``."""
        with self._log.pinned() as fd:
            data = os.pread(fd, header.size_in_bytes, position)
        if len(data) != header.size_in_bytes:
            raise CorruptRecordError("short read of a batch", offset=position)
        return data

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int
    ) -> TimestampAndOffset | None:
        """The first record at or after ``starting_offset`` with a timestamp at or above ``timestamp``.

        The time index narrows the scan; the batch found is decoded (and
        decompressed) to find the exact record, as Kafka does for ListOffsets.
        """
        entry = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(entry.offset, starting_offset)).position
        for at, header in self.iter_batches(position):
            if header.max_timestamp < timestamp or header.last_offset < starting_offset:
                continue
            for record in iter_records(self.read_batch(at, header)):
                if record.timestamp >= timestamp and record.offset >= starting_offset:
                    return TimestampAndOffset(record.timestamp, record.offset, _epoch_of(header))
        return None

    def max_timestamp_record(self) -> TimestampAndOffset | None:
        """The first record holding this segment's largest timestamp (ListOffsets MAX_TIMESTAMP, KIP-734)."""
        timestamp, offset = self.max_timestamp_so_far
        position = self.offset_index.lookup(offset).position
        for at, header in self.iter_batches(position):
            if header.max_timestamp != timestamp:
                continue
            for record in iter_records(self.read_batch(at, header)):
                if record.timestamp == timestamp:
                    return TimestampAndOffset(timestamp, record.offset, _epoch_of(header))
            return None
        return None

    def _read_next_offset(self) -> int:
        if not self._size:
            return self.base_offset
        # The last entry alone, without loading the index (after a clean shutdown it was not
        # checked): one outside the log means a corrupt index, which loading rebuilds.
        last = self._offset_index.last_entry
        if not 0 <= last.position < self._size:
            last = self.offset_index.last_entry
        next_offset = self.base_offset
        for _, header in self.iter_batches(last.position):
            next_offset = header.next_offset
        return next_offset

    # -- lifecycle --------------------------------------------------------------

    def close(self) -> None:
        """Record the largest timestamp in the time index and close the files."""
        if self._log.closed:
            return
        if self._max_timestamp is not None and self._indexes_ready:
            self._time_index.maybe_append(*self._max_timestamp, skip_full_check=True)
            self._max_timestamp_unindexed = False
        if self._size:
            # A segment with batches keeps index files, so a restart does not rebuild them.
            self._offset_index.ensure_file()
            self._time_index.ensure_file()
        self._offset_index.cut()
        self._time_index.cut()
        self.close_handles()

    def close_handles(self) -> None:
        """Close the files without writing anything (a failed disk, or a segment already deleted)."""
        self._offset_index.close()
        self._time_index.close()
        self._log.close()

    def rename_to_deleted(self) -> None:
        """Rename all three files with the ``.deleted`` suffix; the descriptors stay open."""
        self._log.rename(self._log.path.with_name(self._log.path.name + DELETED_SUFFIX))
        for index in (self._offset_index, self._time_index):
            index.rename(index.path.with_name(index.path.name + DELETED_SUFFIX))

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename the ``.log`` then both indexes from ``old_suffix`` to ``new_suffix``
        (Kafka's changeFileSuffixes); the descriptors stay open."""
        for path in (self._log.path, self._offset_index.path, self._time_index.path):
            if not path.name.endswith(old_suffix):
                raise ValueError(f"{path.name} does not end with {old_suffix!r}")
        stem = len(self._log.path.name) - len(old_suffix)
        self._log.rename(self._log.path.with_name(self._log.path.name[:stem] + new_suffix))
        for index in (self._offset_index, self._time_index):
            name = index.path.name
            index.rename(index.path.with_name(name[: len(name) - len(old_suffix)] + new_suffix))

    def delete(self) -> None:
        """Close the files and unlink them, whatever their current names."""
        self.close_handles()
        self._log.path.unlink(missing_ok=True)
        self._offset_index.delete()
        self._time_index.delete()

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self._size})"

    @staticmethod
    def scan_next_offset(path: Path, base_offset: int) -> int:
        """The offset after the last whole batch of a ``.log`` file that is not open as a segment."""
        fd = os.open(path, os.O_RDONLY)
        try:
            next_offset = base_offset
            for _, header in scan_headers(fd, 0, os.fstat(fd).st_size):
                next_offset = header.next_offset
            return next_offset
        finally:
            os.close(fd)


def _epoch_of(header: RecordBatchHeader) -> int | None:
    return header.partition_leader_epoch if header.partition_leader_epoch >= 0 else None
