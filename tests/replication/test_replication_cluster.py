"""Data replication between three combined nodes (real processes on 127.0.0.1).

An RF=3 topic with min.insync.replicas=2: acks=all produces are acknowledged
once the followers have fetched them, every replica holds identical bytes below
the high watermark, a SIGKILLed leader is replaced from the ISR without losing
an acknowledged record, and a follower that stops fetching leaves the ISR
through the controller after ``replica.lag.time.max.ms`` and rejoins once it
catches up.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.quorum_cluster import Node, QuorumCluster
from wire.errors import ErrorCode
from wire.generated.api_019_create_topics import (
    CreateTopicsRequest,
    CreateTopicsRequestCreatableTopic,
    CreateTopicsRequestCreatableTopicConfig,
    CreateTopicsResponse,
)

pytestmark = pytest.mark.timeout(120)

TOPIC = "replicated"


def create_replicated_topic(cluster: QuorumCluster, name: str = TOPIC, min_isr: int = 2) -> None:
    topic = CreateTopicsRequestCreatableTopic(
        name=name, num_partitions=1, replication_factor=3,
        configs=[CreateTopicsRequestCreatableTopicConfig(name="min.insync.replicas", value=str(min_isr))])
    with cluster.client(timeout_s=15.0) as client:
        reply = client.send(CreateTopicsRequest(topics=[topic], timeout_ms=10_000), CreateTopicsResponse)
    assert ErrorCode.for_code(reply.topics[0].error_code) == ErrorCode.NONE


def partition_state(cluster: QuorumCluster, node: Node | None = None) -> dict[str, Any]:
    image = cluster.image(node)
    topic = next(t for t in image["topics"] if t["name"] == TOPIC)
    part: dict[str, Any] = topic["partitions"][0]
    return part


def segment_bytes(node: Node, name: str = TOPIC) -> bytes:
    directory = node.dir / "data" / f"{name}-0"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def produce(bootstrap: list[str], values: list[bytes]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=10, request_timeout_ms=10_000,
                             max_in_flight_requests_per_connection=1)
    try:
        for value in values:
            producer.send(TOPIC, value=value, partition=0).get(timeout=20)
    finally:
        producer.close(timeout=5)


def consume_all(bootstrap: list[str], expected: int) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                             consumer_timeout_ms=5000)
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition(TOPIC, 0)])
        consumer.seek_to_beginning()
        deadline = time.monotonic() + 20
        while len(got) < expected and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                got += [m.value for m in batch]
    finally:
        consumer.close()
    return got


def test_acks_all_replicates_to_every_replica_and_survives_leader_kill(tmp_path: Path) -> None:
    with QuorumCluster(tmp_path, overrides={"replica.lag.time.max.ms": "5000"}) as cluster:
        create_replicated_topic(cluster)
        state = cluster.wait_value(lambda: partition_state(cluster), lambda p: len(p["isr"]) == 3, 15,
                                   "topic with three in-sync replicas")
        bootstrap = [n.bootstrap for n in cluster.nodes.values()]
        first = [f"before-{i}".encode() for i in range(30)]
        produce(bootstrap, first)

        def identical() -> bool:
            logs = {n.node_id: segment_bytes(n) for n in cluster.nodes.values()}
            return len(set(logs.values())) == 1 and len(logs[1]) > 0

        cluster.wait_for(identical, 15, "identical logs on every replica")

        leader = cluster.nodes[state["leader"]]
        leader.kill9()
        survivors = [n for n in cluster.nodes.values() if n is not leader]

        def moved() -> bool:
            p = partition_state(cluster, survivors[0])
            return p["leader"] in {n.node_id for n in survivors} and leader.node_id not in p["isr"]

        cluster.wait_for(moved, 20, "a new leader from the ISR")
        second = [f"after-{i}".encode() for i in range(30)]
        produce([n.bootstrap for n in survivors], second)
        got = consume_all([n.bootstrap for n in survivors], len(first) + len(second))
        assert got == first + second


def test_a_stopped_follower_leaves_and_rejoins_the_isr(tmp_path: Path) -> None:
    # Sessions outlast the lag time: the ISR shrink must come from the leader, not from fencing.
    overrides = {"replica.lag.time.max.ms": "2000"}
    with QuorumCluster(tmp_path, session_timeout_ms=30_000, overrides=overrides) as cluster:
        create_replicated_topic(cluster)
        state = cluster.wait_value(lambda: partition_state(cluster), lambda p: len(p["isr"]) == 3, 15,
                                   "topic with three in-sync replicas")
        leader = cluster.nodes[state["leader"]]
        active = cluster.quorum(leader)["leader_id"]
        follower = next(n for n in cluster.nodes.values() if n.node_id not in (leader.node_id, active))
        assert follower.proc is not None
        follower.proc.send_signal(signal.SIGSTOP)
        try:
            stopped_at = time.monotonic()
            cluster.wait_value(lambda: partition_state(cluster, leader),
                               lambda p: follower.node_id not in p["isr"], 15, "the stopped follower out of the ISR")
            assert time.monotonic() - stopped_at >= 1.5
            # acks=all still works with two in-sync replicas.
            produce([leader.bootstrap], [b"while-stopped"])
        finally:
            follower.proc.send_signal(signal.SIGCONT)
        cluster.wait_value(lambda: partition_state(cluster, leader),
                           lambda p: follower.node_id in p["isr"], 20, "the follower back in the ISR")
        cluster.wait_for(lambda: segment_bytes(follower) == segment_bytes(leader), 10, "follower caught up")
