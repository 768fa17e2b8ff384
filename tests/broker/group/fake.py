"""A ShardContext with explicit time, and helpers that drive a GroupShard like clients do.

Time only moves in :meth:`FakeContext.advance`; timers fire in (deadline, scheduling
order); appends are "committed" by :meth:`FakeContext.flush` (or at once with
``auto_commit``), so a test decides exactly when the high watermark passes them.
"""

from __future__ import annotations

import random
import struct
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from broker.coordinator.runtime import (
    AppendResult,
    CoordinatorRecord,
    PreparedBatch,
    ReplayedRecord,
)
from broker.group.group import JoinResult, SyncResult
from broker.group.records import OffsetAndMetadata
from broker.group.shard import GroupShard
from broker.group.shard_types import GroupConfig, JoinRequest, SyncRequest
from wire.errors import ErrorCode
from wire.generated.data.consumer_protocol_assignment import (
    ConsumerProtocolAssignment,
    ConsumerProtocolAssignmentTopicPartition,
)
from wire.generated.data.consumer_protocol_subscription import (
    ConsumerProtocolSubscription,
    ConsumerProtocolSubscriptionTopicPartition,
)
from wire.records import iter_records

START_MS = 1_700_000_000_000


@dataclass
class Appended:
    offset: int
    record: CoordinatorRecord


class FakeContext:
    def __init__(self, partition: int = 0, seed: int = 7) -> None:
        self.partition = partition
        self.time_ms = START_MS
        self.rng = random.Random(seed)
        self.timers: dict[str, tuple[int, int, Callable[[], None]]] = {}
        self.seq = 0
        self.log: list[Appended] = []
        self.pending: list[tuple[Callable[[AppendResult], None], AppendResult]] = []
        self.auto_commit = True
        self.fail_with: ErrorCode | None = None

    # ShardContext
    def now_ms(self) -> int:
        return self.time_ms

    def random_uuid(self) -> uuid.UUID:
        return uuid.UUID(int=self.rng.getrandbits(128), version=4)

    def schedule(self, key: str, delay_ms: int, callback: Callable[[], None]) -> None:
        self.seq += 1
        self.timers[key] = (self.time_ms + delay_ms, self.seq, callback)

    def cancel(self, key: str) -> None:
        self.timers.pop(key, None)

    def append(
        self,
        records: Sequence[CoordinatorRecord] | PreparedBatch,
        on_complete: Callable[[AppendResult], None] | None = None,
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        transactional: bool = False,
    ) -> None:
        if self.fail_with is not None:
            if on_complete is not None:
                self.pending.append((on_complete, AppendResult(self.fail_with)))
            return
        base = len(self.log)
        if isinstance(records, PreparedBatch):
            records = [CoordinatorRecord(bytes(r.key or b""), None if r.value is None else bytes(r.value))
                       for r in iter_records(records.data, 0)]
        for r in records:
            self.log.append(Appended(len(self.log), r))
        if on_complete is not None:
            self.pending.append((on_complete, AppendResult(ErrorCode.NONE, base, len(self.log) - 1)))

    # driving
    def flush(self) -> None:
        """Every append so far is committed (its callback runs)."""
        while self.pending:
            callback, result = self.pending.pop(0)
            callback(result)

    def after_op(self) -> None:
        if self.auto_commit:
            self.flush()

    def timer_keys(self) -> set[str]:
        return set(self.timers)

    def advance(self, ms: int) -> None:
        target = self.time_ms + ms
        while True:
            due = [(d, s, k) for k, (d, s, _) in self.timers.items() if d <= target]
            if not due:
                break
            deadline, _, key = min(due)
            self.time_ms = max(self.time_ms, deadline)
            _, _, callback = self.timers.pop(key)
            callback()
            self.after_op()
        self.time_ms = target

    def replayed(self) -> list[ReplayedRecord]:
        return [ReplayedRecord(a.offset, START_MS, a.record.key, a.record.value, -1, -1, False) for a in self.log]


def subscription(*topics: str, owned: dict[str, list[int]] | None = None, version: int = 1) -> bytes:
    sub = ConsumerProtocolSubscription(
        topics=list(topics),
        owned_partitions=[ConsumerProtocolSubscriptionTopicPartition(t, ps) for t, ps in (owned or {}).items()],
    )
    return struct.pack(">h", version) + sub.encode(version)


def assignment(parts: dict[str, list[int]]) -> bytes:
    a = ConsumerProtocolAssignment(
        assigned_partitions=[ConsumerProtocolAssignmentTopicPartition(t, ps) for t, ps in parts.items()])
    return struct.pack(">h", 0) + a.encode(0)


