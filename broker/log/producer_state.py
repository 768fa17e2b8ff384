"""Idempotent and transactional producer state of one partition.

Mirrors Kafka's ProducerStateManager, ProducerStateEntry, ProducerAppendInfo and
the producer-state half of UnifiedLog.append (Kafka 3.9). For each producer id
that wrote to the partition it keeps the epoch, the last five batches
(sequence range, offsets, timestamp), the coordinator epoch of the last marker
and the first offset of its ongoing transaction. From that it

- answers an exact retry of one of the last five batches with the original
  offsets and appends nothing (Kafka answers NONE with the first offset);
- rejects sequence gaps (OUT_OF_ORDER_SEQUENCE_NUMBER), stale epochs
  (INVALID_PRODUCER_EPOCH), a non-transactional write inside a transaction
  and a transactional write the coordinator has not verified
  (INVALID_TXN_STATE, KIP-890 part 1), and zombie markers
  (TRANSACTION_COORDINATOR_FENCED);
- tracks ongoing and completed transactions, which give the last stable
  offset, and writes the aborted ones to the segments' ``.txnindex``.

A producer this partition does not know is accepted at any sequence, as Kafka
does since KIP-360: its state may have expired or been deleted with the log.

Persistence: ``<offset>.snapshot`` files in the partition directory, Kafka's
version-1 layout (int16 version, uint32 CRC-32C of the rest, an array of 46-byte
entries), written at a segment roll (when the new segment starts exactly
where the state ends) and at a clean shutdown. Kafka writes one entry per
producer holding only its last batch; here a producer has one entry per
retained batch, oldest first, so all five survive a restart. Kafka's own
reader keeps the last entry of each producer — exactly what Kafka would have
written — so the files stay readable by Kafka's tools. Loading takes the newest
readable snapshot at or below the log end and replays every batch after it
(after a crash, those batches were validated by the log's recovery), which
also rebuilds the aborted-transaction index from there.

Appends that bypass :meth:`ProducerStateManager.append` (a coordinator writing
its internal topic, replication) are picked up by :meth:`sync`, which replays
whatever the log gained since the state was last brought up to date; a
replication truncation must call :meth:`truncate_and_reload`.

Not thread-safe: call from the partition's single writer.
"""

from __future__ import annotations

import bisect
import enum
import struct
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import crc32c
import structlog

from broker.log.files import write_atomically
from broker.log.partition_log import AppendInfo
from broker.log.txn_index import AbortedTxn, TransactionIndexes
from wire.exceptions import CorruptRecordError
from wire.records import (
    NO_PRODUCER_EPOCH,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    ControlRecordType,
    RecordBatchHeader,
    build_control_batch,
    iter_records,
    parse_control_record,
    read_batch_header,
)

if TYPE_CHECKING:
    from broker.log.partition_log import PartitionLog
    from broker.log.segment import LogSegment

log = structlog.get_logger(__name__)

#: Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN: the client's max in-flight requests.
NUM_BATCHES_TO_RETAIN = 5
SNAPSHOT_SUFFIX = ".snapshot"
PRODUCER_SNAPSHOT_VERSION = 1
_INT32_MAX = 2**31 - 1
NO_OFFSET = -1

_SNAPSHOT_HEADER = struct.Struct(">hI")
_SNAPSHOT_COUNT = struct.Struct(">i")
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
assert _SNAPSHOT_ENTRY.size == 46


# -- errors ----------------------------------------------------------------------------------


class ProducerStateError(Exception):
    """An append the producer state refuses; nothing was written."""


class OutOfOrderSequenceError(ProducerStateError):
    """OUT_OF_ORDER_SEQUENCE_NUMBER: a gap in the producer's sequence numbers."""


class InvalidProducerEpochError(ProducerStateError):
    """INVALID_PRODUCER_EPOCH: the batch or marker carries an epoch older than the producer's."""


class InvalidTxnStateError(ProducerStateError):
    """INVALID_TXN_STATE: a write outside the transaction state the partition knows."""


class TransactionCoordinatorFencedError(ProducerStateError):
    """TRANSACTION_COORDINATOR_FENCED: a marker from an older coordinator epoch."""


