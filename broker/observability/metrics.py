"""The broker's metrics as plain counters: what the hot path touches.

Every metric is listed in docs/metrics.md. Code that does the work calls the
methods below; they only add to ints, dicts and pre-bucketed histograms, which
costs a fraction of a microsecond. OpenTelemetry reads these numbers when a
collection happens (a Prometheus scrape, an OTLP export) — see
``broker/observability/telemetry.py`` — so no OpenTelemetry code runs per request.

Subsystems that report *state* rather than events (group coordinator,
producer state, transaction coordinator) register a callable with one of the
``watch_*`` methods; the callable runs at collection time, on the broker's
Trio thread.

With ``metrics.enabled=false`` the node uses :class:`DisabledMetrics`, whose
methods do nothing except keep the in-flight request count that graceful
shutdown waits on.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.observability.share_metrics import ShareMetrics
    from wire.records import RecordBatchHeader

#: Request latency buckets (seconds): sub-millisecond answers up to long polls and joins.
DURATION_BOUNDS_S: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)
#: Background work (flush, compaction, rebalances, transactions, metadata commits), seconds.
SLOW_DURATION_BOUNDS_S: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0,
)
#: Event-loop task steps over the slow-step threshold, seconds.
SLOW_STEP_BOUNDS_S: tuple[float, ...] = (0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BYTES_BOUNDS: tuple[float, ...] = (
    128, 512, 1024, 4096, 16_384, 65_536, 262_144, 1_048_576, 4_194_304, 16_777_216,
)
#: Quota throttle times (milliseconds): a few ms up to the longest window.
THROTTLE_BOUNDS_MS: tuple[float, ...] = (1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 30_000)
#: Client quota types a response can be throttled by (Kafka's QuotaType), always exported.
QUOTA_TYPES = ("produce", "fetch", "request", "controller_mutation")
#: Why a connection was closed on arrival by the connection quotas.
CONNECTION_REFUSALS = ("max_connections_per_ip", "connection_creation_rate_per_ip")
BATCH_RECORDS_BOUNDS: tuple[float, ...] = (1, 2, 5, 10, 50, 100, 500, 1000, 5000, 10_000)

#: Reasons a request frame was rejected before a handler saw it.
DECODE_FAILURE_REASONS = ("frame_size", "short_header", "unknown_api", "unsupported_version", "malformed")
#: Classic consumer group states (Kafka's GroupState), always exported, 0 when none.
GROUP_STATES = ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")
TRANSACTION_RESULTS = ("commit", "abort", "timeout")


class Histogram:
    """Explicit-bucket histogram, cumulative since start (OpenTelemetry's bucket rule:
    bucket i counts values in ``(bounds[i-1], bounds[i]]``)."""

    __slots__ = ("bounds", "count", "counts", "max", "min", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.count = 0
        self.sum = 0.0
        self.min = float("inf")
        self.max = float("-inf")

    def record(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.sum += value
        if value < self.min:
            self.min = value
        if value > self.max:
            self.max = value


@dataclass(frozen=True, slots=True)
class GroupSample:
    """One consumer group as the coordinator sees it."""

    group_id: str
    state: str
    members: int


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """A group's committed offset for one partition (consumer lag = high watermark - offset)."""

    group_id: str
    topic: str
    partition: int
    offset: int


GroupsSource = Callable[[], Iterable[GroupSample]]
CommittedOffsetsSource = Callable[[], Iterable[CommittedOffset]]
CountSource = Callable[[], int]


