"""The console's pure parts: metrics arithmetic, client properties, record views, charts, rules."""

from __future__ import annotations

import ast
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from broker.console.app import _hostname
from broker.console.auth import Authenticator, hash_password, is_loopback, verify_password
from broker.console.charts import line_chart
from broker.console.kafka import ConsoleConfigError, load_client_properties
from broker.console.messages import SHOW_BYTES, View, show
from broker.console.metrics_source import MetricsScraper, parse_sample, percentile_ms
from broker.console.snapshot import History, PartitionView
from tests.shared import ROOT

SCRAPE = """\
# TYPE cormorant_produce_records_total counter
cormorant_produce_records_total 100
# TYPE cormorant_produce_bytes_total counter
cormorant_produce_bytes_total 5000
# TYPE cormorant_fetch_bytes_total counter
cormorant_fetch_bytes_total 8000
# TYPE cormorant_request_duration_seconds histogram
cormorant_request_duration_seconds_bucket{api="Produce",le="0.001"} 90
cormorant_request_duration_seconds_bucket{api="Produce",le="0.01"} 99
cormorant_request_duration_seconds_bucket{api="Produce",le="+Inf"} 100
cormorant_request_duration_seconds_sum{api="Produce"} 0.2
cormorant_request_duration_seconds_count{api="Produce"} 100
cormorant_request_duration_seconds_bucket{api="Fetch",le="0.001"} 0
cormorant_request_duration_seconds_bucket{api="Fetch",le="0.01"} 0
cormorant_request_duration_seconds_bucket{api="Fetch",le="+Inf"} 0
cormorant_request_duration_seconds_sum{api="Fetch"} 0
cormorant_request_duration_seconds_count{api="Fetch"} 0
"""


def test_metrics_sample_sums_every_api() -> None:
    sample = parse_sample(SCRAPE)
    assert (sample.produce_records, sample.produce_bytes, sample.fetch_bytes) == (100, 5000, 8000)
    assert sample.duration_count == 100 and sample.duration_sum == pytest.approx(0.2)
    assert sample.buckets == ((0.001, 90), (0.01, 99), (float("inf"), 100))


def test_p99_is_the_bucket_bound_of_the_interval() -> None:
    before = parse_sample(SCRAPE)
    # 100 more requests: 50 under 1 ms, 49 under 10 ms, 1 slower.
    after = parse_sample(SCRAPE.replace('le="0.001"} 90', 'le="0.001"} 140')
                         .replace('le="0.01"} 99', 'le="0.01"} 198')
                         .replace('api="Produce",le="+Inf"} 100', 'api="Produce",le="+Inf"} 200'))
    assert percentile_ms(before, after, 0.99) == pytest.approx(10.0)
    assert percentile_ms(before, after, 0.5) == pytest.approx(1.0)
    assert percentile_ms(before, before, 0.99) is None


