"""Sparse per-segment indexes: offset → file position, and timestamp → offset.

Mirrors Kafka's OffsetIndex and TimeIndex. Files hold fixed-size big-endian
entries, with offsets stored relative to the segment's base offset:

- ``.index``: int32 relative offset, int32 position of a batch in the ``.log``;
- ``.timeindex``: int64 timestamp, int32 relative offset; a new entry only
  when the segment's largest timestamp grows.

Entries are kept in memory in ``array`` columns, loaded on first use (a
broker with thousands of old segments should not read every index at
start), and each new entry is written through to the file at once, so the
file never lags the memory copy and nothing needs trimming on close. Files
are not preallocated. Lookups are binary searches for the greatest entry at
or below the target. Like Kafka's memory-mapped indexes, a loaded index needs
no descriptor: the file is opened through the broker's
:class:`~broker.log.file_cache.FileCache` only to load, append, truncate or
fsync it.

A cheap sanity check (file shape, first and last entries) runs when a
segment is opened; the full check (every column strictly increasing) runs
when the entries are loaded. Either failure raises :class:`CorruptIndexError`
and the segment rebuilds the index from its log.
"""

from __future__ import annotations

import bisect
import operator
import os
import struct
import sys
from array import array
from pathlib import Path
from typing import ClassVar, NamedTuple

from broker.log.errors import CorruptIndexError
from broker.log.file_cache import DEFAULT_FILE_CACHE, FileCache

INT32_MAX = 2**31 - 1
#: The timestamp of a record that has none (RecordBatch.NO_TIMESTAMP).
NO_TIMESTAMP = -1

assert array("i").itemsize == 4 and array("q").itemsize == 8


class OffsetPosition(NamedTuple):
    offset: int
    position: int


class TimestampOffset(NamedTuple):
    timestamp: int
    offset: int


def _columns(data: bytes, key_code: str, value_code: str) -> tuple[array[int], array[int]]:
    """Split big-endian ``key value`` entries into two native-order arrays.

    Strided slice copies do the work in C, so loading a multi-megabyte index
    costs milliseconds rather than one Python call per entry.
    """
    keys: array[int] = array(key_code)
    values: array[int] = array(value_code)
    key_size = keys.itemsize
    value_size = values.itemsize
    entry_size = key_size + value_size
    count = len(data) // entry_size
    key_bytes = bytearray(count * key_size)
    value_bytes = bytearray(count * value_size)
    for i in range(key_size):
        key_bytes[i::key_size] = data[i::entry_size]
    for i in range(value_size):
        value_bytes[i::value_size] = data[key_size + i :: entry_size]
    keys.frombytes(key_bytes)
    values.frombytes(value_bytes)
    if sys.byteorder == "little":
        keys.byteswap()
        values.byteswap()
    return keys, values


def _increasing(column: array[int], strictly: bool = True) -> bool:
    compare = operator.lt if strictly else operator.le
    return all(map(compare, column, column[1:]))


