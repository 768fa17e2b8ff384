"""The aborted-transaction index: a ``<base_offset>.txnindex`` file beside each segment.

Mirrors Kafka's TransactionIndex and AbortedTxn, byte for byte. Each entry is
34 bytes: version (int16, 0), producer id (int64), first offset (int64), last
offset (int64, the offset of the ABORT marker) and the last stable offset at
the time of the abort (int64). An entry sits in the index of the segment that
holds its marker; the transaction's data may start in an earlier segment.
Entries are appended in increasing last-offset order; the file is created on
the first entry.

read_committed fetches ask :meth:`TransactionIndexes.collect` which aborted
transactions overlap the fetched range; the client then drops those
producers' records up to each marker. The index is rebuilt from the log
whenever producer state is replayed (see :mod:`broker.log.producer_state`), so
a torn or missing file after a crash is repaired on load.

Entries are cached in memory once a file has been read: aborts are rare next to
data, and fetches must not pay a read per request.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import structlog

from broker.log.files import (
    DELETED_SUFFIX,
    TXN_INDEX_SUFFIX,
    fsync_dir,
    fsync_file,
    segment_file_name,
)

log = structlog.get_logger(__name__)

TXN_INDEX_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size
assert ENTRY_SIZE == 34


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(
            TXN_INDEX_VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )


class TransactionIndex:
    """The aborted transactions whose markers are in one segment."""

    def __init__(self, directory: Path, base_offset: int) -> None:
        self.base_offset = base_offset
        self.path = directory / segment_file_name(base_offset, TXN_INDEX_SUFFIX)
        self._entries: list[AbortedTxn] | None = None
        self._dirty = False

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._entries = self._read()
        return self._entries

    def _read(self) -> list[AbortedTxn]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        entries: list[AbortedTxn] = []
        usable = len(data) - len(data) % ENTRY_SIZE
        for pos in range(0, usable, ENTRY_SIZE):
            version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
            if version != TXN_INDEX_VERSION or (entries and last <= entries[-1].last_offset):
                usable = pos
                break
            entries.append(AbortedTxn(pid, first, last, lso))
        if usable != len(data):
            # A torn tail (or garbage) after a crash: keep the good prefix; replay refills the rest.
            log.warning("txn_index_truncated", file=str(self.path), bytes_kept=usable, bytes_found=len(data))
            with open(self.path, "r+b") as f:
                f.truncate(usable)
        return entries

    def append(self, entry: AbortedTxn) -> bool:
        """Add ``entry``; True if that created the file (the caller has the directory fsynced)."""
        entries = self.entries
        if entries and entry.last_offset <= entries[-1].last_offset:
            raise ValueError(
                f"{self.path.name}: last offset {entry.last_offset} does not follow {entries[-1].last_offset}"
            )
        created = not self.path.exists()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            data = entry.encode()
            written = os.write(fd, data)
            if written != len(data):
                os.ftruncate(fd, len(entries) * ENTRY_SIZE)
                raise OSError(f"short write to {self.path}")
        finally:
            os.close(fd)
        entries.append(entry)
        self._dirty = True
        return created

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or above ``offset``."""
        entries = self.entries
        keep = bisect.bisect_left([e.last_offset for e in entries], offset)
        if keep == len(entries):
            return
        del entries[keep:]
        if keep == 0:
            self.path.unlink(missing_ok=True)
        else:
            with open(self.path, "r+b") as f:
                f.truncate(keep * ENTRY_SIZE)
        self._dirty = True

    def flush(self) -> None:
        if not self._dirty:
            return
        # Cleared first: an entry appended (on the loop) while a worker thread fsyncs is
        # flushed next time rather than forgotten.
        self._dirty = False
        with contextlib.suppress(FileNotFoundError):
            fsync_file(self.path)

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
        self.path.with_name(self.path.name + DELETED_SUFFIX).unlink(missing_ok=True)
        self._entries = []


class TransactionIndexes:
    """The transaction indexes of one partition, keyed by segment base offset."""

    def __init__(self, directory: Path, file_names: Iterable[str] | None = None,
                 file_created: Callable[[], None] | None = None) -> None:
        """``file_names``: the directory's files as just listed (else it is listed here).
        ``file_created`` hears of each new index file: the log's next flush fsyncs the directory
        (off the event loop, before the recovery point passes the entry; a roll's way)."""
        self._dir = directory
        self._file_created = file_created
        self._indexes: dict[int, TransactionIndex] = {}
        if file_names is None:
            file_names = (path.name for path in directory.glob("*" + TXN_INDEX_SUFFIX))
        for name in file_names:
            if not name.endswith(TXN_INDEX_SUFFIX):
                continue
            head = name.split(".", 1)[0]
            if head.isdigit():
                base = int(head)
                self._indexes[base] = TransactionIndex(directory, base)

    def move_to(self, directory: Path) -> None:
        self._dir = directory
        for base in list(self._indexes):
            self._indexes[base] = TransactionIndex(directory, base)

    def append(self, segment_base_offset: int, entry: AbortedTxn) -> bool:
        """Add ``entry`` to the segment's index; True if its file was created (the directory
        then needs an fsync before the log's recovery point passes the entry)."""
        index = self._indexes.get(segment_base_offset)
        if index is None:
            index = self._indexes[segment_base_offset] = TransactionIndex(self._dir, segment_base_offset)
        created = index.append(entry)
        if created and self._file_created is not None:
            self._file_created()
        return created

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose marker is at or above ``offset`` (the log was cut there,
        or these markers are about to be replayed)."""
        for base in sorted(self._indexes):
            self._indexes[base].truncate_to(offset)

    def retain(self, segment_base_offsets: Iterable[int]) -> None:
        """Delete the indexes of segments that are no longer in the log."""
        live = set(segment_base_offsets)
        for base in [b for b in self._indexes if b not in live]:
            self._indexes.pop(base).delete()

    def rewrite_range(self, start: int, end: int, markers: frozenset[int]) -> None:
        """Gather the entries with markers in ``[start, end)`` into the index at ``start``,
        keeping those whose marker offset is still in ``markers`` (segments merged or
        rewritten by the cleaner)."""
        moved = [e for e in self.all_entries() if start <= e.last_offset < end and e.last_offset in markers]
        for base in [b for b in self._indexes if start <= b < end]:
            self._indexes.pop(base).delete()
        if any([self.append(start, entry) for entry in moved]):
            fsync_dir(self._dir)

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[fetch_offset, upper_bound_offset)``, in marker order.

        As Kafka, the scan starts at the segment holding ``fetch_offset`` and stops at
        the first entry whose last stable offset reaches the upper bound: every
        transaction aborted later started above it.
        """
        bases = sorted(self._indexes)
        start = max(bisect.bisect_right(bases, fetch_offset) - 1, 0)
        found: list[AbortedTxn] = []
        for base in bases[start:]:
            for entry in self._indexes[base].entries:
                if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound_offset:
                    found.append(entry)
                if entry.last_stable_offset >= upper_bound_offset:
                    return found
        return found

    def all_entries(self) -> list[AbortedTxn]:
        return [e for base in sorted(self._indexes) for e in self._indexes[base].entries]

    def flush(self) -> None:
        for index in list(self._indexes.values()):  # a worker thread may flush while the loop adds
            index.flush()

    def delete_all(self) -> None:
        for index in self._indexes.values():
            index.delete()
        self._indexes.clear()
