"""The share coordinator's state of share-partitions (broker/share/state_store.py): merging
state batches, state and leader epoch fences, and records that replay to the same state."""

from __future__ import annotations

import json
import uuid

from broker.coordinator import CoordinatorRecord
from broker.share.partition import RecordState
from broker.share.partition import StateBatch as B
from broker.share.state_store import ShareState, ShareStateStore, coordinator_key, merge_batches
from wire.errors import ErrorCode

A, ACK, ARC = RecordState.AVAILABLE, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED
TOPIC = uuid.UUID("5d1b6b4e-7d3c-4a0e-9d7e-1f2a3b4c5d6e")
KEY = ("g", TOPIC, 3)


def replayed(store: ShareStateStore, records: list[tuple[bytes, bytes | None]]) -> ShareStateStore:
    for k, v in records:
        store.replay(json.loads(k), None if v is None else json.loads(v))
    return store


def test_coordinator_key_is_kafkas() -> None:
    # SharePartitionKey.asCoordinatorKey(): group:topicId:partition with Kafka's base64 topic id
    assert coordinator_key(("grp", uuid.UUID(int=0), 0)) == "grp:AAAAAAAAAAAAAAAAAAAAAA:0"
    assert coordinator_key(KEY) == "g:XRtrTn08Sg6dfh8qO0xdbg:3"


def test_merge_replaces_what_updates_overlap_and_drops_below_start() -> None:
    current = [B(10, 19, A, 1), B(20, 29, ACK, 1)]
    merged = merge_batches(current, [B(15, 22, ARC, 2)], 12)
    assert merged == (B(12, 14, A, 1), B(15, 22, ARC, 2), B(23, 29, ACK, 1))
    assert merge_batches(current, [], 30) == ()
    assert merge_batches([B(0, 9, A, 1)], [B(3, 3, ACK, 1), B(5, 5, ARC, 3)], 0) == (
        B(0, 2, A, 1), B(3, 3, ACK, 1), B(4, 4, A, 1), B(5, 5, ARC, 3), B(6, 9, A, 1))


def test_unknown_state_reads_uninitialized() -> None:
    store = ShareStateStore()
    error, state, records = store.read(KEY, 4)
    assert (error, state, records) == (ErrorCode.NONE, ShareState(), [])
    assert store.summary(KEY).start_offset == -1


def test_write_merges_and_fences_older_leaders_and_state_epochs() -> None:
    store = ShareStateStore()
    log: list[tuple[bytes, bytes | None]] = []

    def keep(result: tuple[ErrorCode, list[CoordinatorRecord]]) -> ErrorCode:
        log.extend((r.key, r.value) for r in result[1])
        return result[0]

    assert keep(store.initialize(KEY, 1, 100)) is ErrorCode.NONE
    assert keep(store.initialize(KEY, 1, 50)) is ErrorCode.FENCED_STATE_EPOCH
    assert keep(store.write(KEY, 1, 5, -1, [B(100, 104, ACK, 1), B(105, 109, A, 1)])) is ErrorCode.NONE
    assert store.states[KEY].start_offset == 100  # -1: not moved
    assert keep(store.write(KEY, 1, 5, 105, [B(105, 106, ARC, 2)])) is ErrorCode.NONE
    assert store.states[KEY].batches == (B(105, 106, ARC, 2), B(107, 109, A, 1))
    # a new leader (epoch 6) reads: the old one (5) is fenced from then on
    error, state, records = store.read(KEY, 6)
    log.extend((r.key, r.value) for r in records)
    assert error is ErrorCode.NONE and state is not None and state.leader_epoch == 6 and records
    assert keep(store.write(KEY, 1, 5, 107, [])) is ErrorCode.FENCED_LEADER_EPOCH
    assert store.read(KEY, 5)[0] is ErrorCode.FENCED_LEADER_EPOCH
    assert keep(store.write(KEY, 0, 6, 107, [])) is ErrorCode.FENCED_STATE_EPOCH
    assert keep(store.write(KEY, 1, 6, 107, [B(107, 107, ACK, 1)])) is ErrorCode.NONE
    assert store.summary(KEY).delivery_complete_count() == 1
    # the log replays to the same state
    again = replayed(ShareStateStore(), log)
    assert again.states == store.states
    # a higher state epoch resets it (AlterShareGroupOffsets)
    assert keep(store.initialize(KEY, 2, 0)) is ErrorCode.NONE
    assert store.states[KEY] == ShareState(2, -1, 0, ())
    assert keep(store.write(KEY, 1, 6, 5, [])) is ErrorCode.FENCED_STATE_EPOCH
    deleted = store.delete(KEY)
    log.extend((r.key, r.value) for r in deleted)
    assert deleted and KEY not in store.states
    assert replayed(ShareStateStore(), log).states == {}
    assert store.delete(KEY) == []  # nothing to delete: no record
