"""The fast tier of the network nemeses (nodes in network namespaces; root needed, skipped in one
line otherwise): a majority/minority split and the isolation of the active controller from the
other nodes and the clients, CORMORANT_NETNS_FAULT_SECONDS (default 30: with seed 18 each starts
two faults, the second after the first healed and the ISR was full again) each, with the whole
workload: librdkafka and Java idempotent acks=all writers, a transactional producer, a
read_committed consumer group. Nothing acknowledged is lost or duplicated, order and offsets hold,
the replicas are identical below the high watermark, no acknowledgement came from a leader whose
ISR was below min.insync.replicas, read_committed reads what read_uncommitted reads, the group's
committed offsets never go back nor pass the high watermark, and no aborted transaction is read.
One fault each on the other layouts: a 2|3 split of five combined nodes (five voters), and the
isolation of the active controller of three controller-only nodes beside three brokers.

``scripts/chaos --nemesis NAME --minutes N --seed S`` runs any nemesis (and replays it from its seed);
``CORMORANT_NETNS_FAULT_SECONDS=60`` runs this tier's longer form.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from tests.integration.quorum_cluster import Node
from tests.replication.fault_workloads import java_classes
from tests.replication.nemeses import NemesisResult, Workload, run_nemesis
from tests.replication.netns import CLIENT, NetnsUnavailable, Network
from tests.replication.netns_cluster import NetnsFaultCluster

SECONDS = float(os.environ.get("CORMORANT_NETNS_FAULT_SECONDS", "30"))
SEED = 18

pytestmark = [pytest.mark.timeout(int(SECONDS) + 300)]


@pytest.fixture(autouse=True)
def namespaces_available() -> None:
    try:
        Network.check_available()
    except NetnsUnavailable as ex:
        pytest.skip(str(ex))


def assert_clean(result: NemesisResult, faults: int, acknowledged: int) -> None:
    print(result.summary())
    assert result.ok, f"{result.problems}\n{result.summary()}"
    assert result.faults >= faults, result.summary()
    assert result.report.acknowledged >= acknowledged, result.summary()
    # Writes were acknowledged again after every fault healed: the last window closed.
    assert result.unavailability.max_s < 60.0, result.summary()


@pytest.mark.parametrize("nemesis", ["majority-split", "controller-isolated"])
def test_network_nemesis_loses_and_duplicates_nothing(tmp_path: Path, nemesis: str) -> None:
    try:
        java_classes()
        java = 1
    except FileNotFoundError:  # no JDK or no kafka-clients jar: the other clients still run
        java = 0
    # The consume-transform-produce application runs in the CI tier through the split only
    # (scripts/chaos runs it through every nemesis).
    transformers = 1 if nemesis == "majority-split" else 0
    with NetnsFaultCluster(tmp_path) as cluster:
        result = run_nemesis(cluster, nemesis, SEED, SECONDS,
                             workload=Workload(java_writers=java, transformers=transformers))
    assert_clean(result, faults=2, acknowledged=500)
    assert result.group.commits >= 20 and result.group.observations >= 20, result.summary()
    assert result.transactions.committed >= 20 and result.transactions.aborted >= 3, result.summary()
    if transformers:
        assert result.transform is not None, result.summary()
        x = result.transform
        # caught up: every acknowledged input was transformed once (checked in result.ok)
        assert x.inputs >= result.report.acknowledged, result.summary()
        assert x.transactions["committed"] >= 20 and x.transactions["aborted"] >= 3, result.summary()
    if java:
        assert result.acked_by_java >= 100, result.summary()


#: The other layouts: one fault each (the schedule's first fault starts before a 1 s deadline).
LAYOUT_WORKLOAD = Workload(writers=1, java_writers=0, transactional_writers=1, group_members=1, transformers=0)


def test_five_nodes_split_two_three(tmp_path: Path) -> None:
    with NetnsFaultCluster(tmp_path, brokers=5) as cluster:
        assert sum(1 for n in cluster.nodes.values() if n.controller_port) == 5
        result = run_nemesis(cluster, "majority-split", SEED, 1.0, workload=LAYOUT_WORKLOAD)
    assert result.layout == "5 combined"
    assert_clean(result, faults=1, acknowledged=300)
    split = re.fullmatch(r"split \{(.*)\} \| \[(.*)\]", next(f for f in result.fault_log if f.startswith("split")))
    assert split is not None and [len(side.split(",")) for side in split.groups()] == [2, 3], result.fault_log


def test_dedicated_controllers_active_controller_isolated(tmp_path: Path) -> None:
    with NetnsFaultCluster(tmp_path, dedicated_controllers=True) as cluster:
        result = run_nemesis(cluster, "controller-isolated", SEED, 1.0, workload=LAYOUT_WORKLOAD)
    assert result.layout == "3 controllers + 3 brokers"
    assert_clean(result, faults=1, acknowledged=300)
    isolated = next(f for f in result.fault_log if f.startswith("isolate"))
    assert any(f"node {i} " in isolated for i in (1, 2, 3)), isolated  # a controller-only node


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
