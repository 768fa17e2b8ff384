"""The exporters' side of OpenTelemetry: histograms that ``BrokerMetrics`` buckets on the hot
path become OpenTelemetry histogram points at collection time, merged into what the
observable instruments collected, for the Prometheus scrape and for OTLP. The instruments
themselves are registered by broker/observability/telemetry.py."""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import ObservableCounter, ObservableGauge, ObservableUpDownCounter
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    CardinalityLimits,
    HistogramDataPoint,
    Metric,
    MetricsData,
    PeriodicExportingMetricReader,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.metrics.export import Histogram as HistogramData
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from prometheus_client import CollectorRegistry

from broker.observability.metrics import Histogram

SCOPE = "cormorant"
#: Per-partition and per-group series one metric may export (OpenTelemetry's default is 2,000).
CARDINALITY_LIMIT = 100_000
#: A scrape's collection fails after this long (OpenTelemetry's default is 10 s). Aggregating
#: 120,000 series (20,000 partitions) in a worker thread of a broker waiting for a busy core
#: takes longer than that; a late scrape is better than none.
SCRAPE_COLLECT_TIMEOUT_MS = 60_000.0


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("cormorant")
    except PackageNotFoundError:
        return "0.0.0+unknown"


def _limits() -> CardinalityLimits:
    return {ObservableCounter: CARDINALITY_LIMIT, ObservableUpDownCounter: CARDINALITY_LIMIT,
            ObservableGauge: CARDINALITY_LIMIT}


# ---------------------------------------------------------------- histograms as OTel points


class HistogramSpec:
    """A histogram of docs/metrics.md whose buckets ``BrokerMetrics`` fills."""

    def __init__(
        self,
        name: str,
        unit: str,
        description: str,
        series: Callable[[], Iterable[tuple[dict[str, str], Histogram]]],
    ) -> None:
        self.name = name
        self.unit = unit
        self.description = description
        self.series = series

    def to_metric(self, start_ns: int, now_ns: int) -> Metric:
        points = []
        for attributes, h in self.series():
            points.append(HistogramDataPoint(
                attributes=attributes,
                start_time_unix_nano=start_ns,
                time_unix_nano=now_ns,
                count=h.count,
                sum=h.sum,
                bucket_counts=list(h.counts),
                explicit_bounds=list(h.bounds),
                min=h.min if h.count else 0.0,
                max=h.max if h.count else 0.0,
            ))  # fmt: skip
        data = HistogramData(data_points=points, aggregation_temporality=AggregationTemporality.CUMULATIVE)
        return Metric(name=self.name, description=self.description, unit=self.unit, data=data)


class HistogramSource:
    def __init__(self, resource: Resource, start_ns: int, specs: Sequence[HistogramSpec]) -> None:
        self.resource = resource
        self.start_ns = start_ns
        self.specs = specs
        self.scope = InstrumentationScope(SCOPE, package_version())
        #: ``metrics``: the histograms :meth:`build` returned, for a collection in a worker thread.
        self.built = threading.local()

    def build(self) -> list[Metric]:
        """The histograms now (on the Trio thread: ``BrokerMetrics`` fills them there)."""
        now = time.time_ns()
        return [s.to_metric(self.start_ns, now) for s in self.specs]

    def add_to(self, data: MetricsData) -> MetricsData:
        built: list[Metric] | None = getattr(self.built, "metrics", None)
        metrics = self.build() if built is None else built
        if not data.resource_metrics:
            scope = ScopeMetrics(scope=self.scope, metrics=metrics, schema_url="")
            return MetricsData([ResourceMetrics(resource=self.resource, scope_metrics=[scope], schema_url="")])
        first, *rest = data.resource_metrics
        # One ScopeMetrics per scope: OTLP encoders key by scope, so a second "cormorant"
        # scope would replace the instruments' one.
        scopes = list(first.scope_metrics)
        for i, existing in enumerate(scopes):
            if existing.scope.name == self.scope.name:
                scopes[i] = ScopeMetrics(scope=existing.scope, metrics=[*existing.metrics, *metrics],
                                         schema_url=existing.schema_url)
                break
        else:
            scopes.append(ScopeMetrics(scope=self.scope, metrics=metrics, schema_url=""))
        merged = ResourceMetrics(resource=first.resource, scope_metrics=scopes, schema_url=first.schema_url)
        return MetricsData([merged, *rest])


class PrometheusReader(PrometheusMetricReader):
    def __init__(self, histograms: HistogramSource, registry: CollectorRegistry) -> None:
        super().__init__(registry=registry, scope_info_enabled=False, cardinality_limits=_limits())
        self._histograms = histograms
        # The exporter's collector calls ``collect()`` with OpenTelemetry's 10 s (``collect`` is final).
        self._collector._callback = lambda: self.collect(timeout_millis=SCRAPE_COLLECT_TIMEOUT_MS)  # type: ignore[assignment]

    def _receive_metrics(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: object) -> None:
        super()._receive_metrics(self._histograms.add_to(metrics_data), timeout_millis, **kwargs)


class OtlpReader(PeriodicExportingMetricReader):
    """Collected by :meth:`broker.observability.telemetry.Telemetry._otlp_loop` on the Trio thread; exported off it."""

    def __init__(self, histograms: HistogramSource) -> None:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        super().__init__(OTLPMetricExporter(), export_interval_millis=math.inf, cardinality_limits=_limits())
        self._histograms = histograms
        self.pending: MetricsData | None = None
        interval = os.environ.get("OTEL_METRIC_EXPORT_INTERVAL", "60000")
        try:
            self.interval_s = max(float(interval), 100.0) / 1000
        except ValueError:
            self.interval_s = 60.0

    def _receive_metrics(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: object) -> None:
        self.pending = self._histograms.add_to(metrics_data)

    def export_pending(self, timeout_millis: float) -> None:
        data, self.pending = self.pending, None
        if data is not None:
            self._exporter.export(data, timeout_millis=timeout_millis)