class BrokerMetrics:
    """Counters of one broker node. Single-threaded: called from the Trio thread only."""

    enabled = True

    def __init__(self) -> None:
        self.started_unix_ns = time.time_ns()
        # network and requests
        self.connections: Counter[str] = Counter()
        self.connections_opened: Counter[str] = Counter()
        self.in_flight = 0
        self.bytes_received = 0
        self.bytes_sent = 0
        self.decode_failures: Counter[str] = Counter()
        self.request_duration: dict[int, Histogram] = {}
        self.request_errors: Counter[tuple[int, int]] = Counter()
        #: (listener, mechanism, "success" | "failure") -> authentications; TLS handshakes as mechanism "TLS".
        self.authentications: Counter[tuple[str, str, str]] = Counter()
        # quotas (no user or client id attributes: the series stay bounded by the quota types)
        self.throttle_time = {quota_type: Histogram(THROTTLE_BOUNDS_MS) for quota_type in QUOTA_TYPES}
        self.connections_refused: Counter[str] = Counter({reason: 0 for reason in CONNECTION_REFUSALS})
        #: listener -> seconds its acceptor waited for a connection slot or the creation rate.
        self.acceptor_blocked_s: dict[str, float] = {}
        # event loop
        self.slow_step_duration = Histogram(SLOW_STEP_BOUNDS_S)
        self.metadata_apply_errors = 0
        self.longest_step_source: Callable[[], float] | None = None
        # produce and fetch
        self.produced_records = 0
        self.produced_bytes = 0
        self.produce_batch_bytes = Histogram(BATCH_BYTES_BOUNDS)
        self.produce_batch_records = Histogram(BATCH_RECORDS_BOUNDS)
        self.produce_delayed = 0
        self.fetched_bytes = 0
        self.follower_fetched_bytes = 0
        self.fetch_delayed = 0
        # storage
        self.log_flush_duration = Histogram(SLOW_DURATION_BOUNDS_S)
        self.log_recovery_s = 0.0
        self.retention_deleted_segments = 0
        self.compaction_duration = Histogram(SLOW_DURATION_BOUNDS_S)
        self.compaction_removed_bytes = 0
        # replication
        self.isr_shrinks = 0
        self.isr_expands = 0
        # groups
        self.group_rebalances = 0
        self.group_rebalance_duration = Histogram(SLOW_DURATION_BOUNDS_S)
        self.offset_commits = 0
        self.groups_source: GroupsSource | None = None
        self.committed_offsets_source: CommittedOffsetsSource | None = None
        # producers and transactions
        self.producer_ids_allocated = 0
        self.duplicate_batches = 0
        self.active_producers_source: CountSource | None = None
        self.transactions_completed: Counter[str] = Counter()
        self.transaction_duration = Histogram(SLOW_DURATION_BOUNDS_S)
        self.open_transactions_source: CountSource | None = None
        # controller
        self.metadata_commit_duration = Histogram(SLOW_DURATION_BOUNDS_S)
        self.broker_heartbeats = 0
        # share groups (their module uses this one's Histogram)
        from broker.observability.share_metrics import DisabledShareMetrics, ShareMetrics
        self.share: ShareMetrics = ShareMetrics() if self.enabled else DisabledShareMetrics()
        # client telemetry (KIP-714): the receiver of what clients push
        from broker.telemetry.export import ClientTelemetry
        self.client_telemetry = ClientTelemetry()

    # ------------------------------------------------------------ network and requests

    def connection_callback(self, listener: str) -> Callable[[int], None]:
        """The ``on_connection_change`` callback for one listener."""
        self.connections[listener] += 0
        self.connections_opened[listener] += 0
        self.acceptor_blocked_s.setdefault(listener, 0.0)

        def change(delta: int) -> None:
            self.connections[listener] += delta
            if delta > 0:
                self.connections_opened[listener] += delta

        return change

    def decode_failure(self, reason: str) -> None:
        """A frame rejected before any handler ran (the connection is closed)."""
        self.decode_failures[reason] += 1

    def request_received(self, frame_bytes: int) -> None:
        self.bytes_received += frame_bytes

    def authentication(self, listener: str, mechanism: str, succeeded: bool) -> None:
        """A SASL exchange or a TLS handshake ended."""
        self.authentications[(listener, mechanism, "success" if succeeded else "failure")] += 1

    # ------------------------------------------------------------ quotas

    def throttled(self, quota_type: str, throttle_ms: int) -> None:
        """A response throttled (its connection muted) by a client quota."""
        self.throttle_time[quota_type].record(throttle_ms)

    def connection_refused(self, reason: str) -> None:
        self.connections_refused[reason] += 1

    def acceptor_blocked(self, listener: str, seconds: float) -> None:
        self.acceptor_blocked_s[listener] = self.acceptor_blocked_s.get(listener, 0.0) + seconds

    # ------------------------------------------------------------ event loop

    def slow_task_step(self, seconds: float) -> None:
        """A task step held the event loop past ``event.loop.slow.step.ms``."""
        self.slow_step_duration.record(seconds)

    def metadata_apply_failed(self) -> None:
        """Applying a committed metadata image to this broker's state raised."""
        self.metadata_apply_errors += 1

    def watch_longest_step(self, longest_step_s: Callable[[], float]) -> None:
        """Once, by the slow-step watchdog: the longest task step since it started."""
        self.longest_step_source = longest_step_s

    def response_sent(self, frame_bytes: int) -> None:
        self.bytes_sent += frame_bytes

    def request_started(self) -> None:
        self.in_flight += 1

    def record_request(self, api_key: int, seconds: float) -> None:
        self.in_flight -= 1
        histogram = self.request_duration.get(api_key)
        if histogram is None:
            histogram = self.request_duration[api_key] = Histogram(DURATION_BOUNDS_S)
        histogram.record(seconds)

    def requests_in_flight(self) -> int:
        return self.in_flight

    def record_errors(self, api_key: int, codes: Mapping[int, int]) -> None:
        """Error codes (non-zero) a response carried: how many partition/group/... entries
        carry each."""
        errors = self.request_errors
        for code, entries in codes.items():
            errors[(api_key, code)] += entries

    # ------------------------------------------------------------ produce and fetch

    def record_produce(self, records: int, size: int) -> None:
        self.produced_records += records
        self.produced_bytes += size

    def record_batches(self, batches: Iterable[tuple[int, RecordBatchHeader]]) -> None:
        """Sizes of the batches of one append, as ``(position, header)`` pairs."""
        for _, header in batches:
            self.produce_batch_bytes.record(header.size_in_bytes)
            self.produce_batch_records.record(header.records_count)

    def record_fetch(self, size: int, follower: bool = False) -> None:
        if follower:
            self.follower_fetched_bytes += size
        else:
            self.fetched_bytes += size

    def produce_waiting(self, delta: int) -> None:
        """+1 when an acks=all produce starts waiting for the high watermark, -1 when done."""
        self.produce_delayed += delta

    def fetch_waiting(self, delta: int) -> None:
        """+1 when a fetch starts long-polling, -1 when it answers."""
        self.fetch_delayed += delta

    # ------------------------------------------------------------ storage

    def log_flushed(self, seconds: float) -> None:
        self.log_flush_duration.record(seconds)

    def log_recovered(self, seconds: float) -> None:
        self.log_recovery_s = seconds

    def retention_deleted(self, segments: int) -> None:
        self.retention_deleted_segments += segments

    def compaction_finished(self, seconds: float, bytes_removed: int) -> None:
        """One cleaning of one partition log (the log cleaner calls this)."""
        self.compaction_duration.record(seconds)
        self.compaction_removed_bytes += max(bytes_removed, 0)

    # ------------------------------------------------------------ replication

    def isr_changed(self, shrunk: bool) -> None:
        if shrunk:
            self.isr_shrinks += 1
        else:
            self.isr_expands += 1

    # ------------------------------------------------------------ groups

    def group_rebalance(self, seconds: float) -> None:
        """A rebalance completed (the group reached Stable); ``seconds`` since it began."""
        self.group_rebalances += 1
        self.group_rebalance_duration.record(seconds)

    def offset_commit(self, partitions: int = 1) -> None:
        """Offsets committed (OffsetCommit or TxnOffsetCommit), one per partition."""
        self.offset_commits += partitions

    def watch_groups(self, groups: GroupsSource, committed_offsets: CommittedOffsetsSource) -> None:
        """The coordinator's state, read at collection time: every group, and every
        committed offset (for consumer lag)."""
        self.groups_source = groups
        self.committed_offsets_source = committed_offsets

    # ------------------------------------------------------------ producers and transactions

    def producer_id_allocated(self) -> None:
        self.producer_ids_allocated += 1

    def duplicate_batch(self) -> None:
        """An idempotent producer re-sent a batch already in the log (answered, not appended)."""
        self.duplicate_batches += 1

    def watch_producers(self, active: CountSource) -> None:
        """Number of producer ids with idempotence state on this broker."""
        self.active_producers_source = active

    def transaction_ended(self, committed: bool, seconds: float | None = None, *, timed_out: bool = False) -> None:
        """A transaction completed; ``timed_out`` marks an abort by the coordinator's timer."""
        result = "commit" if committed else ("timeout" if timed_out else "abort")
        self.transactions_completed[result] += 1
        if seconds is not None:
            self.transaction_duration.record(seconds)

    def watch_transactions(self, open_transactions: CountSource) -> None:
        """Number of ongoing transactions this broker coordinates."""
        self.open_transactions_source = open_transactions

    # ------------------------------------------------------------ controller

    def metadata_committed(self, seconds: float) -> None:
        """A metadata record batch was committed by the quorum, ``seconds`` after append."""
        self.metadata_commit_duration.record(seconds)

    def broker_heartbeat(self) -> None:
        """The active controller handled a BrokerHeartbeat."""
        self.broker_heartbeats += 1