class _IndexFile:
    """A file of fixed-size ``(key, value)`` entries mirrored by two arrays.

    Not thread-safe for writers; lookups may run while the single writer appends.
    """

    _ENTRY: ClassVar[struct.Struct]
    _KEY_CODE: ClassVar[str]
    _VALUE_CODE: ClassVar[str]

    def __init__(
        self,
        path: str | Path,
        base_offset: int,
        max_index_bytes: int,
        files: FileCache = DEFAULT_FILE_CACHE,
        *,
        exists: bool | None = None,
    ) -> None:
        """``exists`` says whether the file is known to exist (its size is then read when first
        needed) or known not to, in which case it is an empty index whose file is created when
        first written or flushed (:meth:`ensure_file`): a new partition creates one file, not
        three. None: look now, and create the file if it is missing."""
        self.base_offset = base_offset
        self.max_entries = max_index_bytes // self._ENTRY.size
        self._file = files.file(path, os.O_RDWR | os.O_CREAT)
        self._known_size: int | None = None
        self._file_exists = exists is not False
        if exists is None:
            try:
                self._known_size = os.stat(path).st_size
            except FileNotFoundError:
                with self._file.pinned():
                    pass  # created empty, as Kafka creates a missing index
                self._known_size = 0
        elif not exists:
            self._known_size = 0
        # Whether entries were written since the last fsync.
        self._dirty = False
        # Whether the file holds bytes past ``_file_size`` (entries dropped by :meth:`reset`)
        # still to be cut off: before the next write, flush or close, not at once.
        self._truncate_file = False
        # Loaded lazily; until then the file size gives the count.
        self._keys: array[int] | None = None
        self._values: array[int] | None = None

    @property
    def path(self) -> Path:
        return self._file.path

    @property
    def _file_size(self) -> int:
        # Read on first use: a partition's indexes are not touched at start until they are needed.
        if self._known_size is None:
            try:
                self._known_size = os.stat(self._file.fspath).st_size
            except FileNotFoundError:
                self._known_size = 0  # removed meanwhile: recreated empty when next written
        return self._known_size

    @_file_size.setter
    def _file_size(self, size: int) -> None:
        self._known_size = size

    @property
    def file_exists(self) -> bool:
        return self._file_exists

    def ensure_file(self) -> bool:
        """Create the (empty) file if it is not there yet; True if it was created now."""
        if self._file_exists:
            return False
        with self._file.pinned():
            pass  # opened with O_CREAT
        self._file_exists = True
        return True

    @property
    def entry_size(self) -> int:
        return self._ENTRY.size

    @property
    def entries(self) -> int:
        if self._keys is not None:
            return len(self._keys)
        return self._file_size // self._ENTRY.size

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    @property
    def is_loaded(self) -> bool:
        return self._keys is not None

    def _raw_entry(self, slot: int) -> tuple[int, int]:
        if self._keys is not None and self._values is not None:
            return self._keys[slot], self._values[slot]
        size = self._ENTRY.size
        with self._file.pinned() as fd:
            data = os.pread(fd, size, slot * size)
        if len(data) != size:
            raise CorruptIndexError(f"{self.path.name}: short read of entry {slot}")
        key, value = self._ENTRY.unpack(data)
        return int(key), int(value)

    def _check_shape(self) -> None:
        if self._file_size % self._ENTRY.size:
            raise CorruptIndexError(
                f"{self.path.name}: size {self._file_size} is not a multiple of {self._ENTRY.size}"
            )

    def load(self) -> None:
        """Read every entry and check the columns increase; CorruptIndexError if not."""
        if self._keys is not None:
            return
        self._check_shape()
        data = b""
        if self._file_size:
            with self._file.pinned() as fd:
                data = os.pread(fd, self._file_size, 0)
        if len(data) != self._file_size:
            raise CorruptIndexError(f"{self.path.name}: short read")
        keys, values = _columns(data, self._KEY_CODE, self._VALUE_CODE)
        self._check_columns(keys, values)
        self._keys, self._values = keys, values

    def _check_columns(self, keys: array[int], values: array[int]) -> None:
        raise NotImplementedError

    def _columns_loaded(self) -> tuple[array[int], array[int]]:
        self.load()
        assert self._keys is not None and self._values is not None
        return self._keys, self._values

    def _append_raw(self, key: int, value: int) -> None:
        keys, values = self._columns_loaded()
        entry = self._ENTRY.pack(key, value)
        position = len(keys) * len(entry)
        with self._file.pinned() as fd:
            self._file_exists = True
            if self._truncate_file:
                os.ftruncate(fd, position)
                self._truncate_file = False
            written = os.pwrite(fd, entry, position)
        if written != len(entry):
            raise OSError(f"short write to {self.path.name}")
        keys.append(key)
        values.append(value)
        self._file_size = position + len(entry)
        self._dirty = True

    def _truncate_entries(self, count: int) -> None:
        keys, values = self._columns_loaded()
        if count >= len(keys):
            return
        del keys[count:]
        del values[count:]
        self._file_size = count * self._ENTRY.size
        with self._file.pinned() as fd:
            os.ftruncate(fd, self._file_size)
        self._truncate_file = False
        self._dirty = True

    def reset(self) -> None:
        """Drop every entry, without reading the (possibly corrupt) file first.

        The file is cut when next written, flushed or closed: a recovery that rebuilds the
        index of every partition at start would otherwise open and truncate two files per
        partition (most of a start after a crash). Until then the old entries are not read:
        the empty columns stand for the file."""
        self._keys = array(self._KEY_CODE)
        self._values = array(self._VALUE_CODE)
        # An empty file (a new segment's, the common case) is left alone; one whose size is
        # not known yet is cut without a look at it (a stat per index at start is cost too).
        if (self._known_size is None and self._file_exists) or self._known_size:
            self._truncate_file = True
            self._dirty = True
        self._file_size = 0

    def _cut_file(self, fd: int) -> None:
        if self._truncate_file:
            os.ftruncate(fd, self._file_size)
            self._truncate_file = False

    def flush(self) -> bool:
        """fsync what was written; creates the file if it was never written. True if it
        was created now (its directory then needs an fsync too)."""
        created = self.ensure_file()
        if not self._dirty and not created:
            return False
        with self._file.pinned() as fd:
            self._cut_file(fd)
            os.fsync(fd)
        self._dirty = False
        return created

    def cut(self) -> None:
        """Cut off what :meth:`reset` dropped, now (a clean close leaves the file as it reads)."""
        if self._truncate_file and not self._file.closed:
            with self._file.pinned() as fd:
                self._cut_file(fd)

    def close(self) -> None:
        """Close the file without writing anything (:meth:`cut` first for a clean close)."""
        self._file.close()

    def rename(self, path: Path) -> None:
        self.ensure_file()
        self._file.rename(path)

    def delete(self) -> None:
        self.close()
        self._file.path.unlink(missing_ok=True)


