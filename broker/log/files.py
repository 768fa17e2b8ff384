"""Kafka's on-disk names, and writing small files so a crash leaves old or new.

Names mirror Kafka's LogFileUtils and UnifiedLog: a partition lives in the
directory ``<topic>-<partition>``; a segment's files are named by its base
offset zero-padded to 20 digits; a file being deleted, cleaned or swapped
carries an extra suffix. Topic names may contain ``.``, ``_`` and ``-``, so
a directory name splits on its last ``-``.
"""

from __future__ import annotations

import os
import re
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)

#: Appended to a segment's files when it leaves the log; unlinked after file.delete.delay.ms.
DELETED_SUFFIX = ".deleted"
#: A segment being written by the log cleaner; never complete after a restart.
CLEANED_SUFFIX = ".cleaned"
#: A finished replacement segment waiting to be renamed into place.
SWAP_SUFFIX = ".swap"

DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"
_SUFFIXED_DIR = re.compile(r"^(\S+)-(\S+)\.(\S+)-(delete|future|stray)$")
_PARTITION = re.compile(r"^[0-9]+$")
_MAX_FILE_NAME = 255


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


def segment_file_name(base_offset: int, suffix: str) -> str:
    """``00000000000000000042.log`` for base offset 42 and suffix ``.log``."""
    return f"{base_offset:020d}{suffix}"


def offset_from_file_name(name: str) -> int:
    """The base offset a segment file name starts with; ValueError if it has none."""
    head = name.split(".", 1)[0]
    if not head.isdigit():
        raise ValueError(f"not a segment file name: {name!r}")
    return int(head)


def partition_dir_name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def parse_partition_dir_name(name: str) -> TopicPartition:
    """The partition a log directory belongs to, also for ``-delete``/``-future``/``-stray`` names.

    Raises ValueError for a name that is not a partition directory.
    """
    if name.endswith((DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX)):
        if not _SUFFIXED_DIR.fullmatch(name):
            raise ValueError(f"not a partition directory: {name!r}")
        name = name[: name.rindex(".")]
    topic, dash, partition = name.rpartition("-")
    if not dash or not topic or not _PARTITION.fullmatch(partition):
        raise ValueError(f"not a partition directory: {name!r}")
    return TopicPartition(topic, int(partition))


def delete_dir_name(tp: TopicPartition) -> str:
    """A unique ``<topic>-<partition>.<id>-delete`` name, the topic cut to fit 255 bytes as Kafka does."""
    tail = f"-{tp.partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
    return tp.topic[: _MAX_FILE_NAME - len(tail)] + tail


def fsync_file(path: str | Path) -> None:
    """fsync a file written earlier (without); FileNotFoundError if it is gone."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Make renames and new files in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new file.

    Written to ``<path>.tmp``, fsynced, renamed over ``path``, then the
    directory is fsynced so the rename itself survives (Kafka's
    atomicMoveWithFallback after a synced write). Without ``sync`` the
    replacement is atomic for a crashed process but not durable across a
    power loss; the caller syncs later.
    """
    tmp = path.with_name(path.name + ".tmp")
    # One writer of a file at a time (Kafka's CheckpointFile writes are synchronized): the
    # periodic checkpoint runs in a worker thread while a follower's truncation checkpoints on
    # the event loop, and two writers of one ``.tmp`` either mix their bytes or find it renamed
    # away under them (FileNotFoundError, which stopped the broker).
    with _writer_lock(tmp):
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)


_writer_locks: dict[Path, threading.Lock] = {}
_writer_locks_guard = threading.Lock()


def _writer_lock(path: Path) -> threading.Lock:
    with _writer_locks_guard:
        lock = _writer_locks.get(path)
        if lock is None:
            lock = _writer_locks[path] = threading.Lock()
        return lock
