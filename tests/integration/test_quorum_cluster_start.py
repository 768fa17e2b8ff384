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


def test_quorum_cluster_ends_started_nodes_when_one_fails(tmp_path: Path) -> None:
    cluster = QuorumCluster(tmp_path)
    with hold_port(cluster.nodes[2].port):
        with pytest.raises(AssertionError, match="node 2 not ready"):
            with cluster:
                pytest.fail("a cluster with node 2's port taken started")
    assert all(node.proc is not None for node in cluster.nodes.values())
    assert [node.node_id for node in cluster.nodes.values() if node.alive] == []


def test_fault_cluster_ends_started_nodes_when_one_fails(tmp_path: Path) -> None:
    cluster = FaultCluster(tmp_path)
    with hold_port(cluster.nodes[3].port):
        with pytest.raises(AssertionError, match="node 3 not ready"):
            with cluster:
                pytest.fail("a cluster with node 3's port taken started")
    assert all(node.proc is not None for node in cluster.nodes.values())
    assert [node.node_id for node in cluster.nodes.values() if node.alive] == []
