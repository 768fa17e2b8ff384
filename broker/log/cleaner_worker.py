"""The worker-thread side of a clean (see :mod:`broker.log.cleaner`): the snapshot of a log's
segments a worker reads through duplicated descriptors, the plan of a clean, reading batches
and headers below the snapshot's sizes, writing cleaned data, grouping segments, the I/O
throttle, and the runners that put the work in a worker thread (or inline, in tests).
"""

from __future__ import annotations

import bisect
import os
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar

import trio

from broker.log.clean_records import (
    CleanCounts,
    CleanRound,
    LastRecord,
    OffsetMap,
    ProducerScan,
    TransactionTracker,
    control_marker,
    map_batch,
)
from broker.log.partition_log import PartitionLog
from broker.log.segment import LogSegment
from wire.exceptions import CorruptRecordError
from wire.records import (
    BATCH_HEADER_SIZE,
    BytesLike,
    RecordBatchHeader,
    batch_size_at,
    iter_batch_headers,
    read_batch_header,
)

if TYPE_CHECKING:
    from broker.log.cleaner import CleanerConfig, LogToClean

T = TypeVar("T")

_INT32_MAX = 2**31 - 1
#: Bytes read at a time when only batch headers are needed.
_HEADER_SCAN_BYTES = 16 * 1024
#: Java's Double.MAX_VALUE, Kafka's "no throttle".
DOUBLE_MAX = 1.7976931348623157e308
#: How much I/O time the throttler lets pass between checks (Kafka's 300 ms).
_THROTTLE_CHECK_S = 0.3


class CleaningAbortedError(Exception):
    """The log changed under a clean (truncation, deletion, retention) or the cleaner is stopping."""


class WorkerRunner(Protocol):
    def __call__(self, fn: Callable[[], T], /) -> Awaitable[T]: ...


@dataclass(frozen=True, slots=True)
class SegmentSnapshot:
    segment: LogSegment
    base_offset: int
    size: int
    fd: int  # a duplicate, closed when the clean ends
    #: Where the dirty range starts in this segment (0 unless it holds the first dirty offset).
    dirty_position: int


class Throttler:
    """Kafka's Throttler: every ``_THROTTLE_CHECK_S`` of I/O, waits long enough to bring the
    rate down to ``bytes_per_second``. Waits on ``stop``, so a stopping cleaner is not held up."""

    def __init__(
        self, bytes_per_second: float, stop: threading.Event, monotonic: Callable[[], float]
    ) -> None:
        self._rate = bytes_per_second
        self._stop = stop
        self._monotonic = monotonic
        self._period_start = monotonic()
        self._observed = 0

    def maybe_throttle(self, size: int) -> None:
        if self._rate >= DOUBLE_MAX:
            return
        self._observed += size
        elapsed = self._monotonic() - self._period_start
        if elapsed < _THROTTLE_CHECK_S:
            return
        wait_s = self._observed / self._rate - elapsed
        if wait_s > 0 and self._stop.wait(wait_s):
            raise CleaningAbortedError("the cleaner is stopping")
        self._period_start = self._monotonic()
        self._observed = 0


@dataclass(slots=True)
class CleanSnapshot:
    log: PartitionLog
    segments: list[SegmentSnapshot]
    truncations: int
    active_producers: Mapping[int, LastRecord] | None
    now_ms: int
    stop: threading.Event
    throttler: Throttler

    def check_done(self) -> None:
        """Called by the worker between batches (Kafka's checkDone)."""
        if self.stop.is_set():
            raise CleaningAbortedError("the cleaner is stopping")
        if self.log.truncation_count != self.truncations:
            raise CleaningAbortedError("the log was truncated")


@dataclass(slots=True)
class CleanPlan:
    """The mapped dirty range and the groups of segments to rewrite."""

    cleaning: CleanRound
    transactions: TransactionTracker
    end_offset: int
    groups: list[list[SegmentSnapshot]]
    counts: CleanCounts = field(default_factory=CleanCounts)


