"""The pieces of observability that need no broker: buckets, error walks, log limits,
traceparent parsing, and docs/metrics.md against the instruments the code registers."""

from __future__ import annotations

import re

import structlog

from broker.observability.metrics import Histogram
from broker.observability.tracing import parse_traceparent, traceparents
from broker.server.response_errors import (
    LOG_BURST,
    BrokerErrorLog,
    error_code_counts,
    error_codes,
    where,
)
from broker.tools.top import parse, render
from tests.observability.helpers import metric_dictionary
from tests.shared import ROOT
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.generated.api_000_produce import (
    ProduceResponse,
    ProduceResponsePartitionProduceResponse,
    ProduceResponseTopicProduceResponse,
)
from wire.generated.api_018_api_versions import ApiVersionsResponse
from wire.records import Compression, NewRecord, iter_batch_headers

TRACEPARENT = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_histogram_buckets_follow_opentelemetry() -> None:
    h = Histogram((1.0, 2.0))
    for v in (0.5, 1.0, 1.5, 2.0, 3.0):
        h.record(v)
    assert h.counts == [2, 2, 1]  # (-inf, 1], (1, 2], (2, +inf)
    assert (h.count, h.sum, h.min, h.max) == (5, 8.0, 0.5, 3.0)


def produce_response(*codes: int) -> ProduceResponse:
    parts = [ProduceResponsePartitionProduceResponse(index=i, error_code=c) for i, c in enumerate(codes)]
    return ProduceResponse(responses=[ProduceResponseTopicProduceResponse(name="orders", partition_responses=parts)])


def test_error_codes_are_found_wherever_the_schema_puts_them() -> None:
    response = produce_response(0, ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS)
    assert error_codes(response) == [ErrorCode.NOT_ENOUGH_REPLICAS] * 2
    assert where(response, ErrorCode.NOT_ENOUGH_REPLICAS) == ["orders-1", "orders-2"]
    assert error_codes(ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION)) == [35]
    assert error_codes(produce_response(0, 0)) == []


