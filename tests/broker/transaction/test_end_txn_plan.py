"""EndTxn of a transaction the coordinator never saw open: an abort after the previous transaction
committed, when the AddPartitionsToTxn of the new one never took effect (its write to
``__transaction_state`` failed, as under a lossy link). Transactions v1 (EndTxn v0-4) answer
INVALID_TXN_STATE, as Kafka's TransactionCoordinator does (fatal to librdkafka and the Java
client); transactions v2 (EndTxn v5, KIP-890) allow the abort."""

from __future__ import annotations

from broker.transaction.end_txn import plan_end_txn
from broker.transaction.metadata import TransactionMetadata, TransactionState
from wire.errors import ErrorCode

S = TransactionState


def committed_once() -> TransactionMetadata:
    m = TransactionMetadata.new("tx", 7, 60_000, 1_000)
    bump = m.prepare_increment_producer_epoch(60_000, None, 1_000)
    assert not isinstance(bump, ErrorCode)
    m.complete_transition(bump)
    m.complete_transition(m.prepare_add_partitions({("t", 0)}, 2_000))
    m.complete_transition(m.prepare_abort_or_commit(S.PREPARE_COMMIT, 3_000))
    m.complete_transition(m.prepare_complete(4_000))
    assert m.state is S.COMPLETE_COMMIT
    return m


def test_an_abort_the_coordinator_never_saw_begin_is_invalid_under_transactions_v1() -> None:
    m = committed_once()
    decision = plan_end_txn(m, 7, m.producer_epoch, commit=False, from_client=True, tv2=False)
    assert decision.error is ErrorCode.INVALID_TXN_STATE
    # A retried commit of the transaction that did commit is answered NONE.
    assert plan_end_txn(m, 7, m.producer_epoch, commit=True, from_client=True, tv2=False).error is ErrorCode.NONE


def test_transactions_v2_allow_that_abort() -> None:
    m = committed_once()
    decision = plan_end_txn(m, 7, m.producer_epoch, commit=False, from_client=True, tv2=True)
    assert (decision.error, decision.next_state) == (None, S.PREPARE_ABORT)
