"""Invariants of the network fault suite beyond those of :func:`~tests.replication.fault_checker.check`.

- :func:`unavailability_windows`: per partition, each stretch longer than a threshold without an
  acknowledged write while writers were sending to it (how long the partition could not take writes).
- :func:`acks_below_min_isr`: acknowledgements given while the acknowledging partition's leader,
  sampled before and after the acknowledgement, said its ISR was smaller than
  ``min.insync.replicas`` (Kafka 2013: an isolated leader acking alone).
"""

from __future__ import annotations

import bisect
import itertools
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tests.replication.fault_checker import Outcome, Send


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
    most one send interval of a window)."""
    acks: dict[tuple[str, int], list[float]] = defaultdict(list)
    attempts: dict[tuple[str, int], list[float]] = defaultdict(list)
    for s in sends:
        attempts[(s.topic, s.partition)].append(s.sent_at)
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
    return Unavailability(windows)


def acks_below_min_isr(sends: Iterable[Send], samples: Sequence[IsrSample], min_isr: int,
                       max_sample_gap_s: float = 1.0) -> list[str]:
    """Acknowledgements completed between two samples, no more than ``max_sample_gap_s`` apart, in
    which the broker that called itself the partition's leader both times had fewer than
    ``min_isr`` replicas in its ISR — and no broker claiming leadership had enough."""
    leaders: dict[tuple[str, int], list[IsrSample]] = defaultdict(list)
    for sample in samples:
        if sample.leader == sample.node:
            leaders[(sample.topic, sample.partition)].append(sample)
    for series in leaders.values():
        series.sort(key=lambda s: s.at)
    times_of = {key: [s.at for s in series] for key, series in leaders.items()}
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
            out.append(f"{send.value} acked at {send.topic}-{send.partition}@{send.offset} while leader "
                       f"{before.node} had ISR {list(before.isr)} .. {list(after.isr)}")
    return out
