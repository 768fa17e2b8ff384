"""The transactional id state machine and its ``__transaction_state`` records."""

from __future__ import annotations

import pytest

from broker.transaction.metadata import (
    MAX_EPOCH,
    IllegalTransitionError,
    TransactionMetadata,
    TransactionState,
)
from broker.transaction.records import key_bytes, parse_key, parse_value, value_bytes
from wire.errors import ErrorCode

S = TransactionState


def initialized(epoch_bumps: int = 1) -> TransactionMetadata:
    m = TransactionMetadata.new("tx", 7, 60_000, 1_000)
    for _ in range(epoch_bumps):
        transit = m.prepare_increment_producer_epoch(60_000, None, 1_000)
        assert not isinstance(transit, ErrorCode)
        m.complete_transition(transit)
    return m


def test_a_transaction_goes_round_and_its_records_read_back() -> None:
    m = initialized()
    assert (m.producer_epoch, m.state) == (0, S.EMPTY)
    transit = m.prepare_add_partitions({("t", 0), ("t", 1)}, 2_000)
    assert m.pending_state is S.ONGOING
    with pytest.raises(IllegalTransitionError):
        m.prepare_add_partitions({("t", 2)}, 2_001)  # one change at a time
    m.complete_transition(transit)
    assert m.state is S.ONGOING and m.txn_start_timestamp == 2_000
    prepare = m.prepare_abort_or_commit(S.PREPARE_COMMIT, 3_000)
    record = value_bytes(prepare)
    m.complete_transition(prepare)
    loaded = parse_value("tx", record)
    assert (loaded.state, loaded.producer_id, loaded.producer_epoch) == (S.PREPARE_COMMIT, 7, 0)
    assert loaded.topic_partitions == {("t", 0), ("t", 1)}
    assert (loaded.txn_start_timestamp, loaded.txn_last_update_timestamp) == (2_000, 3_000)
    for tp in list(m.topic_partitions):
        m.remove_partition(tp)
    m.complete_transition(m.prepare_complete(4_000))
    assert m.state.state_name == "CompleteCommit" and not m.topic_partitions
    assert parse_key(key_bytes("tx")) == "tx"


def test_empty_is_written_with_a_null_partition_list() -> None:
    m = initialized()
    data = value_bytes(m.prepare_no_transit())
    # version 0 value: ..., status int8, then a null array (-1)
    assert data[:2] == b"\x00\x00" and data[2 + 8 + 2 + 4 + 1:2 + 8 + 2 + 4 + 1 + 4] == b"\xff\xff\xff\xff"
    assert parse_value("tx", data).state is S.EMPTY


def test_epoch_bumps_for_a_retrying_producer_and_fences_others() -> None:
    m = initialized(2)
    assert m.producer_epoch == 1
    # KIP-360: the producer names its current epoch and gets the next one.
    transit = m.prepare_increment_producer_epoch(60_000, 1, 5_000)
    assert not isinstance(transit, ErrorCode)
    m.complete_transition(transit)
    assert (m.producer_epoch, m.last_producer_epoch) == (2, 1)
    # Its retry (the answer was lost) gets the same epoch again.
    retry = m.prepare_increment_producer_epoch(60_000, 1, 5_001)
    assert not isinstance(retry, ErrorCode) and retry.producer_epoch == 2
    m.pending_state = None
    assert m.prepare_increment_producer_epoch(60_000, 0, 5_002) is ErrorCode.PRODUCER_FENCED


def test_a_fence_bumps_the_epoch_once_even_when_retried() -> None:
    m = initialized()
    m.complete_transition(m.prepare_add_partitions({("t", 0)}, 2_000))
    fence = m.prepare_fence_producer_epoch()
    assert (fence.txn_state, fence.producer_epoch) == (S.PREPARE_EPOCH_FENCE, 1)
    m.pending_state = None
    m.has_failed_epoch_fence = True
    assert m.prepare_fence_producer_epoch().producer_epoch == 0


def test_an_exhausted_epoch_rotates_the_producer_id() -> None:
    m = initialized()
    m.producer_epoch = MAX_EPOCH - 1
    assert m.is_producer_epoch_exhausted
    transit = m.prepare_producer_id_rotation(8, 60_000, 6_000, record_last_epoch=True)
    m.complete_transition(transit)
    assert (m.producer_id, m.producer_epoch, m.last_producer_id, m.last_producer_epoch) == (8, 0, 7, MAX_EPOCH - 1)


def test_transaction_version_one_writes_kafka4_tagged_fields_and_reads_them_back() -> None:
    """A TV2 transaction whose epoch ran out: its next producer id, previous producer id and
    client transaction version survive the log (a new coordinator keeps transactions v2)."""
    m = initialized()
    m.complete_transition(m.prepare_add_partitions({("t", 0)}, 2_000, client_transaction_version=2))
    m.producer_epoch = MAX_EPOCH - 1  # the bump below reaches the last epoch
    prepare = m.prepare_abort_or_commit(S.PREPARE_COMMIT, 3_000, client_transaction_version=2, next_producer_id=9)
    legacy = value_bytes(prepare)
    flexible = value_bytes(prepare, transaction_version_level=2)
    assert legacy[:2] == b"\x00\x00" and flexible[:2] == b"\x00\x01"
    # The tagged fields close the record, by tag: 0 previous producer id, 1 next producer id
    # (both int64), 2 the client transaction version (int16).
    previous = prepare.last_producer_id
    assert previous == 7
    tags = bytes([3, 0, 8]) + previous.to_bytes(8, "big") + bytes([1, 8]) + (9).to_bytes(8, "big") + bytes([2, 2, 0, 2])
    assert flexible.endswith(tags)
    loaded = parse_value("tx", flexible)
    assert (loaded.last_producer_id, loaded.next_producer_id, loaded.client_transaction_version) == (7, 9, 2)
    assert loaded.supports_epoch_bump
    old = parse_value("tx", legacy)
    assert (old.last_producer_id, old.next_producer_id, old.client_transaction_version) == (-1, -1, 0)
