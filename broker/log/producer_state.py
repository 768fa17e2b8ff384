"""Idempotent and transactional producer state of one partition.

Mirrors Kafka's ProducerStateManager, ProducerStateEntry, ProducerAppendInfo and
the producer-state half of UnifiedLog.append (Kafka 3.9). For each producer id
that wrote to the partition it keeps the epoch, the last five batches
(sequence range, offsets, timestamp), the coordinator epoch of the last marker
and the first offset of its ongoing transaction. From that it

- answers an exact retry of one of the last five batches with the original
  offsets and appends nothing (Kafka answers NONE with the first offset);
- rejects sequence gaps (OUT_OF_ORDER_SEQUENCE_NUMBER), stale epochs
  (INVALID_PRODUCER_EPOCH), a non-transactional write inside a transaction
  and a transactional write the coordinator has not verified
  (INVALID_TXN_STATE, KIP-890 part 1), and zombie markers
  (TRANSACTION_COORDINATOR_FENCED);
- tracks ongoing and completed transactions, which give the last stable
  offset, and writes the aborted ones to the segments' ``.txnindex``.

A producer this partition does not know is accepted at any sequence, as Kafka
does since KIP-360: its state may have expired or been deleted with the log.

Appending (Kafka's UnifiedLog.append): the partition asks :meth:`ProducerStateManager.analyze_append`
(or :meth:`~ProducerStateManager.analyze_marker`) before it writes, the log appends, and
:meth:`~ProducerStateManager.update` records what the log appended. The producer state never
writes to the log itself.

Persistence: ``<offset>.snapshot`` files in the partition directory
(:mod:`broker.log.producer_snapshot`), written at a segment roll (when the new segment starts
exactly where the state ends), at a clean shutdown, and, unlike Kafka, every
:data:`PRODUCER_SNAPSHOT_EVERY_BATCHES` batches, so a reload on the event loop replays a bounded
part of the log. As in Kafka (UnifiedLog.roll), those are written without an fsync on the append
path and made durable, with the aborted-transaction indexes below them, by the log's next flush
(:meth:`ProducerStateManager.flush_snapshots`, in the periodic flush's worker thread). A crash
before that leaves at worst an unreadable snapshot, which loading skips for an older one. Loading takes the newest readable
snapshot at or below the log end and replays every batch after it (after a crash, those
batches were validated by the log's recovery), which also rebuilds the aborted-transaction
index from there. Changes made to the log other than by appending (truncation, retention,
cleaning) are picked up by :meth:`~ProducerStateManager.sync`.

Not thread-safe: call from the partition's single writer.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from broker.log.partition_log import AppendInfo
from broker.log.producer_entry import (
    NUM_BATCHES_TO_RETAIN,
    AppendOrigin,
    BatchMetadata,
    CompletedTxn,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerAppendInfo,
    ProducerStateEntry,
    ProducerStateError,
    TransactionCoordinatorFencedError,
    TxnMetadata,
    VerificationGuard,
    VerificationStateEntry,
)
from broker.log.producer_snapshot import (
    SNAPSHOT_SUFFIX,
    CorruptSnapshotError,
    read_snapshot,
    sync_snapshot,
    write_snapshot,
)
from broker.log.txn_index import AbortedTxn, TransactionIndexes
from wire.exceptions import CorruptRecordError
from wire.records import (
    ControlRecordType,
    RecordBatchHeader,
    iter_records,
    parse_control_record,
    read_batch_header,
)

if TYPE_CHECKING:
    from pathlib import Path

    from broker.log.partition_log import PartitionLog
    from broker.log.segment import LogSegment

__all__ = [
    "NUM_BATCHES_TO_RETAIN",
    "PRODUCER_SNAPSHOTS_RETAINED",
    "PRODUCER_SNAPSHOT_EVERY_BATCHES",
    "AppendOrigin",
    "BatchMetadata",
    "CorruptSnapshotError",
    "InvalidProducerEpochError",
    "InvalidTxnStateError",
    "OutOfOrderSequenceError",
    "ProducerAppendPlan",
    "ProducerDescription",
    "ProducerStateConfig",
    "ProducerStateEntry",
    "ProducerStateError",
    "ProducerStateManager",
    "TransactionCoordinatorFencedError",
    "VerificationGuard",
    "read_marker",
    "read_snapshot",
    "write_snapshot",
]

log = structlog.get_logger(__name__)

#: A snapshot every this many batches (or one per producer, if more) bounds what a reload on the
#: event loop (after a restart, after every truncation) replays: ~10-30 us a batch, so 10-30 ms,
#: twice that below the newest snapshot. A snapshot costs ~5 us a producer without fsync: nothing
#: next to appending 1,000 batches (~90 us each); with more producers it would cost more than it saves.
PRODUCER_SNAPSHOT_EVERY_BATCHES = 1_000
#: Snapshots kept besides those at segment starts: the newest, and one before it for a short truncation.
PRODUCER_SNAPSHOTS_RETAINED = 2

@dataclass(frozen=True, slots=True)
class ProducerStateConfig:
    #: producer.id.expiration.ms
    producer_id_expiration_ms: int = 86_400_000
    #: transaction.partition.verification.enable (KIP-890 part 1)
    transaction_verification_enabled: bool = True
    #: Batches between periodic snapshots (:data:`PRODUCER_SNAPSHOT_EVERY_BATCHES`); not a Kafka setting.
    snapshot_every_batches: int = PRODUCER_SNAPSHOT_EVERY_BATCHES


@dataclass(frozen=True, slots=True)
class ProducerDescription:
    """One active producer, for DescribeProducers."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


