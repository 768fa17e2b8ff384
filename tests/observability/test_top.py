"""`cormorant top --once` against a live broker's metrics endpoint."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from broker.tools.client import KafkaClient
from tests.observability.helpers import MetricsBroker
from tests.shared import ROOT
from wire.generated.api_003_metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse

TIMEOUT_S = 30.0


def top(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "broker", "top", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=TIMEOUT_S)


def test_top_once_prints_one_frame(tmp_path: Path) -> None:
    broker = MetricsBroker(tmp_path / "data").start()
    try:
        with KafkaClient.connect(broker.bootstrap, timeout_s=TIMEOUT_S) as client:
            client.send(MetadataRequest(topics=[MetadataRequestTopic(name="top-topic")]), MetadataResponse)
            done = top("--once", "--interval", "0.2", "--metrics-url", broker.metrics_url)
        assert done.returncode == 0, done.stderr
        frame = done.stdout
        assert "\x1b[" not in frame  # --once prints plain text
        assert "connections 1" in frame
        assert "Metadata" in frame and "ApiVersions" in frame
        assert "none of 1 led partitions" in frame
        assert "controller active term 1" in frame
        assert "log files open" in frame and "/ budget" in frame
    finally:
        assert broker.stop() == 0


def test_top_reports_an_unreachable_endpoint(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    done = top("--once", "--metrics-url", f"http://127.0.0.1:{port}/metrics")
    assert done.returncode == 1
    assert "cannot read" in done.stderr


def test_top_refuses_the_endpoint_of_another_broker(tmp_path: Path) -> None:
    """Two brokers on one host: top checks which broker an endpoint belongs to."""
    first = MetricsBroker(tmp_path / "first").start()
    second = MetricsBroker(tmp_path / "second").start()
    try:
        assert first.metrics_url != second.metrics_url
        wrong = top("--once", "--interval", "0.1", "--metrics-url", first.metrics_url,
                    "--bootstrap-server", second.bootstrap)
        assert wrong.returncode == 1, wrong.stdout
        assert wrong.stdout == ""
        [line] = wrong.stderr.strip().splitlines()
        assert line.startswith(f"cormorant top: {first.metrics_url} serves the metrics of node 1 of cluster ")
        assert f"but the broker at {second.bootstrap} is node 1 of cluster " in line
        right = top("--once", "--interval", "0.1", "--metrics-url", second.metrics_url,
                    "--bootstrap-server", second.bootstrap)
        assert right.returncode == 0, right.stderr
        assert "node 1" in right.stdout.splitlines()[0]
    finally:
        assert first.stop() == 0
        assert second.stop() == 0
