"""What an EndTxn does to a transaction before anything is written: Kafka's checks of
TransactionCoordinator.endTransaction (4.x), for transactions v1 and v2 (KIP-890).

With transactions v2 the client's epoch is bumped as each transaction ends, so the same
state and epoch no longer tell a retry from the next request: a retried EndTxn carries
the epoch before the bump (or, when the epoch ran out, the previous producer id), and
anything else at the old epoch is fenced. A v2 client may also abort when no
transaction is open: a produce may have opened one it never heard back from, so the
abort bumps the epoch and writes an abort with no partitions.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from broker.transaction.metadata import (
    MAX_EPOCH,
    IllegalTransitionError,
    TransactionMetadata,
    TransactionState,
)
from wire.errors import ErrorCode
from wire.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID

S = TransactionState
log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class EndTxnResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class EndTxnDecision:
    """``error`` set: answer it (NONE: the request was a retry of one already done);
    otherwise prepare ``next_state``."""

    error: ErrorCode | None
    next_state: TransactionState | None = None


def epoch_bumped_by_end_txn(metadata: TransactionMetadata, producer_epoch: int) -> bool:
    """A transactions-v2 EndTxn already bumped the epoch past the one the client sent."""
    return (metadata.pending_state is not S.PREPARE_EPOCH_FENCE and metadata.supports_epoch_bump
            and metadata.producer_epoch == producer_epoch + 1)


def plan_end_txn(metadata: TransactionMetadata, producer_id: int, producer_epoch: int, commit: bool,
                 from_client: bool, tv2: bool) -> EndTxnDecision:
    current_v2 = metadata.pending_state is not S.PREPARE_EPOCH_FENCE and metadata.supports_epoch_bump
    retry_on_overflow = (current_v2 and metadata.last_producer_id == producer_id
                         and producer_epoch == MAX_EPOCH - 1 and metadata.producer_epoch == 0)
    retry_on_bump = epoch_bumped_by_end_txn(metadata, producer_epoch)
    state = metadata.state
    if current_v2:
        if state in (S.ONGOING, S.EMPTY, S.DEAD, S.PREPARE_EPOCH_FENCE):
            valid_epoch = producer_epoch == metadata.producer_epoch
        elif state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            valid_epoch = retry_on_bump
        else:
            # The current epoch too: an abort of a transaction a produce may have opened.
            valid_epoch = retry_on_bump or retry_on_overflow or producer_epoch == metadata.producer_epoch
    else:
        # Transactions v1: client requests must match exactly, they never bump the epoch.
        valid_epoch = ((not from_client or producer_epoch == metadata.producer_epoch)
                       and producer_epoch >= metadata.producer_epoch)
    if metadata.producer_id != producer_id and not retry_on_overflow:
        return EndTxnDecision(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
    if not valid_epoch:
        return EndTxnDecision(ErrorCode.PRODUCER_FENCED)
    if metadata.pending_transition_in_progress and metadata.pending_state is not S.PREPARE_EPOCH_FENCE:
        return EndTxnDecision(ErrorCode.CONCURRENT_TRANSACTIONS)
    is_retry = retry_on_bump or retry_on_overflow
    abort_empty = EndTxnDecision(None, S.PREPARE_ABORT) if tv2 and not commit else None
    if state is S.ONGOING:
        return EndTxnDecision(None, S.PREPARE_COMMIT if commit else S.PREPARE_ABORT)
    if state is S.COMPLETE_COMMIT:
        if commit:
            return EndTxnDecision(ErrorCode.NONE if is_retry or not current_v2 else ErrorCode.INVALID_TXN_STATE)
        if not is_retry and abort_empty is not None:
            return abort_empty
        return EndTxnDecision(ErrorCode.INVALID_TXN_STATE)
    if state is S.COMPLETE_ABORT:
        if not commit:
            if is_retry or (not current_v2 and not tv2):
                return EndTxnDecision(ErrorCode.NONE)
            return abort_empty or EndTxnDecision(ErrorCode.INVALID_TXN_STATE)
        return EndTxnDecision(ErrorCode.INVALID_TXN_STATE)
    if state is S.PREPARE_COMMIT:
        return EndTxnDecision(ErrorCode.CONCURRENT_TRANSACTIONS if commit else ErrorCode.INVALID_TXN_STATE)
    if state is S.PREPARE_ABORT:
        return EndTxnDecision(ErrorCode.CONCURRENT_TRANSACTIONS if not commit else ErrorCode.INVALID_TXN_STATE)
    if state is S.EMPTY:
        return abort_empty or EndTxnDecision(ErrorCode.INVALID_TXN_STATE)
    raise IllegalTransitionError(f"{metadata.transactional_id} found in state {state}")


def log_invalid_state(metadata: TransactionMetadata, producer_id: int, producer_epoch: int, commit: bool,
                      tv2: bool, why: str) -> None:
    """An EndTxn answered INVALID_TXN_STATE (fatal to the client): what the coordinator had."""
    log.info("end_txn_invalid_state", transactional_id=metadata.transactional_id, why=why, transactions_v2=tv2,
             result="commit" if commit else "abort", state=metadata.state.state_name,
             pending_state=None if metadata.pending_state is None else metadata.pending_state.state_name,
             producer_id=producer_id, producer_epoch=producer_epoch, current_producer_id=metadata.producer_id,
             current_producer_epoch=metadata.producer_epoch)
