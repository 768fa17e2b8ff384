"""Loading a partition's log from its directory (Kafka's LogLoader).

Stray files from interrupted deletes, cleanings and segment swaps are removed or
completed as Kafka does; segments with missing or corrupt indexes are rebuilt;
without a clean shutdown, everything from the recovery point on is re-validated and
cut at the first bad batch; the leader epoch cache follows what is left.
"""

from __future__ import annotations

import bisect
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import structlog

from broker.log.config import LogConfig
from broker.log.errors import CorruptIndexError
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
from broker.log.partition_log import PartitionLog
from broker.log.segment import LogSegment
from broker.log.segment_changes import _floor_index
from broker.log.shutdown_summary import PartitionListing, SegmentSummary
from wire.records import RecordBatchHeader

log = structlog.get_logger(__name__)


def load_log(
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
    """Load (or create) the partition in ``directory`` (``existing``: the caller listed it).

    ``listing``, from the clean shutdown's summary, stands for the directory's listing and
    the segments' sizes and next offsets after a clean shutdown (it is ignored otherwise).

    ``recovery_point`` and ``log_start_offset`` come from the log
    directory's checkpoints. Stray files from interrupted deletes and
    cleanings are removed or completed as Kafka does; segments with
    missing or corrupt indexes are rebuilt; without a clean shutdown,
    everything from the recovery point on is re-validated and cut at the
    first bad batch.
    """
    parse_partition_dir_name(directory.name)  # refuse a directory that is not a partition's
    fresh = False
    if not existing:
        try:
            directory.mkdir(parents=True)
            fresh = True
        except FileExistsError:
            pass
    names: list[str] = []
    if fresh:
        segments: list[LogSegment] = []
        needs_rebuild: set[LogSegment] = set()
    else:
        known: Sequence[SegmentSummary] = ()
        if listing is not None and had_clean_shutdown and listing.matches_names():
            names, known = list(listing.names), listing.segments
        else:
            names = remove_temp_files_and_complete_swaps(directory)
        segments, needs_rebuild = _open_segments(
            directory, names, config, clock_ms, files, check_indexes=not had_clean_shutdown,
            recovered_from=None if had_clean_shutdown else recovery_point, known=known,
        )
    try:
        return _load(
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
            names=names,
        )
    except BaseException:
        for segment in segments:
            segment.close_handles()
        raise

def _load(
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
    names: list[str],
) -> PartitionLog:
    tp = parse_partition_dir_name(directory.name)
    epoch_cache = LeaderEpochCache(f"{directory}{os.sep}{LEADER_EPOCH_CHECKPOINT}",
                                   exists=LEADER_EPOCH_CHECKPOINT in names)
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
        names = [*names, segments[0].log_path.name]

    log_end_offset = segments[-1].next_offset
    start = min(max(log_start_offset, segments[0].base_offset), log_end_offset)
    recovery_point = (
        log_end_offset if had_clean_shutdown else min(recovery_point, log_end_offset)
    )
    epoch_cache.truncate_from_end(log_end_offset, sync=False)
    epoch_cache.truncate_from_start(start, sync=False)
    partition_log = PartitionLog(
        directory,
        config,
        clock_ms,
        segments,
        log_start_offset=start,
        recovery_point=recovery_point,
        epoch_cache=epoch_cache,
        files=files,
        dir_needs_fsync=fresh,
        file_names=names,
    )
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


def _file_names(directory: Path) -> list[str]:
    """The regular files of ``directory``, sorted (the entry types come with the listing: no stat each)."""
    with os.scandir(directory) as entries:
        # Interned: an idle partition keeps them until its producer state loads, and most are
        # the same few names (``00000000000000000000.log``, ``leader-epoch-checkpoint``...).
        return sorted(sys.intern(entry.name) for entry in entries if entry.is_file())


def remove_temp_files_and_complete_swaps(directory: Path) -> list[str]:
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
    directory: Path,
    names: Sequence[str],
    config: LogConfig,
    clock_ms: Callable[[], int],
    files: FileCache,
    *,
    check_indexes: bool = True,
    recovered_from: int | None = None,
    known: Sequence[SegmentSummary] = (),
) -> tuple[list[LogSegment], set[LogSegment]]:
    """Every ``.log`` among ``names`` in offset order, and those whose indexes need a rebuild.

    Without ``check_indexes`` (after a clean shutdown) only missing index files are looked
    for, as Kafka does: the indexes are checked in full when they are first loaded. Segments
    from the one holding ``recovered_from`` on are not looked at: recovery rebuilds them.
    """
    present = frozenset(names)
    bases = sorted(
        offset
        for name in names
        if name.endswith(LOG_SUFFIX) and (offset := _offset_or_none(name)) is not None
    )
    segments: list[LogSegment] = []
    needs_rebuild: set[LogSegment] = set()
    first_recovered = (
        None if recovered_from is None else bases[max(bisect.bisect_right(bases, recovered_from) - 1, 0)]
        if bases else None
    )
    summaries = {summary.base_offset: summary for summary in known}
    try:
        for base_offset in bases:
            segment = LogSegment.open(
                directory,
                base_offset,
                index_interval_bytes=config.index_interval_bytes,
                max_index_bytes=config.segment_index_bytes,
                clock_ms=clock_ms,
                files=files,
                dir_names=present,
                known=summaries.get(base_offset),
            )
            segments.append(segment)
            if first_recovered is not None and base_offset >= first_recovered:
                continue
            try:
                if check_indexes:
                    segment.sanity_check()
                elif segment.indexes_missing:
                    raise CorruptIndexError(f"{segment.log_path.name}: index files missing")
            except CorruptIndexError as exc:
                log.warning("index_corrupt", segment=str(segment.log_path), error=str(exc))
                needs_rebuild.add(segment)
    except BaseException:
        for segment in segments:
            segment.close_handles()
        raise
    return segments, needs_rebuild


def _epoch_restorer(cache: LeaderEpochCache) -> Callable[[RecordBatchHeader], None]:
    """Recovery's hook: an epoch newer than the cache knows starts at this batch (as Kafka).
    The cache's file is not read for it: the change is kept until the partition is used."""
    newest = -1

    def restore(header: RecordBatchHeader) -> None:
        nonlocal newest
        epoch = header.partition_leader_epoch
        if epoch > newest:
            newest = epoch
            cache.assign_if_newer(epoch, header.base_offset)

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
    first = _floor_index(segments, recovery_point)
    for index in range(first, len(segments)):
        segment = segments[index]
        # The active segment's largest timestamp goes to its time index when it is next
        # written, rolled or closed: a partition recovered at start creates no file for it.
        if index == first:
            # Only the part at or past the recovery point: below it everything was flushed.
            truncated = segment.recover_from(recovery_point, on_batch=restore, index_max_timestamp=False)
        else:
            # Past the recovery point: the log's next flush makes the rebuilt indexes durable.
            truncated = segment.recover(on_batch=restore, sync_indexes=False, index_max_timestamp=False)
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
            segments = segments[: index + 1]
            break
    for inactive in segments[first:-1]:
        # Retention reads an inactive segment's largest timestamp from its time index.
        inactive.index_max_timestamp()
    return segments
