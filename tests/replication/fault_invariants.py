"""Invariants of the network fault suite beyond those of :func:`~tests.replication.fault_checker.check`.

- :func:`unavailability_windows`: per partition, each stretch longer than a threshold without an
  acknowledged write while writers were sending to it (how long the partition could not take writes).
- :func:`acks_below_min_isr`: acknowledgements given while the acknowledging partition's leader,
  sampled before and after the acknowledgement, said its ISR was smaller than
  ``min.insync.replicas`` (Kafka 2013: an isolated leader acking alone).
- :func:`group_offset_problems`: a consumer group's committed offsets never go backwards (an
  acknowledged commit or an OffsetFetch answer is never below one that completed before it was
  sent), no acknowledged commit is lost, and none passes the high watermark.
- :func:`transaction_problems`: read_committed readers see every committed transaction once and
  whole, nothing of an aborted one, and a transaction of unknown outcome whole or not at all.
- :func:`duplicate_causes`: whether a value written twice was sent again by its client under a new
  producer epoch, or written twice within one epoch (which the broker must refuse).
"""

from __future__ import annotations

import bisect
import enum
import itertools
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from broker.log.files import LOG_SUFFIX
from tests.replication.fault_checker import Outcome, Send
from wire.exceptions import CorruptRecordError
from wire.records import iter_batch_headers, iter_records


@dataclass(frozen=True, slots=True)
class IsrSample:
    """What broker ``node`` said of a partition at ``at`` (monotonic)."""

    at: float
    node: int
    topic: str
    partition: int
    leader: int
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class PendingIsr:
    """Leader ``node`` asking the controller to add replicas to a partition's ISR, from ``start``
    until its outcome (monotonic); ``isr`` is the ISR with them (Kafka's maximal ISR, which a
    leader's acks=all check counts: the high watermark waits for those replicas too), and
    ``committed`` the ISR it asked from. Any committed change ends the request too."""

    start: float
    end: float
    node: int
    topic: str
    partition: int
    committed: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Window:
    topic: str
    partition: int
    start: float
    end: float

    @property
    def length_s(self) -> float:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class Unavailability:
    windows: list[Window]

    @property
    def median_s(self) -> float:
        return statistics.median(w.length_s for w in self.windows) if self.windows else 0.0

    @property
    def max_s(self) -> float:
        return max((w.length_s for w in self.windows), default=0.0)


def unavailability_windows(sends: Iterable[Send], threshold_s: float = 1.0) -> Unavailability:
    """Per partition, each stretch longer than ``threshold_s`` from the first write sent after an
    acknowledgement to the next acknowledgement (writers send continuously, so this misses at
    most one send interval of a window); and one still open at the end, from the first write sent
    after the last acknowledgement to when the last write's outcome was known."""
    acks: dict[tuple[str, int], list[float]] = defaultdict(list)
    attempts: dict[tuple[str, int], list[float]] = defaultdict(list)
    last_done: dict[tuple[str, int], float] = {}
    for s in sends:
        attempts[(s.topic, s.partition)].append(s.sent_at)
        last_done[(s.topic, s.partition)] = max(s.done_at, last_done.get((s.topic, s.partition), s.done_at))
        if s.outcome is Outcome.ACKED:
            acks[(s.topic, s.partition)].append(s.done_at)
    windows = []
    for key, times in sorted(acks.items()):
        times.sort()
        tried = sorted(attempts[key])
        for before, after in itertools.pairwise(times):
            if after - before <= threshold_s:
                continue
            i = bisect.bisect_left(tried, before)
            start = tried[i] if i < len(tried) else after
            if after - start > threshold_s:
                windows.append(Window(key[0], key[1], start, after))
        # Writes sent after the last acknowledgement that were never acknowledged: a window still
        # open when the writers stopped, until their last send's outcome was known.
        i = bisect.bisect_right(tried, times[-1])
        if i < len(tried):
            end = last_done[key]
            if end - tried[i] > threshold_s:
                windows.append(Window(key[0], key[1], tried[i], end))
    for key, tried in sorted(attempts.items()):
        if key not in acks and last_done[key] - min(tried) > threshold_s:  # never acknowledged at all
            windows.append(Window(key[0], key[1], min(tried), last_done[key]))
    return Unavailability(windows)