class DisabledMetrics(BrokerMetrics):
    """``metrics.enabled=false``: nothing is recorded; in-flight requests are still counted
    because graceful shutdown waits for them."""

    enabled = False

    def connection_callback(self, listener: str) -> Callable[[int], None]:
        return _ignore

    def decode_failure(self, reason: str) -> None:
        pass

    def request_received(self, frame_bytes: int) -> None:
        pass

    def authentication(self, listener: str, mechanism: str, succeeded: bool) -> None:
        pass

    def slow_task_step(self, seconds: float) -> None:
        pass

    def metadata_apply_failed(self) -> None:
        pass

    def throttled(self, quota_type: str, throttle_ms: int) -> None:
        pass

    def connection_refused(self, reason: str) -> None:
        pass

    def acceptor_blocked(self, listener: str, seconds: float) -> None:
        pass

    def response_sent(self, frame_bytes: int) -> None:
        pass

    def record_request(self, api_key: int, seconds: float) -> None:
        self.in_flight -= 1

    def record_errors(self, api_key: int, codes: Mapping[int, int]) -> None:
        pass

    def record_produce(self, records: int, size: int) -> None:
        pass

    def record_batches(self, batches: Iterable[tuple[int, RecordBatchHeader]]) -> None:
        pass

    def record_fetch(self, size: int, follower: bool = False) -> None:
        pass

    def produce_waiting(self, delta: int) -> None:
        pass

    def fetch_waiting(self, delta: int) -> None:
        pass


def _ignore(delta: int) -> None:
    pass
