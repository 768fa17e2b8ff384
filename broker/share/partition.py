"""A share-partition's delivery state (KIP-932), as Kafka's ``SharePartition`` keeps it.

One per (share group, topic partition). Records from the *start offset* on are
tracked; below it every record is done. Between the start offset and the *end
offset* (the next offset never handed out yet) each record is in flight:

- AVAILABLE: may be acquired (again) by any member,
- ACQUIRED: locked to one member until its acquisition lock expires,
- ACKNOWLEDGED: accepted (done),
- ARCHIVED: rejected, or delivered ``delivery_count_limit`` times (done).

Acknowledge types are Kafka's: 1 ACCEPT, 2 RELEASE, 3 REJECT (0 is a gap), and 4 RENEW
(KIP-1222), which restarts the acquisition lock of a record without changing its state.
Acquiring increments the delivery count; a released or expired record whose
count reached the limit is archived instead of made available again. The start
offset advances over leading done records. Pure and synchronous: time comes in
as ``now_ms`` arguments, so tests drive it with an explicit clock.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

from wire.errors import ErrorCode

GAP = 0
ACCEPT = 1
RELEASE = 2
REJECT = 3
RENEW = 4
ACKNOWLEDGE_TYPES = frozenset({GAP, ACCEPT, RELEASE, REJECT, RENEW})


class RecordState(enum.IntEnum):
    """Kafka's RecordState ids (also the persisted DeliveryState)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


@dataclass(slots=True)
class InFlightRecord:
    state: RecordState
    delivery_count: int
    member_id: str = ""
    lock_deadline_ms: int = 0


