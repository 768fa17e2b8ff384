"""Reading and writing a segment's ``.log`` through its descriptor: batch header scans, the
recovery scan and whole writes."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from broker.log.file_cache import CachedFile
from wire.exceptions import CorruptRecordError
from wire.records import (
    BATCH_HEADER_SIZE,
    RecordBatchHeader,
    batch_size_at,
    read_batch_header,
    validate_batch,
)

#: Bytes read at a time when scanning batch headers forward from an index entry.
SCAN_CHUNK_BYTES = 16 * 1024
#: Bytes read at a time by recovery.
RECOVERY_CHUNK_BYTES = 1024 * 1024


def scan_pinned(file: CachedFile, start: int, end: int) -> Iterator[tuple[int, RecordBatchHeader]]:
    """:func:`scan_headers` with the file pinned until the scan ends or is dropped."""
    if end - start < BATCH_HEADER_SIZE:
        return  # nothing to read: the file need not be opened
    with file.pinned() as fd:
        yield from scan_headers(fd, start, end)


def scan_headers(fd: int, start: int, end: int) -> Iterator[tuple[int, RecordBatchHeader]]:
    """Batch headers of the file from ``start`` (a batch boundary), stopping before a batch past ``end``."""
    position = start
    buf = b""
    buf_start = position
    while end - position >= BATCH_HEADER_SIZE:
        at = position - buf_start
        if at + BATCH_HEADER_SIZE > len(buf):
            buf = os.pread(fd, min(SCAN_CHUNK_BYTES, end - position), position)
            buf_start = position
            at = 0
            if len(buf) < BATCH_HEADER_SIZE:
                return
        header = read_batch_header(buf, at)
        if header.size_in_bytes > end - position:
            return
        yield position, header
        position += header.size_in_bytes


def write_all(fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
    """Write all of ``data`` at the end of an ``O_APPEND`` file that ends at ``position``.

    On failure (a full disk) the partial write is cut off again, so the file
    never keeps a torn batch that the log's size does not account for.
    """
    view = memoryview(data)
    try:
        while view:
            written = os.write(fd, view)
            view = view[written:]
    except OSError:
        os.ftruncate(fd, position)
        raise


@dataclass(slots=True)
class RecoveryScan:
    """The good batches of a ``.log`` from its start, each validated (CRC included), up to the
    first bad one: a torn header or batch, one over ``max_batch_size``, a bad CRC, offsets that
    do not increase or do not ``fit`` the segment. Iterating yields (position, header); then
    ``valid`` is where the good bytes end, ``last_offset`` the last good offset and
    ``problem`` why the scan stopped early (None at the end of the file)."""

    fd: int
    file_size: int
    max_batch_size: int
    fits: Callable[[int], bool]
    last_offset: int
    valid: int = 0
    problem: str | None = None

    def __iter__(self) -> Iterator[tuple[int, RecordBatchHeader]]:
        buf = b""
        buf_start = 0
        while self.valid < self.file_size:
            remaining = self.file_size - self.valid
            if self.valid + BATCH_HEADER_SIZE > buf_start + len(buf):
                buf = os.pread(self.fd, min(RECOVERY_CHUNK_BYTES, remaining), self.valid)
                buf_start = self.valid
            at = self.valid - buf_start
            try:
                size = batch_size_at(buf, at)
                if size is None or remaining < BATCH_HEADER_SIZE:
                    self.problem = "torn header"
                    return
                if size > remaining:
                    self.problem = "torn batch"
                    return
                if size > self.max_batch_size:
                    self.problem = "batch too large"
                    return
                if at + size > len(buf):
                    buf = os.pread(self.fd, max(size, min(RECOVERY_CHUNK_BYTES, remaining)), self.valid)
                    buf_start = self.valid
                    at = 0
                header = validate_batch(buf, at)
            except CorruptRecordError as exc:
                self.problem = exc.reason
                return
            if header.base_offset <= self.last_offset:
                self.problem = "offsets do not increase"
                return
            if not self.fits(header.last_offset):
                self.problem = "offset does not fit the segment"
                return
            yield self.valid, header
            self.valid += size
            self.last_offset = header.last_offset
