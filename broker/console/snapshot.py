"""What the console knows about a cluster at one moment, and the history its charts draw.

A :class:`Snapshot` is immutable and built whole by :mod:`broker.console.collect`;
pages render from the newest one, so a page costs a template render, not a
round of requests, however many topics and groups the cluster holds.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class BrokerView:
    node_id: int
    host: str
    port: int
    rack: str | None
    is_controller: bool
    #: When the console first saw this broker in the metadata, continuously since (ms).
    seen_since_ms: int


@dataclass(frozen=True, slots=True)
class PartitionView:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    log_start: int | None
    log_end: int | None
    size_bytes: int | None
    min_isr: int
    #: Replicas on brokers that are not in the metadata (stopped, or fenced by the controller).
    missing_replicas: tuple[int, ...] = ()

    @property
    def offline(self) -> bool:
        return self.leader < 0

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas) or bool(self.missing_replicas)

    @property
    def under_min_isr(self) -> bool:
        live_isr = [r for r in self.isr if r not in self.missing_replicas]
        return len(live_isr) < self.min_isr

    @property
    def records(self) -> int | None:
        if self.log_start is None or self.log_end is None:
            return None
        return self.log_end - self.log_start


@dataclass(frozen=True, slots=True)
class TopicView:
    name: str
    topic_id: str
    internal: bool
    partitions: tuple[PartitionView, ...]
    records_per_s: float | None = None

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)

    @property
    def size_bytes(self) -> int | None:
        sizes = [p.size_bytes for p in self.partitions if p.size_bytes is not None]
        return sum(sizes) if sizes else None

    @property
    def records(self) -> int | None:
        counts = [p.records for p in self.partitions if p.records is not None]
        return sum(counts) if counts else None

    @property
    def end_offsets(self) -> int:
        return sum(p.log_end or 0 for p in self.partitions)

    @property
    def under_replicated(self) -> int:
        return sum(1 for p in self.partitions if p.under_replicated)


@dataclass(frozen=True, slots=True)
class MemberView:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int | None
    log_end: int | None
    member_id: str

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.log_end is None:
            return None
        return max(self.log_end - self.committed, 0)


@dataclass(frozen=True, slots=True)
class GroupView:
    group_id: str
    state: str
    group_type: str
    protocol_type: str
    protocol: str
    coordinator: str
    members: tuple[MemberView, ...]
    offsets: tuple[PartitionLag, ...]
    error: str | None = None

    @property
    def total_lag(self) -> int:
        return sum(p.lag or 0 for p in self.offsets)

    @property
    def topics(self) -> tuple[str, ...]:
        return tuple(sorted({p.topic for p in self.offsets}))


@dataclass(frozen=True, slots=True)
class VoterView:
    node_id: int
    log_end_offset: int
    lag: int | None
    last_caught_up_ms: int
    role: str


@dataclass(frozen=True, slots=True)
class QuorumView:
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: tuple[VoterView, ...]
    observers: tuple[VoterView, ...]


@dataclass(frozen=True, slots=True)
class MetricsView:
    """Rates over the last poll interval, from the metrics endpoints (summed over them)."""

    produce_records_per_s: float
    produce_bytes_per_s: float
    fetch_bytes_per_s: float
    request_latency_mean_ms: float | None
    request_latency_p99_ms: float | None
    endpoints_up: int
    endpoints: int
    #: Endpoints scraped twice in a row: the rates are over those (0 after the first scrape).
    intervals: int = 0


@dataclass(frozen=True, slots=True)
class TransactionView:
    transactional_id: str
    coordinator: int
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_ms: int
    partitions: tuple[tuple[str, int], ...]

    def running_ms(self, now_ms: int) -> int | None:
        return now_ms - self.start_ms if self.start_ms >= 0 and self.state == "Ongoing" else None

    def overdue(self, now_ms: int) -> bool:
        """Ongoing for longer than its timeout: the coordinator should have aborted it."""
        running = self.running_ms(now_ms)
        return running is not None and running > self.timeout_ms


@dataclass(frozen=True, slots=True)
class Snapshot:
    taken_ms: int
    cluster_id: str
    controller_id: int
    brokers: tuple[BrokerView, ...]
    topics: dict[str, TopicView]
    groups: dict[str, GroupView]
    quorum: QuorumView | None
    metrics: MetricsView | None
    errors: tuple[str, ...] = ()
    generation: int = 0
    transactions: tuple[TransactionView, ...] = ()
    #: False when the cluster does not answer ListTransactions (Kafka before 3.0).
    transactions_supported: bool = True

    def partitions(self) -> list[PartitionView]:
        return [p for t in self.topics.values() for p in t.partitions]

    @property
    def under_replicated(self) -> list[PartitionView]:
        return [p for p in self.partitions() if p.under_replicated]

    @property
    def offline(self) -> list[PartitionView]:
        return [p for p in self.partitions() if p.offline]

    @property
    def under_min_isr(self) -> list[PartitionView]:
        return [p for p in self.partitions() if p.under_min_isr]


EMPTY = Snapshot(taken_ms=0, cluster_id="", controller_id=-1, brokers=(), topics={}, groups={},
                 quorum=None, metrics=None, errors=("not polled yet",))

#: Points kept per chart series: at the default 2 s refresh, ten minutes.
HISTORY_POINTS = 300


@dataclass(slots=True)
class History:
    """Time series for the charts: ``(ms, value)`` points, the oldest dropped first."""

    points: int = HISTORY_POINTS
    series: dict[str, deque[tuple[int, float]]] = field(default_factory=dict)

    def add(self, name: str, when_ms: int, value: float) -> None:
        line = self.series.get(name)
        if line is None:
            line = self.series[name] = deque(maxlen=self.points)
        line.append((when_ms, value))

    def get(self, name: str) -> list[tuple[int, float]]:
        return list(self.series.get(name, ()))

    def keep_only(self, prefix: str, names: set[str]) -> None:
        """Drop the series under ``prefix`` whose subject no longer exists."""
        for key in [k for k in self.series if k.startswith(prefix) and k[len(prefix):] not in names]:
            del self.series[key]
