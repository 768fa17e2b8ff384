"""How a librdkafka idempotent writer writes a value twice when its ``message.timeout.ms`` (alias
``delivery.timeout.ms``) runs out during an outage, and why the fault harness's writers give
their messages Kafka's default 120 s instead of the outage's length (``paused-follower+kill``,
seed 18: 496 values duplicated, each copy under another producer epoch).

Both followers of a partition are SIGSTOPped (combined nodes: the controller majority goes too,
so the ISR cannot shrink). The leader appends each acks=all batch and, at the request's
``timeout_ms``, answers REQUEST_TIMED_OUT, as Kafka's DelayedProduce does; librdkafka keeps those
messages as "possibly persisted" and retries them under the same producer epoch, which the leader
deduplicates. When the oldest queued message outlives ``message.timeout.ms``, librdkafka fails it,
bumps its producer epoch (no broker error involved) and renumbers every message it still holds
from sequence 0 — messages the leader had already appended among them — so they are appended a
second time under the new epoch. Once the followers resume, those batches are committed. A
message timeout longer than the outage leaves nothing to renumber: no copies.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.replication.fault_checker import Outcome, Writer, partition_dirs
from tests.replication.fault_cluster import FaultCluster
from tests.replication.fault_invariants import duplicate_causes, producer_epochs_of

pytestmark = [pytest.mark.timeout(300)]

CUT_S = 8.0
#: The broker-side ack timeout of each Produce (librdkafka's request.timeout.ms).
REQUEST_TIMEOUT_MS = 1000


def _cut_off_followers(cluster: FaultCluster, topic: str, delivery_timeout_ms: int, debug_log: Path) -> Writer:
    """One writer through a ``CUT_S`` pause of both followers of ``topic``'s partition; returns it
    stopped, with every send's outcome in the history."""
    cluster.create_topic(topic, 1)
    leader = cluster.wait_leader(topic, 0, 30.0)
    writer = Writer(topic, cluster.bootstrap(), topic, 1, cluster.history, rate=20.0,
                    delivery_timeout_ms=delivery_timeout_ms,
                    extra={"request.timeout.ms": REQUEST_TIMEOUT_MS, "debug": "eos,msg"},
                    debug_log=debug_log).start()
    deadline = time.monotonic() + 60.0
    while not _acked(cluster, topic) and time.monotonic() < deadline:
        time.sleep(0.2)  # the producer has its id and writes get through before the cut
    assert _acked(cluster, topic), f"{topic}: nothing acknowledged before the cut"
    followers = [n for n in cluster.brokers() if n is not leader]
    for node in followers:
        cluster.pause(node)
    time.sleep(CUT_S)
    for node in followers:
        cluster.resume(node)
    time.sleep(2.0)
    writer.stop()
    writer.join(delivery_timeout_ms / 1000 + 30)
    return writer


def _acked(cluster: FaultCluster, writer: str) -> int:
    return sum(1 for s in cluster.history.snapshot() if s.writer == writer and s.outcome is Outcome.ACKED)


def _copies(cluster: FaultCluster, topic: str, values: set[str]) -> dict[str, list[tuple[int, int, int]]]:
    dirs = partition_dirs(cluster.data_dirs(), topic, 0)
    return producer_epochs_of(dirs[min(dirs)], values)


def test_a_message_timeout_shorter_than_the_outage_rewrites_appended_values_under_a_new_epoch(
        tmp_path: Path) -> None:
    with FaultCluster(tmp_path / "cluster") as cluster:
        short, long = "short-timeout", "kafka-default-timeout"
        _cut_off_followers(cluster, short, 4000, tmp_path / "short.log")
        _cut_off_followers(cluster, long, 120_000, tmp_path / "long.log")
        report = cluster.verify([short, long], settle_s=60.0)
        client_log = (tmp_path / "short.log").read_text(errors="replace")

        duplicated = {d.split(" read ")[0] for d in report.duplicated}
        rewritten = {v for v in duplicated if v.startswith(f"{short}:")}
        assert rewritten, f"no value of the short-timeout writer was written twice: {report.summary()}"
        # Every copy under another producer epoch: the broker deduplicated within each epoch.
        causes = duplicate_causes(_copies(cluster, short, rewritten))
        assert causes["same producer epoch"] == []
        assert len(causes["new producer epoch"]) == len(rewritten)
        # The client's reason: messages timed out locally, then it bumped its epoch.
        assert "message.timeout.ms exceeded" in client_log
        assert "bumped epoch" in client_log
        timed_out = [s for s in cluster.history.snapshot()
                     if s.writer == short and s.outcome is not Outcome.ACKED]
        assert timed_out, "no send of the short-timeout writer timed out"
        # The checker's other findings are these copies: an acknowledgement names the copy the client
        # was told about while the check finds the first one (misplaced), and each rewritten run
        # of values starts below where the previous run ended (reordered).
        assert {m.split(" acked at ")[0] for m in report.misplaced} <= rewritten
        assert {r.split(": ", 1)[1].split("@")[0] for r in report.reordered} <= rewritten

        # The same outage with Kafka's default delivery timeout: every value once, none lost.
        assert not {v for v in duplicated if v.startswith(f"{long}:")}
        assert "bumped epoch" not in (tmp_path / "long.log").read_text(errors="replace")
        assert report.lost == [], report.summary()
        assert report.replica_divergence == []
