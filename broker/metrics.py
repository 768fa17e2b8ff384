"""The broker's own counters, kept cheap on the hot path.

The OpenTelemetry instruments named in docs/metrics.md read from here.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass(slots=True)
class BrokerMetrics:
    connections: int = 0
    in_flight: int = 0
    requests: Counter[int] = field(default_factory=Counter)
    request_seconds: Counter[int] = field(default_factory=Counter)
    produced_records: int = 0
    produced_bytes: int = 0
    fetched_bytes: int = 0

    def connection_change(self, delta: int) -> None:
        self.connections += delta

    def request_started(self) -> None:
        self.in_flight += 1

    def record_request(self, api_key: int, seconds: float) -> None:
        self.in_flight -= 1
        self.requests[api_key] += 1
        self.request_seconds[api_key] += seconds

    def requests_in_flight(self) -> int:
        return self.in_flight

    def record_produce(self, records: int, size: int) -> None:
        self.produced_records += records
        self.produced_bytes += size

    def record_fetch(self, size: int) -> None:
        self.fetched_bytes += size