def test_scraper_reports_rates_from_the_second_scrape() -> None:
    body = [SCRAPE]

    class Endpoint(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = body[0].encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        scraper = MetricsScraper([f"http://127.0.0.1:{server.server_address[1]}/metrics"])
        first = scraper.scrape(10_000)
        assert first.intervals == 0 and first.endpoints_up == 1
        body[0] = SCRAPE.replace("records_total 100", "records_total 300")
        second = scraper.scrape(12_000)
        assert second.intervals == 1 and second.produce_records_per_s == pytest.approx(100.0)
        assert second.request_latency_mean_ms is None  # no request in between
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_unreachable_metrics_endpoint_counts_as_down() -> None:
    view = MetricsScraper(["http://127.0.0.1:1/metrics"]).scrape(1)
    assert view.endpoints_up == 0 and view.endpoints == 1


def test_client_properties(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("# comment\nclient.id = ops-console\nrequest.timeout.ms: 2500\nsecurity.protocol=PLAINTEXT\n")
    settings = load_client_properties(path)
    assert settings.client_id == "ops-console" and settings.request_timeout_s == 2.5
    path.write_text("bogus.setting=1\n")
    with pytest.raises(ConsoleConfigError, match=r"bogus\.setting"):
        load_client_properties(path)
    path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
                    'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required '
                    'username="ops" password="pw";\n')
    security = load_client_properties(path).security
    assert (security.protocol, security.mechanism, security.username, security.password) == (
        "SASL_PLAINTEXT", "SCRAM-SHA-512", "ops", "pw")
    path.write_text("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n")
    with pytest.raises(ConsoleConfigError, match=r"sasl\.mechanism"):
        load_client_properties(path)
    path.write_text("request.timeout.ms=0\n")
    with pytest.raises(ConsoleConfigError):
        load_client_properties(path)


def test_record_views() -> None:
    assert show(None, View.TEXT) is None
    pretty = show(b'{"a": [1, 2]}', View.AUTO)
    assert pretty is not None and pretty.text == '{\n  "a": [\n    1,\n    2\n  ]\n}'
    plain = show(b"not json", View.AUTO)
    assert plain is not None and plain.text == "not json" and plain.note == ""
    marked = show(b"not json", View.JSON)
    assert marked is not None and marked.note == "not JSON"
    hexed = show(b"\x00\xffA", View.HEX)
    assert hexed is not None and hexed.text == "00 ff 41"
    big = show(b"x" * (SHOW_BYTES + 10), View.TEXT)
    assert big is not None and big.cut and big.size == SHOW_BYTES + 10 and len(big.text) == SHOW_BYTES
    broken = show(b"\xff\xfe", View.TEXT)
    assert broken is not None and broken.text == "\ufffd\ufffd"


def test_passwords_are_salted_and_checked() -> None:
    one, two = hash_password("a long password"), hash_password("a long password")
    assert one != two
    assert verify_password("a long password", one) and not verify_password("another", one)
    assert not verify_password("x", "garbage")
    auth = Authenticator({"alice": one})
    assert auth.check("alice", "a long password")
    assert not auth.check("bob", "a long password")


def test_host_header_names() -> None:
    assert [_hostname(h) for h in ("127.0.0.1:9021", "localhost", "[::1]:9021", "[::1]", "evil.example:80")] == [
        "127.0.0.1", "localhost", "::1", "::1", "evil.example"]


def test_loopback() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3") and not is_loopback("example.org")


def test_partition_health() -> None:
    healthy = PartitionView("t", 0, 1, 0, (1, 2, 3), (1, 2, 3), (), 0, 10, 100, 2)
    assert not (healthy.under_replicated or healthy.offline or healthy.under_min_isr)
    shrunk = PartitionView("t", 0, 1, 0, (1, 2, 3), (1,), (), 0, 10, 100, 2)
    assert shrunk.under_replicated and shrunk.under_min_isr
    # A replica on a broker gone from the metadata counts before the ISR shrinks.
    gone = PartitionView("t", 0, 1, 0, (1, 2, 3), (1, 2, 3), (), 0, 10, 100, 3, missing_replicas=(3,))
    assert gone.under_replicated and gone.under_min_isr
    leaderless = PartitionView("t", 0, -1, 0, (1,), (), (), None, None, None, 1)
    assert leaderless.offline and leaderless.records is None


def test_history_keeps_the_newest_points_and_drops_gone_subjects() -> None:
    history = History(points=3)
    for i in range(5):
        history.add("lag:a", i, float(i))
    history.add("lag:b", 0, 1.0)
    assert history.get("lag:a") == [(2, 2.0), (3, 3.0), (4, 4.0)]
    history.keep_only("lag:", {"a"})
    assert history.get("lag:b") == []


def test_chart_escapes_and_waits_for_two_points() -> None:
    assert "waiting for data" in line_chart([(0, 1.0)], "lag <b>")
    svg = line_chart([(0, 0.0), (1000, 5.0)], "lag <b>", " ms")
    assert "lag &lt;b&gt;" in svg and "<polyline" in svg and "5 ms" in svg


ALLOWED = ("broker.console", "broker.tools.client", "broker.security.client_config", "broker.observability.logging_setup", "wire")


def test_console_is_a_client_and_imports_no_broker_internals() -> None:
    bad = []
    for path in (ROOT / "broker" / "console").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            for name in names:
                if name.split(".")[0] in ("broker", "controller", "wire") and not name.startswith(ALLOWED):
                    bad.append(f"{path.name}: {name}")
    assert bad == []
