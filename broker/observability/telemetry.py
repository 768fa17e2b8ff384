"""OpenTelemetry for one node: the instruments of docs/metrics.md, their exporters, tracing.

Counters and gauges are *observable* instruments whose callbacks read
:class:`broker.observability.metrics.BrokerMetrics` and the broker's own state (partitions,
metadata image, group coordinator) when a collection happens. Histograms are
bucketed by ``BrokerMetrics`` on the hot path (an OpenTelemetry ``record()``
costs ~7 µs in Python, a bisect and two adds ~0.1 µs) and handed to the
exporters as OpenTelemetry histogram points at collection time.

Exporters:

* Prometheus text on ``metrics.listener`` (``broker/observability/metrics_endpoint.py``),
  when scraped: the callbacks run on the Trio thread, the rest in a worker thread
  (``broker/observability/collection.py``).
* OTLP over HTTP when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or the metrics-specific
  variable) is set: collected on the Trio thread every
  ``OTEL_METRIC_EXPORT_INTERVAL`` ms, sent from a worker thread.

Resource: ``service.name=cormorant``, ``service.namespace`` = cluster id,
``service.instance.id`` = node id, plus ``OTEL_RESOURCE_ATTRIBUTES``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

import structlog
import trio
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import (
    MeterProvider,
)
from opentelemetry.sdk.metrics.export import (
    Metric,
)
from opentelemetry.sdk.resources import Resource
from prometheus_client import CollectorRegistry, generate_latest

from broker.observability import share_metrics
from broker.observability.collection import CallbackSnapshot, ObservableMeter, SnapshotMeter
from broker.observability.metrics import (
    DECODE_FAILURE_REASONS,
    GROUP_STATES,
    TRANSACTION_RESULTS,
    BrokerMetrics,
    GroupSample,
    Histogram,
)
from broker.observability.metrics_endpoint import MetricsEndpoint
from broker.observability.readers import (
    SCOPE,
    HistogramSource,
    HistogramSpec,
    OtlpReader,
    PrometheusReader,
    package_version,
)
from broker.observability.tracing import Tracing
from broker.telemetry import export as client_telemetry
from wire.errors import ErrorCode
from wire.generated.registry import API_SPECS

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from broker.cluster.controller_api import MetadataSource, QuorumState
    from broker.log.manager import LogManager
    from broker.replication.replica_manager import Partition, ReplicaManager
    from broker.server.fetch_sessions import FetchSessionCache
    from broker.server.network import NetworkMemory
    from config import BrokerConfig
    from controller.delta import MetadataDelta
    from controller.image import MetadataImage, PartitionImage, TopicImage

log = structlog.get_logger(__name__)

#: Consumer-lag series exported at most; beyond it the largest lags are kept.
MAX_LAG_SERIES = 10_000
OTLP_FINAL_EXPORT_TIMEOUT_MS = 5_000

Callback = Callable[[CallbackOptions], Iterable[Observation]]


def otlp_endpoint(signal: str) -> str | None:
    """The OTLP endpoint for ``signal`` (``METRICS``/``TRACES``) from the standard variables."""
    return os.environ.get(f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")


def build_resource(cluster_id: str, node_id: int) -> Resource:
    return Resource.create({
        "service.name": "cormorant",
        "service.namespace": cluster_id,
        "service.instance.id": str(node_id),
        "service.version": package_version(),
        "cormorant.cluster.id": cluster_id,
        "cormorant.node.id": node_id,
    })  # fmt: skip


# ---------------------------------------------------------------- ISR changes


class IsrChangeTracker:
    """Counts ISR shrinks and expands of the partitions this node leads, from the metadata
    image (the controller owns the ISR; every change is a committed record)."""

    def __init__(self, node_id: int, metrics: BrokerMetrics) -> None:
        self.node_id = node_id
        self.metrics = metrics
        self._topics: Mapping[uuid.UUID, TopicImage] = {}
        self._isr: dict[tuple[uuid.UUID, int], int] = {}

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        for topic_id, deleted in delta.topics.deleted.items():
            for index in deleted.partitions:
                self._isr.pop((topic_id, index), None)
        for topic, part in delta.topics.changed_partitions():
            self._count(topic.topic_id, part)
        self._topics = image.topics_by_id

    def _count(self, topic_id: uuid.UUID, part: PartitionImage) -> None:
        key = (topic_id, part.partition)
        before = self._isr.get(key)
        now = len(part.isr)
        if part.leader == self.node_id and before is not None and now != before:
            self.metrics.isr_changed(shrunk=now < before)
        self._isr[key] = now

    def on_image(self, image: MetadataImage) -> None:
        topics = image.topics_by_id
        for topic_id, topic in topics.items():
            if self._topics.get(topic_id) is topic:
                continue  # images share unchanged topics
            for part in topic.partitions.values():
                self._count(topic_id, part)
        if len(self._topics) != len(topics) or any(t not in topics for t in self._topics):
            self._isr = {k: v for k, v in self._isr.items() if k[0] in topics}
        self._topics = topics  # images are never changed in place


# ---------------------------------------------------------------- the node's telemetry


class Telemetry:
    def __init__(
        self,
        config: BrokerConfig,
        node_id: int,
        cluster_id: str,
        metrics: BrokerMetrics,
        metadata: MetadataSource,
        quorum: QuorumState,
        replica_manager: ReplicaManager,
        log_manager: LogManager,
        fetch_sessions: FetchSessionCache,
        network_memory: NetworkMemory,
    ) -> None:
        self.config = config
        self.node_id = node_id
        self.metrics = metrics
        self._metadata = metadata
        self._quorum_state = quorum
        self._replica_manager = replica_manager
        self._log_manager = log_manager
        self._fetch_sessions = fetch_sessions
        self._network_memory = network_memory
        self.resource = build_resource(cluster_id, node_id)
        self.registry = CollectorRegistry(auto_describe=False)
        self.endpoint: MetricsEndpoint | None = None
        self.provider: MeterProvider | None = None
        self.otlp: OtlpReader | None = None
        self.tracing = Tracing(None)
        self._tracer_provider: TracerProvider | None = None
        self._lag_warned = False
        self._snapshot = CallbackSnapshot()
        self._histograms: HistogramSource | None = None
        self._render_lock = trio.Lock()
        if self.metrics.enabled:
            self._setup_metrics()
        self._setup_tracing()

    # ------------------------------------------------------------ setup

    def _setup_metrics(self) -> None:
        histograms = self._histograms = HistogramSource(self.resource, self.metrics.started_unix_ns,
                                                         self._histogram_specs())
        readers: list[PrometheusMetricReader | OtlpReader] = [PrometheusReader(histograms, self.registry)]
        if otlp_endpoint("METRICS"):
            self.otlp = OtlpReader(histograms)
            readers.append(self.otlp)
        # Shut down by the node (final OTLP export); no second shutdown at interpreter exit.
        self.provider = MeterProvider(resource=self.resource, metric_readers=readers, shutdown_on_exit=False)
        self._register_instruments(SnapshotMeter(self.provider.get_meter(SCOPE, package_version()), self._snapshot))
        tracker = IsrChangeTracker(self.node_id, self.metrics)
        tracker.on_image(self._metadata.image)
        self._metadata.add_metadata_publisher(tracker.on_metadata_update)
        if self.config.metrics_listener is not None:
            hp = self.config.metrics_listener
            self.endpoint = MetricsEndpoint(hp.host, hp.port, self.render_off_loop)

    def _setup_tracing(self) -> None:
        ratio = self.config.tracing_sampling_ratio
        if ratio <= 0:
            return
        if not otlp_endpoint("TRACES"):
            log.warning("tracing_without_exporter", sampling_ratio=ratio,
                        detail="set OTEL_EXPORTER_OTLP_ENDPOINT to export spans; tracing stays off")
            return
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

        provider = TracerProvider(resource=self.resource, sampler=ParentBased(TraceIdRatioBased(ratio)),
                                  shutdown_on_exit=False)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        self._tracer_provider = provider
        self.tracing = Tracing(provider.get_tracer(SCOPE, package_version()))
        log.info("tracing_enabled", sampling_ratio=ratio, endpoint=otlp_endpoint("TRACES"))

    # ------------------------------------------------------------ running

    async def bind(self) -> str | None:
        """Binds the scrape endpoint (so its URL is known before the node reports ready).
        A port already in use is logged and the node runs without the endpoint."""
        if self.endpoint is None:
            return None
        try:
            await self.endpoint.bind()
        except OSError as ex:
            log.error("metrics_listener_unavailable", listener=f"{self.endpoint.host}:{self.endpoint.port}",
                      error=ex.strerror or str(ex))
            self.endpoint = None
            return None
        log.info("metrics_listening", host=self.endpoint.host, port=self.endpoint.bound_port, url=self.endpoint.url)
        return self.endpoint.url

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            if self.endpoint is not None:
                nursery.start_soon(self.endpoint.serve)
            if self.otlp is not None:
                nursery.start_soon(self._otlp_loop, self.otlp)

    async def _otlp_loop(self, reader: OtlpReader) -> None:
        log.info("otlp_metrics_export", endpoint=otlp_endpoint("METRICS"), interval_s=reader.interval_s)
        while True:
            await trio.sleep(reader.interval_s)
            reader.collect()
            await trio.to_thread.run_sync(reader.export_pending, reader.interval_s * 1000, abandon_on_cancel=True)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    async def render_off_loop(self) -> bytes:
        """The Prometheus text, the instruments read here and aggregated in a worker thread."""
        async with self._render_lock:
            taken = self._snapshot.take()
            built = self._histograms.build() if self._histograms is not None else None
            return await trio.to_thread.run_sync(self._render_taken, taken, built)

    def _render_taken(self, taken: list[list[Observation]], built: list[Metric] | None) -> bytes:
        if self._histograms is not None:
            self._histograms.built.metrics = built
        try:
            with self._snapshot.replaying(taken):
                return self.render()
        finally:
            if self._histograms is not None:
                self._histograms.built.metrics = None

    def shutdown(self) -> None:
        if self.otlp is not None:
            try:
                self.otlp.collect()
                self.otlp.export_pending(OTLP_FINAL_EXPORT_TIMEOUT_MS)
            except Exception:
                log.exception("otlp_final_export_failed")
        if self.provider is not None:
            self.provider.shutdown(timeout_millis=OTLP_FINAL_EXPORT_TIMEOUT_MS)
        provider = self._tracer_provider
        if provider is not None:
            provider.shutdown()

    # ------------------------------------------------------------ instruments

    def _histogram_specs(self) -> list[HistogramSpec]:
        m = self.metrics

        def single(h: Histogram) -> Callable[[], Iterable[tuple[dict[str, str], Histogram]]]:
            return lambda: [({}, h)]

        def by_api() -> Iterable[tuple[dict[str, str], Histogram]]:
            # Only APIs that were called: 18 lines per API are most of a scrape's cost. The
            # series count is still bounded by the API table, whatever clients send.
            for key, h in list(m.request_duration.items()):
                if h.count:
                    yield {"api": _api_name(key)}, h

        return [
            HistogramSpec("cormorant.request.duration", "s",
                          "Time from a decoded request to its response, by Kafka API.", by_api),
            HistogramSpec("cormorant.quota.throttle_time", "ms",
                          "Throttle time of responses throttled by a client quota (the connection is muted as "
                          "long), by quota type.",
                          lambda: [({"quota_type": t}, h) for t, h in m.throttle_time.items()]),
            HistogramSpec("cormorant.eventloop.slow_step.duration", "s",
                          "Event-loop task steps longer than event.loop.slow.step.ms (each logged with its stack).",
                          single(m.slow_step_duration)),
            HistogramSpec("cormorant.produce.batch.size", "By",
                          "Size of each record batch appended by Produce.", single(m.produce_batch_bytes)),
            HistogramSpec("cormorant.produce.batch.records", "{record}",
                          "Records in each record batch appended by Produce.", single(m.produce_batch_records)),
            HistogramSpec("cormorant.log.flush.duration", "s",
                          "Time of a periodic flush pass that fsynced at least one log.", single(m.log_flush_duration)),
            HistogramSpec("cormorant.log.compaction.duration", "s",
                          "Time of one cleaning of one compacted partition log.", single(m.compaction_duration)),
            HistogramSpec("cormorant.group.rebalance.duration", "s",
                          "Time from a rebalance starting to the group being Stable.", single(m.group_rebalance_duration)),
            HistogramSpec("cormorant.transaction.duration", "s",
                          "Time from a transaction's first partition to its end marker.", single(m.transaction_duration)),
            HistogramSpec("cormorant.controller.commit.duration", "s",
                          "Time for the metadata quorum to commit an appended batch of records.",
                          single(m.metadata_commit_duration)),
            *(HistogramSpec(*spec) for spec in share_metrics.histograms(m.share)),
        ]  # fmt: skip

    def _register_instruments(self, meter: ObservableMeter) -> None:
        m = self.metrics
        memory = self._network_memory

        def counter(name: str, unit: str, description: str, callback: Callback) -> None:
            meter.create_observable_counter(name, [callback], unit=unit, description=description)

        def updown(name: str, unit: str, description: str, callback: Callback) -> None:
            meter.create_observable_up_down_counter(name, [callback], unit=unit, description=description)

        def gauge(name: str, unit: str, description: str, callback: Callback) -> None:
            meter.create_observable_gauge(name, [callback], unit=unit, description=description)

        def value(read: Callable[[], float]) -> Callback:
            return lambda _: [Observation(read())]

        def by(attribute: str, read: Callable[[], Iterable[tuple[str, float]]]) -> Callback:
            return lambda _: [Observation(v, {attribute: k}) for k, v in read()]

        # network and requests
        updown("cormorant.network.connection.active", "{connection}", "Open client connections, by listener.",
               by("listener", lambda: list(m.connections.items())))
        counter("cormorant.network.connection.opened", "{connection}", "Client connections accepted, by listener.",
                by("listener", lambda: list(m.connections_opened.items())))
        counter("cormorant.network.io", "By", "Bytes of Kafka frames received and sent, size prefix included.",
                by("direction", lambda: [("receive", m.bytes_received), ("transmit", m.bytes_sent)]))
        counter("cormorant.network.decode_failures", "{frame}",
                "Request frames rejected before a handler ran (the connection is closed), by reason.",
                by("reason", lambda: [(r, m.decode_failures[r]) for r in DECODE_FAILURE_REASONS]))
        counter("cormorant.network.authentications", "{authentication}",
                "Ended SASL exchanges and TLS handshakes (mechanism TLS), by listener, mechanism and result.",
                lambda _: [Observation(n, {"listener": listener, "mechanism": mechanism, "result": result})
                           for (listener, mechanism, result), n in list(m.authentications.items())])
        counter("cormorant.network.connection.refused", "{connection}",
                "Connections closed on arrival by the connection quotas, by reason.",
                by("reason", lambda: list(m.connections_refused.items())))
        counter("cormorant.network.acceptor.blocked_time", "s",
                "Time a listener's acceptor waited before accepting (max.connections, "
                "max.connection.creation.rate), by listener.",
                by("listener", lambda: list(m.acceptor_blocked_s.items())))
        updown("cormorant.network.memory", "By",
               "Bytes held for requests (reserved as announced, read or being handled) and for responses built "
               "and not yet sent.",
               by("buffer", lambda: [("request", memory.requests),
                                     ("response", memory.responses)]))
        updown("cormorant.network.memory.waiting", "{connection}",
               "Connections not being read because their next request does not fit in queued.max.request.bytes.",
               value(lambda: memory.waiting))
        updown("cormorant.request.active", "{request}", "Requests being handled now.", value(lambda: m.in_flight))
        gauge("cormorant.eventloop.step.max", "s", "Longest event-loop task step since the broker became ready.",
              value(lambda: m.longest_step_source() if m.longest_step_source is not None else 0.0))
        gauge("cormorant.eventloop.tasks", "{task}",
              "Tasks living in the broker's event loop (connections, long polls, fetchers, timers...).",
              _living_tasks)
        counter("cormorant.request.errors", "{error}",
                "Error codes returned to clients, one per entry (partition, group...) that carries one.",
                lambda _: [Observation(n, {"api": _api_name(k), "error": ErrorCode.for_code(c).name})
                           for (k, c), n in list(m.request_errors.items())])
        # produce and fetch
        counter("cormorant.produce.records", "{record}", "Records appended by Produce requests.",
                value(lambda: m.produced_records))
        counter("cormorant.produce.bytes", "By", "Record batch bytes appended by Produce requests.",
                value(lambda: m.produced_bytes))
        updown("cormorant.produce.delayed", "{request}",
               "acks=all Produce requests waiting for the high watermark.", value(lambda: m.produce_delayed))
        counter("cormorant.fetch.bytes", "By", "Record bytes returned by Fetch, by fetcher (consumer or follower).",
                by("fetcher", lambda: [("consumer", m.fetched_bytes), ("follower", m.follower_fetched_bytes)]))
        updown("cormorant.fetch.delayed", "{request}", "Fetch requests long-polling for data.",
               value(lambda: m.fetch_delayed))
        updown("cormorant.fetch.sessions", "{session}", "Incremental fetch sessions cached (KIP-227).",
               value(lambda: len(self._fetch_sessions)))
        # storage
        gauge("cormorant.log.end_offset", "{offset}", "Log end offset of each hosted partition.",
              self._per_partition(lambda p: p.log_end_offset))
        gauge("cormorant.log.start_offset", "{offset}", "Log start offset of each hosted partition.",
              self._per_partition(lambda p: p.log_start_offset))
        updown("cormorant.log.size", "By", "Bytes in the live segments of each hosted partition.",
               self._per_partition(lambda p: p.log.size))
        updown("cormorant.log.segments", "{segment}", "Segments of each hosted partition.",
               self._per_partition(lambda p: len(p.log.segments)))
        files = self._log_manager.file_cache
        updown("cormorant.log.open_files", "{file}",
               "Log segment and index files held open now (pinned by appends, reads and sends, or idle).",
               value(lambda: files.open_files))
        gauge("cormorant.log.open_files.budget", "{file}", "Most log files held open at once (log.open.files.max).",
              value(lambda: files.capacity))
        counter("cormorant.log.open_files.evictions", "{file}",
                "Idle log files closed to stay within the budget (reopened when used again).",
                value(lambda: files.evictions))
        gauge("cormorant.log.recovery.duration", "s", "Time the last start spent loading and recovering logs.",
              value(lambda: m.log_recovery_s))
        counter("cormorant.log.retention.deleted_segments", "{segment}", "Segments deleted by retention.",
                value(lambda: m.retention_deleted_segments))
        counter("cormorant.log.compaction.removed_bytes", "By", "Bytes removed from logs by compaction.",
                value(lambda: m.compaction_removed_bytes))
        # replication
        updown("cormorant.replication.partitions", "{partition}", "Hosted partitions, by this node's role.",
               by("role", self._roles))
        gauge("cormorant.replication.isr.size", "{replica}", "In-sync replicas of each partition this node leads.",
              self._per_led_partition(lambda p: len(p.isr)))
        updown("cormorant.replication.under_replicated", "{partition}",
               "Partitions led here whose ISR is smaller than their replica set.",
               value(lambda: sum(1 for p in self._led() if len(p.isr) < len(p.replicas))))
        updown("cormorant.replication.under_min_isr", "{partition}",
               "Partitions led here whose ISR is below min.insync.replicas (acks=all fails).",
               value(lambda: sum(1 for p in self._led() if p.under_min_isr)))
        gauge("cormorant.replication.follower.lag", "{record}",
              "Records each follower of a partition led here is behind the leader's log end.",
              self._follower_lag)
        gauge("cormorant.replication.max_lag", "{record}", "Largest follower lag over the partitions led here.",
              value(lambda: max((lag for _, _, _, lag in self._follower_lags()), default=0)))
        counter("cormorant.replication.isr.changes", "{change}",
                "ISR shrinks and expands of partitions led here, from committed metadata.",
                by("change", lambda: [("shrink", m.isr_shrinks), ("expand", m.isr_expands)]))
        # groups
        updown("cormorant.group.count", "{group}", "Consumer groups this node coordinates, by state.",
               by("state", self._group_states))
        updown("cormorant.group.members", "{member}", "Members of the groups this node coordinates.",
               value(lambda: sum(g.members for g in self._groups())))
        counter("cormorant.group.rebalances", "{rebalance}", "Completed rebalances.",
                value(lambda: m.group_rebalances))
        counter("cormorant.group.offset_commits", "{offset}", "Partition offsets committed.",
                value(lambda: m.offset_commits))
        gauge("cormorant.group.lag", "{record}",
              "High watermark minus committed offset, per group and partition hosted here.", self._group_lag)
        # producers and transactions
        updown("cormorant.producer.active", "{producer}", "Producer ids with idempotence state on this node.",
               value(lambda: _read_count(m.active_producers_source)))
        counter("cormorant.producer.ids_allocated", "{producer}", "Producer ids handed out by InitProducerId.",
                value(lambda: m.producer_ids_allocated))
        counter("cormorant.producer.duplicate_batches", "{batch}",
                "Batches an idempotent producer re-sent that were already in the log.",
                value(lambda: m.duplicate_batches))
        updown("cormorant.transaction.open", "{transaction}", "Ongoing transactions this node coordinates.",
               value(lambda: _read_count(m.open_transactions_source)))
        counter("cormorant.transaction.completed", "{transaction}", "Finished transactions, by result.",
                by("result", lambda: [(r, m.transactions_completed[r]) for r in TRANSACTION_RESULTS]))
        # controller
        gauge("cormorant.controller.active", "1", "1 on the active controller, else 0.",
              value(lambda: 1 if self.config.is_controller and self._quorum_state.is_leader() else 0))
        gauge("cormorant.controller.raft.term", "{term}", "Raft term (epoch) of the metadata quorum.",
              value(lambda: self._quorum_state.epoch))
        gauge("cormorant.controller.metadata.offset", "{offset}", "Offset of the last metadata record applied.",
              value(lambda: self._metadata.image.offset))
        counter("cormorant.metadata.apply.errors", "{error}",
                "Committed metadata images this broker failed to apply in part (logged as metadata_publish_failed).",
                value(lambda: m.metadata_apply_errors))
        counter("cormorant.controller.heartbeats", "{heartbeat}", "Broker heartbeats handled as active controller.",
                value(lambda: m.broker_heartbeats))
        updown("cormorant.controller.brokers", "{broker}", "Registered brokers, fenced or not.",
               by("state", self._broker_states))
        share_metrics.register(meter, m.share)
        client_telemetry.register(meter, m.client_telemetry)

    # ------------------------------------------------------------ state readers

    def _led(self) -> list[Partition]:
        node_id = self.node_id
        return [p for p in self._replica_manager.partitions.values() if p.leader == node_id]

    def _per_partition(self, read: Callable[[Partition], float]) -> Callback:
        def callback(_: CallbackOptions) -> Iterable[Observation]:
            return [Observation(read(p), {"topic": p.topic, "partition": p.index})
                    for p in list(self._replica_manager.partitions.values())]

        return callback

    def _per_led_partition(self, read: Callable[[Partition], float]) -> Callback:
        return lambda _: [Observation(read(p), {"topic": p.topic, "partition": p.index}) for p in self._led()]

    def _roles(self) -> list[tuple[str, float]]:
        node_id = self.node_id
        partitions = list(self._replica_manager.partitions.values())
        leaders = sum(1 for p in partitions if p.leader == node_id)
        return [("leader", leaders), ("follower", len(partitions) - leaders)]

    def _follower_lags(self) -> Iterable[tuple[str, int, int, int]]:
        node_id = self.node_id
        for p in self._led():
            end = p.log_end_offset
            for replica in p.replicas:
                if replica != node_id:
                    follower_end = p.follower_end_offsets.get(replica, p.log_start_offset)
                    yield p.topic, p.index, replica, max(end - follower_end, 0)

    def _follower_lag(self, _: CallbackOptions) -> Iterable[Observation]:
        return [Observation(lag, {"topic": t, "partition": i, "replica": r}) for t, i, r, lag in self._follower_lags()]

    def _groups(self) -> list[GroupSample]:
        source = self.metrics.groups_source
        return [] if source is None else list(source())

    def _group_states(self) -> list[tuple[str, float]]:
        states: dict[str, float] = dict.fromkeys(GROUP_STATES, 0)
        for g in self._groups():
            states[g.state] = states.get(g.state, 0) + 1
        return list(states.items())

    def _group_lag(self, _: CallbackOptions) -> Iterable[Observation]:
        source = self.metrics.committed_offsets_source
        if source is None:
            return []
        rm = self._replica_manager
        lags: list[tuple[int, str, str, int]] = []
        for c in source():
            p = rm.get(c.topic, c.partition)
            if p is None or p.leader != self.node_id or c.offset < 0:
                continue
            lags.append((max(p.high_watermark - c.offset, 0), c.group_id, c.topic, c.partition))
        if len(lags) > MAX_LAG_SERIES:
            if not self._lag_warned:
                log.warning("group_lag_series_capped", series=len(lags), limit=MAX_LAG_SERIES)
                self._lag_warned = True
            lags = sorted(lags, reverse=True)[:MAX_LAG_SERIES]
        return [Observation(lag, {"group": g, "topic": t, "partition": i}) for lag, g, t, i in lags]

    def _broker_states(self) -> list[tuple[str, float]]:
        brokers = list(self._metadata.image.brokers.values())
        fenced = sum(1 for b in brokers if b.fenced)
        return [("unfenced", len(brokers) - fenced), ("fenced", fenced)]


def _api_name(api_key: int) -> str:
    spec = API_SPECS.get(api_key)
    return spec.name if spec is not None else str(api_key)


def _read_count(source: Callable[[], int] | None) -> int:
    return 0 if source is None else source()


def _living_tasks(_: CallbackOptions) -> list[Observation]:
    """The event loop's living tasks; nothing when collected outside it (the final OTLP export at
    shutdown runs after the loop ended)."""
    try:
        return [Observation(trio.lowlevel.current_statistics().tasks_living)]
    except RuntimeError:
        return []
