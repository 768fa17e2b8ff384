"""Share-group metrics (KIP-932) as plain counters, after Kafka's ``share-group-metrics`` and
``share-coordinator-metrics``: acknowledgements, acquired and archived records, the time to
load a share-partition's state, share groups by state, rebalances, and the share
coordinator's state writes and their latency.

The share code records events here (``BrokerMetrics.share``); OpenTelemetry reads the
numbers at collection time (:func:`register` and :func:`histograms`, called by
broker/observability/telemetry.py). Every metric is in docs/metrics.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from opentelemetry.metrics import CallbackOptions, Observation

from broker.observability.metrics import Histogram

if TYPE_CHECKING:
    from broker.observability.collection import ObservableMeter

#: Kafka's AcknowledgeType, by its number in ShareFetch/ShareAcknowledge (0 is a gap).
ACK_TYPES = {1: "accept", 2: "release", 3: "reject", 4: "renew"}
#: Why records are archived: rejected, or out of deliveries.
ARCHIVE_REASONS = ("rejected", "delivery_count_exceeded")
#: Share group states (Kafka's ShareGroupState), always exported, 0 when none.
SHARE_GROUP_STATES = ("Empty", "Stable")
#: Share-partition loads and state writes are quick: 0.5 ms ... 30 s.
SHARE_DURATION_BOUNDS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                           30.0)
StatesSource = Callable[[], Iterable[str]]


class ShareMetrics:
    """Single-threaded: called from the Trio thread only."""

    def __init__(self) -> None:
        self.acknowledge_requests = 0
        self.records_acknowledged: Counter[str] = Counter(dict.fromkeys(ACK_TYPES.values(), 0))
        self.records_acquired = 0
        self.records_archived: Counter[str] = Counter(dict.fromkeys(ARCHIVE_REASONS, 0))
        self.dead_letters = 0
        self.partition_load_duration = Histogram(SHARE_DURATION_BOUNDS_S)
        self.rebalances = 0
        self.state_writes = 0
        self.state_write_duration = Histogram(SHARE_DURATION_BOUNDS_S)
        self.group_states_source: StatesSource | None = None

    def acknowledge_request(self) -> None:
        """A ShareFetch or ShareAcknowledge carrying acknowledgements (Kafka's share-acknowledgement)."""
        self.acknowledge_requests += 1

    def acknowledged(self, types: Sequence[int], records: int) -> None:
        """An acknowledgement batch of ``records`` records (Kafka's record-acknowledgement):
        one type for them all, or one type per record (0: a gap, not counted)."""
        for t, n in ((types[0], records),) if len(types) == 1 else ((t, 1) for t in types):
            name = ACK_TYPES.get(t)
            if name is not None:
                self.records_acknowledged[name] += n

    def acquired(self, records: int) -> None:
        self.records_acquired += records

    def archived(self, reason: str, records: int = 1) -> None:
        self.records_archived[reason] += records

    def dead_lettered(self, records: int) -> None:
        self.dead_letters += records

    def partition_loaded(self, seconds: float) -> None:
        """A leader read a share-partition's state from its share coordinator."""
        self.partition_load_duration.record(seconds)

    def rebalance(self) -> None:
        """A share group's epoch moved (its membership or subscriptions changed)."""
        self.rebalances += 1

    def state_written(self, seconds: float) -> None:
        """The share coordinator committed a share-partition's state (WriteShareGroupState)."""
        self.state_writes += 1
        self.state_write_duration.record(seconds)

    def watch_groups(self, states: StatesSource) -> None:
        """The state of every share group this node coordinates, read at collection time."""
        self.group_states_source = states


class DisabledShareMetrics(ShareMetrics):
    """``metrics.enabled=false``: nothing is recorded."""

    def acknowledge_request(self) -> None:
        pass

    def acknowledged(self, types: Sequence[int], records: int) -> None:
        pass

    def acquired(self, records: int) -> None:
        pass

    def archived(self, reason: str, records: int = 1) -> None:
        pass

    def dead_lettered(self, records: int) -> None:
        pass

    def partition_loaded(self, seconds: float) -> None:
        pass

    def rebalance(self) -> None:
        pass

    def state_written(self, seconds: float) -> None:
        pass


HistogramSeries = Callable[[], Iterable[tuple[dict[str, str], Histogram]]]


def histograms(share: ShareMetrics) -> list[tuple[str, str, str, HistogramSeries]]:
    """(name, unit, description, series) of the share histograms."""
    def histogram(name: str, unit: str, description: str, h: Histogram) -> tuple[str, str, str, HistogramSeries]:
        return name, unit, description, lambda: [({}, h)]

    return [
        histogram("cormorant.share.partition.load.duration", "s",
                  "Time a partition leader took to read a share-partition's state from its share coordinator.",
                  share.partition_load_duration),
        histogram("cormorant.share.coordinator.write.duration", "s",
                  "Time the share coordinator took to commit a share-partition's state.",
                  share.state_write_duration),
    ]


def register(meter: ObservableMeter, share: ShareMetrics) -> None:
    def counter(name: str, unit: str, description: str,
                read: Callable[[], Iterable[tuple[dict[str, str], float]]]) -> None:
        meter.create_observable_counter(name, [_observe(read)], unit=unit, description=description)

    def updown(name: str, unit: str, description: str,
               read: Callable[[], Iterable[tuple[dict[str, str], float]]]) -> None:
        meter.create_observable_up_down_counter(name, [_observe(read)], unit=unit, description=description)

    counter("cormorant.share.acknowledgements", "{request}",
            "ShareFetch and ShareAcknowledge requests carrying acknowledgements.",
            lambda: [({}, share.acknowledge_requests)])
    counter("cormorant.share.records.acknowledged", "{record}", "Records acknowledged, by acknowledgement type.",
            lambda: [({"ack_type": t}, n) for t, n in share.records_acknowledged.items()])
    counter("cormorant.share.records.acquired", "{record}", "Records acquired by share consumers.",
            lambda: [({}, share.records_acquired)])
    counter("cormorant.share.records.archived", "{record}", "Records archived, by reason.",
            lambda: [({"reason": r}, n) for r, n in share.records_archived.items()])
    counter("cormorant.share.dead_letters", "{record}", "Archived records copied to a dead-letter topic.",
            lambda: [({}, share.dead_letters)])
    counter("cormorant.share.group.rebalances", "{rebalance}", "Share group epoch changes.",
            lambda: [({}, share.rebalances)])
    counter("cormorant.share.coordinator.writes", "{write}", "Share-partition states committed by this node.",
            lambda: [({}, share.state_writes)])
    updown("cormorant.share.group.count", "{group}", "Share groups this node coordinates, by state.",
           lambda: _states(share))


def _states(share: ShareMetrics) -> list[tuple[dict[str, str], float]]:
    counts: Counter[str] = Counter(dict.fromkeys(SHARE_GROUP_STATES, 0))
    source = share.group_states_source
    if source is not None:
        counts.update(source())
    return [({"state": s}, n) for s, n in counts.items()]


def _observe(read: Callable[[], Iterable[tuple[dict[str, str], float]]]
             ) -> Callable[[CallbackOptions], Iterable[Observation]]:
    return lambda _: [Observation(v, attributes) for attributes, v in read()]
