"""Leader/follower replication between real broker processes: followers copy the leader's
batches byte for byte, acks=all waits for the ISR, the ISR shrinks and grows through the
controller, and a killed leader's successor has every acknowledged record."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.quorum_cluster import Node, QuorumCluster
from tests.integration.test_quorum import create_topic
from tests.shared import ROOT
from wire.errors import ErrorCode

pytestmark = pytest.mark.timeout(240)

LAG_MS = 2000
SESSION_MS = 3000


def partition(cluster: QuorumCluster, topic: str, index: int = 0, node: Node | None = None) -> dict[str, Any]:
    image = cluster.image(node)
    t = next(t for t in image["topics"] if t["name"] == topic)
    return next(p for p in t["partitions"] if p["partition"] == index)


def segment_bytes(node: Node, topic: str, index: int = 0) -> bytes:
    directory = node.dir / "data" / f"{topic}-{index}"
    return b"".join(f.read_bytes() for f in sorted(directory.glob("*.log")))


def produce(bootstrap: list[str], topic: str, values: list[bytes], partition_index: int = 0,
            acks: Any = "all") -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=acks, retries=10, request_timeout_ms=15_000,
                             enable_idempotence=True, max_in_flight_requests_per_connection=5)
    try:
        futures = [producer.send(topic, value=v, partition=partition_index) for v in values]
        for f in futures:
            f.get(timeout=60)
    finally:
        producer.close(timeout=10)


def consume_all(bootstrap: list[str], topic: str, expected: int, partition_index: int = 0) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    try:
        consumer.assign([TopicPartition(topic, partition_index)])
        consumer.seek_to_beginning()
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < expected and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                got += [m.value for m in batch]
        return got
    finally:
        consumer.close()


def test_followers_copy_the_leader_and_survive_its_death(tmp_path: Path) -> None:
    overrides = {"replica.lag.time.max.ms": str(LAG_MS), "min.insync.replicas": "2"}
    with QuorumCluster(tmp_path, session_timeout_ms=SESSION_MS, overrides=overrides) as cluster:
        assert create_topic(cluster, cluster.nodes[1], "replicated", 1, 3) == ErrorCode.NONE
        bootstrap = [n.bootstrap for n in cluster.nodes.values()]
        first = [f"a-{i}".encode() for i in range(300)]
        produce(bootstrap, "replicated", first)

        # Every replica holds the same bytes (the batches as the leader wrote them).
        def identical() -> bool:
            copies = {segment_bytes(n, "replicated") for n in cluster.nodes.values()}
            return len(copies) == 1 and len(next(iter(copies))) > 0

        cluster.wait_for(identical, 20.0, "followers holding the leader's batches")
        state = partition(cluster, "replicated")
        assert sorted(state["isr"]) == [1, 2, 3]

        # The leader dies: a follower from the ISR leads, with everything acknowledged.
        old = cluster.nodes[state["leader"]]
        old.kill9()
        survivors = [n for n in cluster.nodes.values() if n is not old]
        moved = cluster.wait_value(lambda: partition(cluster, "replicated", node=survivors[0]),
                                   lambda p: p["leader"] not in (-1, old.node_id), SESSION_MS / 1000 + 10,
                                   "a new leader")
        assert moved["leader"] in state["isr"]
        second = [f"b-{i}".encode() for i in range(100)]
        produce([n.bootstrap for n in survivors], "replicated", second)
        got = consume_all([n.bootstrap for n in survivors], "replicated", len(first) + len(second))
        assert got == first + second

        # The old leader comes back, truncates what it must, catches up and rejoins the ISR.
        old.start()
        old.wait_ready()
        cluster.wait_value(lambda: partition(cluster, "replicated", node=survivors[0]),
                           lambda p: sorted(p["isr"]) == [1, 2, 3], 30.0, "the restarted broker back in the ISR")
        cluster.wait_for(identical, 20.0, "all three replicas identical again")


def test_the_isr_shrinks_without_a_follower_and_acks_all_needs_min_isr(tmp_path: Path) -> None:
    overrides = {"replica.lag.time.max.ms": str(LAG_MS), "min.insync.replicas": "3"}
    with QuorumCluster(tmp_path, session_timeout_ms=SESSION_MS, overrides=overrides) as cluster:
        assignments = {0: [1, 2, 3]}
        assert create_topic(cluster, cluster.nodes[1], "strict", assignments=assignments) == ErrorCode.NONE
        bootstrap = [n.bootstrap for n in cluster.nodes.values()]
        produce(bootstrap, "strict", [b"x"] * 10)
        follower = cluster.nodes[3]
        follower.kill9()
        shrunk = cluster.wait_value(lambda: partition(cluster, "strict", node=cluster.nodes[1]),
                                    lambda p: 3 not in p["isr"], SESSION_MS / 1000 + LAG_MS / 1000 + 10,
                                    "the ISR without the dead follower")
        assert shrunk["leader"] == 1
        # Fewer in sync than min.insync.replicas: acks=all is refused before appending (19).
        from kafka import KafkaProducer
        from kafka.errors import KafkaError

        producer = KafkaProducer(bootstrap_servers=bootstrap[:2], acks="all", retries=0, request_timeout_ms=5000)
        try:
            with pytest.raises(KafkaError) as refused:
                producer.send("strict", value=b"nope", partition=0).get(timeout=30)
            assert "NotEnoughReplicas" in type(refused.value).__name__, refused.value
        finally:
            producer.close(timeout=5)
        follower.start()
        follower.wait_ready()
        cluster.wait_value(lambda: partition(cluster, "strict", node=cluster.nodes[1]),
                           lambda p: sorted(p["isr"]) == [1, 2, 3], 30.0, "the follower back in the ISR")
        produce(bootstrap, "strict", [b"y"] * 5)
        assert len(consume_all(bootstrap, "strict", 15)) == 15


def test_preferred_election_and_reassignment_move_leadership_and_data(tmp_path: Path) -> None:
    from confluent_kafka import ElectionType, TopicPartition
    from confluent_kafka.admin import AdminClient

    overrides = {"replica.lag.time.max.ms": str(LAG_MS), "auto.leader.rebalance.enable": "false"}
    with QuorumCluster(tmp_path, session_timeout_ms=SESSION_MS, overrides=overrides) as cluster:
        assert create_topic(cluster, cluster.nodes[1], "pref", assignments={0: [1, 2, 3]}) == ErrorCode.NONE
        assert create_topic(cluster, cluster.nodes[1], "moving", assignments={0: [1]}) == ErrorCode.NONE
        bootstrap = [n.bootstrap for n in cluster.nodes.values()]
        produce(bootstrap, "pref", [b"p"] * 20)
        values = [f"m-{i}".encode() for i in range(200)]
        produce(bootstrap, "moving", values)

        # Broker 1 restarts: broker 2 or 3 leads "pref" until a preferred election.
        cluster.nodes[1].terminate()
        cluster.wait_value(lambda: partition(cluster, "pref", node=cluster.nodes[2]),
                           lambda p: p["leader"] in (2, 3), 15.0, "leadership moved off broker 1")
        cluster.nodes[1].start()
        cluster.nodes[1].wait_ready()
        cluster.wait_value(lambda: partition(cluster, "pref", node=cluster.nodes[2]),
                           lambda p: sorted(p["isr"]) == [1, 2, 3], 30.0, "broker 1 back in sync")
        admin = AdminClient({"bootstrap.servers": ",".join(bootstrap)})
        result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("pref", 0)]).result(timeout=30)
        assert result[TopicPartition("pref", 0)] is None, result
        assert partition(cluster, "pref", node=cluster.nodes[1])["leader"] == 1

        # "moving" goes from broker 1 to brokers 2 and 3: they copy it, then 1 lets it go.
        tool = [sys.executable, "-m", "broker", "partitions", "--bootstrap-server", bootstrap[0]]
        started = subprocess.run([*tool, "reassign", "--wait", "--timeout", "30", "moving:0=2,3"], cwd=ROOT,
                                 capture_output=True, text=True, timeout=60)
        assert started.returncode == 0 and "moving-0: reassignment started" in started.stdout, started
        assert started.stdout.splitlines()[-1] == "reassignment complete: 1 partition(s)", started.stdout
        done = cluster.wait_value(lambda: partition(cluster, "moving", node=cluster.nodes[2]),
                                  lambda p: p["replicas"] == [2, 3], 30.0, "the reassignment completed")
        assert sorted(done["isr"]) == [2, 3] and done["leader"] in (2, 3)
        cluster.wait_for(lambda: not (cluster.nodes[1].dir / "data" / "moving-0").exists()
                         or not list((cluster.nodes[1].dir / "data" / "moving-0").glob("*.log")), 20.0,
                         "broker 1 dropped its copy")
        status = subprocess.run([*tool, "status"], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert status.stdout == "No partition is being reassigned.\n", status
        assert consume_all(bootstrap, "moving", len(values)) == values
        assert segment_bytes(cluster.nodes[2], "moving") == segment_bytes(cluster.nodes[3], "moving")


def test_auto_leader_rebalance_hands_leadership_back(tmp_path: Path) -> None:
    overrides = {"replica.lag.time.max.ms": str(LAG_MS), "auto.leader.rebalance.enable": "true",
                 "leader.imbalance.check.interval.seconds": "1"}
    with QuorumCluster(tmp_path, session_timeout_ms=SESSION_MS, overrides=overrides) as cluster:
        assert create_topic(cluster, cluster.nodes[1], "balanced", assignments={0: [1, 2, 3]}) == ErrorCode.NONE
        produce([n.bootstrap for n in cluster.nodes.values()], "balanced", [b"v"] * 10)
        cluster.nodes[1].terminate()
        cluster.wait_value(lambda: partition(cluster, "balanced", node=cluster.nodes[2]),
                           lambda p: p["leader"] in (2, 3), 15.0, "leadership moved off broker 1")
        cluster.nodes[1].start()
        cluster.nodes[1].wait_ready()
        # No ElectLeaders: the active controller's balance check moves it back once 1 is in sync.
        back = cluster.wait_value(lambda: partition(cluster, "balanced", node=cluster.nodes[2]),
                                  lambda p: p["leader"] == 1, 40.0, "leadership back on the preferred replica")
        assert sorted(back["isr"]) == [1, 2, 3]


def test_transactions_span_brokers(tmp_path: Path) -> None:
    """The transaction coordinator and the partition leader on different brokers: the
    leader verifies the transaction with the coordinator (AddPartitionsToTxn v4) and the
    coordinator writes the markers over the inter-broker listener (WriteTxnMarkers)."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    from wire.generated.api_010_find_coordinator import (
        FindCoordinatorRequest,
        FindCoordinatorResponse,
    )

    with QuorumCluster(tmp_path, session_timeout_ms=SESSION_MS) as cluster:
        bootstrap = ",".join(n.bootstrap for n in cluster.nodes.values())
        txn_id = "span-1"

        def coordinator() -> int:
            with cluster.client(timeout_s=15.0) as client:
                reply = client.send(FindCoordinatorRequest(key=txn_id, key_type=1), FindCoordinatorResponse, 3)
            assert reply.error_code == 0, reply
            return reply.node_id

        coordinator_id = cluster.wait_value(coordinator, lambda c: c in cluster.nodes, 30.0, "a coordinator")
        other = next(n for n in cluster.nodes if n != coordinator_id)
        assert create_topic(cluster, cluster.nodes[other], "span", assignments={0: [other]}) == ErrorCode.NONE
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
        producer.init_transactions(30)
        for round_ in range(3):
            producer.begin_transaction()
            for i in range(10):
                producer.produce("span", value=f"{round_}-{i}".encode(), partition=0)
            if round_ == 1:
                producer.abort_transaction(30)
            else:
                producer.commit_transaction(30)
        producer.flush(10)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "span-reader",
                             "isolation.level": "read_committed", "enable.auto.commit": False})
        consumer.assign([TopicPartition("span", 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 20 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        consumer.close()
        assert sorted(got) == sorted(f"{r}-{i}".encode() for r in (0, 2) for i in range(10))
        assert partition(cluster, "span")["leader"] == other != coordinator_id