class CorruptSnapshotError(Exception):
    """A snapshot file that fails its version, size or CRC check; it is deleted and skipped."""


class AppendOrigin(enum.Enum):
    """Who is appending: clients get full validation, replication none (Kafka's AppendOrigin)."""

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"


# -- state -----------------------------------------------------------------------------------


def decrement_sequence(sequence: int, decrement: int) -> int:
    """Kafka's DefaultRecordBatch.decrementSequence: subtract, wrapping below 0 to int32 max."""
    if sequence < decrement:
        return _INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT32_MAX)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """One retained batch of a producer: its last sequence and offset, and how many it spans."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = NO_TIMESTAMP
    current_txn_first_offset: int | None = None
    batches: deque[BatchMetadata] = field(default_factory=deque)

    @property
    def is_empty(self) -> bool:
        return not self.batches

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else NO_OFFSET

    def copy_without_batches(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id, self.producer_epoch, self.coordinator_epoch, self.last_timestamp,
            self.current_txn_first_offset,
        )

    def maybe_update_producer_epoch(self, producer_epoch: int) -> None:
        if self.producer_epoch != producer_epoch:
            self.batches.clear()
            self.producer_epoch = producer_epoch

    def add_batch(self, producer_epoch: int, last_seq: int, last_offset: int, offset_delta: int,
                  timestamp: int) -> None:
        self.maybe_update_producer_epoch(producer_epoch)
        self._add_batch_metadata(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def _add_batch_metadata(self, batch: BatchMetadata) -> None:
        if len(self.batches) == NUM_BATCHES_TO_RETAIN:
            self.batches.popleft()
        self.batches.append(batch)

    def update(self, other: ProducerStateEntry) -> None:
        """Fold in what one append did (Kafka's ProducerStateEntry.update)."""
        self.maybe_update_producer_epoch(other.producer_epoch)
        for batch in other.batches:
            self._add_batch_metadata(batch)
        self.coordinator_epoch = other.coordinator_epoch
        self.current_txn_first_offset = other.current_txn_first_offset
        self.last_timestamp = other.last_timestamp

    def find_duplicate_batch(self, header: RecordBatchHeader) -> BatchMetadata | None:
        if header.producer_epoch != self.producer_epoch:
            return None
        first, last = header.base_sequence, header.last_sequence
        for batch in self.batches:
            if batch.first_seq == first and batch.last_seq == last:
                return batch
        return None


@dataclass(slots=True)
class TxnMetadata:
    producer_id: int
    first_offset: int
    last_offset: int | None = None


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class VerificationGuard:
    """A token naming one verification of one producer's first transactional write (KIP-890).

    Only the guard handed out when the verification began lets that write in,
    so a verification answered after the transaction was aborted and another
    begun (the ABA case) cannot admit the write.
    """

    __slots__ = ()


@dataclass(slots=True)
class VerificationStateEntry:
    timestamp: int
    lowest_sequence: int
    epoch: int
    guard: VerificationGuard = field(default_factory=VerificationGuard)

    def maybe_update_lowest_sequence_and_epoch(self, sequence: int, epoch: int) -> None:
        if epoch > self.epoch:
            self.lowest_sequence = sequence
            self.epoch = epoch
        elif epoch == self.epoch:
            self.lowest_sequence = min(sequence, self.lowest_sequence)


class ProducerAppendInfo:
    """Validates the batches of one producer within one append (Kafka's ProducerAppendInfo)."""

    def __init__(
        self,
        topic_partition: str,
        producer_id: int,
        current: ProducerStateEntry,
        origin: AppendOrigin,
        verification: VerificationStateEntry | None,
    ) -> None:
        self.topic_partition = topic_partition
        self.producer_id = producer_id
        self.current = current
        self.origin = origin
        self.verification = verification
        self.updated = current.copy_without_batches()
        self.started_transactions: list[TxnMetadata] = []

    def _check_producer_epoch(self, producer_epoch: int, offset: int) -> None:
        current = self.updated.producer_epoch
        if producer_epoch < current:
            message = (f"Epoch of producer {self.producer_id} at offset {offset} in {self.topic_partition}"
                       f" is {producer_epoch}, which is smaller than the last seen epoch {current}")
            if self.origin is AppendOrigin.REPLICATION:
                log.warning("stale_producer_epoch_replicated", partition=self.topic_partition,
                            producer_id=self.producer_id, epoch=producer_epoch, current_epoch=current)
            else:
                raise InvalidProducerEpochError(message)

    def _check_sequence(self, producer_epoch: int, first_seq: int, offset: int) -> None:
        verification = self.verification
        if verification is not None and first_seq > verification.lowest_sequence:
            raise OutOfOrderSequenceError(
                f"Out of order sequence number for producer {self.producer_id} at offset {offset} in"
                f" partition {self.topic_partition}: {first_seq} (incoming seq. number),"
                f" {verification.lowest_sequence} (earliest seen sequence)")
        if producer_epoch != self.updated.producer_epoch:
            if first_seq != 0 and self.updated.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"Invalid sequence number for new epoch of producer {self.producer_id} at offset {offset}"
                    f" in partition {self.topic_partition}: {producer_epoch} (request epoch), {first_seq}"
                    f" (seq. number), {self.updated.producer_epoch} (current producer epoch)")
            return
        if not self.updated.is_empty:
            current_last_seq = self.updated.last_seq
        elif producer_epoch == self.current.producer_epoch:
            current_last_seq = self.current.last_seq
        else:
            current_last_seq = NO_SEQUENCE
        # No known epoch (records deleted by retention or DeleteRecords): any sequence goes.
        if not (self.current.producer_epoch == NO_PRODUCER_EPOCH or in_sequence(current_last_seq, first_seq)):
            raise OutOfOrderSequenceError(
                f"Out of order sequence number for producer {self.producer_id} at offset {offset} in"
                f" partition {self.topic_partition}: {first_seq} (incoming seq. number),"
                f" {current_last_seq} (current end sequence number)")

    def append_data_batch(self, header: RecordBatchHeader, first_offset: int, last_offset: int) -> None:
        epoch = header.producer_epoch
        self._check_producer_epoch(epoch, first_offset)
        if self.origin is AppendOrigin.CLIENT:
            self._check_sequence(epoch, header.base_sequence, first_offset)
        self.updated.add_batch(epoch, header.last_sequence, last_offset, last_offset - first_offset,
                               header.max_timestamp)
        ongoing = self.updated.current_txn_first_offset
        if ongoing is not None and not header.is_transactional:
            raise InvalidTxnStateError(
                f"Expected transactional write from producer {self.producer_id} at offset {first_offset}"
                f" in partition {self.topic_partition}")
        if ongoing is None and header.is_transactional:
            self.updated.current_txn_first_offset = first_offset
            self.started_transactions.append(TxnMetadata(self.producer_id, first_offset))

    def append_end_txn_marker(self, control_type: ControlRecordType, coordinator_epoch: int,
                              producer_epoch: int, offset: int, timestamp: int,
                              transaction_version: int = 0) -> CompletedTxn | None:
        self._check_producer_epoch(producer_epoch, offset)
        current = self.updated.producer_epoch
        if transaction_version >= 2 and self.origin is not AppendOrigin.REPLICATION and producer_epoch <= current:
            # KIP-1228: a transactions-v2 marker carries the epoch its EndTxn bumped, so one at
            # the producer's current epoch is a zombie's.
            raise InvalidProducerEpochError(
                f"Epoch of producer {self.producer_id} at offset {offset} in {self.topic_partition} is"
                f" {producer_epoch}, which is not greater than the last seen epoch {current} (transactions v2)")
        if self.updated.coordinator_epoch > coordinator_epoch:
            if self.origin is AppendOrigin.REPLICATION:
                log.info("stale_coordinator_epoch_replicated", partition=self.topic_partition,
                         producer_id=self.producer_id, coordinator_epoch=coordinator_epoch,
                         current=self.updated.coordinator_epoch)
            else:
                raise TransactionCoordinatorFencedError(
                    f"Invalid coordinator epoch for producerId {self.producer_id} at offset {offset} in"
                    f" partition {self.topic_partition}: {coordinator_epoch} (zombie),"
                    f" {self.updated.coordinator_epoch} (current)")
        first = self.updated.current_txn_first_offset
        # A marker for a transaction with no data here moves nothing (no LSO, no index entry).
        completed = (CompletedTxn(self.producer_id, first, offset, control_type is ControlRecordType.ABORT)
                     if first is not None else None)
        self.updated.maybe_update_producer_epoch(producer_epoch)
        self.updated.coordinator_epoch = coordinator_epoch
        self.updated.current_txn_first_offset = None
        self.updated.last_timestamp = timestamp
        return completed


