"""Fault injection on real multi-node clusters, for the replication fault suite and ``scripts/chaos``.

Built on :class:`tests.integration.quorum_cluster.QuorumCluster` by composition:
:class:`FaultCluster` owns one, adds dedicated controllers (``process.roles=
controller`` nodes beside broker-only ones) when asked, and knows the fault
moves — SIGKILL and restart a node, SIGSTOP/SIGCONT it (a node cut off: its
sockets stay open and silent) — and how to read a partition's state (leader,
ISR, end offsets) and every replica's segment files. Only the processes this
module started are ever signalled, by their pid.

The scenarios (:func:`leader_kills`, :func:`double_leader_kills`) run a
workload of idempotent ``acks=all`` writers through the faults and return the
checker's :class:`~tests.replication.fault_checker.Report`, so the CI tests and
the long runs of ``scripts/chaos`` share them.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.tools.client import ClientError, KafkaClient
from broker.tools.metadata import describe_image
from tests.integration.quorum_cluster import Node, QuorumCluster
from tests.replication.fault_checker import (
    Fault,
    Gaps,
    History,
    Outcome,
    Report,
    Send,
    Writer,
    check,
    classify_error,
    compare_replicas,
    drain,
    encode_value,
    failover_gaps,
    partition_dirs,
    segment_batches,
)
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.generated.api_000_produce import (
    ProduceRequest,
    ProduceRequestPartitionProduceData,
    ProduceRequestTopicProduceData,
    ProduceResponse,
)
from wire.generated.api_010_find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from wire.generated.api_019_create_topics import (
    CreateTopicsRequest,
    CreateTopicsRequestCreatableReplicaAssignment,
    CreateTopicsRequestCreatableTopic,
    CreateTopicsRequestCreatableTopicConfig,
    CreateTopicsResponse,
)
from wire.records import NewRecord

SESSION_TIMEOUT_MS = 3000
#: How long a node may take to print its ready line. Several nodes start at once, and on a machine
#: loaded far beyond its cores (load 30 on 2 cores) a Python process can take over a minute to import.
START_TIMEOUT_S = float(os.environ.get("CORMORANT_FAULT_START_TIMEOUT_S", "180"))
#: Settings of every node: replicated internal topics with few partitions, min.insync.replicas=2.
CLUSTER_OVERRIDES = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
    "auto.create.topics.enable": "false",
    "replica.lag.time.max.ms": "6000",
    "unclean.leader.election.enable": "false",
}


class ControllerOnlyNode(Node):
    """A ``process.roles=controller`` node: the controller listener only, no Kafka clients."""

    def __init__(self, cluster: QuorumCluster, node_id: int, controller_port: int) -> None:
        super().__init__(cluster, node_id, controller_port, controller_port)

    def args(self) -> list[str]:
        out = super().args()
        settings = {"process.roles": "controller",
                    "listeners": f"CONTROLLER://{self.host}:{self.controller_port}"}
        rewritten: list[str] = []
        skip = False
        for i, arg in enumerate(out):
            if skip:
                skip = False
                continue
            if arg == "--override" and i + 1 < len(out):
                key = out[i + 1].split("=", 1)[0]
                if key == "advertised.listeners":
                    skip = True
                    continue
                if key in settings:
                    rewritten += ["--override", f"{key}={settings[key]}"]
                    skip = True
                    continue
            rewritten.append(arg)
        return rewritten


class FaultCluster:
    """``brokers`` nodes on 127.0.0.1 with the settings of :data:`CLUSTER_OVERRIDES`.

    Combined (default): the first ``controllers`` nodes (default three) are also the controller quorum.
    ``dedicated_controllers``: three more nodes run only the controller role, so
    faults on brokers never take the metadata quorum with them.
    """

    def __init__(self, base: Path, brokers: int = 3, dedicated_controllers: bool = False,
                 overrides: dict[str, str] | None = None, session_timeout_ms: int = SESSION_TIMEOUT_MS,
                 controllers: int | None = None) -> None:
        settings = {**CLUSTER_OVERRIDES, **(overrides or {})}
        self.dedicated = dedicated_controllers
        if dedicated_controllers:
            self.quorum = QuorumCluster(base, nodes=3 + brokers, controllers=3,
                                        session_timeout_ms=session_timeout_ms, overrides=settings)
            for node_id in (1, 2, 3):
                old = self.quorum.nodes[node_id]
                assert old.controller_port is not None
                self.quorum.nodes[node_id] = ControllerOnlyNode(self.quorum, node_id, old.controller_port)
        else:
            self.quorum = QuorumCluster(base, nodes=brokers, controllers=controllers or min(3, brokers),
                                        session_timeout_ms=session_timeout_ms, overrides=settings)
        self.history = History()
        self.paused: set[int] = set()

    # -- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> FaultCluster:
        self.start()
        return self

    def start(self) -> None:
        """Starts every node (:meth:`QuorumCluster.start`, which ends them if one fails)."""
        self.quorum.start(START_TIMEOUT_S)

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for node_id in list(self.paused):
            self.resume(self.quorum.nodes[node_id])
        self.quorum.close()

    @property
    def nodes(self) -> dict[int, Node]:
        return self.quorum.nodes

    def brokers(self) -> list[Node]:
        return [n for n in self.nodes.values() if not isinstance(n, ControllerOnlyNode)]

    def bootstrap(self) -> list[str]:
        return [n.bootstrap for n in self.brokers()]

    def reachable_brokers(self) -> list[Node]:
        return [n for n in self.brokers() if n.alive and n.node_id not in self.paused]

    def client(self, node: Node | None = None, timeout_s: float = 10.0) -> KafkaClient:
        target = node or self.reachable_brokers()[0]
        return KafkaClient(target.host, target.port, timeout_s=timeout_s)

    def data_dirs(self) -> dict[int, Path]:
        return {n.node_id: n.dir / "data" for n in self.brokers()}

    # -- faults ----------------------------------------------------------------------------------

    def led_by(self, node: Node, topics: Sequence[str]) -> list[tuple[str, int]]:
        """The partitions of ``topics`` the metadata says ``node`` leads."""
        out = []
        for topic in topics:
            try:
                out += [(topic, p["partition"]) for p in self.partitions(topic) if p["leader"] == node.node_id]
            except (AssertionError, ClientError, OSError):
                pass
        return out

    def kill(self, node: Node, what: str = "", topics: Sequence[str] = ()) -> float:
        """SIGKILL ``node``; the fault is recorded with the partitions of ``topics`` it led."""
        led = self.led_by(node, topics)
        node.kill9()
        return self.history.fault(what or f"SIGKILL node {node.node_id}", partitions=led)

    def restart(self, node: Node, wait: bool = True) -> None:
        node.start()
        if wait:
            node.wait_ready(START_TIMEOUT_S)

    def pause(self, node: Node) -> float:
        assert node.proc is not None and node.alive
        node.proc.send_signal(signal.SIGSTOP)
        self.paused.add(node.node_id)
        return self.history.fault(f"SIGSTOP node {node.node_id}")

    def resume(self, node: Node) -> None:
        if node.proc is not None and node.proc.poll() is None:
            node.proc.send_signal(signal.SIGCONT)
        self.paused.discard(node.node_id)

    # -- topics and partitions -------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1, replication: int = 3,
                     configs: dict[str, str] | None = None,
                     assignments: dict[int, list[int]] | None = None, timeout_s: float = 30.0) -> None:
        entries = [CreateTopicsRequestCreatableTopicConfig(name=k, value=v)
                   for k, v in {"min.insync.replicas": "2", **(configs or {})}.items()]
        if assignments:
            topic = CreateTopicsRequestCreatableTopic(name=name, num_partitions=-1, replication_factor=-1,
                                                      configs=entries, assignments=[
                CreateTopicsRequestCreatableReplicaAssignment(partition_index=i, broker_ids=b)
                for i, b in sorted(assignments.items())])
        else:
            topic = CreateTopicsRequestCreatableTopic(name=name, num_partitions=partitions,
                                                      replication_factor=replication, configs=entries)

        def created() -> bool:
            with self.client(timeout_s=15.0) as client:
                reply = client.send(CreateTopicsRequest(topics=[topic], timeout_ms=10_000), CreateTopicsResponse)
            code = ErrorCode.for_code(reply.topics[0].error_code)
            assert code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS), code
            return True

        self.quorum.wait_for(created, timeout_s, f"topic {name} created")
        self.wait_in_sync([name], timeout_s)

    def partitions(self, topic: str, node: Node | None = None) -> list[dict[str, Any]]:
        """The partitions of ``topic`` as a reachable broker's metadata has them."""
        with self.client(node, timeout_s=5.0) as client:
            image = describe_image(client)
        for t in image["topics"]:
            if t["name"] == topic:
                return sorted(t["partitions"], key=lambda p: p["partition"])
        raise AssertionError(f"no topic {topic} in the metadata")

    def leader(self, topic: str, partition: int) -> Node | None:
        for p in self.partitions(topic):
            if p["partition"] == partition:
                return self.nodes.get(p["leader"])
        return None

    def wait_leader(self, topic: str, partition: int, timeout_s: float, not_on: Sequence[int] = ()) -> Node:
        def found() -> Node | None:
            node = self.leader(topic, partition)
            if node is None or node.node_id in not_on or not node.alive:
                return None
            return node

        node: Node = self.quorum.wait_for(found, timeout_s, f"a leader of {topic}-{partition} not on {not_on}")
        return node

    def wait_in_sync(self, topics: Sequence[str], timeout_s: float) -> None:
        """Every partition of ``topics`` has a live leader and all its replicas in the ISR."""
        def full() -> bool:
            for topic in topics:
                for p in self.partitions(topic):
                    if p["leader"] < 0 or sorted(p["isr"]) != sorted(p["replicas"]):
                        raise AssertionError(f"{topic}-{p['partition']}: leader {p['leader']} isr {p['isr']} "
                                             f"replicas {p['replicas']}")
            return True

        self.quorum.wait_for(full, timeout_s, f"all replicas of {list(topics)} in sync")

    def find_coordinator(self, key: str, key_type: int) -> Node:
        """The node coordinating group (key_type 0) or transactional id (1) ``key``."""
        def ask() -> Node:
            with self.client(timeout_s=5.0) as client:
                reply = client.send(FindCoordinatorRequest(key=key, key_type=key_type), FindCoordinatorResponse, 3)
            code, node_id = reply.error_code, reply.node_id
            assert code == 0, ErrorCode.for_code(code)
            return self.nodes[node_id]

        node: Node = self.quorum.wait_for(ask, 20.0, f"the coordinator of {key}")
        return node

    def produce_once(self, node: Node, topic: str, partition: int, writer: str, seq: int,
                     timeout_ms: int = 5000) -> int:
        """One acks=all Produce of the value ``writer:seq`` straight to ``node``; the outcome goes
        into the history, the error code is returned (-1: no answer)."""
        batch = build_batch([NewRecord(key=None, value=encode_value(writer, seq).encode())])
        request = ProduceRequest(acks=-1, timeout_ms=timeout_ms, topic_data=[ProduceRequestTopicProduceData(
            name=topic, partition_data=[ProduceRequestPartitionProduceData(index=partition, records=batch)])])
        sent_at = time.monotonic()
        try:
            with self.client(node, timeout_s=timeout_ms / 1000 + 5) as client:
                reply = client.send(request, ProduceResponse)
        except (ClientError, OSError) as ex:
            self.history.add(Send(writer, seq, topic, partition, sent_at, time.monotonic(), Outcome.UNKNOWN,
                                  error=repr(ex)))
            return -1
        answer = reply.responses[0].partition_responses[0]
        done = time.monotonic()
        if answer.error_code == 0:
            self.history.add(Send(writer, seq, topic, partition, sent_at, done, Outcome.ACKED, answer.base_offset))
        else:
            self.history.add(Send(writer, seq, topic, partition, sent_at, done, classify_error(answer.error_code),
                                  error=ErrorCode.for_code(answer.error_code).name))
        return answer.error_code

    # -- checking --------------------------------------------------------------------------------

    def replica_problems(self, topics: Sequence[str], high_watermarks: dict[tuple[str, int], int]) -> list[str]:
        """Differences between the replicas of each partition below its high watermark."""
        problems: list[str] = []
        data = self.data_dirs()
        for topic in topics:
            for p in self.partitions(topic):
                index = p["partition"]
                dirs = partition_dirs(data, topic, index)
                missing = sorted(set(p["replicas"]) - set(dirs))
                if missing:
                    problems.append(f"{topic}-{index}: no log directory on nodes {missing}")
                summaries = {node: segment_batches(path) for node, path in dirs.items()}
                problems += compare_replicas(summaries, high_watermarks[(topic, index)], f"{topic}-{index}:")
        return problems

    def verify(self, topics: Sequence[str], *, transactional: Sequence[str] = (), settle_s: float = 60.0,
               compare: bool = True) -> Report:
        """After the workload: all replicas back in sync, drain, check the history, compare replicas."""
        self.wait_in_sync(topics, settle_s)
        reads, starts, ends = drain(self.bootstrap(), topics, timeout_s=settle_s)
        report = check(self.history.snapshot(), reads, log_start_offsets=starts, end_offsets=ends,
                       transactional_topics=transactional)
        if compare:
            deadline = time.monotonic() + 15.0
            problems = self.replica_problems(topics, ends)
            while problems and time.monotonic() < deadline:
                time.sleep(1.0)  # a follower may still be fetching up to the high watermark it was told
                problems = self.replica_problems(topics, ends)
            report.replica_divergence = problems
        return report