def acks_below_min_isr(sends: Iterable[Send], samples: Sequence[IsrSample], min_isr: int,
                       max_sample_gap_s: float = 1.0, pending: Sequence[PendingIsr] = ()) -> list[str]:
    """Acknowledgements completed between two samples, no more than ``max_sample_gap_s`` apart, in
    which the broker that called itself the partition's leader both times had fewer than
    ``min_isr`` replicas in its ISR — and no broker claiming leadership had enough, nor that leader at
    any sample between the send and the acknowledgement (an answer can arrive late). The samples
    are the brokers' metadata, the committed ISR; a leader also counts the replicas it has asked
    to add (``pending``, Kafka's maximal ISR: they had reached its high watermark), so an ack
    sent or answered while such a request made the ISR large enough is not flagged."""
    expanding: dict[tuple[str, int], list[PendingIsr]] = defaultdict(list)
    for p in pending:
        if len(p.isr) >= min_isr:
            expanding[(p.topic, p.partition)].append(p)
    leaders: dict[tuple[str, int], list[IsrSample]] = defaultdict(list)
    for sample in samples:
        if sample.leader == sample.node:
            leaders[(sample.topic, sample.partition)].append(sample)
    for series in leaders.values():
        series.sort(key=lambda s: s.at)
    times_of = {key: [s.at for s in series] for key, series in leaders.items()}
    # A request ends at the first sample of its leader showing another committed ISR (the leader
    # drops what it asked for when a change lands): at most one sampling interval late.
    for key, requests in expanding.items():
        series = leaders.get(key, [])
        ended = []
        for p in requests:
            changed = next((s.at for s in series[bisect.bisect_right(times_of[key], p.start) if series else 0:]
                            if s.node == p.node and set(s.isr) != set(p.committed)), p.end)
            ended.append(replace(p, end=min(p.end, changed)))
        expanding[key] = ended
    out = []
    for send in sends:
        if send.outcome is not Outcome.ACKED:
            continue
        series = leaders.get((send.topic, send.partition), [])
        times = times_of.get((send.topic, send.partition), [])
        i = bisect.bisect_right(times, send.done_at)
        if i == 0 or i == len(series):
            continue
        before, after = series[i - 1], series[i]
        if after.at - before.at > max_sample_gap_s or before.node != after.node:
            continue
        if len(before.isr) < min_isr and len(after.isr) < min_isr:
            # The leader decided at some point between the send and the answer: a sample from that
            # stretch (or the last one before it) with enough replicas excuses the ack.
            first = max(bisect.bisect_right(times, send.sent_at) - 1, 0)
            if any(s.node == before.node and len(s.isr) >= min_isr for s in series[first:i]):
                continue
            if any(p.node == before.node and p.start <= send.done_at and p.end >= send.sent_at
                   for p in expanding.get((send.topic, send.partition), ())):
                continue
            out.append(f"{send.value} acked at {send.topic}-{send.partition}@{send.offset} while leader "
                       f"{before.node} had ISR {list(before.isr)} .. {list(after.isr)}")
    return out


