"""The share coordinator's state of share-partitions (Kafka's ShareCoordinatorShard).

A share-partition is (group, topic id, partition); its durable state is the
start offset and the state batches of its in-flight records (Kafka's
PersisterStateBatch), plus two fences:

- the *state epoch*, bumped when the state is reset (InitializeShareGroupState
  with a higher epoch, AlterShareGroupOffsets); a Write carrying an older one is
  FENCED_STATE_EPOCH;
- the *leader epoch* of the topic partition whose leader keeps the live
  share-partition: a Read raises it (the new leader takes over), and a Read or
  Write from an older leader is FENCED_LEADER_EPOCH, so a deposed leader cannot
  overwrite what its successor does.

Which ``__share_group_state`` partition keeps a share-partition: Kafka's key
``"groupId:topicId:partition"`` (topic id in Kafka's base64 form) hashed as any
coordinator key. Records (JSON, compacted by key; see docs/share-groups.md):
key ``{"type":"state","group":G,"topic_id":T,"partition":P}``, value
``{"version":1,"state_epoch":E,"leader_epoch":L,"start_offset":S,
"state_batches":[[first,last,state,count],...]}``; a tombstone deletes it.

Pure and synchronous: every operation changes the state at once and returns the
records to append; the caller answers once they are committed.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from broker.coordinator import CoordinatorRecord
from broker.share.partition import RecordState, StateBatch
from wire.errors import ErrorCode

#: (group id, topic id, partition)
SharePartitionKey = tuple[str, uuid.UUID, int]

#: Start offset of a share-partition nobody initialized yet (Kafka's UNINITIALIZED_START_OFFSET).
UNINITIALIZED_START_OFFSET = -1
#: Kafka's PartitionFactory.DEFAULT_STATE_EPOCH.
DEFAULT_STATE_EPOCH = 0
NO_LEADER_EPOCH = -1
_DONE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
_KAFKA_UUID = re.compile(r"[A-Za-z0-9_-]{22}")
_PARTITION = re.compile(r"[0-9]+")
_INT32_MAX = 2**31 - 1


def kafka_uuid(value: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString()``: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def coordinator_key(key: SharePartitionKey) -> str:
    """Kafka's ``SharePartitionKey.asCoordinatorKey()``: what picks the state partition."""
    group, topic_id, partition = key
    return f"{group}:{kafka_uuid(topic_id)}:{partition}"


def parse_coordinator_key(text: str) -> SharePartitionKey | None:
    """Kafka's ``SharePartitionKey.getInstance``: ``groupId:topicId:partition`` with a
    non-blank group, a topic id in Kafka's base64 form and a partition >= 0; None when
    malformed (FindCoordinator answers INVALID_REQUEST)."""
    tokens = text.split(":")
    if len(tokens) != 3 or not tokens[0].strip():
        return None
    group, topic, partition = tokens
    if not _KAFKA_UUID.fullmatch(topic) or not _PARTITION.fullmatch(partition) or int(partition) > _INT32_MAX:
        return None
    raw = base64.urlsafe_b64decode(topic + "==")
    number = int(partition)
    return group.strip(), uuid.UUID(bytes=raw), number


@dataclass(frozen=True, slots=True)
class ShareState:
    state_epoch: int = DEFAULT_STATE_EPOCH
    leader_epoch: int = NO_LEADER_EPOCH
    start_offset: int = UNINITIALIZED_START_OFFSET
    batches: tuple[StateBatch, ...] = ()

    def delivery_complete_count(self) -> int:
        """Offsets at or past the start offset whose delivery is over (acknowledged or archived)."""
        return sum(b.last_offset - b.first_offset + 1 for b in self.batches
                   if b.state in _DONE and b.first_offset >= self.start_offset)


def merge_batches(current: Iterable[StateBatch], updates: Iterable[StateBatch], start_offset: int
                  ) -> tuple[StateBatch, ...]:
    """Kafka's combineStateBatches: ``updates`` replace what they overlap; nothing below
    ``start_offset`` is kept."""
    out = sorted(current, key=lambda b: b.first_offset)
    for u in sorted(updates, key=lambda b: b.first_offset):
        if u.last_offset < u.first_offset:
            continue
        kept: list[StateBatch] = []
        for b in out:
            if b.last_offset < u.first_offset or b.first_offset > u.last_offset:
                kept.append(b)
                continue
            if b.first_offset < u.first_offset:
                kept.append(StateBatch(b.first_offset, u.first_offset - 1, b.state, b.delivery_count))
            if b.last_offset > u.last_offset:
                kept.append(StateBatch(u.last_offset + 1, b.last_offset, b.state, b.delivery_count))
        kept.append(u)
        out = sorted(kept, key=lambda b: b.first_offset)
    trimmed: list[StateBatch] = []
    for b in out:
        if b.last_offset < start_offset:
            continue
        if b.first_offset < start_offset:
            b = StateBatch(start_offset, b.last_offset, b.state, b.delivery_count)
        trimmed.append(b)
    return tuple(trimmed)


