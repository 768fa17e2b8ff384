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

Records are acquired, as Kafka's ``SharePartition.acquire`` does, in *in-flight batches*
(``batches``): new records from the log become batches of about ShareFetch's
``BatchSize`` records, cut at log-batch boundaries (``batch_optimized``), and a
redelivery takes an in-flight batch whole. Near the delivery limit Kafka throttles: once
an available record of a batch has been delivered ``throttle_delivery_count`` times
(half the limit rounded up, at least 2), the batch is delivered on its own, and only
``batch length >> (count - throttle + 1)`` of its records at a time (at least one); a
record on its last delivery goes alone. So a poison record that keeps failing takes at
most itself, not its whole batch, to the archive.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from wire.errors import ErrorCode

GAP = 0
ACCEPT = 1
RELEASE = 2
REJECT = 3
RENEW = 4
ACKNOWLEDGE_TYPES = frozenset({GAP, ACCEPT, RELEASE, REJECT, RENEW})
#: Kafka's MINIMUM_THROTTLE_RECORDS_DELIVERY_LIMIT.
MIN_THROTTLE_DELIVERY_COUNT = 2


def throttle_delivery_count(delivery_count_limit: int) -> int:
    """From which delivery count Kafka throttles a batch's redelivery: half the limit
    rounded up, at least 2."""
    return max(MIN_THROTTLE_DELIVERY_COUNT, -(-delivery_count_limit // 2))


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
    #: In-flight batches: first offset -> last offset (Kafka's cachedState keys).
    batches: dict[int, int] = field(default_factory=dict)
    #: Archived by this instance since last drained (dead-letter copies).
    archived: list[ArchivedRecord] = field(default_factory=list)

    @property
    def initialized(self) -> bool:
        return self.start_offset >= 0

    def initialize(self, offset: int) -> None:
        self.start_offset = self.end_offset = offset
        self.records.clear()
        self.batches.clear()

    # ------------------------------------------------------------ acquiring

    def first_available(self) -> int:
        """Where a read must start to find every acquirable record."""
        avail = [o for o, r in self.records.items() if r.state is RecordState.AVAILABLE]
        return min(avail) if avail else self.end_offset

    def acquire(self, member_id: str, log_offsets: Iterable[int], max_records: int,
                now_ms: int) -> list[AcquiredBatch]:
        """Locks up to ``max_records`` of ``log_offsets`` (ascending) for ``member_id``, each
        offset taken as a log batch of its own (``record_limit``)."""
        return self.acquire_fetched(member_id, [(o, o) for o in log_offsets], max_records=max_records,
                                    batch_size=max(max_records, 1), record_limit=True, now_ms=now_ms)

    def acquire_fetched(self, member_id: str, log_batches: Sequence[tuple[int, int]], *, max_records: int,
                        batch_size: int, record_limit: bool, now_ms: int) -> list[AcquiredBatch]:
        """Locks records of the data batches just read from the log (``log_batches``: base and
        last offset of each, ascending) for ``member_id``: available in-flight batches first
        (redeliveries, throttled near the delivery limit), then new records past the end
        offset while ``max_in_flight`` leaves room. ``max_records`` is ShareFetch's MaxRecords,
        exceeded in ``batch_optimized`` to finish a batch; ``record_limit`` never exceeds it.
        ``batch_size`` is ShareFetch's BatchSize (below 1: no split)."""
        self.expire_locks(now_ms)
        if max_records <= 0 or not log_batches:
            return []
        taken: list[tuple[int, int]] = []
        count, throttled = self._redeliver(member_id, log_batches, max_records, record_limit, taken, now_ms)
        if not throttled and count < max_records:
            self._acquire_new(member_id, log_batches, max_records - count, batch_size, record_limit, taken, now_ms)
        return _runs(taken, self.batches)

    def _redeliver(self, member_id: str, log_batches: Sequence[tuple[int, int]], max_records: int,
                   record_limit: bool, taken: list[tuple[int, int]], now_ms: int) -> tuple[int, bool]:
        """Acquires available in-flight records, batch by batch; returns how many, and whether
        a throttled batch ended the acquisition (nothing more is taken with it)."""
        low, high = log_batches[0][0], min(log_batches[-1][1], self.end_offset - 1)
        count = 0
        for first in sorted(self.batches):
            last = self.batches[first]
            if first > high or count >= max_records:
                break
            if last < low:
                continue
            candidates = [o for o in range(max(first, low), min(last, high) + 1)
                          if (r := self.records.get(o)) is not None and r.state is RecordState.AVAILABLE]
            if not candidates:
                continue
            throttled = max(self.records[o].delivery_count for o in candidates) >= self.throttle_delivery_count
            if throttled and count > 0:
                return count, True  # delivered on its own, by the next fetch
            remaining = max_records - count
            if throttled or (record_limit and len(candidates) > remaining):
                got = self._acquire_subset(member_id, candidates, last - first + 1, record_limit, remaining,
                                           taken, now_ms)
                count += got
                if throttled and got:
                    return count, True
                continue
            taken.extend((o, self._lock(o, member_id, now_ms)) for o in candidates)
            count += len(candidates)
        return count, False

    def _acquire_subset(self, member_id: str, candidates: list[int], batch_length: int, record_limit: bool,
                        remaining: int, taken: list[tuple[int, int]], now_ms: int) -> int:
        """Kafka's acquisition of a batch record by record: a record on its last delivery
        goes alone; once a record reached the throttle count, at most
        ``batch_length >> (its count - throttle + 1)`` records (at least one)."""
        limit, throttle = self.delivery_count_limit, self.throttle_delivery_count
        got = 0
        cap = -1
        for offset in candidates:
            delivered = self.records[offset].delivery_count
            if limit > 2 and delivered == limit - 1 and got > 0:
                break
            if delivered >= throttle and cap < 0:
                cap = max(1, batch_length >> (delivered - throttle + 1))
            count = self._lock(offset, member_id, now_ms)
            taken.append((offset, count))
            got += 1
            if (limit > 2 and count == limit) or (record_limit and got == remaining) or got == cap:
                break
        return got

    def _acquire_new(self, member_id: str, log_batches: Sequence[tuple[int, int]], max_records: int,
                     batch_size: int, record_limit: bool, taken: list[tuple[int, int]], now_ms: int) -> None:
        """New records past the end offset: up to the end of the log batch holding the last of
        ``max_records`` (bounded by the in-flight room), in in-flight batches of about
        ``batch_size`` cut at log-batch boundaries (one batch in ``record_limit``, whose
        records past ``max_records`` stay available)."""
        fresh = [(max(base, self.end_offset), last) for base, last in log_batches if last >= self.end_offset]
        remaining = min(max_records, self.max_in_flight - (self.end_offset - self.start_offset))
        if not fresh or remaining <= 0:
            return
        first, last = fresh[0][0], fresh[-1][1]
        if remaining < last - first + 1:
            cut = first + remaining - 1
            last = next(batch_last for _, batch_last in fresh if batch_last >= cut)
        starts = [first]
        if not record_limit and batch_size > 0:
            for base, _ in fresh:
                if base > last:
                    break
                if base - starts[-1] >= batch_size:
                    starts.append(base)
        for begin, end in zip(starts, [*(s - 1 for s in starts[1:]), last], strict=True):
            self.batches[begin] = end
        locked_to = first + remaining - 1 if record_limit else last
        for base, batch_last in fresh:
            for offset in range(base, min(batch_last, last) + 1):
                self.records[offset] = InFlightRecord(RecordState.AVAILABLE, 0)
                if offset <= locked_to:
                    taken.append((offset, self._lock(offset, member_id, now_ms)))
        self.end_offset = last + 1

    @property
    def throttle_delivery_count(self) -> int:
        return throttle_delivery_count(self.delivery_count_limit)

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
        for first in [f for f, last in self.batches.items() if last < offset]:
            del self.batches[first]
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
        """A member left or its session closed: its acquired records become available. As
        Kafka's ``releaseAcquiredRecords``, they were not known to be delivered, so the delivery
        that acquired them is taken back (the count decreases) and the delivery limit does not
        archive them on this path."""
        released = 0
        for r in self.records.values():
            if r.state is RecordState.ACQUIRED and r.member_id == member_id:
                r.delivery_count = max(0, r.delivery_count - 1)
                self._finish(r, RecordState.AVAILABLE)
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
        if self.batches and min(self.batches) < self.start_offset:
            for first in [f for f, last in self.batches.items() if last < self.start_offset]:
                del self.batches[first]

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
            if b.last_offset >= start_offset:
                self.batches[b.first_offset] = b.last_offset
            for offset in range(max(b.first_offset, start_offset), b.last_offset + 1):
                self.records[offset] = InFlightRecord(b.state, b.delivery_count)
                self.end_offset = max(self.end_offset, offset + 1)
        self._advance_start()

    def counts(self) -> dict[str, int]:
        out = {s.name: 0 for s in RecordState}
        for r in self.records.values():
            out[r.state.name] += 1
        return out


def _runs(taken: list[tuple[int, int]], batches: dict[int, int]) -> list[AcquiredBatch]:
    """AcquiredRecords: runs of consecutive offsets with one delivery count, cut where an
    in-flight batch starts."""
    out: list[AcquiredBatch] = []
    for offset, count in sorted(taken):
        last = out[-1] if out else None
        if (last is not None and last.last_offset == offset - 1 and last.delivery_count == count
                and offset not in batches):
            out[-1] = AcquiredBatch(last.first_offset, offset, count)
        else:
            out.append(AcquiredBatch(offset, offset, count))
    return out