def test_broker_side_errors_are_logged_once_and_limited() -> None:
    now = [100.0]
    errors = BrokerErrorLog(clock=lambda: now[0])
    response = produce_response(ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    codes = error_code_counts(response)
    with structlog.testing.capture_logs() as logs:
        for _ in range(LOG_BURST + 5):
            errors.report("Produce", 0, 9, "app", "127.0.0.1:5000", object(), response, codes)
        now[0] += 1.5
        errors.report("Produce", 0, 9, "app", "127.0.0.1:5000", object(), response, codes)
        errors.report("Produce", 0, 9, "app", "127.0.0.1:5000", object(), response, codes,
                      skip=ErrorCode.KAFKA_STORAGE_ERROR)
    assert [e["event"] for e in logs] == ["broker_error_returned"] * (LOG_BURST + 1)
    assert {e["error"] for e in logs} == {"KAFKA_STORAGE_ERROR"}  # a client-side code is not logged
    assert logs[0]["where"] == ["orders-0"] and logs[0]["log_level"] == "error"
    assert logs[-1]["suppressed"] == 5


def test_traceparent_parsing() -> None:
    assert parse_traceparent(TRACEPARENT) == (0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7, 1)
    for bad in (b"", None, b"garbage", TRACEPARENT.replace(b"4bf9", b"XXXX"),
                b"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"):
        assert parse_traceparent(bad) is None


def test_traceparents_are_read_from_uncompressed_batches_only() -> None:
    record = NewRecord(key=None, value=b"v", headers=[("traceparent", TRACEPARENT), ("other", b"x")])
    data = build_batch([record, record]) + build_batch([record], compression=Compression.GZIP)
    found, compressed = traceparents(data, list(iter_batch_headers(data)))
    assert len(found) == 1 and compressed == 1


def prometheus_name(name: str, unit: str, kind: str) -> str:
    from opentelemetry.exporter.prometheus._mapping import map_unit, sanitize_full_name

    base = sanitize_full_name(name)
    suffix = map_unit(unit)
    if suffix and not base.endswith("_" + suffix):
        base += "_" + suffix
    return base + "_total" if kind == "Counter" else base


def test_documented_prometheus_names_follow_the_exporter() -> None:
    for doc in metric_dictionary():
        assert doc.prometheus == prometheus_name(doc.name, doc.unit, doc.kind), doc.name


def test_dictionary_matches_the_registered_instruments() -> None:
    source = "".join((ROOT / "broker" / module).read_text()
                     for module in ("observability/telemetry.py", "observability/share_metrics.py",
                                    "telemetry/export.py"))
    kinds = {"counter": "Counter", "updown": "UpDownCounter", "gauge": "Gauge", "HistogramSpec": "Histogram",
             "histogram": "Histogram"}
    registered = {
        name: (kinds[fn], unit)
        for fn, name, unit in re.findall(
            r'\b(counter|updown|gauge|HistogramSpec|histogram)\("(cormorant\.[^"]+)", "([^"]*)"', source)
    }
    documented = {d.name: (d.kind, d.unit) for d in metric_dictionary()}
    assert registered == documented
    assert all(re.fullmatch(r"cormorant\.[a-z]+(\.[a-z_]+)+", name) for name in documented)


def test_top_renders_lag_and_groups() -> None:
    text = """\
target_info{service_instance_id="3",cormorant_node_id="3",cormorant_cluster_id="abc"} 1
cormorant_request_duration_seconds_count{api="Produce"} %(n)s
cormorant_request_duration_seconds_sum{api="Produce"} %(s)s
cormorant_network_io_bytes_total{direction="receive"} %(b)s
cormorant_replication_isr_size{topic="orders",partition="0"} 1
cormorant_replication_follower_lag{topic="orders",partition="0",replica="2"} 42
cormorant_group_lag{group="billing",topic="orders",partition="0"} 7
cormorant_request_errors_total{api="Produce",error="NOT_ENOUGH_REPLICAS"} %(e)s
"""
    prev = parse(text % {"n": 10, "s": 0.01, "b": 1000, "e": 1}, at=0.0)
    cur = parse(text % {"n": 30, "s": 0.03, "b": 3000, "e": 3}, at=2.0)
    frame = "\n".join(render(prev, cur, "http://x/metrics"))
    assert "node 3" in frame and "cluster abc" in frame
    assert re.search(r"Produce\s+10\.0\s+1\.00\s+30", frame)
    assert "in 1.0 kB/s" in frame
    assert re.search(r"orders-0\s+1/2\s+42", frame)
    assert re.search(r"billing\s+1\s+7", frame)
    assert "NOT_ENOUGH_REPLICAS" in frame


def test_the_emitting_api_is_callable() -> None:
    from broker.observability.metrics import (
        BrokerMetrics,
        CommittedOffset,
        DisabledMetrics,
        GroupSample,
    )

    for metrics in (BrokerMetrics(), DisabledMetrics()):
        metrics.group_rebalance(0.2)
        metrics.offset_commit(3)
        metrics.watch_groups(lambda: [GroupSample("g", "Stable", 2)], lambda: [CommittedOffset("g", "t", 0, 5)])
        metrics.producer_id_allocated()
        metrics.duplicate_batch()
        metrics.watch_producers(lambda: 4)
        metrics.transaction_ended(True, 0.5)
        metrics.transaction_ended(False, timed_out=True)
        metrics.watch_transactions(lambda: 1)
        metrics.compaction_finished(1.5, 1000)
        metrics.broker_heartbeat()
        metrics.metadata_committed(0.01)
        metrics.isr_changed(shrunk=True)
        metrics.connection_callback("PLAINTEXT")(1)
        metrics.request_started()
        metrics.record_request(0, 0.001)
        assert metrics.requests_in_flight() == 0
    m = BrokerMetrics()
    m.group_rebalance(0.2)
    m.transaction_ended(False, 2.0, timed_out=True)
    assert (m.group_rebalances, m.group_rebalance_duration.count) == (1, 1)
    assert m.transactions_completed["timeout"] == 1 and m.transaction_duration.sum == 2.0
