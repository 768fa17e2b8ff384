"""Reading and writing a segment's ``.log`` through its descriptor: batch header scans and whole writes."""

from __future__ import annotations

import os
from collections.abc import Iterator

from broker.log.file_cache import CachedFile
from wire.records import BATCH_HEADER_SIZE, RecordBatchHeader, read_batch_header

#: Bytes read at a time when scanning batch headers forward from an index entry.
SCAN_CHUNK_BYTES = 16 * 1024


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
