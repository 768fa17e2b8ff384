"""A :class:`~tests.replication.fault_cluster.FaultCluster` whose nodes each run in a network
namespace of their own (:mod:`tests.replication.netns`), started with ``ip netns exec`` and
listening on their namespace address; the test process joins the clients' bridge namespace for
the cluster's lifetime, so every client (the writers, the drain, the metadata reads) reaches the
brokers over the bridge and the faults of :class:`~tests.replication.netns.Network` apply to it.

:class:`IsrMonitor` samples every broker's own view of each partition (leader, ISR) a few times a
second for the min.insync.replicas invariant of :mod:`tests.replication.fault_invariants`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

from broker.tools.client import ClientError, KafkaClient
from broker.tools.metadata import describe_image, describe_quorum
from tests.integration.quorum_cluster import Node
from tests.replication.fault_cluster import FaultCluster
from tests.replication.fault_invariants import IsrSample
from tests.replication.netns import Network, host_of


class NetnsFaultCluster(FaultCluster):
    """Each node in its own namespace; ``network`` applies the faults. Layouts: ``brokers`` combined
    nodes (3 or 5; every one a voter unless ``controllers`` says fewer), or with
    ``dedicated_controllers`` three controller-only nodes (ids 1-3) beside ``brokers`` broker-only
    ones. Use as a context manager: the namespaces are removed on exit whatever happened."""

    def __init__(self, base: Path, brokers: int = 3, dedicated_controllers: bool = False,
                 overrides: dict[str, str] | None = None, session_timeout_ms: int = 3000,
                 controllers: int | None = None) -> None:
        # Combined: every node a voter unless told otherwise (five nodes, five voters: a 2|3 split
        # leaves the minority without a quorum). Dedicated: three controller-only nodes.
        super().__init__(base, brokers, dedicated_controllers, overrides, session_timeout_ms,
                         controllers=controllers or brokers)
        self.network = Network(self.nodes)
        for node_id, node in self.nodes.items():
            node.host = host_of(node_id)
            node.exec_prefix = self.network.exec_prefix(node_id)

    def __enter__(self) -> NetnsFaultCluster:
        self.network.create()
        try:
            self.network.enter()
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        try:
            try:
                self.network.heal()
            except RuntimeError:
                pass
            super().close()
        finally:
            self.network.close()

    def active_controller(self) -> Node:
        """The node leading the metadata quorum, as a reachable broker says."""
        def ask() -> Node | None:
            for node in self.reachable_brokers():
                try:
                    with self.client(node, timeout_s=3.0) as client:
                        leader = describe_quorum(client, wait_s=2.0)["leader_id"]
                except (ClientError, OSError, AssertionError):
                    continue
                if leader in self.nodes:
                    return self.nodes[leader]
            return None

        node: Node = self.quorum.wait_for(ask, 30.0, "the active controller")
        return node


class IsrMonitor:
    """Polls each broker's metadata (its own view) every ``interval_s`` in a thread of its own."""

    def __init__(self, cluster: FaultCluster, topics: Sequence[str], interval_s: float = 0.25) -> None:
        self.cluster = cluster
        self.topics = list(topics)
        self.interval_s = interval_s
        self.samples: list[IsrSample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="isr-monitor", daemon=True)

    def start(self) -> IsrMonitor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            for node in self.cluster.reachable_brokers():
                try:
                    with KafkaClient(node.host, node.port, timeout_s=1.0) as client:
                        image = describe_image(client)
                except (ClientError, OSError, AssertionError):
                    continue
                at = time.monotonic()
                for t in image["topics"]:
                    if t["name"] in self.topics:
                        for p in t["partitions"]:
                            self.samples.append(IsrSample(at, node.node_id, t["name"], p["partition"],
                                                          p["leader"], tuple(p["isr"])))
            self._stop.wait(self.interval_s)
