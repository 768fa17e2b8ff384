"""The fault suite fails when it should, on a real cluster: acknowledged writes removed from a
partition's only replica behind the broker's back are reported lost.

Runs without data replication (RF 1), so it guards the harness — writers, drain, checker —
end to end whatever the state of the replication code.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.replication.fault_checker import Outcome
from tests.replication.fault_cluster import FaultCluster, start_writers, stop_writers

pytestmark = pytest.mark.timeout(180)

TOPIC = "victim"


def test_writes_cut_from_the_log_are_reported_lost(tmp_path: Path) -> None:
    with FaultCluster(tmp_path) as cluster:
        cluster.create_topic(TOPIC, 1, 1, configs={"min.insync.replicas": "1"})
        writers = start_writers(cluster, TOPIC, 1, 1, rate=100.0)
        try:
            cluster.quorum.wait_for(lambda: cluster.history.count(Outcome.ACKED) >= 200, 60.0,
                                    "200 acknowledged writes")
        finally:
            stop_writers(writers)
        clean = cluster.verify([TOPIC], compare=False)
        assert clean.ok, clean.problems

        leader = cluster.wait_leader(TOPIC, 0, 20.0)
        cluster.kill(leader)
        segment = sorted((leader.dir / "data" / f"{TOPIC}-0").glob("*.log"))[-1]
        with open(segment, "r+b") as f:
            f.truncate(segment.stat().st_size // 2)  # the broker's recovery drops the torn tail
        cluster.restart(leader)
        time.sleep(1.0)
        report = cluster.verify([TOPIC], compare=False)
        print(report.summary())
        assert not report.ok
        assert len(report.lost) >= 50, report.summary()
