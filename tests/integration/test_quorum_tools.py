"""``cormorant cluster up/down`` and ``cormorant metadata quorum/image``, end to end: four
nodes (three controllers and a broker-only node that follows the log over Fetch)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from broker.tools.cluster import PID_FILE, read_pid
from tests.integration.quorum_cluster import topics_summary
from tests.shared import ROOT

pytestmark = pytest.mark.timeout(300)


def cormorant(*args: str, timeout_s: float = 90.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "broker", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout_s)


def kill_all(root: Path) -> None:
    for pid_file in root.glob(f"node-*/{PID_FILE}"):
        pid = read_pid(pid_file)
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def wait_json(args: list[str], accept: object, timeout_s: float = 20.0) -> dict[str, object]:
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        result = cormorant(*args)
        if result.returncode == 0:
            last = json.loads(result.stdout)
            if accept(last):  # type: ignore[operator]
                return last
        else:
            last = result.stderr
        time.sleep(0.3)
    raise AssertionError(f"{args}: {last}")


def metrics_of(node_dir: Path) -> str:
    """The node's metrics URL, from its ready line."""
    ready = (node_dir / "stdout.log").read_text()
    return ready.split(" metrics=")[1].split()[0]


def wait_metric(url: str, name: str, timeout_s: float = 20.0) -> float:
    """The sum of ``name``'s samples, once above zero (or whatever it is at the deadline)."""
    deadline = time.monotonic() + timeout_s
    total = 0.0
    while time.monotonic() < deadline:
        with urllib.request.urlopen(url, timeout=5) as reply:
            text = reply.read().decode()
        total = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                    if line.startswith(name) and (line[len(name):][:1] in (" ", "{")))
        if total > 0:
            break
        time.sleep(0.3)
    return total


def test_cluster_up_metadata_tools_and_down(tmp_path: Path) -> None:
    root = tmp_path / "cluster"
    try:
        up = cormorant("cluster", "up", "--nodes", "4", "--controllers", "3", "--dir", str(root),
                       "--override", "broker.session.timeout.ms=3000", "--override", "log.format=json")
        assert up.returncode == 0, up.stderr
        bootstrap = up.stdout.split("bootstrap.servers=")[1].strip().split(",")
        assert len(bootstrap) == 4
        props = (root / "node-4" / "server.properties").read_text()
        assert "process.roles=broker\n" in props and "CONTROLLER://" not in props.split("listeners=")[1]
        broker_only = bootstrap[3]

        created = cormorant("topics", "--bootstrap-server", broker_only, "create", "orders",
                            "--partitions", "4", "--replication-factor", "3")
        assert created.returncode == 0, created.stderr

        quorum = wait_json(["metadata", "--bootstrap-server", broker_only, "--json", "quorum"],
                           lambda q: 4 in [o["node_id"] for o in q["observers"]])  # type: ignore[index]
        assert [v["node_id"] for v in quorum["voters"]] == [1, 2, 3]  # type: ignore[union-attr]
        assert quorum["leader_id"] in (1, 2, 3) and quorum["leader_epoch"] >= 1
        # The active controller counts the heartbeats it handles and times its commits.
        leader_metrics = metrics_of(root / f"node-{quorum['leader_id']}")
        assert wait_metric(leader_metrics, "cormorant_controller_heartbeats_total") > 0
        assert wait_metric(leader_metrics, "cormorant_controller_commit_duration_seconds_count") > 0
        text = cormorant("metadata", "--bootstrap-server", bootstrap[0], "quorum")
        assert "LeaderId:" in text.stdout and "Lag" in text.stdout

        images = [wait_json(["metadata", "--bootstrap-server", b, "--json", "image"],
                            lambda i: len(i["brokers"]) == 4 and i["topics"]) for b in bootstrap]  # type: ignore[index]
        assert all(i["topics"] == images[0]["topics"] for i in images)
        orders = images[0]["topics"][0]  # type: ignore[index]
        assert orders["name"] == "orders" and len(orders["partitions"]) == 4
        shown = cormorant("metadata", "--bootstrap-server", broker_only, "image")
        assert f"TopicId: {orders['topic_id']}" in shown.stdout

        # A broker-only node killed and restarted by `cluster up` fetches the log again.
        pid = read_pid(root / "node-4" / PID_FILE)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        again = cormorant("cluster", "up", "--dir", str(root))
        assert again.returncode == 0, again.stderr
        image = wait_json(["metadata", "--bootstrap-server", broker_only, "--json", "image"],
                          lambda i: len(i["brokers"]) == 4)
        # Same topic, id and replicas after the restart; every partition still has a leader.
        assert topics_summary(image) == topics_summary(images[0])
        assert all(p["leader"] in (1, 2, 3, 4) for p in image["topics"][0]["partitions"])  # type: ignore[index]

        status = cormorant("cluster", "status", "--dir", str(root))
        assert status.stdout.count("running") == 4
        # Each node has a metrics endpoint of its own, and top checks it against its broker.
        urls = [line.split(" metrics=")[1] for line in status.stdout.splitlines()]
        assert len(set(urls)) == 4
        assert cormorant("top", "--once", "--interval", "0.1", "--metrics-url", urls[0],
                         "--bootstrap-server", bootstrap[0]).returncode == 0
        assert cormorant("top", "--once", "--interval", "0.1", "--metrics-url", urls[0],
                         "--bootstrap-server", bootstrap[1]).returncode == 1
        down = cormorant("cluster", "down", "--dir", str(root))
        assert down.returncode == 0
        assert not list(root.glob(f"node-*/{PID_FILE}"))
    finally:
        kill_all(root)