@dataclass(frozen=True, slots=True)
class ProducerStateConfig:
    #: producer.id.expiration.ms
    producer_id_expiration_ms: int = 86_400_000
    #: transaction.partition.verification.enable (KIP-890 part 1)
    transaction_verification_enabled: bool = True


@dataclass(frozen=True, slots=True)
class ProducerDescription:
    """One active producer, for DescribeProducers."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


@dataclass(slots=True)
class _PendingUpdate:
    producers: dict[int, ProducerAppendInfo]
    completed: list[CompletedTxn]


# -- the manager -----------------------------------------------------------------------------


class ProducerStateManager:
    """The producer state of one partition log. Build with :meth:`load`."""

    def __init__(self, plog: PartitionLog, config: ProducerStateConfig, clock_ms: Callable[[], int]) -> None:
        self._log = plog
        self._config = config
        self._clock_ms = clock_ms
        self._tp = str(plog.topic_partition)
        self._producers: dict[int, ProducerStateEntry] = {}
        self._verification: dict[int, VerificationStateEntry] = {}
        self._ongoing: dict[int, TxnMetadata] = {}  # by first offset
        self._unreplicated: dict[int, TxnMetadata] = {}  # completed, marker maybe above the HW
        self._txn_indexes = TransactionIndexes(plog.dir)
        self._map_end_offset = plog.log_start_offset
        self._last_snapshot_offset = -1
        self._log_start_offset = plog.log_start_offset
        self._segments_seen: tuple[LogSegment, ...] = ()

    @classmethod
    def load(cls, plog: PartitionLog, config: ProducerStateConfig,
             clock_ms: Callable[[], int]) -> ProducerStateManager:
        """The state at the log end: the newest usable snapshot, then every batch after it."""
        manager = cls(plog, config, clock_ms)
        manager._reload()
        return manager

    @property
    def config(self) -> ProducerStateConfig:
        return self._config

    @property
    def map_end_offset(self) -> int:
        """Every batch below this offset is reflected in the state."""
        return self._map_end_offset

    # -- loading and catching up --------------------------------------------------------------

    def _reload(self) -> None:
        plog = self._log
        start, end = plog.log_start_offset, plog.log_end_offset
        self._producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()
        self._last_snapshot_offset = -1
        offset = start
        for snap_offset, path in reversed(self._snapshot_files()):
            if snap_offset > end or snap_offset < start:
                # Beyond a truncated log end, or below its start: unusable, as in Kafka.
                path.unlink(missing_ok=True)
                continue
            try:
                entries = read_snapshot(path)
            except (CorruptSnapshotError, OSError) as ex:
                log.warning("producer_snapshot_corrupt", partition=self._tp, file=path.name, error=str(ex))
                path.unlink(missing_ok=True)
                continue
            now = self._clock_ms()
            for entry in entries:
                if not self._is_expired(entry, now):
                    self._load_entry(entry)
            offset = snap_offset
            self._last_snapshot_offset = snap_offset
            break
        self._map_end_offset = offset
        self._log_start_offset = start
        replayed = self._replay(offset, end)
        self._segments_seen = plog.segments
        self._txn_indexes.retain(s.base_offset for s in plog.segments)
        self._remove_stray_snapshots()
        log.debug("producer_state_loaded", partition=self._tp, snapshot_offset=self._last_snapshot_offset,
                 batches_replayed=replayed, producers=len(self._producers),
                 ongoing_transactions=len(self._ongoing))

    def _load_entry(self, entry: ProducerStateEntry) -> None:
        self._producers[entry.producer_id] = entry
        if entry.current_txn_first_offset is not None:
            first = entry.current_txn_first_offset
            self._ongoing[first] = TxnMetadata(entry.producer_id, first)

    def _replay(self, from_offset: int, to_offset: int) -> int:
        """Apply the batches in ``[from_offset, to_offset)`` as Kafka's recovery does (no
        sequence checks); rebuilds the aborted-transaction index over that range."""
        if from_offset >= to_offset:
            self._map_end_offset = max(self._map_end_offset, to_offset)
            return 0
        self._txn_indexes.truncate_to(from_offset)
        count = 0
        for segment, position, header in self._batches_between(from_offset, to_offset):
            if header.producer_id >= 0:
                info = self._prepare(header.producer_id, AppendOrigin.REPLICATION)
                completed: CompletedTxn | None = None
                if header.is_control:
                    marker = _read_marker(segment.read_batch(position, header))
                    if marker is not None:
                        completed = info.append_end_txn_marker(
                            marker[0], marker[1], header.producer_epoch, header.base_offset, marker[2])
                else:
                    info.append_data_batch(header, header.base_offset, header.last_offset)
                if header.is_transactional:
                    self._verification.pop(header.producer_id, None)
                self._apply(info)
                if completed is not None:
                    self._complete(completed)
            self._map_end_offset = header.last_offset + 1
            count += 1
        self._map_end_offset = max(self._map_end_offset, to_offset)
        return count

    def _batches_between(
        self, from_offset: int, to_offset: int
    ) -> Iterator[tuple[LogSegment, int, RecordBatchHeader]]:
        segments = self._log.segments
        bases = [s.base_offset for s in segments]
        index = max(bisect.bisect_right(bases, from_offset) - 1, 0)
        for segment in segments[index:]:
            if segment.base_offset >= to_offset:
                return
            start = segment.position_of(from_offset) if segment.base_offset <= from_offset else 0
            for position, header in segment.iter_batches(start):
                if header.base_offset >= to_offset:
                    return
                if header.last_offset < from_offset:
                    continue
                yield segment, position, header

    def sync(self) -> None:
        """Catch up with changes made to the log behind the state's back."""
        plog = self._log
        end = plog.log_end_offset
        if end < self._map_end_offset:
            self.truncate_and_reload()
            return
        if plog.log_start_offset > self._log_start_offset:
            self._on_log_start_offset_incremented(plog.log_start_offset)
        if end > self._map_end_offset:
            self._replay(self._map_end_offset, end)
        segments = plog.segments
        if segments is not self._segments_seen:
            self._on_segments_changed(segments)

    def _on_segments_changed(self, segments: tuple[LogSegment, ...]) -> None:
        """Retention deleted segments, or the cleaner replaced some: drop the indexes of
        segments that went, and keep a cleaned segment's entries only while its abort
        marker is still there (else a consumer would keep skipping that producer)."""
        seen = {id(s) for s in self._segments_seen}
        bases = [s.base_offset for s in segments]
        self._txn_indexes.retain(bases)
        for i, segment in enumerate(segments[:-1]):
            if id(segment) in seen:
                continue
            upper = bases[i + 1]
            markers = frozenset(h.base_offset for _, h in segment.iter_batches() if h.is_control)
            self._txn_indexes.rewrite_range(segment.base_offset, upper, markers)
        self._segments_seen = segments
        self._delete_snapshots_below(bases[0])

    def truncate_and_reload(self) -> None:
        """The log was truncated (replication): rebuild from the snapshots that still apply."""
        log.info("producer_state_reloading", partition=self._tp, log_end_offset=self._log.log_end_offset,
                 map_end_offset=self._map_end_offset)
        self._verification.clear()
        self._reload()

    def _on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        self._log_start_offset = log_start_offset
        for first, txn in list(self._unreplicated.items()):
            if txn.last_offset is not None and txn.last_offset < log_start_offset:
                del self._unreplicated[first]
        self._map_end_offset = max(self._map_end_offset, log_start_offset)

    # -- appending -----------------------------------------------------------------------------

    def _prepare(self, producer_id: int, origin: AppendOrigin) -> ProducerAppendInfo:
        current = self._producers.get(producer_id) or ProducerStateEntry(producer_id)
        return ProducerAppendInfo(self._tp, producer_id, current, origin, self._verification.get(producer_id))

    def _apply(self, info: ProducerAppendInfo) -> None:
        current = self._producers.get(info.producer_id)
        if current is None:
            self._producers[info.producer_id] = info.updated
        else:
            current.update(info.updated)
        for txn in info.started_transactions:
            self._ongoing[txn.first_offset] = txn

    def _complete(self, completed: CompletedTxn) -> None:
        """Index an abort (with the LSO it leaves) and move the transaction to the completed set."""
        if completed.is_aborted:
            lso = self._last_stable_offset_after(completed)
            base = self._segment_base_for(completed.last_offset)
            self._txn_indexes.append(base, AbortedTxn(
                completed.producer_id, completed.first_offset, completed.last_offset, lso))
        txn = self._ongoing.pop(completed.first_offset, None)
        if txn is None:
            # Cannot happen while the state matches the log; keep serving rather than fail.
            log.warning("completed_unknown_transaction", partition=self._tp, producer_id=completed.producer_id,
                        first_offset=completed.first_offset, marker_offset=completed.last_offset)
            return
        txn.last_offset = completed.last_offset
        self._unreplicated[completed.first_offset] = txn

    def _last_stable_offset_after(self, completed: CompletedTxn) -> int:
        for first in sorted(self._ongoing):
            if self._ongoing[first].producer_id != completed.producer_id:
                return first
        return completed.last_offset + 1

    def _segment_base_for(self, offset: int) -> int:
        bases = [s.base_offset for s in self._log.segments]
        return bases[max(bisect.bisect_right(bases, offset) - 1, 0)]

    def _analyze(self, headers: Sequence[tuple[int, RecordBatchHeader]], first_offset: int,
                 origin: AppendOrigin, verification_guard: VerificationGuard | None,
                 ) -> _PendingUpdate | BatchMetadata:
        """Kafka's analyzeAndValidateProducerState, before anything is written. Returns the
        updates to apply after the write, or the metadata of the batch this one duplicates."""
        producers: dict[int, ProducerAppendInfo] = {}
        completed: list[CompletedTxn] = []
        offset = first_offset
        for _, header in headers:
            base = offset
            last = base + header.last_offset_delta
            offset = last + 1
            pid = header.producer_id
            if pid < 0:
                continue
            if origin is AppendOrigin.CLIENT:
                entry = self._producers.get(pid)
                duplicate = entry.find_duplicate_batch(header) if entry is not None else None
                if duplicate is not None:
                    return duplicate
            if (origin is not AppendOrigin.REPLICATION and header.is_transactional
                    and not header.is_control and self._config.transaction_verification_enabled
                    and not self.has_ongoing_transaction(pid)):
                state = self._verification.get(pid)
                if state is None or verification_guard is None or state.guard is not verification_guard:
                    raise InvalidTxnStateError("Record was not part of an ongoing transaction")
            info = producers.get(pid)
            if info is None:
                info = producers[pid] = self._prepare(pid, origin)
            if header.is_control:
                raise ValueError("control batches go through append_marker")
            info.append_data_batch(header, base, last)
        return _PendingUpdate(producers, completed)

    def append(
        self,
        data: bytearray,
        headers: Sequence[tuple[int, RecordBatchHeader]],
        leader_epoch: int,
        *,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        verification_guard: VerificationGuard | None = None,
    ) -> AppendInfo:
        """Validate the producer state of ``data`` (batches already checked by
        ``validate_produce``), append it as leader and record what it did.

        An exact retry of a retained batch appends nothing and returns that batch's
        offsets, with its timestamp as the log append time (as Kafka). Raises a
        :class:`ProducerStateError` (nothing written) for a sequence gap, a stale
        epoch or a write outside the known transaction state.
        """
        self.sync()
        plog = self._log
        end_before = plog.log_end_offset
        outcome = self._analyze(headers, end_before, origin, verification_guard)
        if isinstance(outcome, BatchMetadata):
            log.info("duplicate_batch", partition=self._tp, producer_id=headers[0][1].producer_id,
                     first_sequence=headers[0][1].base_sequence, first_offset=outcome.first_offset)
            return AppendInfo(outcome.first_offset, outcome.last_offset, outcome.timestamp,
                              outcome.last_offset, outcome.timestamp, plog.log_start_offset, 0, 0, 0)
        for _, header in headers:
            if header.producer_id >= 0 and header.is_transactional:
                self._verification.pop(header.producer_id, None)
        info = plog.append_as_leader(data, leader_epoch, validated=True)
        self._after_append(end_before, info, outcome)
        return info

    def append_marker(
        self,
        control_type: ControlRecordType,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        leader_epoch: int,
        *,
        origin: AppendOrigin = AppendOrigin.COORDINATOR,
        transaction_version: int = 0,
    ) -> AppendInfo:
        """Write a COMMIT or ABORT marker for ``producer_id`` (WriteTxnMarkers); a transactions-v2
        marker (``transaction_version`` 2) must carry an epoch above the producer's (KIP-1228)."""
        self.sync()
        plog = self._log
        end_before = plog.log_end_offset
        now = self._clock_ms()
        info_ = self._prepare(producer_id, origin)
        completed = info_.append_end_txn_marker(control_type, coordinator_epoch, producer_epoch, end_before, now,
                                                transaction_version)
        batch = bytearray(build_control_batch(control_type, producer_id, producer_epoch, coordinator_epoch,
                                              timestamp_ms=now))
        info = plog.append_as_leader(batch, leader_epoch)
        self._after_append(end_before, info, _PendingUpdate({producer_id: info_},
                                                             [completed] if completed is not None else []))
        return info

    def _after_append(self, end_before: int, info: AppendInfo, pending: _PendingUpdate) -> None:
        if info.first_offset != end_before:
            raise AssertionError(f"append landed at {info.first_offset}, expected {end_before}")
        if any(s.base_offset == end_before for s in self._log.segments[1:]) and end_before > self._last_snapshot_offset:
            # Rolled right where the state ends: snapshot it for the new segment, as Kafka.
            self._write_snapshot(end_before)
        for producer_info in pending.producers.values():
            self._apply(producer_info)
        for completed in pending.completed:
            self._complete(completed)
        self._map_end_offset = info.last_offset + 1

    # -- transactions and the last stable offset ------------------------------------------------

    def has_ongoing_transaction(self, producer_id: int) -> bool:
        """Whether the producer has an open transaction here (as of the last :meth:`sync`)."""
        entry = self._producers.get(producer_id)
        return entry is not None and entry.current_txn_first_offset is not None

    def maybe_start_verification(self, producer_id: int, sequence: int, epoch: int) -> VerificationGuard | None:
        """None if the producer's transaction is already going here; else the guard its first
        transactional write must carry once the coordinator has verified the partition."""
        self.sync()
        if self.has_ongoing_transaction(producer_id):
            return None
        state = self._verification.get(producer_id)
        if state is None:
            state = self._verification[producer_id] = VerificationStateEntry(self._clock_ms(), sequence, epoch)
        state.maybe_update_lowest_sequence_and_epoch(sequence, epoch)
        return state.guard

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of an undecided transaction, or of a decided one whose marker is
        not yet below the high watermark; None when there is none."""
        self.sync()
        for first in [f for f, t in self._unreplicated.items()
                      if t.last_offset is not None and t.last_offset < high_watermark]:
            del self._unreplicated[first]
        candidates = list(self._ongoing) + list(self._unreplicated)
        if not candidates:
            return None
        return max(min(candidates), self._log.log_start_offset)

    def last_stable_offset(self, high_watermark: int) -> int:
        first = self.first_unstable_offset(high_watermark)
        return high_watermark if first is None or first >= high_watermark else first

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        self.sync()
        return self._txn_indexes.collect(fetch_offset, upper_bound_offset)

    def aborted_transactions(self) -> list[AbortedTxn]:
        self.sync()
        return self._txn_indexes.all_entries()

    # -- producers ---------------------------------------------------------------------------------

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        self.sync()
        return self._producers.get(producer_id)

    def active_producers(self) -> list[ProducerDescription]:
        self.sync()
        return [
            ProducerDescription(
                e.producer_id, e.producer_epoch, e.last_seq, e.last_timestamp, e.coordinator_epoch,
                -1 if e.current_txn_first_offset is None else e.current_txn_first_offset,
            )
            for e in sorted(self._producers.values(), key=lambda e: e.producer_id)
        ]

    def last_records(self) -> dict[int, tuple[int | None, int]]:
        """Producer id -> (last offset of its last data batch, or None; its epoch): what the
        log cleaner must keep so deduplication still works (Kafka's LastRecord)."""
        self.sync()
        return {pid: (e.last_data_offset if e.batches else None, e.producer_epoch)
                for pid, e in self._producers.items()}

    def _is_expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        return (entry.current_txn_first_offset is None
                and now_ms - entry.last_timestamp >= self._config.producer_id_expiration_ms)

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget producers idle for ``producer.id.expiration.ms`` (never one in a transaction)."""
        expired = [pid for pid, e in self._producers.items() if self._is_expired(e, now_ms)]
        for pid in expired:
            del self._producers[pid]
        for pid in [p for p, v in self._verification.items()
                    if now_ms - v.timestamp >= self._config.producer_id_expiration_ms]:
            del self._verification[pid]
        if expired:
            log.info("producer_ids_expired", partition=self._tp, count=len(expired))
        return len(expired)

    # -- snapshots ---------------------------------------------------------------------------------

    def _snapshot_files(self) -> list[tuple[int, Path]]:
        found = []
        for path in self._log.dir.glob("*" + SNAPSHOT_SUFFIX):
            head = path.name[: -len(SNAPSHOT_SUFFIX)]
            if head.isdigit():
                found.append((int(head), path))
        return sorted(found)

    def _write_snapshot(self, offset: int, *, sync: bool = True) -> None:
        path = self._log.dir / f"{offset:020d}{SNAPSHOT_SUFFIX}"
        # The index entries below the snapshot must be as durable as the snapshot itself.
        self._txn_indexes.flush()
        write_snapshot(path, self._producers.values(), sync=sync)
        self._last_snapshot_offset = offset
        log.debug("producer_snapshot_written", partition=self._tp, offset=offset, producers=len(self._producers))

    def take_snapshot(self, *, sync: bool = True) -> None:
        """Snapshot the state at the log end, unless one exists there (clean shutdown).

        Without ``sync`` the caller makes it durable (one ``sync`` for every partition at shutdown).
        """
        self.sync()
        if self._map_end_offset > self._last_snapshot_offset and self._map_end_offset > self._log.log_start_offset:
            self._write_snapshot(self._map_end_offset, sync=sync)

    def _remove_stray_snapshots(self) -> None:
        """Keep the snapshots at segment starts and the newest one (Kafka's removeStraySnapshots),
        so clean restarts do not pile them up."""
        files = self._snapshot_files()
        bases = {s.base_offset for s in self._log.segments}
        for offset, path in files[:-1]:
            if offset not in bases:
                path.unlink(missing_ok=True)

    def _delete_snapshots_below(self, offset: int) -> None:
        for snap_offset, path in self._snapshot_files():
            if snap_offset < offset:
                path.unlink(missing_ok=True)

    def snapshot_offsets(self) -> list[int]:
        return [offset for offset, _ in self._snapshot_files()]


def _read_marker(batch: bytes) -> tuple[ControlRecordType, int, int] | None:
    """(type, coordinator epoch, timestamp) of a control batch's marker; None when the cleaner
    emptied the batch or the record is not a marker."""
    try:
        for record in iter_records(batch, 0, verify_crc=False):
            control_type, coordinator_epoch = parse_control_record(record)
            return control_type, coordinator_epoch, record.timestamp
    except CorruptRecordError:
        header = read_batch_header(batch, 0)
        log.warning("unreadable_control_batch", offset=header.base_offset)
    return None


# -- snapshot files ------------------------------------------------------------------------------


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