@dataclass
class Box:
    """The answer to a request that may arrive later."""

    values: list[object] = field(default_factory=list)
    #: for a two-step join: the member id the first step handed out
    member_id: str = ""

    def __call__(self, value: object) -> None:
        self.values.append(value)

    @property
    def done(self) -> bool:
        return bool(self.values)

    @property
    def value(self) -> object:
        assert len(self.values) == 1, f"expected one answer, got {self.values}"
        return self.values[0]

    @property
    def join(self) -> JoinResult:
        v = self.value
        assert isinstance(v, JoinResult)
        return v

    @property
    def sync(self) -> SyncResult:
        v = self.value
        assert isinstance(v, SyncResult)
        return v


class Driver:
    """A GroupShard and its fake context, with client-shaped calls."""

    def __init__(self, config: GroupConfig | None = None, **kwargs: object) -> None:
        self.ctx = FakeContext()
        self.config = config or GroupConfig(initial_rebalance_delay_ms=0, **kwargs)  # type: ignore[arg-type]
        self.shard = GroupShard(self.ctx, self.config)  # type: ignore[arg-type]
        self.shard.on_loaded()

    def join(
        self,
        group: str = "g",
        member_id: str = "",
        *,
        instance_id: str | None = None,
        protocols: list[tuple[str, bytes]] | None = None,
        protocol_type: str = "consumer",
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 30_000,
        require_known_member_id: bool = True,
        skip_assignment: bool = False,
        client_id: str = "client",
    ) -> Box:
        box = Box()
        self.shard.join_group(JoinRequest(
            group_id=group, member_id=member_id, group_instance_id=instance_id,
            require_known_member_id=require_known_member_id and instance_id is None,
            support_skip_assignment=skip_assignment, client_id=client_id, client_host="/127.0.0.1",
            rebalance_timeout_ms=rebalance_timeout_ms, session_timeout_ms=session_timeout_ms,
            protocol_type=protocol_type,
            protocols=protocols if protocols is not None else [("range", subscription("t"))],
        ), box)
        self.ctx.after_op()
        return box

    def join_new(self, group: str = "g", **kwargs: object) -> Box:
        """A dynamic member's two-step join (v4+): MEMBER_ID_REQUIRED, then the real join."""
        first = self.join(group, **kwargs)  # type: ignore[arg-type]
        assert first.join.error is ErrorCode.MEMBER_ID_REQUIRED, first.join
        second = self.join(group, first.join.member_id, **kwargs)  # type: ignore[arg-type]
        second.member_id = first.join.member_id
        return second

    def sync(self, group: str, member_id: str, generation: int, assignments: dict[str, bytes] | None = None,
             instance_id: str | None = None, protocol_type: str | None = None,
             protocol_name: str | None = None) -> Box:
        box = Box()
        self.shard.sync_group(SyncRequest(group, generation, member_id, instance_id, protocol_type, protocol_name,
                                          assignments or {}), box)
        self.ctx.after_op()
        return box

    def heartbeat(self, group: str, member_id: str, generation: int, instance_id: str | None = None) -> ErrorCode:
        error = self.shard.heartbeat(group, member_id, instance_id, generation)
        self.ctx.after_op()
        return error

    def commit(self, group: str, offsets: dict[tuple[str, int], int], *, member_id: str = "",
               generation: int = -1, instance_id: str | None = None, metadata: str = "",
               leader_epoch: int | None = None, expire_ms: int | None = None) -> Box:
        box = Box()
        now = self.ctx.now_ms()
        self.shard.commit_offsets(group, member_id, instance_id, generation, {
            tp: OffsetAndMetadata(o, leader_epoch, metadata, now, expire_ms) for tp, o in offsets.items()}, box)
        self.ctx.after_op()
        return box

    def state(self, group: str = "g") -> str:
        g = self.shard.groups.get(group)
        return "Dead" if g is None else g.state.value

    def stable_group(self, group: str, n: int, *, protocols: list[tuple[str, bytes]] | None = None,
                     **kwargs: object) -> list[str]:
        """``n`` dynamic members joined and synced; returns their member ids (leader first)."""
        boxes = [self.join_new(group, protocols=protocols, **kwargs) for _ in range(n)]  # type: ignore[arg-type]
        if not all(b.done for b in boxes):
            self.ctx.advance(0)
        results = [b.join for b in boxes]
        generation = results[-1].generation_id
        leader = results[0].leader_id
        members = [r.member_id for r in results]
        syncs = [self.sync(group, m, generation, {x: b"a-" + x.encode() for x in members} if m == leader else None)
                 for m in members]
        assert all(s.sync.error is ErrorCode.NONE for s in syncs), [s.values for s in syncs]
        assert self.state(group) == "Stable"
        return [leader] + [m for m in members if m != leader]
