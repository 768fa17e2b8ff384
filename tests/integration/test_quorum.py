"""Three combined nodes (``process.roles=broker,controller``) as real processes on 127.0.0.1:
controller failover, broker failure, full restarts and repeated kills.

Data is not yet replicated between brokers, so a partition's new leader starts from
its own log; these tests check leadership, metadata and that clients carry on.
"""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.quorum_cluster import Node, QuorumCluster, topics_summary
from wire.errors import ErrorCode
from wire.generated.api_019_create_topics import (
    CreateTopicsRequest,
    CreateTopicsRequestCreatableReplicaAssignment,
    CreateTopicsRequestCreatableTopic,
    CreateTopicsResponse,
)

SESSION_TIMEOUT_MS = 3000
#: How long the repeated-kill test runs (longer soaks: CORMORANT_QUORUM_SOAK_S=900).
SOAK_S = float(os.environ.get("CORMORANT_QUORUM_SOAK_S", "60"))

pytestmark = pytest.mark.timeout(300)


def create_topic(cluster: QuorumCluster, node: Node, name: str, partitions: int = 1, replication: int = 1,
                 assignments: dict[int, list[int]] | None = None) -> ErrorCode:
    topic = CreateTopicsRequestCreatableTopic(name=name, num_partitions=partitions, replication_factor=replication)
    if assignments:
        topic = CreateTopicsRequestCreatableTopic(name=name, num_partitions=-1, replication_factor=-1, assignments=[
            CreateTopicsRequestCreatableReplicaAssignment(partition_index=i, broker_ids=b)
            for i, b in sorted(assignments.items())])
    with cluster.client(node, timeout_s=15.0) as client:
        reply = client.send(CreateTopicsRequest(topics=[topic], timeout_ms=10_000), CreateTopicsResponse)
    return ErrorCode.for_code(reply.topics[0].error_code)


def single_leader_per_term(cluster: QuorumCluster) -> dict[int, set[int]]:
    terms = cluster.leaders_by_term()
    doubled = {term: leaders for term, leaders in terms.items() if len(leaders) > 1}
    assert not doubled, f"terms with two leaders: {doubled}"
    return terms


def test_killing_the_active_controller_elects_another(tmp_path: Path) -> None:
    with QuorumCluster(tmp_path, session_timeout_ms=SESSION_TIMEOUT_MS) as cluster:
        assert create_topic(cluster, cluster.nodes[1], "before", 3, 2) == ErrorCode.NONE
        before = cluster.quorum()
        leader = cluster.nodes[before["leader_id"]]
        ids = topics_summary(cluster.image())
        leader.kill9()
        killed_at = time.monotonic()
        survivor = cluster.live()[0]

        def created() -> bool:
            code = create_topic(cluster, survivor, "after", 2, 2)
            assert code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS), code
            return True

        cluster.wait_for(created, 10.0, "topic creation after the active controller died")
        assert time.monotonic() - killed_at < 10.0
        after = cluster.quorum(survivor)
        assert after["leader_id"] != leader.node_id and after["leader_epoch"] > before["leader_epoch"]
        assert after["high_watermark"] > before["high_watermark"]

        # The old leader comes back on its log dirs and catches up: same topics, same ids.
        leader.start()
        leader.wait_ready()
        cluster.wait_for(lambda: set(topics_summary(cluster.image(leader))) == {"before", "after"}, 15.0,
                         "the restarted node's metadata")
        assert topics_summary(cluster.image(leader))["before"] == ids["before"]
        quorum = cluster.wait_value(cluster.quorum, lambda q: all(v["lag"] == 0 for v in q["voters"]), 15.0,
                                    "voters caught up")
        assert {v["node_id"] for v in quorum["voters"]} == {1, 2, 3}
        single_leader_per_term(cluster)