# -- scenarios ---------------------------------------------------------------------------------


@dataclass
class RunResult:
    report: Report
    gaps: Gaps
    faults: list[Fault] = field(default_factory=list)
    duration_s: float = 0.0
    #: Fatal producer errors (the writer replaced its producer and carried on).
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (f"{self.report.summary()} faults={len(self.faults)} failover_gap_median_s={self.gaps.median_s:.2f} "
                f"failover_gap_max_s={self.gaps.max_s:.2f} duration_s={self.duration_s:.0f} "
                f"producer_fatal_errors={len(self.notes)}")


def start_writers(cluster: FaultCluster, topic: str, partitions: int, count: int, rate: float,
                  delivery_timeout_ms: int = 30_000, client_debug: str | None = None,
                  debug_dir: Path | None = None) -> list[Writer]:
    """``client_debug``: librdkafka ``debug`` contexts, logged to ``debug_dir/writer-NAME.log``."""
    extra = {"debug": client_debug} if client_debug else None
    return [Writer(f"w{i}", cluster.bootstrap(), topic, partitions, cluster.history, rate=rate,
                   delivery_timeout_ms=delivery_timeout_ms, extra=extra,
                   debug_log=(debug_dir / f"writer-w{i}.log") if client_debug and debug_dir else None).start()
            for i in range(count)]


