"""One transactional id's state: Kafka's TransactionMetadata, TransactionState and
TxnTransitMetadata (3.9).

A change is prepared first (``prepare_*`` returns the target state and sets the
pending state, which blocks any other change), written to
``__transaction_state``, and applied with :meth:`TransactionMetadata.complete_transition`
once the write is committed — or dropped (pending state cleared) if it fails.

States (names as Kafka's, which DescribeTransactions and ListTransactions report):

- Empty: no transaction; -> Ongoing on the first AddPartitionsToTxn.
- Ongoing: partitions added; -> PrepareCommit / PrepareAbort on EndTxn, or
  PrepareEpochFence when a new producer takes over or the transaction times out.
- PrepareCommit / PrepareAbort: the decision is durable, markers are being
  written; -> CompleteCommit / CompleteAbort once every partition has its marker.
- CompleteCommit / CompleteAbort: done; -> Ongoing for the next transaction.
- Dead: the transactional id expired and is being removed.
- PrepareEpochFence: never stored; the epoch is bumped and the transaction aborted.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from wire.errors import ErrorCode
from wire.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID

#: Short.MaxValue: epochs at or past MAX - 1 are exhausted and the producer id rotates.
MAX_EPOCH = 2**15 - 1


class IllegalTransitionError(Exception):
    """A transition the state machine forbids: a bug, never a client error."""


class TransactionState(enum.Enum):
    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    @property
    def id(self) -> int:
        return self.value[0]

    @property
    def state_name(self) -> str:
        return self.value[1]

    @property
    def expiration_allowed(self) -> bool:
        return self in (TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)

    @classmethod
    def from_id(cls, state_id: int) -> TransactionState:
        for state in cls:
            if state.id == state_id:
                return state
        raise ValueError(f"unknown transaction state id {state_id}")

    @classmethod
    def from_name(cls, name: str) -> TransactionState | None:
        for state in cls:
            if state.state_name == name:
                return state
        return None


S = TransactionState
_VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    # Transactions v2 may abort with no transaction open (a produce may have opened one unseen).
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}


def is_epoch_exhausted(producer_epoch: int) -> bool:
    return producer_epoch >= MAX_EPOCH - 1


@dataclass(frozen=True, slots=True)
class TxnTransitMetadata:
    """The state a prepared change leads to (what gets written to the log)."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    txn_state: TransactionState
    topic_partitions: frozenset[tuple[str, int]]
    txn_start_timestamp: int
    txn_last_update_timestamp: int
    #: The producer id the transaction moves to once complete, when its epoch ran out (TV2).
    next_producer_id: int = NO_PRODUCER_ID
    #: The transaction version the client spoke (2: transactions v2, KIP-890).
    client_transaction_version: int = 0

    @property
    def supports_epoch_bump(self) -> bool:
        return self.client_transaction_version >= 2