@dataclass(slots=True)
class ProducerAppendPlan:
    """What one append does to the producer state, applied once the log has written it."""

    producers: dict[int, ProducerAppendInfo]
    completed: list[CompletedTxn]
    #: Producers whose transactional write this is: their verification is used up.
    verified: frozenset[int]


# -- the manager -----------------------------------------------------------------------------


class ProducerStateManager:
    """The producer state of one partition log. Build with :meth:`load`."""

    def __init__(self, plog: PartitionLog, config: ProducerStateConfig, clock_ms: Callable[[], int]) -> None:
        self._log = plog
        self._config = config
        self._clock_ms = clock_ms
        self._tp = str(plog.topic_partition)
        self._producers: dict[int, ProducerStateEntry] = {}
        self._verification: dict[int, VerificationStateEntry] = {}
        self._ongoing: dict[int, TxnMetadata] = {}  # by first offset
        self._unreplicated: dict[int, TxnMetadata] = {}  # completed, marker maybe above the HW
        # Listed once when the log was loaded: no listing of the directory of our own here.
        self._loaded_names = plog.take_loaded_file_names()
        self._txn_indexes = TransactionIndexes(plog.dir, self._loaded_names, plog.directory_changed)
        self._map_end_offset = plog.log_start_offset
        self._last_snapshot_offset = -1
        #: Batches applied since the last snapshot: what a reload would replay now.
        self._batches_since_snapshot = 0
        self._log_start_offset = plog.log_start_offset
        self._segments_seen: tuple[LogSegment, ...] = ()
        #: Snapshots written without an fsync (at a roll), fsynced by the log's next flush.
        self._unsynced_snapshots: list[Path] = []
        plog.before_flush = self.flush_snapshots
        self._loaded = False

    @classmethod
    def load(cls, plog: PartitionLog, config: ProducerStateConfig,
             clock_ms: Callable[[], int], *, lazily: bool = False) -> ProducerStateManager:
        """The state at the log end: the newest usable snapshot, then every batch after it.

        ``lazily``: read when first used instead (a broker starting with thousands of
        partitions reads no snapshot of a partition nobody writes to or reads from)."""
        manager = cls(plog, config, clock_ms)
        if not lazily:
            manager._reload()
        return manager

    @property
    def loaded(self) -> bool:
        """Whether the state has been read (see :meth:`load`)."""
        return self._loaded

    @property
    def config(self) -> ProducerStateConfig:
        return self._config

    @property
    def log(self) -> PartitionLog:
        """The log this state follows."""
        return self._log

    @property
    def map_end_offset(self) -> int:
        """Every batch below this offset is reflected in the state."""
        if not self._loaded:
            self._reload()
        return self._map_end_offset

    # -- loading and catching up --------------------------------------------------------------

    def _reload(self) -> None:
        self._loaded = True
        plog = self._log
        start, end = plog.log_start_offset, plog.log_end_offset
        self._producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()
        self._last_snapshot_offset = -1
        offset = start
        files = self._snapshot_files()
        for snap_offset, path in reversed(files[:]):
            if snap_offset > end or snap_offset < start:
                # Beyond a truncated log end, or below its start: unusable, as in Kafka.
                path.unlink(missing_ok=True)
                files.remove((snap_offset, path))
                continue
            try:
                entries = read_snapshot(path)
            except (CorruptSnapshotError, OSError) as ex:
                log.warning("producer_snapshot_corrupt", partition=self._tp, file=path.name, error=str(ex))
                path.unlink(missing_ok=True)
                files.remove((snap_offset, path))
                continue
            for entry in entries:
                self._load_entry(entry)
            offset = snap_offset
            self._last_snapshot_offset = snap_offset
            break
        self._map_end_offset = offset
        self._log_start_offset = start
        self._batches_since_snapshot = 0
        replayed = self._replay(offset, end)
        # Expired producers are dropped after the replay (as Kafka does), so one that wrote again
        # keeps its older batches and the state does not depend on which snapshot was read.
        now = self._clock_ms()
        for pid in [pid for pid, e in self._producers.items() if self._is_expired(e, now)]:
            del self._producers[pid]
        self._segments_seen = plog.segments
        self._txn_indexes.retain(s.base_offset for s in plog.segments)
        self._remove_stray_snapshots(files)
        # A long replay is paid once: the next reload starts here.
        self._maybe_take_periodic_snapshot()
        log.debug("producer_state_loaded", partition=self._tp, snapshot_offset=self._last_snapshot_offset,
                 batches_replayed=replayed, producers=len(self._producers),
                 ongoing_transactions=len(self._ongoing))

    def _load_entry(self, entry: ProducerStateEntry) -> None:
        self._producers[entry.producer_id] = entry
        if entry.current_txn_first_offset is not None:
            first = entry.current_txn_first_offset
            self._ongoing[first] = TxnMetadata(entry.producer_id, first)

    def _replay(self, from_offset: int, to_offset: int) -> int:
        """Apply the batches in ``[from_offset, to_offset)`` as Kafka's recovery does (no
        sequence checks); rebuilds the aborted-transaction index over that range."""
        # Also with nothing to replay: a log truncated to exactly a snapshot's offset keeps no
        # aborted transaction whose marker was cut.
        self._txn_indexes.truncate_to(from_offset)
        if from_offset >= to_offset:
            self._map_end_offset = max(self._map_end_offset, to_offset)
            return 0
        count = 0
        for segment, position, header in self._batches_between(from_offset, to_offset):
            if header.producer_id >= 0:
                info = self._prepare(header.producer_id, AppendOrigin.REPLICATION)
                completed: CompletedTxn | None = None
                if header.is_control:
                    marker = read_marker(segment.read_batch(position, header))
                    if marker is not None:
                        completed = info.append_end_txn_marker(
                            marker[0], marker[1], header.producer_epoch, header.base_offset, marker[2])
                else:
                    info.append_data_batch(header, header.base_offset, header.last_offset)
                if header.is_transactional:
                    self._verification.pop(header.producer_id, None)
                self._apply(info)
                if completed is not None:
                    self._complete(completed)
            self._map_end_offset = header.last_offset + 1
            count += 1
        self._map_end_offset = max(self._map_end_offset, to_offset)
        self._batches_since_snapshot += count
        return count

    def _batches_between(
        self, from_offset: int, to_offset: int
    ) -> Iterator[tuple[LogSegment, int, RecordBatchHeader]]:
        segments = self._log.segments
        bases = [s.base_offset for s in segments]
        index = max(bisect.bisect_right(bases, from_offset) - 1, 0)
        for segment in segments[index:]:
            if segment.base_offset >= to_offset:
                return
            start = segment.position_of(from_offset) if segment.base_offset <= from_offset else 0
            for position, header in segment.iter_batches(start):
                if header.base_offset >= to_offset:
                    return
                if header.last_offset < from_offset:
                    continue
                yield segment, position, header

    def sync(self) -> None:
        """Catch up with changes made to the log behind the state's back (reading the state
        first if it was loaded lazily and not read yet)."""
        if not self._loaded:
            self._reload()
            return
        plog = self._log
        end = plog.log_end_offset
        if end < self._map_end_offset:
            self.truncate_and_reload()
            return
        if plog.log_start_offset > self._log_start_offset:
            self._on_log_start_offset_incremented(plog.log_start_offset)
        if end > self._map_end_offset:
            self._replay(self._map_end_offset, end)
        segments = plog.segments
        if segments is not self._segments_seen:
            self._on_segments_changed(segments)
        self._maybe_take_periodic_snapshot()

    def _on_segments_changed(self, segments: tuple[LogSegment, ...]) -> None:
        """Retention deleted segments, or the cleaner replaced some: drop the indexes of
        segments that went, and keep a cleaned segment's entries only while its abort
        marker is still there (else a consumer would keep skipping that producer)."""
        seen = {id(s) for s in self._segments_seen}
        bases = [s.base_offset for s in segments]
        self._txn_indexes.retain(bases)
        for i, segment in enumerate(segments[:-1]):
            if id(segment) in seen:
                continue
            upper = bases[i + 1]
            markers = frozenset(h.base_offset for _, h in segment.iter_batches() if h.is_control)
            self._txn_indexes.rewrite_range(segment.base_offset, upper, markers)
        self._segments_seen = segments
        self._delete_snapshots_below(bases[0])

    def truncate_and_reload(self) -> None:
        """The log was truncated (replication): rebuild from the snapshots that still apply."""
        log.info("producer_state_reloading", partition=self._tp, log_end_offset=self._log.log_end_offset,
                 map_end_offset=self._map_end_offset)
        self._verification.clear()
        self._reload()

    def _on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        self._log_start_offset = log_start_offset
        for first, txn in list(self._unreplicated.items()):
            if txn.last_offset is not None and txn.last_offset < log_start_offset:
                del self._unreplicated[first]
        self._map_end_offset = max(self._map_end_offset, log_start_offset)

    # -- appending -----------------------------------------------------------------------------

    def _prepare(self, producer_id: int, origin: AppendOrigin) -> ProducerAppendInfo:
        current = self._producers.get(producer_id) or ProducerStateEntry(producer_id)
        return ProducerAppendInfo(self._tp, producer_id, current, origin, self._verification.get(producer_id))

    def _apply(self, info: ProducerAppendInfo) -> None:
        current = self._producers.get(info.producer_id)
        if current is None:
            self._producers[info.producer_id] = info.updated
        else:
            current.update(info.updated)
        for txn in info.started_transactions:
            self._ongoing[txn.first_offset] = txn

    def _complete(self, completed: CompletedTxn) -> None:
        """Index an abort (with the LSO it leaves) and move the transaction to the completed set."""
        if completed.is_aborted:
            lso = self._last_stable_offset_after(completed)
            base = self._segment_base_for(completed.last_offset)
            self._txn_indexes.append(base, AbortedTxn(
                completed.producer_id, completed.first_offset, completed.last_offset, lso))
        txn = self._ongoing.pop(completed.first_offset, None)
        if txn is None:
            # Cannot happen while the state matches the log; keep serving rather than fail.
            log.warning("completed_unknown_transaction", partition=self._tp, producer_id=completed.producer_id,
                        first_offset=completed.first_offset, marker_offset=completed.last_offset)
            return
        txn.last_offset = completed.last_offset
        self._unreplicated[completed.first_offset] = txn

    def _last_stable_offset_after(self, completed: CompletedTxn) -> int:
        for first in sorted(self._ongoing):
            if self._ongoing[first].producer_id != completed.producer_id:
                return first
        return completed.last_offset + 1

    def _segment_base_for(self, offset: int) -> int:
        bases = [s.base_offset for s in self._log.segments]
        return bases[max(bisect.bisect_right(bases, offset) - 1, 0)]

    def analyze_append(
        self,
        headers: Sequence[tuple[int, RecordBatchHeader]],
        first_offset: int,
        origin: AppendOrigin,
        verification_guard: VerificationGuard | None = None,
        buffer: bytes | bytearray | memoryview | None = None,
    ) -> ProducerAppendPlan | BatchMetadata:
        """Kafka's analyzeAndValidateProducerState, before anything is written.

        ``headers`` are the batches about to be appended, the first at ``first_offset``
        (a leader's offsets; a follower's batches carry their own, pass their first).
        Returns what :meth:`update` applies once the log has appended them, or, for a
        client's exact retry, the metadata of the batch it duplicates (append nothing).
        Raises a :class:`ProducerStateError` for a sequence gap, a stale epoch or a write
        outside the known transaction state. Control batches (replicated markers) are
        read from ``buffer``.
        """
        self.sync()
        producers: dict[int, ProducerAppendInfo] = {}
        completed: list[CompletedTxn] = []
        offset = first_offset
        for position, header in headers:
            base = header.base_offset if origin is AppendOrigin.REPLICATION else offset
            last = base + header.last_offset_delta
            offset = last + 1
            pid = header.producer_id
            if pid < 0:
                continue
            if origin is AppendOrigin.CLIENT:
                entry = self._producers.get(pid)
                duplicate = entry.find_duplicate_batch(header) if entry is not None else None
                if duplicate is not None:
                    return duplicate
            if (origin is AppendOrigin.CLIENT and header.is_transactional
                    and not header.is_control and self._config.transaction_verification_enabled
                    and not self.has_ongoing_transaction(pid, header.producer_epoch)):
                state = self._verification.get(pid)
                if state is None or verification_guard is None or state.guard is not verification_guard:
                    raise InvalidTxnStateError("Record was not part of an ongoing transaction")
            info = producers.get(pid)
            if info is None:
                info = producers[pid] = self._prepare(pid, origin)
            if header.is_control:
                if buffer is None:
                    raise ValueError("a leader's markers go through analyze_marker")
                marker = read_marker(buffer, position)
                if marker is not None:
                    done = info.append_end_txn_marker(marker[0], marker[1], header.producer_epoch, base, marker[2])
                    if done is not None:
                        completed.append(done)
            else:
                info.append_data_batch(header, base, last)
        return ProducerAppendPlan(producers, completed,
                                  frozenset(h.producer_id for _, h in headers if h.producer_id >= 0 and h.is_transactional))

    def analyze_marker(
        self,
        control_type: ControlRecordType,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        timestamp: int,
        origin: AppendOrigin = AppendOrigin.COORDINATOR,
        transaction_version: int = 0,
    ) -> ProducerAppendPlan:
        """Check a COMMIT or ABORT marker the leader is about to append at the log end
        (WriteTxnMarkers): a zombie coordinator or a stale epoch is refused; a transactions-v2
        marker (``transaction_version`` 2) must carry an epoch above the producer's (KIP-1228)."""
        self.sync()
        info = self._prepare(producer_id, origin)
        completed = info.append_end_txn_marker(
            control_type, coordinator_epoch, producer_epoch, self._log.log_end_offset, timestamp,
            transaction_version)
        return ProducerAppendPlan({producer_id: info}, [completed] if completed is not None else [], frozenset())

    def update(self, end_before: int, info: AppendInfo, plan: ProducerAppendPlan) -> None:
        """Record what the log appended (``info``, the log end having been ``end_before``)
        with the checks :meth:`analyze_append` made of it (Kafka's ProducerStateManager.update)."""
        if not self._loaded:
            raise AssertionError("update without analyze_append")
        if info.first_offset < end_before or info.batch_count == 0:
            raise AssertionError(f"append landed at {info.first_offset}, expected at least {end_before}")
        if any(s.base_offset == end_before for s in self._log.segments[1:]) and end_before > self._last_snapshot_offset:
            # Rolled right where the state ends: snapshot it for the new segment, as Kafka, and
            # leave its fsync to the flush of the rolled segment (off the event loop).
            self._write_snapshot(end_before, sync=False)
        for producer_id in plan.verified:
            self._verification.pop(producer_id, None)
        for producer_info in plan.producers.values():
            self._apply(producer_info)
        for completed in plan.completed:
            self._complete(completed)
        self._map_end_offset = info.last_offset + 1
        self._batches_since_snapshot += info.batch_count
        self._maybe_take_periodic_snapshot()

    # -- transactions and the last stable offset ------------------------------------------------

    def has_ongoing_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        """Whether the producer has an open transaction here at ``producer_epoch`` (as of the
        last :meth:`sync`). The epoch matters with transactions v2: each transaction ends with
        an epoch bump, and the next one's first write may come before the last one's marker;
        it is a new transaction to verify, not part of the open one (as Kafka 4's
        ``UnifiedLog.hasOngoingTransaction``)."""
        if not self._loaded:
            self._reload()
        entry = self._producers.get(producer_id)
        return (entry is not None and entry.current_txn_first_offset is not None
                and entry.producer_epoch == producer_epoch)

    def maybe_start_verification(self, producer_id: int, sequence: int, epoch: int) -> VerificationGuard | None:
        """None if the producer's transaction is already going here; else the guard its first
        transactional write must carry once the coordinator has verified the partition."""
        self.sync()
        if self.has_ongoing_transaction(producer_id, epoch):
            return None
        state = self._verification.get(producer_id)
        if state is None:
            state = self._verification[producer_id] = VerificationStateEntry(self._clock_ms(), sequence, epoch)
        state.maybe_update_lowest_sequence_and_epoch(sequence, epoch)
        return state.guard

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of an undecided transaction, or of a decided one whose marker is
        not yet below the high watermark; None when there is none."""
        self.sync()
        if not self._ongoing and not self._unreplicated:
            return None  # every Fetch asks for every partition, and most have no transaction
        for first in [f for f, t in self._unreplicated.items()
                      if t.last_offset is not None and t.last_offset < high_watermark]:
            del self._unreplicated[first]
        if not self._ongoing and not self._unreplicated:
            return None
        return max(min([*self._ongoing, *self._unreplicated]), self._log.log_start_offset)

    def last_stable_offset(self, high_watermark: int) -> int:
        first = self.first_unstable_offset(high_watermark)
        return high_watermark if first is None or first >= high_watermark else first

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        self.sync()
        return self._txn_indexes.collect(fetch_offset, upper_bound_offset)

    def aborted_transactions(self) -> list[AbortedTxn]:
        self.sync()
        return self._txn_indexes.all_entries()

    # -- producers ---------------------------------------------------------------------------------

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        self.sync()
        return self._producers.get(producer_id)

    def active_producers(self) -> list[ProducerDescription]:
        self.sync()
        return [
            ProducerDescription(
                e.producer_id, e.producer_epoch, e.last_seq, e.last_timestamp, e.coordinator_epoch,
                -1 if e.current_txn_first_offset is None else e.current_txn_first_offset,
            )
            for e in sorted(self._producers.values(), key=lambda e: e.producer_id)
        ]

    def last_records(self) -> dict[int, tuple[int | None, int]]:
        """Producer id -> (last offset of its last data batch, or None; its epoch): what the
        log cleaner must keep so deduplication still works (Kafka's LastRecord)."""
        self.sync()
        return {pid: (e.last_data_offset if e.batches else None, e.producer_epoch)
                for pid, e in self._producers.items()}

    def _is_expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        return (entry.current_txn_first_offset is None
                and now_ms - entry.last_timestamp >= self._config.producer_id_expiration_ms)

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget producers idle for ``producer.id.expiration.ms`` (never one in a transaction).

        A state not read yet is left unread: reading it leaves the expired producers out."""
        expired = [pid for pid, e in self._producers.items() if self._is_expired(e, now_ms)]
        for pid in expired:
            del self._producers[pid]
        for pid in [p for p, v in self._verification.items()
                    if now_ms - v.timestamp >= self._config.producer_id_expiration_ms]:
            del self._verification[pid]
        if expired:
            log.info("producer_ids_expired", partition=self._tp, count=len(expired))
        return len(expired)

    # -- snapshots ---------------------------------------------------------------------------------

    def _snapshot_files(self) -> list[tuple[int, Path]]:
        directory = self._log.dir
        names, self._loaded_names = self._loaded_names, None  # good for the first look only
        if names is None:
            names = [path.name for path in directory.glob("*" + SNAPSHOT_SUFFIX)]
        found = []
        for name in names:
            head = name[: -len(SNAPSHOT_SUFFIX)]
            if name.endswith(SNAPSHOT_SUFFIX) and head.isdigit():
                found.append((int(head), directory / name))
        return sorted(found)

    def _write_snapshot(self, offset: int, *, sync: bool = True) -> None:
        path = self._log.dir / f"{offset:020d}{SNAPSHOT_SUFFIX}"
        if sync:
            # The index entries below the snapshot must be as durable as the snapshot itself.
            self._txn_indexes.flush()
        write_snapshot(path, self._producers.values(), sync=sync)
        if not sync:
            self._unsynced_snapshots.append(path)
        self._last_snapshot_offset = offset
        self._batches_since_snapshot = 0
        log.debug("producer_snapshot_written", partition=self._tp, offset=offset, producers=len(self._producers))

    def take_snapshot(self, *, sync: bool = True) -> None:
        """Snapshot the state at the log end, unless one exists there (clean shutdown).

        Without ``sync`` the caller makes it durable (one ``sync`` for every partition at shutdown).
        A state never read since start is left alone: nothing changed it, and the next start
        reads it from the same files.
        """
        if not self._loaded:
            return
        self.sync()
        if self._map_end_offset > self._last_snapshot_offset and self._map_end_offset > self._log.log_start_offset:
            self._write_snapshot(self._map_end_offset, sync=sync)

    def _maybe_take_periodic_snapshot(self) -> None:
        """Snapshot the state at the log end once enough batches were applied since the last one
        (called where the state matches the log end), as a roll does: no fsync on the event loop,
        durable at the log's next flush; one lost in a crash means a longer replay. Drops stray ones."""
        if self._batches_since_snapshot < max(self._config.snapshot_every_batches, len(self._producers)):
            return
        offset = self._map_end_offset
        if offset != self._log.log_end_offset or offset <= self._log.log_start_offset:
            return
        if offset > self._last_snapshot_offset:
            self._write_snapshot(offset, sync=False)
        self._batches_since_snapshot = 0
        self._remove_stray_snapshots(self._snapshot_files())

    def flush_snapshots(self) -> None:
        """fsyncs the snapshots written without (Kafka's flushProducerStateSnapshot), after the
        aborted-transaction indexes below them. Called by :meth:`PartitionLog.flush`, which then
        fsyncs the directory: from the periodic flush's worker thread while the loop appends, so
        only the list of paths is shared (appended on the loop, taken here)."""
        if not self._unsynced_snapshots:
            return
        self._txn_indexes.flush()
        while self._unsynced_snapshots:
            try:
                sync_snapshot(self._unsynced_snapshots[0])
            except FileNotFoundError:  # deleted meanwhile (retention, truncation)
                pass
            self._unsynced_snapshots.pop(0)

    def _remove_stray_snapshots(self, files: list[tuple[int, Path]]) -> None:
        """Keep the snapshots at segment starts and the newest :data:`PRODUCER_SNAPSHOTS_RETAINED`
        (Kafka's removeStraySnapshots keeps the newest one), so neither clean restarts nor the
        periodic snapshots pile them up."""
        bases = {s.base_offset for s in self._log.segments}
        for offset, path in files[:-PRODUCER_SNAPSHOTS_RETAINED]:
            if offset not in bases:
                path.unlink(missing_ok=True)

    def _delete_snapshots_below(self, offset: int) -> None:
        for snap_offset, path in self._snapshot_files():
            if snap_offset < offset:
                path.unlink(missing_ok=True)

    def snapshot_offsets(self) -> list[int]:
        if not self._loaded:
            self._reload()
        return [offset for offset, _ in self._snapshot_files()]


def read_marker(batch: bytes | bytearray | memoryview, position: int = 0) -> tuple[ControlRecordType, int, int] | None:
    """(type, coordinator epoch, timestamp) of the control batch at ``position``; None when
    the cleaner emptied the batch or the record is not a marker."""
    try:
        for record in iter_records(batch, position, verify_crc=False):
            control_type, coordinator_epoch = parse_control_record(record)
            return control_type, coordinator_epoch, record.timestamp
    except CorruptRecordError:
        header = read_batch_header(batch, position)
        log.warning("unreadable_control_batch", offset=header.base_offset)
    return None
