"""Log compaction's record-level rules, on batches in memory: no files, no clock of its own.

Mirrors the parts of Kafka's cleaner that decide what stays: SkimpyOffsetMap
(:class:`OffsetMap`), CleanedTransactionMetadata (:class:`TransactionTracker`),
Cleaner.buildOffsetMapForSegment (:func:`map_batch`) and Cleaner.cleanInto with
MemoryRecords.filterTo (:func:`filter_batch`). ``broker/log/cleaner.py`` does
the file work around them.

The rules, for one cleaning round over the log below its first uncleanable
offset:

- a keyed record stays if no later record in the mapped (dirty) range has its
  key; records past the map's last offset all stay; keyless records go;
- a tombstone (null value) stays until its batch's delete horizon passes: the
  first clean that copies it stamps the batch with ``now + delete.retention.ms``
  (KIP-534, attribute bit 6); a later clean removes it;
- batches of aborted transactions go whole; a transaction marker stays until
  no batch of its transaction is left and its own delete horizon has passed;
- a batch keeps its base offset, last offset, producer id, epoch and base
  sequence even when records go; if all go, it is kept as an empty batch when
  it is its producer's last (the producer's sequence lives there) or the last
  batch of the round (the log's last offset lives there).
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from wire.batch_builder import RecordBatchBuilder, build_empty_batch
from wire.exceptions import CorruptRecordError
from wire.records import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    BytesLike,
    ControlRecordType,
    Record,
    RecordBatchHeader,
    iter_records,
    parse_control_record,
)

#: Java's Long.MAX_VALUE: delete horizons are int64 timestamps.
_LONG_MAX = 2**63 - 1
_KEY_DIGEST_BYTES = 16
#: Memory one offset map entry takes on CPython (a 16-byte digest object, an int, a dict
#: slot; measured), so ``log.cleaner.dedupe.buffer.size`` bounds real memory.
OFFSET_MAP_ENTRY_BYTES = 136


class OffsetMap:
    """Key → offset of its latest record in the mapped range, bounded in memory.

    Keys are stored as 16-byte BLAKE2b digests, as Kafka's SkimpyOffsetMap
    stores MD5 digests: memory per key is fixed whatever the key's size, and
    unlike MD5 a producer cannot craft two keys that collide.
    """

    def __init__(self, memory_bytes: int, load_factor: float) -> None:
        self.slots = memory_bytes // OFFSET_MAP_ENTRY_BYTES
        self.max_entries = int(self.slots * load_factor)
        if self.max_entries < 1:
            raise ValueError(
                f"a dedupe buffer of {memory_bytes} bytes at load factor {load_factor}"
                " cannot hold a single key"
            )
        self._offsets: dict[bytes, int] = {}
        #: The last offset mapped: records past it are not covered by the map.
        self.latest_offset = -1

    @staticmethod
    def _digest(key: bytes) -> bytes:
        return hashlib.blake2b(key, digest_size=_KEY_DIGEST_BYTES).digest()

    def put(self, key: bytes, offset: int) -> None:
        self._offsets[self._digest(key)] = offset

    def get(self, key: bytes) -> int:
        """The latest offset mapped for ``key``, -1 if none."""
        return self._offsets.get(self._digest(key), -1)

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def is_full(self) -> bool:
        return len(self._offsets) >= self.max_entries

    @property
    def utilization(self) -> float:
        return len(self._offsets) / self.slots


@dataclass(frozen=True, slots=True)
class LastRecord:
    """An active producer's last batch (Kafka's LastRecord): the last offset of its last
    data batch (None if it wrote none in its current epoch) and its epoch."""

    last_data_offset: int | None
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """An aborted transaction: its first data offset and the offset of its abort marker."""

    producer_id: int
    first_offset: int
    last_offset: int


class Marker(enum.Enum):
    """What a control batch holds."""

    ABORT = "abort"
    COMMIT = "commit"
    #: A control record of another kind (leader change, snapshot headers): always kept.
    OTHER = "other"
    #: No record: a marker an earlier clean emptied.
    EMPTY = "empty"


def control_marker(
    buf: BytesLike, pos: int = 0, max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
) -> Marker:
    """The kind of the control batch at ``pos`` (its first record decides, as in Kafka)."""
    for record in iter_records(buf, pos, max_decompressed_bytes):
        try:
            control_type, _ = parse_control_record(record)
        except CorruptRecordError:
            return Marker.OTHER
        return Marker.ABORT if control_type is ControlRecordType.ABORT else Marker.COMMIT
    return Marker.EMPTY


class ProducerScan:
    """What a pass over the whole log's batch headers learns, in offset order.

    The aborted transactions (the transaction index Kafka would read) and each
    producer's last batch (Kafka takes these from its producer state; here
    every producer in the log counts as active, which keeps at most one extra
    empty batch per producer).
    """

    def __init__(self) -> None:
        self.producers: dict[int, LastRecord] = {}
        self.aborted: list[AbortedTxn] = []
        self._txn_first_offset: dict[int, int] = {}

    def add(self, header: RecordBatchHeader, marker: Marker | None) -> None:
        """One batch; ``marker`` is given for control batches."""
        producer_id = header.producer_id
        if producer_id < 0:
            return
        previous = self.producers.get(producer_id)
        same_epoch = previous is not None and previous.producer_epoch == header.producer_epoch
        if header.is_control:
            first = self._txn_first_offset.pop(producer_id, None)
            if marker is Marker.ABORT and first is not None:
                self.aborted.append(AbortedTxn(producer_id, first, header.last_offset))
            # A new epoch forgets the producer's batches, as Kafka's ProducerStateEntry does.
            last_data = previous.last_data_offset if previous is not None and same_epoch else None
            self.producers[producer_id] = LastRecord(last_data, header.producer_epoch)
            return
        if header.is_transactional:
            self._txn_first_offset.setdefault(producer_id, header.base_offset)
        self.producers[producer_id] = LastRecord(header.last_offset, header.producer_epoch)


class TransactionTracker:
    """Which transactional batches and markers a pass in offset order may drop
    (Kafka's CleanedTransactionMetadata)."""

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._aborted = sorted(aborted, key=lambda txn: txn.first_offset)
        self._next_aborted = 0
        self._ongoing_committed: set[int] = set()
        # Producer id -> last offset of a batch seen from its aborted transaction, if any.
        self._ongoing_aborted: dict[int, int | None] = {}

    def _consume_aborted_up_to(self, offset: int) -> None:
        while (
            self._next_aborted < len(self._aborted)
            and self._aborted[self._next_aborted].first_offset <= offset
        ):
            txn = self._aborted[self._next_aborted]
            self._ongoing_aborted.setdefault(txn.producer_id, None)
            self._next_aborted += 1

    def on_batch(self, header: RecordBatchHeader) -> bool:
        """A data batch; True if it belongs to an aborted transaction (it can go)."""
        self._consume_aborted_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        producer_id = header.producer_id
        if producer_id in self._ongoing_aborted:
            self._ongoing_aborted[producer_id] = header.last_offset
            return True
        self._ongoing_committed.add(producer_id)
        return False

    def on_control_batch(self, header: RecordBatchHeader, marker: Marker) -> bool:
        """A control batch; True if no batch of its transaction was seen (the marker may go)."""
        self._consume_aborted_up_to(header.last_offset)
        producer_id = header.producer_id
        if marker is Marker.EMPTY:
            return True
        if marker is Marker.ABORT:
            seen = self._ongoing_aborted.pop(producer_id, None)
            return seen is None
        if marker is Marker.COMMIT:
            if producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(producer_id)
                return False
            return True
        return False


@dataclass(slots=True)
class CleanCounts:
    """What a round read and kept (for logs and metrics)."""

    batches_read: int = 0
    bytes_read: int = 0
    records_read: int = 0
    bytes_written: int = 0
    records_written: int = 0
    keyless_records: int = 0
    map_records_read: int = 0


def map_batch(
    offset_map: OffsetMap,
    transactions: TransactionTracker,
    buf: BytesLike,
    pos: int,
    header: RecordBatchHeader,
    start_offset: int,
    counts: CleanCounts,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> bool:
    """Add the keys of one batch of the dirty range to ``offset_map``; True once it is full.

    Records below ``start_offset`` and batches of aborted transactions are not
    mapped. The map counts as full only after it covers at least one batch, so
    every round makes progress even when one batch holds more keys than fit
    (Kafka can stall there).
    """
    if header.is_control:
        transactions.on_control_batch(header, control_marker(buf, pos, max_decompressed_bytes))
    elif not transactions.on_batch(header):
        for record in iter_records(buf, pos, max_decompressed_bytes):
            counts.map_records_read += 1
            if record.key is None or record.offset < start_offset:
                continue
            if offset_map.is_full and offset_map.latest_offset >= start_offset:
                return True
            offset_map.put(record.key, record.offset)
    if header.last_offset >= start_offset:
        offset_map.latest_offset = header.last_offset
    return False


@dataclass(frozen=True, slots=True)
class CleanRound:
    """What one cleaning round decides with, the same for every batch."""

    offset_map: OffsetMap
    active_producers: Mapping[int, LastRecord]
    now_ms: int
    delete_retention_ms: int
    #: The round's first uncleanable offset: the batch ending just below it stays, even empty.
    upper_bound_offset: int
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES


class _Retention(enum.Enum):
    DELETE = "delete"  # the whole batch goes, records unread
    RETAIN_EMPTY = "retain_empty"  # kept even if no record stays
    DELETE_EMPTY = "delete_empty"  # kept only if a record stays


def filter_batch(
    cleaning: CleanRound,
    transactions: TransactionTracker,
    buf: BytesLike,
    pos: int,
    header: RecordBatchHeader,
    counts: CleanCounts,
) -> BytesLike | None:
    """What remains of the batch at ``pos``: its own bytes, a rebuilt batch, an empty batch, or None.

    Batches must be passed in offset order (``transactions`` follows them).
    """
    now = cleaning.now_ms
    size = header.size_in_bytes
    counts.batches_read += 1
    counts.bytes_read += size
    if header.is_control:
        marker = control_marker(buf, pos, cleaning.max_decompressed_bytes)
        can_discard = transactions.on_control_batch(header, marker)
        horizon = header.delete_horizon_ms
        discard_records = can_discard and horizon is not None and horizon <= now
    else:
        can_discard = transactions.on_batch(header)
        discard_records = can_discard
    if header.has_producer_id and _is_last_batch_of_producer(header, cleaning.active_producers):
        retention = _Retention.RETAIN_EMPTY
    elif header.next_offset == cleaning.upper_bound_offset:
        retention = _Retention.RETAIN_EMPTY
    elif discard_records:
        retention = _Retention.DELETE
    else:
        retention = _Retention.DELETE_EMPTY
    if retention is _Retention.DELETE:
        return None

    retained: list[Record] = []
    all_retained = True
    has_tombstones = False
    for record in iter_records(buf, pos, cleaning.max_decompressed_bytes):
        counts.records_read += 1
        if _retain_record(cleaning, header, record, discard_records, counts):
            retained.append(record)
            has_tombstones = has_tombstones or record.value is None
        else:
            all_retained = False
    if not retained:
        if retention is _Retention.RETAIN_EMPTY:
            empty = build_empty_batch(header)
            counts.bytes_written += len(empty)
            return empty
        return None
    counts.records_written += len(retained)
    # Stamp the delete horizon on the first clean that keeps a tombstone, or a
    # marker whose transaction has no data left.
    marker_for_empty_txn = can_discard and header.is_control
    needs_horizon = (has_tombstones or marker_for_empty_txn) and not header.has_delete_horizon
    if all_retained and not needs_horizon:
        counts.bytes_written += size
        return memoryview(buf)[pos : pos + size]
    horizon_ms = (
        min(now + cleaning.delete_retention_ms, _LONG_MAX)
        if needs_horizon
        else header.delete_horizon_ms
    )
    rebuilt = _rebuild(header, retained, horizon_ms)
    counts.bytes_written += len(rebuilt)
    return rebuilt


def _is_last_batch_of_producer(
    header: RecordBatchHeader, producers: Mapping[int, LastRecord]
) -> bool:
    # Kafka keeps the batch holding an active producer's last sequence, or, if
    # it wrote no data in its epoch, the marker carrying that epoch (fencing).
    last = producers.get(header.producer_id)
    if last is None:
        return False
    if last.last_data_offset is not None:
        return header.last_offset == last.last_data_offset
    return header.is_control and header.producer_epoch == last.producer_epoch


def _retain_record(
    cleaning: CleanRound,
    header: RecordBatchHeader,
    record: Record,
    discard_records: bool,
    counts: CleanCounts,
) -> bool:
    if discard_records:
        return False
    if header.is_control:
        return True
    if record.offset > cleaning.offset_map.latest_offset:
        return True
    if record.key is None:
        counts.keyless_records += 1
        return False
    if record.offset < cleaning.offset_map.get(record.key):
        return False
    if record.value is not None:
        return True
    horizon = header.delete_horizon_ms
    return horizon is None or cleaning.now_ms < horizon


def _rebuild(header: RecordBatchHeader, records: list[Record], delete_horizon_ms: int | None) -> bytes:
    """The batch again with only ``records``, same codec, offsets and producer fields."""
    builder = RecordBatchBuilder(
        base_offset=header.base_offset,
        compression=header.compression,
        timestamp_type=header.timestamp_type,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        is_transactional=header.is_transactional,
        is_control=header.is_control,
        partition_leader_epoch=header.partition_leader_epoch,
        delete_horizon_ms=delete_horizon_ms,
    )
    for record in records:
        builder.append_record(record)
    builder.override_last_offset(header.last_offset)
    return builder.build()
