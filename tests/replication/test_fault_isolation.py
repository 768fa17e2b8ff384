"""Two followers of a partition cut off (SIGSTOP: sockets open, nothing answers): with fewer than
min.insync.replicas=2 replicas in sync nothing is acknowledged.

- Combined nodes: the cut also takes the controller majority, so the ISR cannot shrink;
  the leader holds acks=all produces until they time out. Clients see timeouts, never an ack.
- Dedicated controllers (three ``process.roles=controller`` nodes, three broker-only nodes):
  the controller fences the silent brokers, the ISR shrinks to the leader, and an acks=all
  produce is refused with NOT_ENOUGH_REPLICAS (19).

After the followers come back, they rejoin the ISR, writes are acknowledged again, and the
history checks out (what was written during the cut may land; it was never acknowledged).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.replication.fault_checker import Outcome
from tests.replication.fault_cluster import (
    FaultCluster,
    start_writers,
    stop_writers,
)

pytestmark = [pytest.mark.timeout(240)]

CUT_S = 10.0
DELIVERY_TIMEOUT_MS = 8000
TOPIC = "cut"


def acked_between(cluster: FaultCluster, start: float, end: float) -> int:
    return sum(1 for s in cluster.history.snapshot() if s.outcome is Outcome.ACKED and start <= s.sent_at < end)


def test_combined_nodes_cut_off_two_followers_time_out_never_ack(tmp_path: Path) -> None:
    with FaultCluster(tmp_path) as cluster:
        cluster.create_topic(TOPIC, 1)
        leader = cluster.wait_leader(TOPIC, 0, 20.0)
        assert cluster.produce_once(leader, TOPIC, 0, "raw", 0) == 0  # in sync: acknowledged
        followers = [n for n in cluster.brokers() if n is not leader]
        for node in followers:
            cluster.pause(node)
        cut_at = time.monotonic()
        time.sleep(0.5)  # fetches already in flight settle
        writing_from = time.monotonic()
        writers = start_writers(cluster, TOPIC, 1, 2, rate=20.0, delivery_timeout_ms=DELIVERY_TIMEOUT_MS)
        time.sleep(CUT_S)
        stop_writers(writers, DELIVERY_TIMEOUT_MS)
        during = [s for s in cluster.history.snapshot() if s.sent_at >= writing_from]
        assert during, "no writes during the cut"
        assert [s for s in during if s.outcome is Outcome.ACKED] == []
        assert all(s.outcome is Outcome.UNKNOWN for s in during), {s.error for s in during}
        assert cluster.produce_once(leader, TOPIC, 0, "raw", 1, timeout_ms=2000) != 0
        for node in followers:
            cluster.resume(node)
        healed_at = time.monotonic()
        cluster.wait_in_sync([TOPIC], 60.0)
        writers = start_writers(cluster, TOPIC, 1, 1, rate=20.0)
        time.sleep(3.0)
        stop_writers(writers)
        assert acked_between(cluster, healed_at, time.monotonic()) > 0
        report = cluster.verify([TOPIC])
        print(report.summary(), f"cut {healed_at - cut_at:.1f}s")
        assert report.ok, report.problems


def test_dedicated_controllers_shrink_the_isr_and_refuse_with_not_enough_replicas(tmp_path: Path) -> None:
    with FaultCluster(tmp_path, dedicated_controllers=True) as cluster:
        cluster.create_topic(TOPIC, 1)
        leader = cluster.wait_leader(TOPIC, 0, 20.0)
        assert cluster.produce_once(leader, TOPIC, 0, "raw", 0) == 0
        followers = [n for n in cluster.brokers() if n is not leader]
        for node in followers:
            cluster.pause(node)

        def shrunk() -> bool:
            p = cluster.partitions(TOPIC, leader)[0]
            assert p["isr"] == [leader.node_id] and p["leader"] == leader.node_id, p
            return True

        cluster.quorum.wait_for(shrunk, 30.0, "the ISR shrunk to the leader")
        codes = [cluster.produce_once(leader, TOPIC, 0, "raw", seq) for seq in range(1, 4)]
        assert codes == [19, 19, 19], codes  # NOT_ENOUGH_REPLICAS
        writing_from = time.monotonic()
        writers = start_writers(cluster, TOPIC, 1, 1, rate=20.0, delivery_timeout_ms=DELIVERY_TIMEOUT_MS)
        time.sleep(5.0)
        stop_writers(writers, DELIVERY_TIMEOUT_MS)
        assert acked_between(cluster, writing_from, time.monotonic()) == 0
        for node in followers:
            cluster.resume(node)
        cluster.wait_in_sync([TOPIC], 60.0)
        # The leader may learn of the ISR growing a moment after another broker does: retry (each
        # refusal is another definitive failure in the history) until it acknowledges.
        seqs = iter(range(4, 1000))
        cluster.quorum.wait_value(lambda: cluster.produce_once(leader, TOPIC, 0, "raw", next(seqs)),
                                  lambda code: code == 0, 20.0, "an acknowledged write after the followers returned")
        report = cluster.verify([TOPIC])
        print(report.summary())
        assert report.ok, report.problems
        assert report.failed >= 3 and not report.failed_but_present