# -- consumer-group offsets --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    """A commit the coordinator acknowledged: ``member`` committed ``offset`` for a partition,
    the request sent at ``sent_at`` and answered without error at ``done_at`` (monotonic)."""

    member: str
    topic: str
    partition: int
    offset: int
    sent_at: float
    done_at: float


@dataclass(frozen=True, slots=True)
class OffsetObservation:
    """The committed offset of a partition as node ``node`` (the coordinator a FindCoordinator named)
    answered an OffsetFetch sent at ``sent_at`` and answered at ``done_at``."""

    node: int
    topic: str
    partition: int
    offset: int
    sent_at: float
    done_at: float


@dataclass
class GroupOffsetReport:
    commits: int = 0
    observations: int = 0
    #: An observation or an acknowledged commit lower than one that completed before it was sent.
    went_back: list[str] = field(default_factory=list)
    #: Lower answers from a coordinator cut off from the quorum (it does not know it was replaced and
    #: answers from what it has, as Kafka's would; it can acknowledge no commit): counted, not a violation.
    stale_reads: list[str] = field(default_factory=list)
    #: A committed offset beyond the partition's high watermark once everything healed.
    beyond_high_watermark: list[str] = field(default_factory=list)
    #: The committed offset after the heal is lower than an acknowledged commit.
    lost_commits: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        out = []
        for name in ("went_back", "beyond_high_watermark", "lost_commits"):
            items: list[str] = getattr(self, name)
            if items:
                out.append(f"group offsets {name}: {len(items)} (first: {items[:3]})")
        return out


def group_offset_problems(commits: Iterable[OffsetCommit], observations: Iterable[OffsetObservation],
                          final: Mapping[tuple[str, int], int],
                          high_watermarks: Mapping[tuple[str, int], int],
                          cut_off: Mapping[int, Sequence[tuple[float, float]]] | None = None) -> GroupOffsetReport:
    """A group's committed offsets never go backwards and never pass the high watermark.

    Per partition, every event (an acknowledged commit, or an OffsetFetch answer) must be at least
    every event that *completed before it was sent* — so only events in real-time order are
    compared, never two that overlapped. ``final`` is the committed offsets read after the heal: each
    must be at least the highest acknowledged commit (an acknowledged commit is never lost), and no
    offset anyone committed or read may be beyond the final high watermark (a consumer commits only
    offsets it read, so a commit above it means records it read were truncated).

    ``cut_off``: node -> stretches of time it was cut off from the quorum or fenced by the controller.
    A lower answer from such a node while it was is a stale read, reported apart: a coordinator that has not heard it was replaced
    answers from what it has (Kafka's does the same), but it cannot acknowledge a commit, so a member
    cannot build on it — a lower *acknowledged commit* is a violation whoever answered."""
    report = GroupOffsetReport()
    events: dict[tuple[str, int], list[tuple[float, float, int, str]]] = defaultdict(list)
    for c in commits:
        report.commits += 1
        events[(c.topic, c.partition)].append((c.sent_at, c.done_at, c.offset, f"commit by {c.member}"))
    stale_sources: dict[str, int] = {}
    for o in observations:
        report.observations += 1
        what = f"OffsetFetch from node {o.node}"
        if any(start <= o.done_at and o.sent_at <= end for start, end in (cut_off or {}).get(o.node, ())):
            what += " (cut off from the quorum or fenced)"
            stale_sources[what] = o.node
        events[(o.topic, o.partition)].append((o.sent_at, o.done_at, o.offset, what))
    for key, series in sorted(events.items()):
        label = f"{key[0]}-{key[1]}"
        by_done = sorted(series, key=lambda e: e[1])
        done_times = [e[1] for e in by_done]
        best: list[tuple[int, float, str]] = []  # running maximum of offsets by completion time
        for _, done, offset, what in by_done:
            if not best or offset > best[-1][0]:
                best.append((offset, done, what))
            else:
                best.append(best[-1])
        for sent, _done, offset, what in sorted(series):
            i = bisect.bisect_left(done_times, sent)
            if i and best[i - 1][0] > offset:
                high, high_at, high_what = best[i - 1]
                found = (report.stale_reads if what in stale_sources else report.went_back)
                found.append(f"{label}: {what} sent at {sent:.2f} got {offset}, after {high_what} "
                             f"had {high} at {high_at:.2f}")
        hw = high_watermarks.get(key)
        top = max(series, key=lambda e: e[2])
        if hw is not None and top[2] > hw:
            report.beyond_high_watermark.append(f"{label}: {top[3]} at {top[1]:.2f} had {top[2]}, "
                                                f"high watermark {hw}")
        acked = [e for e in series if e[3].startswith("commit")]
        if acked:
            highest = max(e[2] for e in acked)
            after = final.get(key, -1)
            if after < highest:
                report.lost_commits.append(f"{label}: committed {after} after the heal, {highest} was acknowledged")
    return report


# -- transactions ------------------------------------------------------------------------------


class TxnOutcome(enum.Enum):
    COMMITTED = "committed"
    ABORTED = "aborted"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Transaction:
    """One transaction of a transactional producer: the values it wrote and how it ended
    (COMMITTED: commit_transaction returned; ABORTED: abort_transaction returned; UNKNOWN: neither)."""

    producer: str
    values: tuple[str, ...]
    outcome: TxnOutcome
    started_at: float
    done_at: float


@dataclass
class TransactionReport:
    committed: int = 0
    aborted: int = 0
    unknown: int = 0
    #: Values of aborted transactions a read_committed reader saw (the final drain or a live consumer).
    aborted_read: list[str] = field(default_factory=list)
    #: Values of committed transactions the read_committed drain did not read.
    committed_missing: list[str] = field(default_factory=list)
    #: Values the read_committed drain read more than once.
    duplicated: list[str] = field(default_factory=list)
    #: Transactions of unknown outcome read in part (atomicity).
    partial: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        out = []
        for name in ("aborted_read", "committed_missing", "duplicated", "partial"):
            items: list[str] = getattr(self, name)
            if items:
                out.append(f"transactions {name}: {len(items)} (first: {items[:3]})")
        return out


def transaction_problems(transactions: Iterable[Transaction], drained: Sequence[str],
                         live_reads: Iterable[str] = ()) -> TransactionReport:
    """``drained``: every value a read_committed drain read from the transactional topic after the
    heal; ``live_reads``: values read_committed consumers read while the faults ran. Every committed
    transaction is read exactly once and whole; nothing of an aborted one is ever read; a transaction
    of unknown outcome is read whole or not at all."""
    report = TransactionReport()
    counts = Counter(drained)
    live = set(live_reads)
    for value, times in sorted(counts.items()):
        if times > 1:
            report.duplicated.append(f"{value} read {times} times")
    for txn in transactions:
        if txn.outcome is TxnOutcome.COMMITTED:
            report.committed += 1
            missing = [v for v in txn.values if v not in counts]
            if missing:
                report.committed_missing.append(f"{txn.producer}: {missing} of a transaction committed at "
                                                f"{txn.done_at:.2f}")
        elif txn.outcome is TxnOutcome.ABORTED:
            report.aborted += 1
            seen = [v for v in txn.values if v in counts or v in live]
            if seen:
                report.aborted_read.append(f"{txn.producer}: {seen} of a transaction aborted at {txn.done_at:.2f}")
        else:
            report.unknown += 1
            present = [v for v in txn.values if v in counts]
            if present and len(present) != len(txn.values):
                report.partial.append(f"{txn.producer}: {len(present)} of {len(txn.values)} values read "
                                      f"({present[:3]})")
    return report


# -- why a value is in the log twice -----------------------------------------------------------


def producer_epochs_of(partition_dir: Path, values: set[str]) -> dict[str, list[tuple[int, int, int]]]:
    """For each of ``values`` found in a partition directory's segment files: (offset, producer id,
    producer epoch) of every copy."""
    out: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    if not values:
        return out
    segments = sorted(p for p in partition_dir.iterdir() if p.name.endswith(LOG_SUFFIX))
    for path in segments:
        data = path.read_bytes()
        for pos, header in iter_batch_headers(data):
            try:
                for record in iter_records(data, pos):
                    value = record.value.decode(errors="replace") if record.value is not None else None
                    if value in values:
                        out[value].append((record.offset, header.producer_id, header.producer_epoch))
            except CorruptRecordError:
                break
    return out


def duplicate_causes(copies: Mapping[str, Sequence[tuple[int, int, int]]]) -> dict[str, list[str]]:
    """Sorts values written twice by how: ``new producer epoch`` — the copies carry different
    producer epochs, so the client sent the records again after bumping its epoch (the broker
    deduplicates only within an epoch, as Kafka's); ``same producer epoch`` — one producer id and
    epoch wrote them twice, which the broker's sequence check should have refused (a broker bug)."""
    out: dict[str, list[str]] = {"new producer epoch": [], "same producer epoch": []}
    for value, found in sorted(copies.items()):
        if len(found) < 2:
            continue
        epochs = {(pid, epoch) for _, pid, epoch in found}
        cause = "new producer epoch" if len(epochs) > 1 else "same producer epoch"
        out[cause].append(f"{value} at " + ", ".join(f"{o} (producer {p} epoch {e})" for o, p, e in found))
    return out