def stop_writers(writers: Sequence[Writer], delivery_timeout_ms: int = 30_000) -> None:
    for w in writers:
        w.stop()
    for w in writers:
        w.join(delivery_timeout_ms / 1000 + 30)


def _run_with_writers(cluster: FaultCluster, topic: str, partitions: int, writers: int, rate: float,
                      inject: Callable[[], None], replication: int = 3, before_s: float = 3.0) -> RunResult:
    """``before_s``: writes before ``inject`` starts (0 when its schedule waits before the first fault)."""
    started = time.monotonic()
    cluster.create_topic(topic, partitions, replication,
                         configs={"min.insync.replicas": str(min(2, replication))})
    running = start_writers(cluster, topic, partitions, writers, rate)
    try:
        time.sleep(before_s)  # some acknowledged writes before the first fault
        inject()
        time.sleep(3.0)  # and after the last
    finally:
        stop_writers(running)
    report = cluster.verify([topic])
    faults = list(cluster.history.faults)
    gaps = failover_gaps(cluster.history.snapshot(), [f for f in faults if f.what.startswith("SIGKILL")])
    notes = [error for w in running for error in w.fatal_errors]
    return RunResult(report, gaps, faults, time.monotonic() - started, notes)


def leader_kills(cluster: FaultCluster, duration_s: float, interval_s: float = 15.0, topic: str = "chaos",
                 partitions: int = 3, writers: int = 2, rate: float = 40.0, down_s: float = 2.0,
                 log: Callable[[str], None] = lambda _: None, replication: int = 3) -> RunResult:
    """SIGKILL the leader of one of the partitions every ``interval_s`` (round robin over the
    partitions), restart it ``down_s`` later; before each kill wait for the ISR to be full again."""
    def inject() -> None:
        start = time.monotonic()
        deadline = start + duration_s
        next_kill = start + interval_s - down_s
        round_ = 0
        while next_kill <= deadline:
            time.sleep(max(0.0, next_kill - time.monotonic()))
            partition = round_ % partitions
            victim = cluster.wait_leader(topic, partition, 20.0)
            cluster.kill(victim, f"SIGKILL node {victim.node_id}, leader of {topic}-{partition}", [topic])
            log(f"killed node {victim.node_id} (leader of {topic}-{partition})")
            time.sleep(down_s)
            cluster.restart(victim)
            cluster.wait_in_sync([topic], 45.0)  # the restarted replica caught up and rejoined the ISR
            round_ += 1
            next_kill = max(next_kill + interval_s, time.monotonic() + 1.0)

    # The first kill comes interval_s - down_s into the run: writes are acknowledged before it.
    return _run_with_writers(cluster, topic, partitions, writers, rate, inject, replication, before_s=0.0)