class OffsetIndex(_IndexFile):
    """Sparse map from offsets to positions of batches in the segment's log file."""

    _ENTRY = struct.Struct(">ii")
    _KEY_CODE = "i"
    _VALUE_CODE = "i"

    def sanity_check(self, log_size: int) -> None:
        """Cheap checks on the file alone: shape, first and last entry inside the segment."""
        self._check_shape()
        count = self.entries
        if not count:
            return
        first_offset, first_position = self._raw_entry(0)
        last_offset, last_position = self._raw_entry(count - 1)
        if first_offset < 0 or last_offset < first_offset:
            raise CorruptIndexError(
                f"{self.path.name}: relative offsets {first_offset}..{last_offset} out of order"
            )
        if first_position < 0 or last_position < first_position or last_position >= log_size:
            raise CorruptIndexError(
                f"{self.path.name}: positions {first_position}..{last_position}"
                f" outside a log of {log_size} bytes"
            )

    def _check_columns(self, keys: array[int], values: array[int]) -> None:
        if (keys and keys[0] < 0) or not _increasing(keys) or not _increasing(values):
            raise CorruptIndexError(f"{self.path.name}: entries do not increase")

    def can_append_offset(self, offset: int) -> bool:
        """Whether ``offset`` fits this segment as a non-negative int32 relative offset."""
        return 0 <= offset - self.base_offset <= INT32_MAX

    @property
    def last_entry(self) -> OffsetPosition:
        """The last entry, or ``(base_offset, 0)`` for an empty index."""
        count = self.entries
        if not count:
            return OffsetPosition(self.base_offset, 0)
        relative, position = self._raw_entry(count - 1)
        return OffsetPosition(self.base_offset + relative, position)

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The entry with the greatest offset at or below ``target_offset``, else ``(base_offset, 0)``."""
        keys, values = self._columns_loaded()
        slot = bisect.bisect_right(keys, target_offset - self.base_offset) - 1
        if slot < 0:
            return OffsetPosition(self.base_offset, 0)
        return OffsetPosition(self.base_offset + keys[slot], values[slot])

    def lookup_position(self, target_position: int) -> OffsetPosition:
        """The entry with the greatest position at or below ``target_position``, else ``(base_offset, 0)``."""
        keys, values = self._columns_loaded()
        slot = bisect.bisect_right(values, target_position) - 1
        if slot < 0:
            return OffsetPosition(self.base_offset, 0)
        return OffsetPosition(self.base_offset + keys[slot], values[slot])

    def append(self, offset: int, position: int) -> None:
        """Add an entry; offsets and positions must increase, and the index must have room."""
        if self.is_full:
            raise ValueError(f"{self.path.name}: index is full ({self.entries} entries)")
        if not self.can_append_offset(offset):
            raise ValueError(f"{self.path.name}: offset {offset} does not fit the segment")
        keys, values = self._columns_loaded()
        relative = offset - self.base_offset
        if keys and (relative <= keys[-1] or position <= values[-1]):
            raise ValueError(
                f"{self.path.name}: entry ({offset}, {position}) does not follow"
                f" ({self.base_offset + keys[-1]}, {values[-1]})"
            )
        self._append_raw(relative, position)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries with an offset at or above ``offset``."""
        keys, _ = self._columns_loaded()
        self._truncate_entries(bisect.bisect_left(keys, offset - self.base_offset))


