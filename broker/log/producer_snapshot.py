"""Producer state snapshot files: ``<offset>.snapshot``, Kafka's version-1 layout
(int16 version, uint32 CRC-32C of the rest, an array of 46-byte entries).

Kafka writes one entry per producer holding only its last batch; here a producer
has one entry per retained batch, oldest first, so all five survive a restart.
Kafka's own reader keeps the last entry of each producer, exactly what Kafka would
have written, so the files stay readable by Kafka's tools.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path

import crc32c

from broker.log.files import fsync_file, write_atomically
from broker.log.producer_entry import NO_OFFSET, BatchMetadata, ProducerStateEntry
from wire.records import NO_SEQUENCE

SNAPSHOT_SUFFIX = ".snapshot"
PRODUCER_SNAPSHOT_VERSION = 1

_SNAPSHOT_HEADER = struct.Struct(">hI")
_SNAPSHOT_COUNT = struct.Struct(">i")
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
assert _SNAPSHOT_ENTRY.size == 46


class CorruptSnapshotError(Exception):
    """A snapshot file that fails its version, size or CRC check; it is deleted and skipped."""


def write_snapshot(path: Path, entries: Iterable[ProducerStateEntry], *, sync: bool = True) -> None:
    """Write ``entries`` atomically in Kafka's snapshot layout (one entry per retained batch)."""
    body = bytearray()
    count = 0
    for entry in entries:
        txn_first = -1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset
        rows: list[BatchMetadata | None] = list(entry.batches) or [None]
        for i, batch in enumerate(rows):
            last = i == len(rows) - 1
            if batch is None:
                seq, offset, delta, timestamp = NO_SEQUENCE, NO_OFFSET, 0, entry.last_timestamp
            else:
                seq, offset, delta = batch.last_seq, batch.last_offset, batch.offset_delta
                timestamp = entry.last_timestamp if last else batch.timestamp
            body += _SNAPSHOT_ENTRY.pack(entry.producer_id, entry.producer_epoch, seq, offset, delta,
                                         timestamp, entry.coordinator_epoch, txn_first)
            count += 1
    payload = _SNAPSHOT_COUNT.pack(count) + body
    data = _SNAPSHOT_HEADER.pack(PRODUCER_SNAPSHOT_VERSION, crc32c.crc32c(payload)) + payload
    write_atomically(path, data, sync=sync)


def sync_snapshot(path: Path) -> None:
    """fsyncs a snapshot written with ``sync=False`` (its directory is the caller's)."""
    fsync_file(path)


def read_snapshot(path: Path) -> list[ProducerStateEntry]:
    data = path.read_bytes()
    if len(data) < _SNAPSHOT_HEADER.size + _SNAPSHOT_COUNT.size:
        raise CorruptSnapshotError(f"{path.name}: {len(data)} bytes is too short")
    version, crc = _SNAPSHOT_HEADER.unpack_from(data, 0)
    if version != PRODUCER_SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"{path.name}: unknown version {version}")
    if crc32c.crc32c(data[_SNAPSHOT_HEADER.size:]) != crc:
        raise CorruptSnapshotError(f"{path.name}: CRC mismatch")
    (count,) = _SNAPSHOT_COUNT.unpack_from(data, _SNAPSHOT_HEADER.size)
    pos = _SNAPSHOT_HEADER.size + _SNAPSHOT_COUNT.size
    if count < 0 or len(data) - pos != count * _SNAPSHOT_ENTRY.size:
        raise CorruptSnapshotError(f"{path.name}: {count} entries do not fill {len(data) - pos} bytes")
    entries: dict[int, ProducerStateEntry] = {}
    for _ in range(count):
        pid, epoch, seq, offset, delta, timestamp, coordinator_epoch, txn_first = _SNAPSHOT_ENTRY.unpack_from(
            data, pos)
        pos += _SNAPSHOT_ENTRY.size
        entry = entries.get(pid)
        if entry is None:
            entry = entries[pid] = ProducerStateEntry(pid, epoch)
        entry.maybe_update_producer_epoch(epoch)
        if offset >= 0:
            entry._add_batch_metadata(BatchMetadata(seq, offset, delta, timestamp))
        entry.coordinator_epoch = coordinator_epoch
        entry.current_txn_first_offset = txn_first if txn_first >= 0 else None
        entry.last_timestamp = timestamp
    return list(entries.values())
