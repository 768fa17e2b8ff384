"""The leader of a partition is SIGKILLed, then its successor within a second; both restart in
reverse order; several rounds while idempotent acks=all writers run. Afterwards the replicas hold
identical batches below the high watermark and the history checks out.

CI runs CORMORANT_FAULT_DOUBLE_ROUNDS (default 2) rounds; ``scripts/chaos`` runs more.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.replication.fault_cluster import FaultCluster, double_leader_kills

ROUNDS = int(os.environ.get("CORMORANT_FAULT_DOUBLE_ROUNDS", "2"))

pytestmark = [pytest.mark.timeout(120 + 60 * ROUNDS)]


def test_double_leader_kills_leave_identical_replicas(tmp_path: Path) -> None:
    with FaultCluster(tmp_path) as cluster:
        result = double_leader_kills(cluster, ROUNDS)
        print(result.summary())
        report = result.report
        assert report.ok, f"{report.problems}\n{result.summary()}"
        assert len(result.faults) == 2 * ROUNDS
        assert report.acknowledged >= 100, result.summary()
