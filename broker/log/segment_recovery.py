"""Crash recovery of one segment (Kafka's LogSegment.recover), a base of
:class:`~broker.log.segment.LogSegment`, which holds the state declared here.

:meth:`SegmentRecovery.recover` re-validates every batch of the segment and rebuilds both
indexes. :meth:`SegmentRecovery.recover_from` re-validates only the batches at or past the
log's recovery point: everything below it was fsynced (the ``.log`` and the index entries
for it alike) before the recovery point moved past it, so only the index entries at or
past it are dropped, the batches before it are walked by their headers alone to find where
the unflushed part starts, and the CRC checks start there. Anything that does not add up
(an index out of order, a header that does not parse) falls back to :meth:`recover`.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import structlog

from broker.log.errors import CorruptIndexError
from broker.log.file_cache import CachedFile
from broker.log.index import NO_TIMESTAMP, OffsetIndex, TimeIndex, TimestampOffset
from broker.log.segment_io import RecoveryScan, scan_headers
from wire.exceptions import CorruptRecordError
from wire.records import RecordBatchHeader

log = structlog.get_logger(__name__)

#: No batch can be larger than an int32 length allows.
MAX_BATCH_SIZE = 2**31 - 1


class SegmentRecovery:
    base_offset: int
    _log: CachedFile
    _offset_index: OffsetIndex
    _time_index: TimeIndex
    _index_interval_bytes: int
    _indexes_missing: bool
    _indexes_ready: bool
    _size: int
    _next_offset: int | None
    _max_timestamp: TimestampOffset | None
    _first_batch_timestamp: int | None
    _bytes_since_last_index_entry: int
    #: Recovery's largest timestamp, not written to the time index yet (see recover()).
    _max_timestamp_unindexed: bool

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        raise NotImplementedError

    @property
    def index_is_full(self) -> bool:
        raise NotImplementedError

    def recover(
        self,
        max_batch_size: int = MAX_BATCH_SIZE,
        on_batch: Callable[[RecordBatchHeader], None] | None = None,
        *,
        sync_indexes: bool = True,
        index_max_timestamp: bool = True,
    ) -> int:
        """Re-validate every batch, rebuild both indexes, and cut the log at the first bad batch.

        A batch is bad if its header is malformed, it runs past the end of the
        file (a torn write), it is larger than ``max_batch_size``, its CRC does
        not match, or its offsets do not increase from the previous batch or
        do not fit the segment. ``on_batch`` sees each good batch in order
        (the log uses it to restore leader epochs). Returns the bytes removed.
        Without ``sync_indexes`` the rebuilt indexes are left for the log's next
        flush (a segment past the recovery point, which that flush covers). Without
        ``index_max_timestamp`` the segment's largest timestamp is kept in memory and written
        to the time index (as Kafka writes it at the end of recovery) by the next append, the
        roll or the close, or :meth:`index_max_timestamp`: an active segment recovered at
        start then creates no file for it.
        """
        with self._log.pinned() as fd:
            file_size = os.fstat(fd).st_size
            self._offset_index.reset()
            self._time_index.reset()
            truncated = self._scan_and_index(fd, file_size, 0, self.base_offset - 1, 0,
                                             TimestampOffset(NO_TIMESTAMP, self.base_offset),
                                             max_batch_size, on_batch, index_max_timestamp)
        if sync_indexes:
            # The rebuilt indexes may hold entries below the recovery point, which is never
            # rebuilt again: make them durable now.
            self._offset_index.flush()
            self._time_index.flush()
        return truncated

    def recover_from(
        self,
        recovery_point: int,
        max_batch_size: int = MAX_BATCH_SIZE,
        on_batch: Callable[[RecordBatchHeader], None] | None = None,
        *,
        index_max_timestamp: bool = True,
    ) -> int:
        """:meth:`recover` of the batches at or past ``recovery_point`` only (this segment
        holds it); the part below it is trusted as Kafka trusts every segment below it.
        ``on_batch`` sees only the re-validated batches. Returns the bytes removed."""
        if recovery_point <= self.base_offset or self._indexes_missing:
            return self.recover(max_batch_size, on_batch, sync_indexes=recovery_point > self.base_offset,
                                index_max_timestamp=index_max_timestamp)
        with self._log.pinned() as fd:
            file_size = os.fstat(fd).st_size
            start = self._flushed_prefix(fd, recovery_point, file_size)
            if start is not None:
                position, last_offset, last_index_entry, max_timestamp = start
                return self._scan_and_index(fd, file_size, position, last_offset, last_index_entry,
                                            max_timestamp, max_batch_size, on_batch, index_max_timestamp)
        log.warning("segment_recovered_in_full", segment=str(self._log.path), recovery_point=recovery_point,
                    reason="indexes or headers below the recovery point do not add up")
        # Entries below the recovery point are rewritten: durable before anything relies on them.
        return self.recover(max_batch_size, on_batch, sync_indexes=True, index_max_timestamp=index_max_timestamp)

    def index_max_timestamp(self) -> None:
        """Write the largest timestamp that recovery kept out of the time index."""
        if self._max_timestamp_unindexed and self._max_timestamp is not None:
            self._time_index.maybe_append(*self._max_timestamp, skip_full_check=True)
        self._max_timestamp_unindexed = False

    def _flushed_prefix(
        self, fd: int, recovery_point: int, file_size: int
    ) -> tuple[int, int, int, TimestampOffset] | None:
        """Where the batches at or past ``recovery_point`` start, the last offset before them,
        the last offset index entry's position and the largest timestamp before them; None
        if the indexes or headers cannot be trusted."""
        try:
            self._offset_index.load()
            self._time_index.load()
            # Entries at or past the recovery point may describe bytes that were never flushed
            # (or that a crash tore off): only those below it are held to the log.
            self._offset_index.truncate_to(recovery_point)
            self._time_index.truncate_to(recovery_point)
            self._offset_index.sanity_check(file_size)
            self._time_index.sanity_check()
        except CorruptIndexError:
            return None
        last_entry = self._offset_index.last_entry
        max_timestamp = self._time_index.last_entry
        # Batches after the last time index entry may have gone higher: scan from there.
        start = self._offset_index.lookup(max_timestamp.offset)
        last_offset = self.base_offset - 1
        position = start.position
        try:
            for position, header in scan_headers(fd, start.position, file_size):
                first = last_offset < self.base_offset
                if first and start.position and not self.base_offset <= header.base_offset <= start.offset:
                    return None  # the first batch is not the one the index entry names
                if header.last_offset >= recovery_point:
                    break
                if header.base_offset <= last_offset:
                    return None
                last_offset = header.last_offset
                if header.max_timestamp > max_timestamp.timestamp:
                    max_timestamp = TimestampOffset(header.max_timestamp, header.last_offset)
                position += header.size_in_bytes
        except CorruptRecordError:
            return None
        if start.position and last_offset < self.base_offset:
            return None  # an index entry at or past the recovery point after all
        return position, last_offset, last_entry.position, max_timestamp

    def _scan_and_index(
        self,
        fd: int,
        file_size: int,
        position: int,
        last_offset: int,
        last_index_entry: int,
        max_timestamp: TimestampOffset,
        max_batch_size: int,
        on_batch: Callable[[RecordBatchHeader], None] | None,
        index_max_timestamp: bool,
    ) -> int:
        """Validate the batches from ``position`` (a batch boundary after ``last_offset``),
        index them, and cut the file at the first bad one; returns the bytes removed."""
        self._indexes_ready = True
        self._indexes_missing = False
        scan = RecoveryScan(fd, file_size, max_batch_size, self.can_convert_to_relative_offset, last_offset,
                            valid=position)
        for at, header in scan:
            if header.max_timestamp > max_timestamp.timestamp:
                max_timestamp = TimestampOffset(header.max_timestamp, header.last_offset)
            # A full index (segment.index.bytes lowered since) just stays sparser.
            if at - last_index_entry > self._index_interval_bytes and not self.index_is_full:
                self._offset_index.append(header.last_offset, at)
                self._time_index.maybe_append(*max_timestamp)
                last_index_entry = at
            if on_batch is not None:
                on_batch(header)
        valid, previous_last_offset, problem = scan.valid, scan.last_offset, scan.problem
        truncated = file_size - valid
        if truncated:
            log.warning(
                "segment_truncated_in_recovery",
                segment=str(self._log.path),
                position=valid,
                bytes_removed=truncated,
                reason=problem,
            )
            os.ftruncate(fd, valid)
        self._size = valid
        self._max_timestamp = max_timestamp
        self._max_timestamp_unindexed = True
        if index_max_timestamp:
            self.index_max_timestamp()
        self._next_offset = previous_last_offset + 1 if valid else self.base_offset
        self._first_batch_timestamp = None
        self._bytes_since_last_index_entry = valid - last_index_entry
        return truncated
