"""The cluster harnesses end the nodes they started when one node fails to start: ``with``
never reaches ``__exit__`` when ``__enter__`` raises, so a failed start would otherwise leave
broker processes running after the test."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.integration.quorum_cluster import QuorumCluster
from tests.replication.fault_cluster import FaultCluster

pytestmark = pytest.mark.timeout(120)


def hold_port(port: int) -> socket.socket:
    """A listening socket on ``port``: a broker told to listen there cannot start."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


@pytest.mark.parametrize(("harness", "blocked"), [(QuorumCluster, 2), (FaultCluster, 3)],
                         ids=["QuorumCluster", "FaultCluster"])
def test_a_failed_start_ends_the_nodes_started(tmp_path: Path, harness: type[QuorumCluster | FaultCluster],
                                               blocked: int) -> None:
    cluster = harness(tmp_path)
    with hold_port(cluster.nodes[blocked].port):
        with pytest.raises(AssertionError, match=f"node {blocked} not ready"):
            with cluster:
                pytest.fail(f"a cluster with node {blocked}'s port taken started")
    assert all(node.proc is not None for node in cluster.nodes.values())
    assert [node.node_id for node in cluster.nodes.values() if node.alive] == []
