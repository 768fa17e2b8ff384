"""The open files of the logs, held to a budget (like RocksDB's ``max_open_files``).

Every segment's ``.log``, ``.index`` and ``.timeindex`` is a :class:`CachedFile`:
a path whose descriptor is opened when the file is used and kept open in a
least-recently-used list afterwards. :class:`FileCache` keeps at most
``capacity`` of them open; opening one more closes the least recently used idle
one. A file is *pinned* while it is in use — an append or a read of a segment, a
fetch's region until it has been sent with ``sendfile`` — and a pinned file is
never closed under its user: an eviction skips it, and closing or deleting it
waits for the last pin to go. So the number of partitions is limited by disk and
memory, not by the process's open-file limit.

Descriptors are per process, so one cache serves the whole broker; the lock
makes it safe for the log cleaner's worker threads too. The page cache is per
file, not per descriptor: closing a descriptor loses nothing written through it,
and ``fsync`` on a reopened one flushes what the earlier one wrote.
"""

from __future__ import annotations

import errno
import os
import threading
import weakref
from collections import OrderedDict
from pathlib import Path

import structlog

from wire.regions import FileRegion

log = structlog.get_logger(__name__)

#: Descriptors kept back from the files' share for everything else the broker opens
#: (listeners, the metadata journal, checkpoints being written, the log dir locks).
RESERVED_DESCRIPTORS = 128
#: The smallest budget: a few partitions must always be usable.
MIN_CAPACITY = 16
_CREATE_FLAGS = os.O_CREAT | os.O_EXCL


def default_capacity(open_file_limit: int) -> int:
    """The files' share of a process limit: half of what is left above the reserve.

    The other half is for client and inter-broker connections (see
    ``docs/operations.md``).
    """
    return max(MIN_CAPACITY, (open_file_limit - RESERVED_DESCRIPTORS) // 2)


class FileCache:
    """A bound on the log files held open at once, least recently used closed first."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"file cache capacity must be positive, got {capacity}")
        self._capacity = capacity
        self._lock = threading.RLock()
        # Open and not pinned, least recently used first.
        self._idle: OrderedDict[CachedFile, None] = OrderedDict()
        self._open = 0
        self.opens = 0
        self.evictions = 0
        #: Regions read into memory because pinned files filled the budget.
        self.copied_regions = 0

    @property
    def capacity(self) -> int:
        return self._capacity

    @capacity.setter
    def capacity(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"file cache capacity must be positive, got {capacity}")
        with self._lock:
            self._capacity = capacity
            self._trim(capacity)

    @property
    def open_files(self) -> int:
        """Descriptors held now, pinned or idle."""
        return self._open

    @property
    def pinned_files(self) -> int:
        return self._open - len(self._idle)

    def file(self, path: str | Path, flags: int) -> CachedFile:
        """A file opened with ``flags`` when first used (``O_CREAT | O_EXCL`` only that first time)."""
        return CachedFile(self, path, flags)

    # -- called by CachedFile under the lock ----------------------------------------

    def _open_fd(self, path: str, flags: int) -> int:
        self._trim(self._capacity - 1)
        try:
            fd = os.open(path, flags, 0o644)
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE) or not self._idle:
                raise
            # Connections took the rest of the process limit: give back half of ours and retry.
            self._trim(len(self._idle) // 2 + (self._open - len(self._idle)))
            fd = os.open(path, flags, 0o644)
        self._open += 1
        self.opens += 1
        return fd

    def _trim(self, keep: int) -> None:
        while self._open > keep and self._idle:
            victim, _ = self._idle.popitem(last=False)
            victim._close_fd()
            self.evictions += 1

    def close_all_idle(self) -> None:
        """Close every descriptor that is not in use (tests, and shutdown)."""
        with self._lock:
            self._trim(0)


class CachedFile:
    """One log file whose descriptor the :class:`FileCache` opens and closes."""

    __slots__ = ("__weakref__", "_cache", "_closed", "_fd", "_flags", "_path", "_pins")

    def __init__(self, cache: FileCache, path: str | Path, flags: int) -> None:
        self._cache = cache
        # A string, not a Path: a hundred thousand idle partitions hold three of these each.
        self._path = os.fspath(path)
        self._flags = flags
        self._fd = -1
        self._pins = 0
        self._closed = False

    @property
    def path(self) -> Path:
        return Path(self._path)

    @property
    def fspath(self) -> str:
        """The file's path as a string (without a Path made for it)."""
        return self._path

    @property
    def name(self) -> str:
        """The file's name (without a Path made for it)."""
        return os.path.basename(self._path)

    @property
    def is_open(self) -> bool:
        """Whether a descriptor is held now (for tests and metrics)."""
        return self._fd >= 0

    @property
    def closed(self) -> bool:
        return self._closed

    def acquire(self) -> int:
        """Pin the file and return its descriptor, opening it if needed; :meth:`release` when done."""
        cache = self._cache
        with cache._lock:
            if self._closed:
                raise ValueError(f"{self.name} is closed")
            if self._fd < 0:
                self._fd = cache._open_fd(self._path, self._flags)
                self._flags &= ~_CREATE_FLAGS
            elif self._pins == 0:
                del cache._idle[self]
            self._pins += 1
            return self._fd

    def release(self) -> None:
        cache = self._cache
        with cache._lock:
            self._pins -= 1
            if self._pins or self._fd < 0:
                return
            if self._closed:
                self._close_fd()
            else:
                cache._idle[self] = None
                cache._trim(cache._capacity)

    def pinned(self) -> CachedFile:
        """The descriptor, pinned for the ``with`` block (``with file.pinned() as fd``). The file
        is its own context manager: a generator-based one cost more than the pin itself, and every
        append of every partition takes one or more."""
        return self

    def __enter__(self) -> int:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def region(self, position: int, length: int) -> FileRegion | bytes:
        """A region of this file that keeps it pinned until the region is dropped (sent or discarded).

        When pinned files already fill the budget (one fetch over thousands of partitions),
        the bytes themselves instead: a fetch must not take descriptors the budget has not got.
        """
        cache = self._cache
        with cache._lock:
            if self._pins == 0 and cache.pinned_files >= cache._capacity:
                cache.copied_regions += 1
                with self.pinned() as fd:
                    return os.pread(fd, length, position)
        fd = self.acquire()
        try:
            region = FileRegion(fd, position, length)
            weakref.finalize(region, self.release)
        except BaseException:
            self.release()
            raise
        return region

    def rename(self, path: Path) -> None:
        """Rename the file on disk; an open descriptor follows it, a later open uses the new name."""
        with self._cache._lock:
            os.rename(self._path, path)
            self._path = os.fspath(path)

    def close(self) -> None:
        """Close the descriptor now, or when the last pin goes; the file cannot be used again."""
        cache = self._cache
        with cache._lock:
            self._closed = True
            if self._fd >= 0 and self._pins == 0:
                cache._idle.pop(self, None)
                self._close_fd()

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, -1
        self._cache._open -= 1
        os.close(fd)

    def __repr__(self) -> str:
        return f"CachedFile({self.name}, fd={self._fd}, pins={self._pins})"


#: The cache of logs opened without one of their own (tests and tools); the broker passes its own.
DEFAULT_FILE_CACHE = FileCache(4096)