@dataclass(eq=False, slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    topic_partitions: set[tuple[str, int]] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    pending_state: TransactionState | None = None
    #: The bumped epoch of a fence may not have reached the log; do not bump again.
    has_failed_epoch_fence: bool = False
    next_producer_id: int = NO_PRODUCER_ID
    #: The transaction version of the client's last change (2: transactions v2); in the log
    #: from transaction.version 1 (TransactionLogValue v1, tag 2).
    client_transaction_version: int = 0

    @property
    def supports_epoch_bump(self) -> bool:
        return self.client_transaction_version >= 2

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    def _has_pending_transaction(self) -> bool:
        return self.state in (S.ONGOING, S.PREPARE_ABORT, S.PREPARE_COMMIT)

    def remove_partition(self, tp: tuple[str, int]) -> None:
        if self.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            raise IllegalTransitionError(
                f"{self.transactional_id}: removing a partition whose marker was written in state {self.state}")
        self.topic_partitions.discard(tp)

    # -- preparing changes -------------------------------------------------------------------------

    def prepare_no_transit(self) -> TxnTransitMetadata:
        return TxnTransitMetadata(self.producer_id, self.last_producer_id, self.producer_epoch,
                                  self.last_producer_epoch, self.txn_timeout_ms, self.state,
                                  frozenset(self.topic_partitions), self.txn_start_timestamp,
                                  self.txn_last_update_timestamp)

    def prepare_fence_producer_epoch(self) -> TxnTransitMetadata:
        if self.producer_epoch == MAX_EPOCH:
            raise IllegalTransitionError("cannot fence a producer whose epoch is already Short.MaxValue")
        bumped = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(S.PREPARE_EPOCH_FENCE, self.producer_id, bumped, NO_PRODUCER_EPOCH,
                             self.txn_timeout_ms, frozenset(self.topic_partitions), self.txn_start_timestamp,
                             self.txn_last_update_timestamp)

    def prepare_increment_producer_epoch(
        self, new_timeout_ms: int, expected_epoch: int | None, now_ms: int
    ) -> TxnTransitMetadata | ErrorCode:
        if self.is_producer_epoch_exhausted:
            raise IllegalTransitionError(f"no more epochs for producer id {self.producer_id}")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            next_epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            # Continuing after an error with nobody else initialized since: bump, remember the old.
            next_epoch, last_epoch = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            # A retry of a bump whose answer was lost: the epoch it already got.
            next_epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            return ErrorCode.PRODUCER_FENCED
        return self._prepare(S.EMPTY, self.producer_id, next_epoch, last_epoch, new_timeout_ms,
                             frozenset(), -1, now_ms)

    def prepare_producer_id_rotation(self, new_producer_id: int, new_timeout_ms: int, now_ms: int,
                                     record_last_epoch: bool) -> TxnTransitMetadata:
        if self._has_pending_transaction():
            raise IllegalTransitionError("cannot rotate producer ids while a transaction is pending")
        return self._prepare(S.EMPTY, new_producer_id, 0,
                             self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
                             new_timeout_ms, frozenset(), -1, now_ms)

    def prepare_add_partitions(self, added: set[tuple[str, int]], now_ms: int,
                               client_transaction_version: int = 0) -> TxnTransitMetadata:
        start = now_ms if self.state in (S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT) else self.txn_start_timestamp
        return self._prepare(S.ONGOING, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.txn_timeout_ms, frozenset(self.topic_partitions | added), start, now_ms,
                             tv=client_transaction_version)

    def prepare_abort_or_commit(self, new_state: TransactionState, now_ms: int, client_transaction_version: int = 0,
                                next_producer_id: int = NO_PRODUCER_ID, start_ms: int | None = None
                                ) -> TxnTransitMetadata:
        """With transactions v2 the epoch is bumped as the transaction ends (KIP-890)."""
        if client_transaction_version >= 2:
            epoch, last_epoch = self.producer_epoch + 1, self.producer_epoch
        else:
            epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        return self._prepare(new_state, self.producer_id, epoch, last_epoch,
                             self.txn_timeout_ms, frozenset(self.topic_partitions),
                             self.txn_start_timestamp if start_ms is None else start_ms, now_ms,
                             next_producer_id=next_producer_id, tv=client_transaction_version)

    def prepare_complete(self, now_ms: int) -> TxnTransitMetadata:
        new_state = S.COMPLETE_COMMIT if self.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        self.has_failed_epoch_fence = False
        producer_id, epoch = self.producer_id, self.producer_epoch
        if self.supports_epoch_bump and self.next_producer_id != NO_PRODUCER_ID:
            # The epoch ran out: the marker is written, the producer moves to its new id.
            producer_id, epoch = self.next_producer_id, 0
        return self._prepare(new_state, producer_id, epoch, self.producer_epoch,
                             self.txn_timeout_ms, frozenset(), self.txn_start_timestamp, now_ms,
                             tv=self.client_transaction_version)

    def prepare_dead(self) -> TxnTransitMetadata:
        return self._prepare(S.DEAD, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.txn_timeout_ms, frozenset(), self.txn_start_timestamp,
                             self.txn_last_update_timestamp)

    def _prepare(self, new_state: TransactionState, producer_id: int, epoch: int, last_epoch: int,
                 timeout_ms: int, partitions: frozenset[tuple[str, int]], start_ms: int,
                 update_ms: int, next_producer_id: int = NO_PRODUCER_ID, tv: int | None = None
                 ) -> TxnTransitMetadata:
        if self.pending_state is not None:
            raise IllegalTransitionError(
                f"{self.transactional_id}: preparing {new_state} while {self.pending_state} is pending")
        if producer_id < 0:
            raise IllegalTransitionError(f"illegal producer id {producer_id}")
        if new_state is not S.DEAD and epoch < 0:
            raise IllegalTransitionError(f"illegal producer epoch {epoch}")
        if self.state not in _VALID_PREVIOUS[new_state]:
            raise IllegalTransitionError(f"{self.transactional_id}: {self.state} cannot become {new_state}")
        self.pending_state = new_state
        return TxnTransitMetadata(producer_id, self.producer_id, epoch, last_epoch, timeout_ms, new_state,
                                  partitions, start_ms, update_ms, next_producer_id,
                                  self.client_transaction_version if tv is None else tv)

    # -- completing them ---------------------------------------------------------------------------

    def complete_transition(self, transit: TxnTransitMetadata) -> None:
        """Apply a prepared change whose record is now committed (Kafka's completeTransitionTo)."""
        to_state = self.pending_state
        if to_state is None or to_state is not transit.txn_state:
            raise IllegalTransitionError(f"{self.transactional_id}: completing {transit.txn_state}"
                                         f" while {to_state} is pending")
        same_epoch = transit.producer_epoch == self.producer_epoch and transit.producer_id == self.producer_id
        if transit.supports_epoch_bump and to_state in (S.PREPARE_ABORT, S.PREPARE_COMMIT):
            # Transactions v2: the prepared state carries the bumped epoch, the current one as last.
            same_epoch = transit.last_producer_epoch == self.producer_epoch and transit.producer_id == self.producer_id
        elif transit.supports_epoch_bump and to_state in (S.COMPLETE_ABORT, S.COMPLETE_COMMIT):
            same_epoch = (transit.last_producer_id == self.producer_id
                          and (transit.producer_epoch == self.producer_epoch
                               or (transit.producer_epoch == 0 and transit.producer_id == self.next_producer_id)))
        if to_state is S.EMPTY:
            bump = (transit.producer_epoch == self.producer_epoch + 1
                    or (transit.producer_epoch == 0 and transit.producer_id != self.producer_id))
            if ((self.producer_epoch != transit.producer_epoch and not bump) or transit.topic_partitions
                    or transit.txn_start_timestamp != -1):
                self._fail(transit)
            self.txn_timeout_ms = transit.txn_timeout_ms
            self.producer_epoch = transit.producer_epoch
            self.last_producer_epoch = transit.last_producer_epoch
            self.producer_id = transit.producer_id
            self.last_producer_id = transit.last_producer_id
        elif to_state is S.ONGOING:
            if (not same_epoch or not self.topic_partitions <= transit.topic_partitions
                    or self.txn_timeout_ms != transit.txn_timeout_ms):
                self._fail(transit)
            self.txn_start_timestamp = transit.txn_start_timestamp
            self.topic_partitions |= transit.topic_partitions
        elif to_state in (S.PREPARE_ABORT, S.PREPARE_COMMIT):
            if (not same_epoch or frozenset(self.topic_partitions) != transit.topic_partitions
                    or self.txn_timeout_ms != transit.txn_timeout_ms
                    or (self.txn_start_timestamp != transit.txn_start_timestamp and self.state is S.ONGOING)):
                self._fail(transit)
            if transit.supports_epoch_bump:
                self.producer_epoch = transit.producer_epoch
                self.last_producer_epoch = transit.last_producer_epoch
                self.next_producer_id = transit.next_producer_id
            self.txn_start_timestamp = transit.txn_start_timestamp
        elif to_state in (S.COMPLETE_ABORT, S.COMPLETE_COMMIT):
            if not same_epoch or self.txn_timeout_ms != transit.txn_timeout_ms or transit.txn_start_timestamp == -1:
                self._fail(transit)
            self.txn_start_timestamp = transit.txn_start_timestamp
            self.topic_partitions.clear()
            if transit.supports_epoch_bump:
                self.producer_epoch = transit.producer_epoch
                self.last_producer_epoch = transit.last_producer_epoch
                self.last_producer_id = transit.last_producer_id
                self.producer_id = transit.producer_id
                self.next_producer_id = transit.next_producer_id
        else:
            # PrepareEpochFence is never stored, and Dead ends with removal from the cache.
            self._fail(transit)
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp
        self.client_transaction_version = transit.client_transaction_version
        self.pending_state = None
        self.state = to_state

    def _fail(self, transit: TxnTransitMetadata) -> None:
        raise IllegalTransitionError(f"{self.transactional_id}: {self.state} cannot complete {transit}")

    @classmethod
    def new(cls, transactional_id: str, producer_id: int, timeout_ms: int, now_ms: int) -> TransactionMetadata:
        return cls(transactional_id, producer_id, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_PRODUCER_EPOCH,
                   timeout_ms, S.EMPTY, set(), -1, now_ms)
