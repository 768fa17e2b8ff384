"""Rates and request latency from Cormorant's Prometheus endpoints (``--metrics-url``, one per broker).

Counters are differenced between two scrapes; latency comes from the
``cormorant_request_duration_seconds`` histogram's increase over the interval:
its mean (sum / count) and its 99th percentile (the upper bound of the bucket
the 99th request fell in), over every API. Names are those of docs/metrics.md.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from broker.console.snapshot import MetricsView

SCRAPE_TIMEOUT_S = 2.0
PRODUCE_RECORDS = "cormorant_produce_records"
PRODUCE_BYTES = "cormorant_produce_bytes"
FETCH_BYTES = "cormorant_fetch_bytes"
REQUEST_DURATION = "cormorant_request_duration_seconds"


@dataclass(frozen=True, slots=True)
class Sample:
    """The totals of one scrape of one endpoint."""

    produce_records: float = 0.0
    produce_bytes: float = 0.0
    fetch_bytes: float = 0.0
    duration_sum: float = 0.0
    duration_count: float = 0.0
    #: Cumulative count per bucket upper bound (seconds), over every API.
    buckets: tuple[tuple[float, float], ...] = ()


def parse_sample(text: str) -> Sample:
    totals = {PRODUCE_RECORDS: 0.0, PRODUCE_BYTES: 0.0, FETCH_BYTES: 0.0}
    duration_sum = duration_count = 0.0
    buckets: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if family.name in totals and s.name.endswith("_total"):
                totals[family.name] += s.value
            elif family.name == REQUEST_DURATION:
                if s.name.endswith("_sum"):
                    duration_sum += s.value
                elif s.name.endswith("_count"):
                    duration_count += s.value
                elif s.name.endswith("_bucket"):
                    bound = float(s.labels.get("le", "+Inf"))
                    buckets[bound] = buckets.get(bound, 0.0) + s.value
    return Sample(totals[PRODUCE_RECORDS], totals[PRODUCE_BYTES], totals[FETCH_BYTES], duration_sum,
                  duration_count, tuple(sorted(buckets.items())))


def percentile_ms(before: Sample, after: Sample, quantile: float) -> float | None:
    """The upper bound of the bucket holding the ``quantile`` request of the interval."""
    earlier = dict(before.buckets)
    increases = [(bound, count - earlier.get(bound, 0.0)) for bound, count in after.buckets]
    total = increases[-1][1] if increases else 0.0
    if total <= 0:
        return None
    for bound, count in increases:
        if count >= quantile * total:
            return bound * 1000 if bound != float("inf") else None
    return None


@dataclass(slots=True)
class MetricsScraper:
    urls: list[str]
    _previous: dict[str, tuple[int, Sample]] = field(default_factory=dict)

    def _fetch(self, url: str) -> Sample | None:
        try:
            with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as response:
                return parse_sample(response.read().decode("utf-8", "replace"))
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def scrape(self, now_ms: int) -> MetricsView:
        produce_records = produce_bytes = fetch_bytes = 0.0
        duration_sum = duration_count = 0.0
        p99: list[float] = []
        up = intervals = 0
        for url in self.urls:
            sample = self._fetch(url)
            if sample is None:
                self._previous.pop(url, None)
                continue
            up += 1
            previous = self._previous.get(url)
            self._previous[url] = (now_ms, sample)
            if previous is None or now_ms <= previous[0]:
                continue
            intervals += 1
            seconds = (now_ms - previous[0]) / 1000
            before = previous[1]
            produce_records += max(sample.produce_records - before.produce_records, 0) / seconds
            produce_bytes += max(sample.produce_bytes - before.produce_bytes, 0) / seconds
            fetch_bytes += max(sample.fetch_bytes - before.fetch_bytes, 0) / seconds
            duration_sum += max(sample.duration_sum - before.duration_sum, 0)
            duration_count += max(sample.duration_count - before.duration_count, 0)
            worst = percentile_ms(before, sample, 0.99)
            if worst is not None:
                p99.append(worst)
        mean = duration_sum * 1000 / duration_count if duration_count else None
        return MetricsView(produce_records, produce_bytes, fetch_bytes, mean, max(p99) if p99 else None,
                           up, len(self.urls), intervals)
