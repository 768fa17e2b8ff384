"""The metrics clients push (OTLP ``MetricsData``), kept as the last value of each series and
exported through the broker's OpenTelemetry pipeline (docs/metrics.md, "Client telemetry").

A series is one gauge or sum data point of one client metric: its name becomes the
``metric_name`` attribute, next to the data point's own attributes and the client's
``client_instance_id``, ``client_id``, ``client_software_name`` and ``client_software_version``.
Sums arrive as deltas (GetTelemetrySubscriptions asks for delta temporality, as Kafka does):
the exported value is the last push's. Histograms, summaries and non-finite values (an average over an empty window is NaN) are not
exported. At most
``MAX_SERIES`` series are kept; data points past that are dropped and counted. A client
instance's series go when the instance leaves the cache.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from google.protobuf.message import DecodeError
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData, NumberDataPoint

from broker.telemetry.manager import ClientMetricsManager
from wire.compression import decompress
from wire.exceptions import CorruptRecordError

if TYPE_CHECKING:
    from broker.observability.collection import ObservableMeter

#: Most series of client metrics kept at once (every client together).
MAX_SERIES = 10_000
#: A compressed push may decompress to at most this many times ``telemetry.max.bytes``.
DECOMPRESSED_LIMIT_FACTOR = 4

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]
DataPoint = tuple[str, tuple[tuple[str, str], ...], float]


class PayloadError(ValueError):
    """A push whose metrics do not decompress or parse."""


def _text(value: AnyValue) -> str:
    kind = value.WhichOneof("value")
    if kind is None:
        return ""
    return str(getattr(value, kind)) if kind in ("string_value", "bool_value", "int_value", "double_value") else kind


def decode(compression_type: int, payload: bytes, max_bytes: int,
           max_points: int = MAX_SERIES) -> tuple[list[DataPoint], int]:
    """The gauge and sum data points of an OTLP ``MetricsData`` push (runs in any thread): at
    most ``max_points`` of them (more could not all be kept, and recording them runs on the event
    loop), and how many more there were."""
    try:
        raw = decompress(compression_type, payload, max_bytes * DECOMPRESSED_LIMIT_FACTOR)
        data = MetricsData.FromString(raw)
    except (CorruptRecordError, DecodeError, ValueError) as ex:
        raise PayloadError(str(ex)) from None
    points: list[DataPoint] = []
    skipped = 0
    for resource_metrics in data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                kind = metric.WhichOneof("data")
                if kind not in ("gauge", "sum"):
                    continue
                numbers: Iterable[NumberDataPoint] = getattr(metric, kind).data_points
                for point in numbers:
                    value = point.as_double if point.WhichOneof("value") == "as_double" else float(point.as_int)
                    if not math.isfinite(value):  # e.g. an average over an empty window: nothing to export
                        continue
                    if len(points) >= max_points:
                        skipped += 1
                        continue
                    attributes = tuple(sorted((a.key, _text(a.value)) for a in point.attributes))
                    points.append((metric.name, attributes, value))
    return points, skipped


@dataclass(slots=True)
class ClientMetricSeries:
    """Last value of each series of pushed client metrics, by client instance."""

    max_series: int = MAX_SERIES
    values: dict[SeriesKey, float] = field(default_factory=dict)
    by_instance: dict[uuid.UUID, set[SeriesKey]] = field(default_factory=dict)
    dropped: int = 0

    def record(self, instance_id: uuid.UUID, client: Mapping[str, str | None], points: Iterable[DataPoint]) -> None:
        owned = self.by_instance.setdefault(instance_id, set())
        client_attributes = tuple((k, v) for k, v in client.items() if v is not None)
        for name, attributes, value in points:
            key = (name, tuple(sorted(dict(attributes + client_attributes).items())))
            if key not in self.values and len(self.values) >= self.max_series:
                self.dropped += 1
                continue
            self.values[key] = value
            owned.add(key)

    def drop_instance(self, instance_id: uuid.UUID) -> None:
        for key in self.by_instance.pop(instance_id, ()):
            self.values.pop(key, None)

    def observations(self) -> list[Observation]:
        return [Observation(value, {"metric_name": name, **dict(attributes)})
                for (name, attributes), value in self.values.items()]


@dataclass(slots=True)
class ClientTelemetry:
    """The broker's telemetry receiver: the manager and the series it exports."""

    manager: ClientMetricsManager = field(default_factory=ClientMetricsManager)
    series: ClientMetricSeries = field(default_factory=ClientMetricSeries)
    #: The broker's clock (the handlers' ``clock_ms``), set by the node: a collection first
    #: expires idle instances, so their series go even when no client sends telemetry.
    clock_ms: Callable[[], int] | None = None

    def __post_init__(self) -> None:
        self.manager.add_removal_listener(self.series.drop_instance)

    def observations(self) -> list[Observation]:
        if self.clock_ms is not None:
            self.manager.expire(self.clock_ms())
        return self.series.observations()


Callback = Callable[[CallbackOptions], Iterable[Observation]]


def register(meter: ObservableMeter, telemetry: ClientTelemetry) -> None:
    """The client-telemetry instruments (docs/metrics.md), read at collection time."""
    stats = telemetry.manager.stats

    def value(read: Callable[[], float]) -> Callback:
        return lambda _: [Observation(read())]

    def counter(name: str, unit: str, description: str, read: Callable[[], float]) -> None:
        meter.create_observable_counter(name, [value(read)], unit=unit, description=description)

    def updown(name: str, unit: str, description: str, read: Callable[[], float]) -> None:
        meter.create_observable_up_down_counter(name, [value(read)], unit=unit, description=description)

    def gauge(name: str, unit: str, description: str, callback: Callback) -> None:
        meter.create_observable_gauge(name, [callback], unit=unit, description=description)

    gauge("cormorant.client.telemetry.value", "1", "Last value of each client metric pushed (KIP-714).",
          lambda _: telemetry.observations())
    updown("cormorant.client.telemetry.instances", "{instance}",
           "Client instances this broker keeps telemetry state for.", lambda: telemetry.manager.instance_count)
    updown("cormorant.client.telemetry.series", "{series}", "Client metric series exported.",
           lambda: len(telemetry.series.values))
    counter("cormorant.client.telemetry.unknown_subscription_requests", "{request}",
            "PushTelemetry requests with an unknown or stale subscription id.",
            lambda: stats.unknown_subscription_requests)
    counter("cormorant.client.telemetry.throttled_requests", "{request}",
            "Telemetry requests that came before their push interval allowed.", lambda: stats.throttled_requests)
    counter("cormorant.client.telemetry.exports", "{request}", "Pushes whose metrics were exported.",
            lambda: stats.exports)
    counter("cormorant.client.telemetry.export_errors", "{request}",
            "Pushes whose metrics did not decompress or parse.", lambda: stats.export_errors)
    counter("cormorant.client.telemetry.series_dropped", "{datapoint}",
            "Data points dropped because the series limit was reached.", lambda: telemetry.series.dropped)
