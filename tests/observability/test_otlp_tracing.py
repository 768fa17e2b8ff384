"""OTLP export end to end: a broker with tracing on sends spans and metrics to a small
OTLP/HTTP receiver; a produced record's traceparent becomes a span link, a compressed
batch is not looked into."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from broker.tools.client import KafkaClient
from tests.observability.helpers import MetricsBroker
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.generated.api_000_produce import (
    ProduceRequest,
    ProduceRequestPartitionProduceData,
    ProduceRequestTopicProduceData,
    ProduceResponse,
)
from wire.generated.api_003_metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from wire.records import Compression, NewRecord

trace_pb2 = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
metrics_pb2 = pytest.importorskip("opentelemetry.proto.collector.metrics.v1.metrics_service_pb2")

TIMEOUT_S = 20.0
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"


class Receiver:
    """Collects OTLP/HTTP protobuf posts by path."""

    def __init__(self) -> None:
        self.posts: dict[str, list[bytes]] = {}
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver.lock:
                    receiver.posts.setdefault(self.path, []).append(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def bodies(self, path: str) -> list[bytes]:
        with self.lock:
            return list(self.posts.get(path, []))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    try:
        yield r
    finally:
        r.close()


def spans(receiver: Receiver) -> list[object]:
    out = []
    for body in receiver.bodies("/v1/traces"):
        request = trace_pb2.ExportTraceServiceRequest.FromString(body)
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                out.extend(ss.spans)
    return out


def metric_names(receiver: Receiver) -> set[str]:
    names = set()
    for body in receiver.bodies("/v1/metrics"):
        request = metrics_pb2.ExportMetricsServiceRequest.FromString(body)
        for rm in request.resource_metrics:
            for sm in rm.scope_metrics:
                names.update(m.name for m in sm.metrics)
    return names


def attributes(span: object) -> dict[str, object]:
    out: dict[str, object] = {}
    for kv in span.attributes:  # type: ignore[attr-defined]
        v = kv.value
        out[kv.key] = v.string_value if v.HasField("string_value") else v.int_value
    return out


def produce(client: KafkaClient, topic: str, compression: Compression) -> None:
    header = [("traceparent", f"00-{TRACE_ID}-{SPAN_ID}-01".encode())]
    batch = build_batch([NewRecord(key=None, value=b"v", headers=header)] * 3, compression=compression)
    request = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequestTopicProduceData(
        name=topic, partition_data=[ProduceRequestPartitionProduceData(index=0, records=batch)])])
    response = client.send(request, ProduceResponse)
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.NONE


def wait_for(predicate: object, what: str) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_produce_spans_link_to_traceparent_and_metrics_export(tmp_path: Path, receiver: Receiver) -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_METRIC_EXPORT_INTERVAL": "300",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    broker = MetricsBroker(tmp_path / "data", {"tracing.sampling.ratio": "1.0"}, env=env).start()
    try:
        with KafkaClient.connect(broker.bootstrap, timeout_s=TIMEOUT_S) as client:
            client.send(MetadataRequest(topics=[MetadataRequestTopic(name="traced")]), MetadataResponse)  # creates it
            produce(client, "traced", Compression.NONE)
            produce(client, "traced", Compression.GZIP)
        wait_for(lambda: sum(1 for s in spans(receiver) if s.name == "append traced") >= 2, "two append spans")
        wait_for(lambda: "cormorant.request.duration" in metric_names(receiver), "an OTLP metrics export")
    finally:
        assert broker.stop() == 0

    appends = [s for s in spans(receiver) if s.name == "append traced"]
    linked = [s for s in appends if s.links]
    assert len(linked) == 1, "only the uncompressed batch is looked into"
    (link,) = linked[0].links
    assert link.trace_id.hex() == TRACE_ID and link.span_id.hex() == SPAN_ID
    attrs = attributes(linked[0])
    assert attrs["messaging.system"] == "kafka"
    assert attrs["messaging.destination.name"] == "traced"
    assert attrs["messaging.destination.partition.id"] == "0"
    assert attrs["messaging.batch.message_count"] == 3
    (unlinked,) = [s for s in appends if not s.links]
    assert attributes(unlinked)["cormorant.compressed_batches_not_inspected"] == 1
    produce_spans = [s for s in spans(receiver) if s.name == "Produce traced"]
    assert len(produce_spans) == 2
    assert attributes(produce_spans[0])["messaging.operation.type"] == "send"
    assert all(a.parent_span_id in {p.span_id for p in produce_spans} for a in appends)
    names = metric_names(receiver)
    assert {"cormorant.produce.records", "cormorant.log.end_offset", "cormorant.network.io"} <= names, (
        sorted(names), broker.logs()[-3000:])


def test_tracing_needs_an_exporter(tmp_path: Path) -> None:
    broker = MetricsBroker(tmp_path / "data", {"tracing.sampling.ratio": "0.5"},
                           env={"OTEL_EXPORTER_OTLP_ENDPOINT": "", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ""}).start()
    try:
        assert any(e.get("event") == "tracing_without_exporter" for e in broker.log_events())
    finally:
        assert broker.stop() == 0