async def run_inline(fn: Callable[[], T], /) -> T:
    return fn()


@dataclass(frozen=True, slots=True)
class ThreadRunner:
    """Runs work in a worker thread. If the task is cancelled meanwhile, it sets
    ``stop`` and waits for the work to notice, so no worker outlives the task
    (the log manager may be closed right after)."""

    stop: threading.Event

    async def __call__(self, fn: Callable[[], T], /) -> T:
        finished = False

        async def stop_when_cancelled() -> None:
            try:
                await trio.sleep_forever()
            finally:
                if not finished:
                    self.stop.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(stop_when_cancelled)
            try:
                return await trio.to_thread.run_sync(fn)
            finally:
                finished = True
                nursery.cancel_scope.cancel()


def read_batches(
    segment: SegmentSnapshot, start: int, chunk_bytes: int, snapshot: CleanSnapshot
) -> Iterator[tuple[BytesLike, int, RecordBatchHeader]]:
    """Each whole batch of the snapshot from ``start`` (a batch boundary): ``(buffer, position, header)``."""
    position = start
    end = segment.size
    while position < end:
        snapshot.check_done()
        buf = os.pread(segment.fd, min(chunk_bytes, end - position), position)
        snapshot.throttler.maybe_throttle(len(buf))
        consumed = 0
        for at, header in iter_batch_headers(buf):
            yield buf, at, header
            consumed = at + header.size_in_bytes
        if consumed == 0:
            # A batch larger than the chunk: read it whole.
            size = batch_size_at(buf)
            if size is None or size < BATCH_HEADER_SIZE or size > end - position:
                raise CorruptRecordError(
                    f"{segment.segment.log_path.name}: no whole batch at {position}", offset=position
                )
            buf = os.pread(segment.fd, size, position)
            if len(buf) != size:
                raise CorruptRecordError("short read of a batch", offset=position)
            snapshot.throttler.maybe_throttle(size)
            yield buf, 0, read_batch_header(buf)
            consumed = size
        position += consumed


def scan_headers(
    segment: SegmentSnapshot, check_done: Callable[[], None]
) -> Iterator[tuple[RecordBatchHeader, bytes | None]]:
    """Each batch header of the snapshot, with the whole batch for control batches only."""
    position = 0
    end = segment.size
    buf = b""
    buf_start = 0
    while end - position >= BATCH_HEADER_SIZE:
        at = position - buf_start
        if at + BATCH_HEADER_SIZE > len(buf):
            check_done()
            buf = os.pread(segment.fd, min(_HEADER_SCAN_BYTES, end - position), position)
            buf_start, at = position, 0
        header = read_batch_header(buf, at)
        size = header.size_in_bytes
        if size < BATCH_HEADER_SIZE or size > end - position:
            raise CorruptRecordError(
                f"{segment.segment.log_path.name}: batch at {position} runs past the snapshot",
                offset=position,
            )
        whole = None
        if header.is_control:
            whole = os.pread(segment.fd, size, position)
            if len(whole) != size:
                raise CorruptRecordError("short read of a control batch", offset=position)
        yield header, whole
        position += size
    if position != end:
        raise CorruptRecordError(f"{segment.segment.log_path.name}: torn batch at {position}")


def write_all(fd: int, chunks: Sequence[BytesLike]) -> None:
    for chunk in chunks:
        view = memoryview(chunk)
        while view:
            view = view[os.write(fd, view) :]