def test_a_failed_broker_hands_its_partitions_to_the_isr(tmp_path: Path) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    with QuorumCluster(tmp_path, session_timeout_ms=SESSION_TIMEOUT_MS) as cluster:
        active = cluster.quorum()["leader_id"]
        victim = next(n for n in cluster.nodes.values() if n.node_id != active)
        others = [n.node_id for n in cluster.nodes.values() if n is not victim]
        # Every partition has the victim and one other broker; half of them led by the victim.
        assignments = {i: ([victim.node_id, others[i % 2]] if i % 2 == 0 else [others[i % 2], victim.node_id])
                       for i in range(4)}
        assert create_topic(cluster, cluster.nodes[active], "events", assignments=assignments) == ErrorCode.NONE
        image = cluster.image()
        led = [p["partition"] for p in image["topics"][0]["partitions"] if p["leader"] == victim.node_id]
        assert led == [0, 2]

        victim.kill9()
        killed_at = time.monotonic()
        survivors = [n for n in cluster.nodes.values() if n is not victim]

        def moved() -> bool:
            parts = cluster.image(survivors[0])["topics"][0]["partitions"]
            return all(p["leader"] in others and p["leader"] in p["isr"] and victim.node_id not in p["isr"]
                       for p in parts)

        cluster.wait_for(moved, SESSION_TIMEOUT_MS / 1000 + 5.0, "leaders moved from the failed broker")
        assert time.monotonic() - killed_at < SESSION_TIMEOUT_MS / 1000 + 5.0

        bootstrap = [n.bootstrap for n in survivors]
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=5, request_timeout_ms=10_000)
        sent = [f"after-{i}".encode() for i in range(40)]
        for i, value in enumerate(sent):
            producer.send("events", value=value, partition=i % 4).get(timeout=15)
        producer.close(timeout=5)
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                                 consumer_timeout_ms=5000)
        consumer.assign([TopicPartition("events", p) for p in range(4)])
        consumer.seek_to_beginning()
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < len(sent) and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                got += [m.value for m in batch]
        consumer.close()
        assert sorted(got) == sorted(sent)


def test_restarting_every_node_keeps_the_metadata(tmp_path: Path) -> None:
    with QuorumCluster(tmp_path, session_timeout_ms=SESSION_TIMEOUT_MS) as cluster:
        for i, (partitions, rf) in enumerate([(3, 3), (2, 1), (5, 2)]):
            assert create_topic(cluster, cluster.nodes[1 + i % 3], f"topic-{i}", partitions, rf) == ErrorCode.NONE
        before = topics_summary(cluster.image())
        hw = cluster.quorum()["high_watermark"]
        for stop in ("SIGTERM", "SIGKILL"):
            for node in cluster.nodes.values():
                node.terminate() if stop == "SIGTERM" else node.kill9()
            cluster.start()
            for node in cluster.nodes.values():
                # Every broker answers the same topics with the same ids and replicas.
                summary = cluster.wait_value(lambda n=node: topics_summary(cluster.image(n)), lambda s: len(s) == 3,
                                             15.0, f"node {node.node_id}'s metadata after {stop}")
                assert summary == before, stop
            assert cluster.quorum()["high_watermark"] >= hw
        single_leader_per_term(cluster)


def test_repeated_kills_never_elect_two_leaders_in_a_term(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("CORMORANT_QUORUM_SEED", "7")))
    with QuorumCluster(tmp_path, session_timeout_ms=SESSION_TIMEOUT_MS) as cluster:
        acknowledged: list[str] = []
        stop = threading.Event()
        errors: list[str] = []

        def writer() -> None:
            # Topic creations through whichever broker is up; the acknowledged ones must survive.
            n = 0
            while not stop.is_set():
                live = cluster.live()
                if not live:
                    time.sleep(0.2)
                    continue
                name = f"soak-{n}"
                try:
                    code = create_topic(cluster, rng.choice(live), name)
                except Exception as ex:  # a node dying under the request: the outcome is unknown
                    errors.append(repr(ex))
                    code = None
                if code == ErrorCode.NONE:
                    acknowledged.append(name)
                if code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                    n += 1
                time.sleep(0.3)

        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        deadline = time.monotonic() + SOAK_S
        kills = 0
        try:
            while time.monotonic() < deadline:
                time.sleep(rng.uniform(2.0, 5.0))
                try:
                    leader = cluster.quorum(rng.choice(cluster.live()))["leader_id"]
                except Exception:
                    leader = -1
                victim = cluster.nodes.get(leader) if rng.random() < 0.7 else None
                victim = victim or rng.choice(list(cluster.nodes.values()))
                victim.kill9()
                kills += 1
                time.sleep(rng.uniform(0.2, 2.5))
                victim.start()
                victim.wait_ready()
        finally:
            stop.set()
            thread.join(30)
        terms = single_leader_per_term(cluster)
        assert kills >= 5 and len(terms) >= 3, (kills, terms)
        assert len(acknowledged) >= 10, errors[-5:]
        final: dict[str, Any] = {}
        for node in cluster.nodes.values():
            final = cluster.wait_value(lambda n=node: topics_summary(cluster.image(n)),
                                       lambda s: set(acknowledged) <= set(s), 20.0,
                                       f"acknowledged topics on node {node.node_id}")
        assert set(acknowledged) <= set(final)