class TimeIndex(_IndexFile):
    """Sparse map from the segment's growing largest timestamp to the offset that reached it."""

    _ENTRY = struct.Struct(">qi")
    _KEY_CODE = "q"
    _VALUE_CODE = "i"

    def sanity_check(self) -> None:
        """Cheap checks on the file alone: shape, first and last entry in order."""
        self._check_shape()
        count = self.entries
        if not count:
            return
        first_timestamp, first_offset = self._raw_entry(0)
        last_timestamp, last_offset = self._raw_entry(count - 1)
        if last_timestamp < first_timestamp or first_offset < 0 or last_offset < first_offset:
            raise CorruptIndexError(f"{self.path.name}: first and last entries out of order")

    def _check_columns(self, keys: array[int], values: array[int]) -> None:
        if (
            (values and values[0] < 0)
            or not _increasing(keys)
            or not _increasing(values, strictly=False)
        ):
            raise CorruptIndexError(f"{self.path.name}: entries do not increase")

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or ``(NO_TIMESTAMP, base_offset)`` for an empty index."""
        count = self.entries
        if not count:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        timestamp, relative = self._raw_entry(count - 1)
        return TimestampOffset(timestamp, self.base_offset + relative)

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The entry with the greatest timestamp at or below the target, else ``(NO_TIMESTAMP, base_offset)``."""
        keys, values = self._columns_loaded()
        slot = bisect.bisect_right(keys, target_timestamp) - 1
        if slot < 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return TimestampOffset(keys[slot], self.base_offset + values[slot])

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Add ``(timestamp, offset)`` if ``timestamp`` is larger than the last entry's.

        ``skip_full_check`` lets a segment that is closing or rolling record its
        largest timestamp even when the index is full (Kafka does the same).
        """
        if not skip_full_check and self.is_full:
            raise ValueError(f"{self.path.name}: index is full ({self.entries} entries)")
        last = self.last_entry
        if self.entries and offset < last.offset:
            raise ValueError(
                f"{self.path.name}: offset {offset} is below the last entry's {last.offset}"
            )
        if self.entries and timestamp < last.timestamp:
            raise ValueError(
                f"{self.path.name}: timestamp {timestamp} is below the last entry's {last.timestamp}"
            )
        if timestamp > last.timestamp:
            relative = offset - self.base_offset
            if not 0 <= relative <= INT32_MAX:
                raise ValueError(f"{self.path.name}: offset {offset} does not fit the segment")
            self._append_raw(timestamp, relative)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries with an offset at or above ``offset``."""
        _, values = self._columns_loaded()
        self._truncate_entries(bisect.bisect_left(values, offset - self.base_offset))
