"""The fast tier of the network nemeses (nodes in network namespaces; root needed, skipped in one
line otherwise): a majority/minority split and the isolation of the active controller from the
other nodes and the clients, CORMORANT_NETNS_FAULT_SECONDS (default 90) each with idempotent acks=all writers.
Nothing acknowledged is lost or duplicated, order and offsets hold, the replicas are identical
below the high watermark, no acknowledgement came from a leader whose ISR was below
min.insync.replicas, and read_committed reads what read_uncommitted reads.

``scripts/chaos --nemesis NAME --minutes N --seed S`` runs any nemesis (and replays it from its seed).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.integration.quorum_cluster import Node
from tests.replication.nemeses import run_nemesis
from tests.replication.netns import CLIENT, NetnsUnavailable, Network
from tests.replication.netns_cluster import NetnsFaultCluster

SECONDS = float(os.environ.get("CORMORANT_NETNS_FAULT_SECONDS", "90"))
SEED = 18

pytestmark = [pytest.mark.timeout(int(SECONDS) + 300)]


@pytest.fixture(autouse=True)
def namespaces_available() -> None:
    try:
        Network.check_available()
    except NetnsUnavailable as ex:
        pytest.skip(str(ex))


@pytest.mark.parametrize("nemesis", ["majority-split", "controller-isolated"])
def test_network_nemesis_loses_and_duplicates_nothing(tmp_path: Path, nemesis: str) -> None:
    with NetnsFaultCluster(tmp_path) as cluster:
        result = run_nemesis(cluster, nemesis, SEED, SECONDS)
    print(result.summary())
    assert result.ok, f"{result.problems}\n{result.summary()}"
    assert result.faults >= 2, result.summary()
    assert result.report.acknowledged >= 500, result.summary()
    # Writes were acknowledged again after every fault healed: the last window closed.
    assert result.unavailability.max_s < 60.0, result.summary()


def test_isolating_the_active_controller_fences_no_other_broker(tmp_path: Path) -> None:
    """The brokers' heartbeats in flight to a controller that was cut off (its packets dropped, no
    reset) must not outlast the new controller's session for them: the new controller fences only
    the node that is gone. (Found by controller-isolated, seed 18: each heartbeat attempt waited
    5 s on the old controller, the new one expired every session after 3 s, fenced all three
    brokers, and every partition was offline until the cut healed.)"""
    with NetnsFaultCluster(tmp_path) as cluster:
        cluster.create_topic("fence", 3)
        old = cluster.active_controller()
        others = [n for n in cluster.nodes if n != old.node_id]
        cluster.network.isolate(old.node_id, [*others, CLIENT])

        def successor() -> Node | None:
            node = cluster.active_controller()
            return node if node.node_id != old.node_id else None

        new: Node = cluster.quorum.wait_for(successor, 30.0, "a new active controller")
        time.sleep(cluster.quorum.session_timeout_ms / 1000 * 2)  # two session timeouts under the new controller
        fenced = {int(e["broker_id"]) for e in new.events("broker_fenced") if e.get("reason") == "session expired"}
        cluster.network.heal()
        assert fenced == {old.node_id}, f"node {new.node_id} fenced {sorted(fenced)}; only {old.node_id} was cut off"
        cluster.wait_in_sync(["fence"], 60.0)