def _record_key(key: SharePartitionKey) -> bytes:
    group, topic_id, partition = key
    return json.dumps({"group": group, "partition": partition, "topic_id": str(topic_id), "type": "state"},
                      sort_keys=True, separators=(",", ":")).encode()


def _record(key: SharePartitionKey, state: ShareState | None) -> CoordinatorRecord:
    if state is None:
        return CoordinatorRecord(_record_key(key), None)
    value = {"version": 1, "state_epoch": state.state_epoch, "leader_epoch": state.leader_epoch,
             "start_offset": state.start_offset,
             "state_batches": [[b.first_offset, b.last_offset, int(b.state), b.delivery_count]
                               for b in state.batches]}
    return CoordinatorRecord(_record_key(key), json.dumps(value, separators=(",", ":")).encode())


class ShareStateStore:
    """The share-partition states kept by one ``__share_group_state`` partition."""

    def __init__(self) -> None:
        self.states: dict[SharePartitionKey, ShareState] = {}

    # ------------------------------------------------------------ replay

    def replay(self, key: dict[str, Any], value: dict[str, Any] | None) -> None:
        """A ``"type":"state"`` record read back from the log (raises on a malformed one)."""
        spk: SharePartitionKey = (str(key["group"]), uuid.UUID(key["topic_id"]), int(key["partition"]))
        if value is None:
            self.states.pop(spk, None)
            return
        self.states[spk] = ShareState(
            int(value["state_epoch"]), int(value["leader_epoch"]), int(value["start_offset"]),
            tuple(StateBatch(int(f), int(last), RecordState(int(s)), int(c))
                  for f, last, s, c in value["state_batches"]))

    # ------------------------------------------------------------ operations

    def initialize(self, key: SharePartitionKey, state_epoch: int, start_offset: int
                   ) -> tuple[ErrorCode, list[CoordinatorRecord]]:
        """InitializeShareGroupState: a fresh state (nothing in flight) at ``start_offset``;
        only a higher state epoch may replace an existing one."""
        current = self.states.get(key)
        if current is not None and state_epoch <= current.state_epoch:
            return ErrorCode.FENCED_STATE_EPOCH, []
        state = self.states[key] = ShareState(state_epoch, NO_LEADER_EPOCH, start_offset, ())
        return ErrorCode.NONE, [_record(key, state)]

    def write(self, key: SharePartitionKey, state_epoch: int, leader_epoch: int, start_offset: int,
              batches: Sequence[StateBatch]) -> tuple[ErrorCode, list[CoordinatorRecord]]:
        """WriteShareGroupState: ``batches`` merged over the kept ones, the start offset
        moved (unless -1)."""
        current = self.states.get(key, ShareState())
        if leader_epoch != NO_LEADER_EPOCH and leader_epoch < current.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH, []
        if state_epoch < current.state_epoch:
            return ErrorCode.FENCED_STATE_EPOCH, []
        start = current.start_offset if start_offset == UNINITIALIZED_START_OFFSET else start_offset
        state = self.states[key] = ShareState(
            max(state_epoch, current.state_epoch), max(leader_epoch, current.leader_epoch), start,
            merge_batches(current.batches, batches, start))
        return ErrorCode.NONE, [_record(key, state)]

    def read(self, key: SharePartitionKey, leader_epoch: int
             ) -> tuple[ErrorCode, ShareState | None, list[CoordinatorRecord]]:
        """ReadShareGroupState by a partition leader: a newer leader epoch is recorded (it fences
        the older leaders); an older one is FENCED_LEADER_EPOCH. Unknown: not initialized."""
        current = self.states.get(key)
        if current is None:
            return ErrorCode.NONE, ShareState(), []
        if leader_epoch != NO_LEADER_EPOCH and leader_epoch < current.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH, None, []
        if leader_epoch > current.leader_epoch:
            current = self.states[key] = ShareState(current.state_epoch, leader_epoch, current.start_offset,
                                                    current.batches)
            return ErrorCode.NONE, current, [_record(key, current)]
        return ErrorCode.NONE, current, []

    def summary(self, key: SharePartitionKey) -> ShareState:
        """ReadShareGroupStateSummary: the state as kept, changing nothing."""
        return self.states.get(key, ShareState())

    def delete(self, key: SharePartitionKey) -> list[CoordinatorRecord]:
        """DeleteShareGroupState: forgets the share-partition (a tombstone)."""
        if self.states.pop(key, None) is None:
            return []
        return [_record(key, None)]

    def keys_of(self, group: str) -> list[SharePartitionKey]:
        return sorted(k for k in self.states if k[0] == group)
