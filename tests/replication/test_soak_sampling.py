"""The soak reads each broker process's task count from the metrics URL of that process's own ready
line: a restarted node's new process never gets its predecessor's URL (another port by then)."""

from __future__ import annotations

from pathlib import Path

from tests.integration.quorum_cluster import QuorumCluster
from tests.replication.soak import MetricsUrls

READY = "cormorant ready listeners=PLAINTEXT://127.0.0.1:{port} node_id=1 cluster_id=c metrics=http://127.0.0.1:{metrics}/metrics\n"


def test_each_process_gets_the_url_of_its_own_ready_line(tmp_path: Path) -> None:
    node = QuorumCluster(tmp_path, nodes=1, controllers=1).nodes[1]  # not started: only its files are read
    urls = MetricsUrls()
    node.out_path.write_text("starting\n" + READY.format(port=9092, metrics=40001))
    assert urls.url(node, pid=100) == "http://127.0.0.1:40001/metrics"
    assert urls.url(node, pid=100) == "http://127.0.0.1:40001/metrics"

    # Restarted: the new process has not printed its ready line yet.
    with node.out_path.open("a") as out:
        out.write("starting again\ncormorant ready listeners=PLAINT")
    assert urls.url(node, pid=200) is None
    with node.out_path.open("a") as out:
        out.write("EXT://127.0.0.1:9092 node_id=1 cluster_id=c metrics=http://127.0.0.1:40002/metrics\n")
    assert urls.url(node, pid=200) == "http://127.0.0.1:40002/metrics"

    # A third process, then a ready line without a metrics endpoint (metrics disabled).
    with node.out_path.open("a") as out:
        out.write("cormorant ready listeners=PLAINTEXT://127.0.0.1:9092 node_id=1 cluster_id=c\n")
    assert urls.url(node, pid=300) is None