def double_leader_kills(cluster: FaultCluster, rounds: int, topic: str = "double", partitions: int = 1,
                        writers: int = 2, rate: float = 40.0, log: Callable[[str], None] = lambda _: None
                        ) -> RunResult:
    """Kill a partition's leader, then its successor as soon as it is elected (well within a
    second), restart both in reverse order; ``rounds`` times, waiting for a full ISR between rounds."""

    def inject() -> None:
        for _ in range(rounds):
            first = cluster.wait_leader(topic, 0, 20.0)
            cluster.kill(first, f"SIGKILL node {first.node_id}, leader of {topic}-0", [topic])
            # The successor is killed as soon as the metadata names it (polled every 100 ms).
            second = cluster.wait_leader(topic, 0, cluster.quorum.session_timeout_ms / 1000 + 15.0,
                                         not_on=[first.node_id])
            seen_at = time.monotonic()
            cluster.kill(second, f"SIGKILL node {second.node_id}, successor of node {first.node_id}", [topic])
            log(f"killed node {first.node_id}, then its successor node {second.node_id} "
                f"{time.monotonic() - seen_at:.2f}s after it was elected")
            time.sleep(1.0)
            cluster.restart(second, wait=False)
            time.sleep(0.5)
            cluster.restart(first, wait=False)
            second.wait_ready(START_TIMEOUT_S)
            first.wait_ready(START_TIMEOUT_S)
            cluster.wait_in_sync([topic], 60.0)
            time.sleep(2.0)

    return _run_with_writers(cluster, topic, partitions, writers, rate, inject)