def group_segments(
    segments: Sequence[SegmentSnapshot],
    max_bytes: int,
    max_index_entries: int,
    index_interval_bytes: int,
    first_uncleanable_offset: int,
) -> list[list[SegmentSnapshot]]:
    """Consecutive segments whose total fits one segment (Kafka's groupSegmentsBySize).

    A group's offsets must fit int32 relative offsets, and its data must not
    need more index entries than one index holds (Kafka compares index file
    sizes; ours are rebuilt, so the count follows from the data size).
    """
    groups: list[list[SegmentSnapshot]] = []
    index = 0
    while index < len(segments):
        group = [segments[index]]
        size = segments[index].size
        index += 1
        while index < len(segments):
            candidate = segments[index]
            # The candidate's last offset, bounded by where the next segment starts.
            last_offset = (
                segments[index + 1].base_offset - 1
                if index + 1 < len(segments)
                else first_uncleanable_offset - 1
            )
            if (
                size + candidate.size > max_bytes
                or (size + candidate.size) // (index_interval_bytes + 1) + 1 > max_index_entries
                or (candidate.size and last_offset - group[0].base_offset > _INT32_MAX)
            ):
                break
            group.append(candidate)
            size += candidate.size
            index += 1
        groups.append(group)
    return groups


class HasBaseOffset(Protocol):
    @property
    def base_offset(self) -> int: ...


def floor_index(segments: Sequence[HasBaseOffset], offset: int) -> int:
    """The index of the segment holding ``offset`` (the first if it is below them all)."""
    return max(bisect.bisect_right(segments, offset, key=lambda s: s.base_offset) - 1, 0)


def segments_between(
    segments: Sequence[LogSegment], start: int, end: int
) -> Sequence[LogSegment]:
    """The segments overlapping ``[start, end)`` (Kafka's logSegments(from, to))."""
    first = floor_index(segments, start)
    return [s for s in segments[first:] if s.base_offset < end]


def plan_clean(
    chosen: LogToClean, snapshot: CleanSnapshot, cleaner_config: CleanerConfig, io_chunk_bytes: int
) -> CleanPlan:
    """Scan the log, map the dirty range, and group the segments to rewrite (Kafka's doClean)."""
    config = snapshot.log.config
    scan = ProducerScan()
    for segment in snapshot.segments:
        for header, marker_buf in scan_headers(segment, snapshot.check_done):
            scan.add(
                header,
                control_marker(marker_buf, 0, cleaner_config.max_decompressed_bytes)
                if marker_buf is not None
                else None,
            )
    offset_map = OffsetMap(
        cleaner_config.dedupe_buffer_size, cleaner_config.dedupe_buffer_load_factor
    )
    counts = CleanCounts()
    transactions = TransactionTracker(scan.aborted)
    start = chosen.first_dirty_offset
    upper = chosen.first_uncleanable_offset
    dirty = [s for s in snapshot.segments if s.base_offset < upper]
    dirty = dirty[floor_index(dirty, start) :]
    full = False
    for index, segment in enumerate(dirty):
        for buf, pos, header in read_batches(
            segment, segment.dirty_position, io_chunk_bytes, snapshot
        ):
            full = map_batch(
                offset_map,
                transactions,
                buf,
                pos,
                header,
                start,
                counts,
                cleaner_config.max_decompressed_bytes,
            )
            if full:
                break
        if full:
            break
        # Past any gap at the segment's end, up to where the next one starts.
        following = dirty[index + 1].base_offset if index + 1 < len(dirty) else upper
        offset_map.latest_offset = max(offset_map.latest_offset, following - 1)
    end_offset = offset_map.latest_offset + 1
    producers = snapshot.active_producers
    cleaning = CleanRound(
        offset_map=offset_map,
        active_producers=producers if producers is not None else scan.producers,
        now_ms=snapshot.now_ms,
        delete_retention_ms=config.delete_retention_ms,
        upper_bound_offset=upper,
        max_decompressed_bytes=cleaner_config.max_decompressed_bytes,
    )
    to_clean = [s for s in snapshot.segments[:-1] if s.base_offset < end_offset]
    groups = group_segments(
        to_clean,
        config.segment_bytes,
        max(config.segment_index_bytes // 12, 1),
        config.index_interval_bytes,
        upper,
    )
    return CleanPlan(cleaning, TransactionTracker(scan.aborted), end_offset, groups, counts)