@dataclass(frozen=True, slots=True)
class AcquiredBatch:
    """A run of consecutive offsets acquired with the same delivery count."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ArchivedRecord:
    """A record archived by REJECT or by running out of deliveries (for a dead-letter copy)."""

    offset: int
    reason: str  # "rejected" | "delivery_count_exceeded"
    delivery_count: int


@dataclass(frozen=True, slots=True)
class StateBatch:
    """Persisted form of a run of in-flight records (Kafka's PersisterStateBatch)."""

    first_offset: int
    last_offset: int
    state: RecordState
    delivery_count: int


@dataclass(slots=True)
class SharePartition:
    lock_duration_ms: int
    delivery_count_limit: int
    max_in_flight: int
    start_offset: int = -1  # -1: not initialized yet (share.auto.offset.reset decides)
    end_offset: int = -1
    records: dict[int, InFlightRecord] = field(default_factory=dict)
    #: Archived by this instance since last drained (dead-letter copies).
    archived: list[ArchivedRecord] = field(default_factory=list)

    @property
    def initialized(self) -> bool:
        return self.start_offset >= 0

    def initialize(self, offset: int) -> None:
        self.start_offset = self.end_offset = offset
        self.records.clear()

    # ------------------------------------------------------------ acquiring

    def first_available(self) -> int:
        """Where a read must start to find every acquirable record."""
        avail = [o for o, r in self.records.items() if r.state is RecordState.AVAILABLE]
        return min(avail) if avail else self.end_offset

    def acquire(self, member_id: str, log_offsets: Iterable[int], max_records: int,
                now_ms: int) -> list[AcquiredBatch]:
        """Locks up to ``max_records`` records for ``member_id`` among ``log_offsets`` (the
        offsets of the records just read from the log, ascending): in-flight AVAILABLE ones
        first (redeliveries), then new ones at or past the end offset."""
        return self.acquire_offsets(member_id, self.acquirable(log_offsets, now_ms)[:max(max_records, 0)], now_ms)

    def acquirable(self, log_offsets: Iterable[int], now_ms: int) -> list[int]:
        """The offsets among ``log_offsets`` (ascending) that may be acquired now, in order:
        in-flight AVAILABLE ones (redeliveries, all below the end offset), then new ones at or
        past the end offset while ``max_in_flight`` leaves room."""
        self.expire_locks(now_ms)
        out: list[int] = []
        room = self.max_in_flight - len(self.records)
        for offset in log_offsets:
            if offset < self.end_offset:
                r = self.records.get(offset)
                if r is not None and r.state is RecordState.AVAILABLE:
                    out.append(offset)
            elif room > 0:
                out.append(offset)
                room -= 1
        return out

    def acquire_offsets(self, member_id: str, offsets: Iterable[int], now_ms: int) -> list[AcquiredBatch]:
        """Locks ``offsets`` (chosen from :meth:`acquirable`, ascending) for ``member_id``."""
        taken: list[tuple[int, int]] = []
        for offset in offsets:
            if offset >= self.end_offset:
                self.records[offset] = InFlightRecord(RecordState.AVAILABLE, 0)
                self.end_offset = offset + 1
            taken.append((offset, self._lock(offset, member_id, now_ms)))
        return _runs(taken)

    def _lock(self, offset: int, member_id: str, now_ms: int) -> int:
        r = self.records[offset]
        r.state = RecordState.ACQUIRED
        r.delivery_count += 1
        r.member_id = member_id
        r.lock_deadline_ms = now_ms + self.lock_duration_ms
        return r.delivery_count

    def skip_to(self, offset: int) -> None:
        """The log starts later than the end offset (retention, deletion): nothing below
        ``offset`` can be delivered any more."""
        if offset <= self.end_offset:
            return
        for o in [o for o in self.records if o < offset]:
            del self.records[o]
        self.end_offset = offset
        self.start_offset = max(self.start_offset, offset)
        self._advance_start()

    # ------------------------------------------------------------ acknowledging

    def acknowledge(self, member_id: str, first_offset: int, last_offset: int,
                    types: list[int], now_ms: int) -> ErrorCode:
        """One AcknowledgementBatch: ``types`` has one type for the whole range or one per
        offset. Every non-gap offset must be ACQUIRED by ``member_id``; otherwise nothing in
        the batch changes and the answer is INVALID_RECORD_STATE. RENEW restarts the
        record's acquisition lock (``lock_duration_ms`` from ``now_ms``); whether a request may
        renew at all is the handler's to check (Kafka's validateAcknowledgementBatches)."""
        count = last_offset - first_offset + 1
        if count <= 0 or not types or (len(types) != 1 and len(types) != count):
            return ErrorCode.INVALID_REQUEST
        if any(t not in ACKNOWLEDGE_TYPES for t in types):
            return ErrorCode.INVALID_REQUEST
        if first_offset < self.start_offset or last_offset >= self.end_offset:
            # Nothing outside the in-flight window can be held (this also bounds the work).
            return ErrorCode.INVALID_RECORD_STATE
        self.expire_locks(now_ms)
        plan: list[tuple[int, int]] = []
        for i in range(count):
            offset = first_offset + i
            kind = types[0] if len(types) == 1 else types[i]
            if kind == GAP:
                continue
            r = self.records.get(offset)
            if r is None or r.state is not RecordState.ACQUIRED or r.member_id != member_id:
                return ErrorCode.INVALID_RECORD_STATE
            plan.append((offset, kind))
        for offset, kind in plan:
            r = self.records[offset]
            if kind == RENEW:
                r.lock_deadline_ms = now_ms + self.lock_duration_ms
            elif kind == ACCEPT:
                self._finish(r, RecordState.ACKNOWLEDGED)
            elif kind == REJECT:
                self._archive(offset, r, "rejected")
            else:
                self._make_available(offset, r)
        self._advance_start()
        return ErrorCode.NONE

    def release_member(self, member_id: str) -> int:
        """A member left or its session closed: its acquired records become available."""
        released = 0
        for offset, r in sorted(self.records.items()):
            if r.state is RecordState.ACQUIRED and r.member_id == member_id:
                self._make_available(offset, r)
                released += 1
        self._advance_start()
        return released

    def expire_locks(self, now_ms: int) -> int:
        """Acquisition locks past their deadline: the record is redelivered (or archived)."""
        expired = 0
        for offset, r in sorted(self.records.items()):
            if r.state is RecordState.ACQUIRED and r.lock_deadline_ms <= now_ms:
                self._make_available(offset, r)
                expired += 1
        if expired:
            self._advance_start()
        return expired

    def next_lock_deadline(self) -> int | None:
        deadlines = [r.lock_deadline_ms for r in self.records.values() if r.state is RecordState.ACQUIRED]
        return min(deadlines) if deadlines else None

    def _make_available(self, offset: int, r: InFlightRecord) -> None:
        if r.delivery_count >= self.delivery_count_limit:
            self._archive(offset, r, "delivery_count_exceeded")
        else:
            self._finish(r, RecordState.AVAILABLE)

    def _archive(self, offset: int, r: InFlightRecord, reason: str) -> None:
        self._finish(r, RecordState.ARCHIVED)
        self.archived.append(ArchivedRecord(offset, reason, r.delivery_count))

    @staticmethod
    def _finish(r: InFlightRecord, state: RecordState) -> None:
        r.state = state
        r.member_id = ""
        r.lock_deadline_ms = 0

    def _advance_start(self) -> None:
        while self.start_offset < self.end_offset:
            r = self.records.get(self.start_offset)
            if r is not None and r.state not in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
                break
            self.records.pop(self.start_offset, None)
            self.start_offset += 1

    # ------------------------------------------------------------ persistence

    def state_batches(self) -> list[StateBatch]:
        """The in-flight records as runs; an acquired record is persisted AVAILABLE (locks do
        not survive a restart) with its delivery count, so deliveries are never forgotten."""
        runs: list[StateBatch] = []
        for offset in sorted(self.records):
            r = self.records[offset]
            state = RecordState.AVAILABLE if r.state is RecordState.ACQUIRED else r.state
            last = runs[-1] if runs else None
            if (last is not None and last.last_offset == offset - 1 and last.state is state
                    and last.delivery_count == r.delivery_count):
                runs[-1] = StateBatch(last.first_offset, offset, state, r.delivery_count)
            else:
                runs.append(StateBatch(offset, offset, state, r.delivery_count))
        return runs

    def restore(self, start_offset: int, batches: Iterable[StateBatch]) -> None:
        self.initialize(start_offset)
        for b in batches:
            for offset in range(max(b.first_offset, start_offset), b.last_offset + 1):
                self.records[offset] = InFlightRecord(b.state, b.delivery_count)
                self.end_offset = max(self.end_offset, offset + 1)
        self._advance_start()

    def counts(self) -> dict[str, int]:
        out = {s.name: 0 for s in RecordState}
        for r in self.records.values():
            out[r.state.name] += 1
        return out


def _runs(taken: list[tuple[int, int]]) -> list[AcquiredBatch]:
    out: list[AcquiredBatch] = []
    for offset, count in sorted(taken):
        last = out[-1] if out else None
        if last is not None and last.last_offset == offset - 1 and last.delivery_count == count:
            out[-1] = AcquiredBatch(last.first_offset, offset, count)
        else:
            out.append(AcquiredBatch(offset, offset, count))
    return out
