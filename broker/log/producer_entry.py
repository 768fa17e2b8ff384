"""Producer entries and the checks of one append (Kafka's ProducerStateEntry,
ProducerAppendInfo, BatchMetadata, TxnMetadata, CompletedTxn and the KIP-890
verification state), used by :mod:`broker.log.producer_state`."""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field

import structlog

from wire.records import (
    NO_PRODUCER_EPOCH,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    ControlRecordType,
    RecordBatchHeader,
)

log = structlog.get_logger(__name__)

#: Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN: the client's max in-flight requests.
NUM_BATCHES_TO_RETAIN = 5
_INT32_MAX = 2**31 - 1
NO_OFFSET = -1


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
