"""Changes to a partition log's segments other than appending and rolling: retention
and DeleteRecords (the log start offset moves, whole segments go), the cleaner's segment
swaps, and truncation for replication (Kafka's LocalLog and UnifiedLog parts of these).

A base of :class:`~broker.log.partition_log.PartitionLog`, which holds the state
declared here; see that class for the offsets and the concurrency rules.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import structlog

from broker.log.config import LogConfig
from broker.log.errors import OffsetOutOfRangeError
from broker.log.file_cache import FileCache
from broker.log.files import CLEANED_SUFFIX, SWAP_SUFFIX, TopicPartition, fsync_dir
from broker.log.leader_epoch import LeaderEpochCache
from broker.log.segment import LogSegment

log = structlog.get_logger(__name__)


class LogEnd(NamedTuple):
    """The log end offset with the active segment and its size at that moment."""

    offset: int
    segment: LogSegment
    position: int


class SegmentChanges:
    _dir: Path
    _files: FileCache
    _tp: TopicPartition
    _config: LogConfig
    _clock_ms: Callable[[], int]
    _segments: tuple[LogSegment, ...]
    _end: LogEnd
    _log_start_offset: int
    _recovery_point: int
    _epoch_cache: LeaderEpochCache
    _roll_flush_offset: int | None
    _dir_needs_fsync: bool
    _pending_deletes: list[tuple[int, LogSegment]]
    _truncations: int

    def _check_open(self) -> None:
        raise NotImplementedError

    def _roll(self, base_offset: int, reason: str) -> None:
        raise NotImplementedError

    @property
    def size(self) -> int:
        raise NotImplementedError

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
        # Written with the log's next flush, not fsynced on the event loop (a DeleteRecords or
        # a retention pass): loading cuts the cache at the log start anyway (as Kafka 3.7's
        # truncateFromStartAsyncFlush, KAFKA-15046).
        self._epoch_cache.truncate_from_start(offset, sync=False)
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
        :func:`broker.log.loader.remove_temp_files_and_complete_swaps`:

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

    def truncate_to(self, offset: int, *, sync: bool = True) -> bool:
        """Remove every batch holding an offset at or above ``offset``; True if the log changed.

        A batch straddling ``offset`` goes entirely, so the log end offset can
        end up below ``offset`` (never above). The leader epoch cache is cut
        at the new log end. The caller must then rewrite the recovery point
        checkpoint (the manager's ``truncate_to`` does), or a crash could
        skip recovery of offsets rewritten after the truncation.

        Without ``sync`` the files are written but nothing is fsynced: the caller runs
        :meth:`sync_truncation` (off the event loop) before the log takes another append.
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
            self.truncate_fully_and_start_at(offset, sync=sync)
            return True
        keep = tuple(segment for segment in segments if segment.base_offset <= offset)
        removed = segments[len(keep) :]
        self._truncations += 1
        self._segments = keep
        self._retire(removed)
        active = keep[-1]
        active.truncate_to(offset)
        self._end = LogEnd(active.next_offset, active, active.size)
        self._epoch_cache.truncate_from_end(self._end.offset, sync=sync)
        if not sync:
            self._epoch_cache.flush(sync=False)
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

    def sync_truncation(self) -> None:
        """Make an unsynced truncation durable: the leader epoch file, then the directory (the
        retired segments' renames, a new segment, the epoch file's replacement). May run in a
        worker thread: the log takes no append meanwhile (its follower waits for this)."""
        self._epoch_cache.sync_file()
        fsync_dir(self._dir)

    def truncate_fully_and_start_at(self, offset: int, *, sync: bool = True) -> None:
        """Empty the log and restart it at ``offset`` (a follower far behind the leader's log
        start). Without ``sync``, as :meth:`truncate_to`."""
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
        self._end = LogEnd(offset, segment, 0)
        self._log_start_offset = offset
        self._recovery_point = offset
        self._roll_flush_offset = None
        self._epoch_cache.clear(sync=sync)
        if sync:
            fsync_dir(self._dir)
            self._dir_needs_fsync = False
        log.info(
            "log_truncated_fully",
            topic=self._tp.topic,
            partition=self._tp.partition,
            log_start_offset=offset,
        )


def _floor_index(segments: Sequence[LogSegment], offset: int) -> int:
    """The index of the segment that would hold ``offset`` (the first one if it is below them all)."""
    return max(bisect.bisect_right(segments, offset, key=_base_offset) - 1, 0)


def _base_offset(segment: LogSegment) -> int:
    return segment.base_offset
