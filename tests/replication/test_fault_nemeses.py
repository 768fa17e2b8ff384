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
from pathlib import Path

import pytest

from tests.replication.nemeses import run_nemesis
from tests.replication.netns import NetnsUnavailable, Network
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
