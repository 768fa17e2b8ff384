"""Named, seeded network nemeses for clusters in network namespaces, and the run that checks them.

A nemesis is a schedule of faults drawn from ``random.Random(seed)``: how long each fault holds,
how long the cluster rests between them, which partition's leader or which follower it hits. The
targets that depend on the cluster's state (the leader of a partition, the active controller) are
resolved when the step runs, and every step is logged and recorded in the history, so a run is
replayed with its name and seed. Each ``NAME+kill`` variant also SIGKILLs a node the schedule picks
in the middle of each fault, and restarts it when the fault heals.

After each fault the network heals and the run waits (bounded) for every replica to be back in the
ISR before the next one: a partition that never recovers aborts the run with the nodes' logs.

The workload (:class:`Workload`) runs throughout: idempotent ``acks=all`` writers (librdkafka, and
Java kafka-clients), a transactional producer aborting a share of its transactions, and a
read_committed consumer group committing what it reads, whose committed offsets are watched.

A nemesis this machine cannot apply (``slow-follower``'s delay needs the kernel's ``sch_netem``, or
NFQUEUE and the NetfilterQueue package for the delayer in user space) raises
:class:`NemesisNotApplicable` before anything starts.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from broker.replication.isr import PENDING_TIMEOUT_MS
from tests.integration.quorum_cluster import Node
from tests.replication.fault_checker import (
    Outcome,
    Read,
    Report,
    Send,
    Writer,
    drain,
    partition_dirs,
)
from tests.replication.fault_cluster import start_writers, stop_writers
from tests.replication.fault_invariants import (
    GroupOffsetReport,
    PendingIsr,
    TransactionReport,
    Unavailability,
    acks_below_min_isr,
    duplicate_causes,
    group_offset_problems,
    producer_epochs_of,
    transaction_problems,
    unavailability_windows,
)
from tests.replication.fault_transform import (
    OUTPUT_PREFIX,
    Transformer,
    TransformReport,
    transform_problems,
)
from tests.replication.fault_workloads import (
    GroupMember,
    JavaWriter,
    OffsetObserver,
    TransactionalWriter,
)
from tests.replication.netns import CLIENT, delay_missing
from tests.replication.netns_cluster import IsrMonitor, NetnsFaultCluster

MIN_INSYNC_REPLICAS = 2
#: The idempotent writers' delivery.timeout.ms (librdkafka's message.timeout.ms): Kafka's default,
#: far longer than any fault (at most about 25 s without a leader). A message that times out makes
#: librdkafka bump its producer epoch and renumber every message it still holds, written or not,
#: so a timeout near the fault's length turns into values written twice
#: (test_fault_message_timeout.py); librdkafka advises a large message.timeout.ms.
DELIVERY_TIMEOUT_MS = 120_000
RESYNC_TIMEOUT_S = 90.0


class NemesisNotApplicable(Exception):
    """The nemesis needs something this machine does not have (the message says what)."""


@dataclass(frozen=True)
class Workload:
    """What runs through a nemesis: ``writers`` librdkafka and ``java_writers`` Java kafka-clients
    idempotent acks=all writers at ``rate`` records a second each over ``partitions`` partitions;
    ``transactional_writers`` transactional producers on a topic of their own; ``transformers``
    consume-transform-produce applications reading the writers' topic and writing a topic of their
    own in transactions that commit their group's offsets; ``group_members`` read_committed
    consumers of every topic in one group, committing every second."""

    partitions: int = 3
    writers: int = 2
    rate: float = 40.0
    java_writers: int = 1
    transactional_writers: int = 1
    group_members: int = 2
    transformers: int = 1
    #: librdkafka ``debug`` contexts of the librdkafka writers and group members (e.g. ``eos,msg`` or
    #: ``cgrp,consumer,protocol``), logged to ``writer-NAME.log`` / ``member-NAME.log`` beside the
    #: nodes' logs.
    client_debug: str | None = None


@dataclass
class Context:
    cluster: NetnsFaultCluster
    rng: random.Random
    deadline: float
    topic: str
    partitions: int
    kills: bool
    log: Callable[[str], None]
    killed: list[Node] = field(default_factory=list)
    #: (when, the nodes cut off from a majority of the voters from then on), at each fault and heal.
    cut_off: list[tuple[float, frozenset[int]]] = field(default_factory=list)
    name: str = ""
    seed: int = 0
    delay_notes_logged: int = 0
    delay_problems_logged: int = 0

    @property
    def net(self) -> NetnsFaultCluster:
        return self.cluster

    def running(self) -> bool:
        return time.monotonic() < self.deadline

    def fault(self, what: str, partitions: list[tuple[str, int]] | None = None) -> None:
        at = self.cluster.history.fault(what, partitions=partitions or [])
        voters = [n.node_id for n in self.cluster.nodes.values() if n.controller_port]
        self.cut_off.append((at, frozenset(self.cluster.network.cut_off(voters))))
        self.log(f"{what}  [{self.cluster.network.describe()}]")

    def log_delayers(self) -> None:
        """What the NFQUEUE delayers did since the last heal, and any of them found dead."""
        network = self.cluster.network
        for note in network.delay_notes[self.delay_notes_logged:]:
            self.log(f"delay: {note}")
        for problem in network.delay_problems[self.delay_problems_logged:]:
            self.log(f"delay PROBLEM: {problem}")
        self.delay_notes_logged, self.delay_problems_logged = len(network.delay_notes), len(network.delay_problems)

    def leader_of_random_partition(self) -> tuple[int, Node]:
        partition = self.rng.randrange(self.partitions)
        return partition, self.cluster.wait_leader(self.topic, partition, 30.0)

    def followers(self, partition: int, leader: Node) -> list[Node]:
        replicas = next(p["replicas"] for p in self.cluster.partitions(self.topic) if p["partition"] == partition)
        return [self.cluster.nodes[r] for r in sorted(replicas) if r != leader.node_id]

    def hold(self, low_s: float, high_s: float) -> None:
        """Keep the current fault for a seeded time; ``+kill``: SIGKILL a seeded node midway."""
        length = self.rng.uniform(low_s, high_s)
        victim_index = self.rng.randrange(len(self.cluster.nodes))
        if not self.kills:
            time.sleep(length)
            return
        time.sleep(length / 2)
        candidates = [n for n in self.cluster.brokers() if n.alive and n.node_id not in self.cluster.paused]
        if candidates:
            victim = candidates[victim_index % len(candidates)]
            self.cluster.kill(victim, f"SIGKILL node {victim.node_id}", [self.topic])
            self.killed.append(victim)
            self.log(f"SIGKILL node {victim.node_id}")
        time.sleep(length / 2)

    def heal(self) -> None:
        self.cluster.network.heal()
        self.log_delayers()
        for node_id in list(self.cluster.paused):
            self.cluster.resume(self.cluster.nodes[node_id])
        for node in self.killed:
            self.cluster.restart(node)
        self.killed.clear()
        self.fault("heal")
        self.cluster.wait_in_sync([self.topic], RESYNC_TIMEOUT_S)
        time.sleep(self.rng.uniform(2.0, 5.0))


def leader_isolated(ctx: Context) -> None:
    """The leader of a partition cut off from the other nodes (so from the controllers), not from the clients."""
    while ctx.running():
        partition, leader = ctx.leader_of_random_partition()
        ctx.net.network.isolate(leader.node_id, [n for n in ctx.cluster.nodes if n != leader.node_id])
        ctx.fault(f"isolate node {leader.node_id} (leader of {ctx.topic}-{partition}) from the other nodes",
                  [(ctx.topic, partition)])
        ctx.hold(8.0, 15.0)
        ctx.heal()


def controller_isolated(ctx: Context) -> None:
    """The active controller cut off from every other node and from the clients."""
    while ctx.running():
        controller = ctx.cluster.active_controller()
        ctx.net.network.isolate(controller.node_id, [*(n for n in ctx.cluster.nodes if n != controller.node_id),
                                                     CLIENT])
        ctx.fault(f"isolate node {controller.node_id} (active controller) from nodes and clients")
        ctx.hold(8.0, 15.0)
        ctx.heal()


def majority_split(ctx: Context) -> None:
    """A minority of the nodes (one of three, two of five or six) cut off from the rest; the clients reach both."""
    while ctx.running():
        nodes = sorted(ctx.cluster.nodes)
        size = (len(nodes) - 1) // 2
        minority = [ctx.rng.choice(nodes)] if size == 1 else sorted(ctx.rng.sample(nodes, size))
        majority = [n for n in nodes if n not in minority]
        ctx.net.network.split(minority, majority)
        ctx.fault(f"split {set(minority)} | {majority}")
        ctx.hold(10.0, 20.0)
        ctx.heal()


def one_way(ctx: Context) -> None:
    """A partition's leader and one follower: one of them stops hearing the other (a seeded direction)."""
    while ctx.running():
        partition, leader = ctx.leader_of_random_partition()
        follower = ctx.rng.choice(ctx.followers(partition, leader))
        src, dst = (leader, follower) if ctx.rng.random() < 0.5 else (follower, leader)
        ctx.net.network.cut(src.node_id, dst.node_id)
        ctx.fault(f"node {dst.node_id} stops hearing node {src.node_id} ({ctx.topic}-{partition} leader "
                  f"{leader.node_id})", [(ctx.topic, partition)])
        ctx.hold(10.0, 15.0)
        ctx.heal()


def flapping(ctx: Context) -> None:
    """The link between a partition's leader and a follower cut and restored every 2 s, for 20 s at a time."""
    while ctx.running():
        partition, leader = ctx.leader_of_random_partition()
        follower = ctx.rng.choice(ctx.followers(partition, leader))
        ctx.fault(f"flap the link {leader.node_id} <-> {follower.node_id} every 2 s", [(ctx.topic, partition)])
        kill_at = ctx.rng.randrange(10)
        for i in range(10):
            if i % 2 == 0:
                ctx.net.network.cut_both(leader.node_id, follower.node_id)
            else:
                ctx.net.network.heal_cut(leader.node_id, follower.node_id)
                ctx.net.network.heal_cut(follower.node_id, leader.node_id)
            if ctx.kills and i == kill_at:
                ctx.hold(0.0, 0.0)
            time.sleep(2.0)
        ctx.heal()


def slow_follower(ctx: Context) -> None:
    """200 ms delay and 5 % loss both ways on one follower of a partition (the delay: sch_netem, or NFQUEUE and a delayer in user space)."""
    while ctx.running():
        partition, leader = ctx.leader_of_random_partition()
        follower = ctx.rng.choice(ctx.followers(partition, leader))
        if not ctx.net.network.set_delay(follower.node_id, 200):
            raise NemesisNotApplicable(f"{ctx.name} {delay_missing()}")
        ctx.net.network.set_loss(follower.node_id, 5)
        ctx.fault(f"node {follower.node_id} (follower of {ctx.topic}-{partition}): 200 ms delay, 5% loss",
                  [(ctx.topic, partition)])
        ctx.hold(20.0, 30.0)
        ctx.heal()


def lossy_follower(ctx: Context) -> None:
    """5 % of the packets between one follower of a partition and the other nodes dropped (nftables), both ways."""
    while ctx.running():
        partition, leader = ctx.leader_of_random_partition()
        follower = ctx.rng.choice(ctx.followers(partition, leader))
        ctx.net.network.set_loss(follower.node_id, 5)
        ctx.fault(f"node {follower.node_id} (follower of {ctx.topic}-{partition}): 5% loss", [(ctx.topic, partition)])
        ctx.hold(20.0, 30.0)
        ctx.heal()


def paused_follower(ctx: Context) -> None:
    """A partition's leader cut off from the other nodes, then one of its followers SIGSTOPped."""
    while ctx.running():
        partition, leader = ctx.leader_of_random_partition()
        follower = ctx.rng.choice(ctx.followers(partition, leader))
        ctx.net.network.isolate(leader.node_id, [n for n in ctx.cluster.nodes if n != leader.node_id])
        ctx.fault(f"isolate node {leader.node_id} (leader of {ctx.topic}-{partition})", [(ctx.topic, partition)])
        time.sleep(ctx.rng.uniform(1.0, 3.0))
        ctx.cluster.pause(follower)  # recorded in the history by pause()
        ctx.log(f"SIGSTOP node {follower.node_id} (follower)")
        ctx.hold(8.0, 12.0)
        ctx.heal()


BASE: dict[str, Callable[[Context], None]] = {
    "leader-isolated": leader_isolated,
    "controller-isolated": controller_isolated,
    "majority-split": majority_split,
    "one-way": one_way,
    "flapping": flapping,
    "slow-follower": slow_follower,
    "lossy-follower": lossy_follower,
    "paused-follower": paused_follower,
}
#: Nemeses that delay packets: they need ``tc qdisc ... netem`` or the NFQUEUE delayer.
NEEDS_DELAY = {"slow-follower"}
NEMESES = [*BASE, *(f"{name}+kill" for name in BASE)]


def not_applicable(name: str) -> str | None:
    """Why this machine cannot run the nemesis ``name`` (None: it can)."""
    missing = delay_missing() if name.removesuffix("+kill") in NEEDS_DELAY else None
    if missing:
        return f"{name} {missing}; lossy-follower applies the loss alone with nftables"
    return None


def describe(name: str) -> str:
    base = BASE[name.removesuffix("+kill")]
    doc = (base.__doc__ or "").strip()
    return doc + (" A node SIGKILLed during each fault." if name.endswith("+kill") else "")


@dataclass
class NemesisResult:
    name: str
    seed: int
    report: Report
    unavailability: Unavailability
    below_min_isr: list[str]
    read_committed_differs: list[str]
    faults: int
    duration_s: float
    producer_fatal_errors: list[str]
    group: GroupOffsetReport = field(default_factory=GroupOffsetReport)
    transactions: TransactionReport = field(default_factory=TransactionReport)
    transform: TransformReport | None = None
    layout: str = "3 combined"
    #: Values written twice, by cause (:func:`~tests.replication.fault_invariants.duplicate_causes`).
    duplicates_by_cause: dict[str, list[str]] = field(default_factory=dict)
    #: Every send of every writer (librdkafka writers ``wN``, Java writers ``jN``), and what each fault was.
    sends: list[Send] = field(default_factory=list)
    fault_log: list[str] = field(default_factory=list)
    #: NFQUEUE delayers found dead or killed (the delay the nemesis names did not hold).
    delay_problems: list[str] = field(default_factory=list)

    @property
    def acked_by_java(self) -> int:
        return sum(1 for s in self.sends if s.writer.startswith("j") and s.outcome is Outcome.ACKED)

    @property
    def problems(self) -> list[str]:
        out = list(self.report.problems)
        if self.below_min_isr:
            out.append(f"acked below min.insync.replicas: {len(self.below_min_isr)} (first: {self.below_min_isr[:3]})")
        if self.read_committed_differs:
            out.append(f"read_committed differs: {self.read_committed_differs[:3]}")
        return (out + self.group.problems + self.transactions.problems
                + (self.transform.problems if self.transform else []) + self.delay_problems)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        g, t = self.group, self.transactions
        return (f"nemesis={self.name} seed={self.seed} layout={self.layout!r} {self.report.summary()} "
                f"below_min_isr={len(self.below_min_isr)} read_committed_differs={len(self.read_committed_differs)} "
                f"group_commits={g.commits} group_offset_reads={g.observations} "
                f"group_offsets_back={len(g.went_back)} group_offsets_beyond_hw={len(g.beyond_high_watermark)} "
                f"group_commits_lost={len(g.lost_commits)} group_stale_reads={len(g.stale_reads)} "
                f"txns_committed={t.committed} txns_aborted={t.aborted} txns_unknown={t.unknown} "
                f"aborted_read={len(t.aborted_read)} committed_txn_missing={len(t.committed_missing)} "
                f"txn_duplicated={len(t.duplicated)} txn_partial={len(t.partial)} "
                + (f"{self.transform.summary()} " if self.transform else "")
                + "".join(f"duplicated_{cause.replace(' ', '_')}={len(v)} "
                          for cause, v in self.duplicates_by_cause.items()) +
                f"java_acked={self.acked_by_java} faults={self.faults} unavailable_windows={len(self.unavailability.windows)} "
                f"unavailable_median_s={self.unavailability.median_s:.1f} "
                f"unavailable_max_s={self.unavailability.max_s:.1f} duration_s={self.duration_s:.0f} "
                f"producer_fatal_errors={len(self.producer_fatal_errors)}")


#: How long after a heal a node that was cut off from the quorum may still answer from the metadata
#: it had (it learns of the leaders elected meanwhile within a heartbeat or two of the heal).
ZOMBIE_GRACE_S = 5.0


def cut_off_windows(timeline: list[tuple[float, frozenset[int]]], grace_s: float) -> dict[int, list[tuple[float, float]]]:
    """Node -> the stretches it was cut off from a majority of the voters, each extended by ``grace_s``."""
    out: dict[int, list[tuple[float, float]]] = {}
    open_since: dict[int, float] = {}
    for at, nodes in [*timeline, (float("inf"), frozenset())]:
        for node in list(open_since):
            if node not in nodes:
                out.setdefault(node, []).append((open_since.pop(node), at + grace_s))
        for node in nodes:
            open_since.setdefault(node, at)
    return out


def logged_at(event: dict[str, Any], offset: float) -> float:
    """When a node logged ``event``, on this process's monotonic clock (``offset``: wall minus monotonic)."""
    return datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00")).timestamp() - offset


def fenced_windows(cluster: NetnsFaultCluster, grace_s: float) -> dict[int, list[tuple[float, float]]]:
    """Broker -> the stretches (monotonic) from the controller fencing it (``broker_fenced`` in the
    active controller's log) to ``grace_s`` after it was unfenced: its partitions had moved to other
    leaders while it may not have heard so (a one-way cut between it and the active controller does
    that without cutting it off from a majority of the voters)."""
    offset = time.time() - time.monotonic()
    events: list[tuple[float, int, bool]] = []
    for node in cluster.nodes.values():
        for name, fenced in (("broker_fenced", True), ("broker_unfenced", False)):
            for event in node.events(name):
                try:
                    events.append((logged_at(event, offset), int(event["broker_id"]), fenced))
                except (KeyError, ValueError):
                    continue
    out: dict[int, list[tuple[float, float]]] = {}
    since: dict[int, float] = {}
    for at, broker, fenced in sorted(events):
        if fenced:
            since.setdefault(broker, at)
        elif broker in since:
            out.setdefault(broker, []).append((since.pop(broker), at + grace_s))
    for broker, start in since.items():
        out.setdefault(broker, []).append((start, float("inf")))
    return out


def pending_isr_windows(cluster: NetnsFaultCluster, timeout_s: float = PENDING_TIMEOUT_MS / 1000) -> list[PendingIsr]:
    """Each leader's requests to add replicas to an ISR (``isr_change_proposed`` with more replicas
    than the ISR, in its log), each until the leader's next request for that partition, a failed
    or refused request, a committed change reaching it (``partition_isr_changed``), or the leader's
    own give-up time (monotonic)."""
    offset = time.time() - time.monotonic()
    out: list[PendingIsr] = []
    for node_id, node in cluster.nodes.items():
        ends: list[tuple[float, tuple[str, int] | None]] = []  # None: every partition of the node
        proposals: list[tuple[float, str, int, tuple[int, ...], tuple[int, ...]]] = []
        try:
            for event in node.events("isr_change_proposed"):
                key = (str(event["topic"]), int(event["partition"]))
                isr = tuple(int(r) for r in event["isr"])
                proposed = tuple(int(r) for r in event["proposed"])
                proposals.append((logged_at(event, offset), *key, isr, proposed))
                ends.append((logged_at(event, offset), key))
            for name in ("isr_change_failed", "isr_change_refused", "partition_isr_changed"):
                for event in node.events(name):
                    which = ((str(event["topic"]), int(event["partition"]))
                             if "topic" in event and "partition" in event else None)
                    ends.append((logged_at(event, offset), which))
        except (KeyError, TypeError, ValueError):
            continue
        ends.sort(key=lambda e: e[0])
        for start, topic, partition, isr, proposed in proposals:
            if not set(proposed) - set(isr):
                continue  # a shrink: the acks=all check uses the committed ISR until it lands
            end = start + timeout_s
            for t, which in ends:
                if t > start and (which is None or which == (topic, partition)):
                    end = min(end, t)
                    break
            out.append(PendingIsr(start, end, node_id, topic, partition, isr, tuple(sorted(set(isr) | set(proposed)))))
    return out


def merge_windows(*sources: dict[int, list[tuple[float, float]]]) -> dict[int, list[tuple[float, float]]]:
    out: dict[int, list[tuple[float, float]]] = {}
    for source in sources:
        for node, windows in source.items():
            out.setdefault(node, []).extend(windows)
    return out


def duplicate_copies(cluster: NetnsFaultCluster, topic: str, partitions: int,
                     values: set[str]) -> dict[str, list[tuple[int, int, int]]]:
    """Where each of ``values`` sits in the log, with the producer epoch of each copy (read from one
    replica's segment files: the replicas were found identical below the high watermark)."""
    out: dict[str, list[tuple[int, int, int]]] = {}
    for partition in range(partitions):
        dirs = partition_dirs(cluster.data_dirs(), topic, partition)
        if dirs and values:
            out.update(producer_epochs_of(dirs[min(dirs)], values))
    return out


def layout_of(cluster: NetnsFaultCluster) -> str:
    brokers = len(cluster.brokers())
    if cluster.dedicated:
        return f"{len(cluster.nodes) - brokers} controllers + {brokers} brokers"
    voters = sum(1 for n in cluster.nodes.values() if n.controller_port)
    return f"{brokers} combined" + ("" if voters == brokers else f" ({voters} voters)")


def check_transformers(cluster: NetnsFaultCluster, transformers: list[Transformer], source: str, sink: str,
                       source_reads: list[Read], high_watermarks: dict[tuple[str, int], int],
                       read_by_members: list[str], catch_up_s: float = 300.0) -> TransformReport:
    """Once the source topic is drained (its writers stopped), let the transformers consume it to its
    end (at most ``catch_up_s``, and at most 60 s without progress), stop them, and check the sink's read_committed drain against the source's log and
    the group's committed offsets."""
    ends = {p: hw for (t, p), hw in high_watermarks.items() if t == source}
    try:
        caught_up = all([x.catch_up(ends, catch_up_s) for x in transformers])
    finally:
        for x in transformers:
            x.stop()
        hung = []
        for x in transformers:
            try:
                x.join(60.0)
            except AssertionError as ex:
                hung.append(str(ex))
        if hung:
            raise AssertionError("; ".join(hung))
    group = transformers[0].group
    final = OffsetObserver(lambda: [(n.node_id, n.host, n.port) for n in cluster.reachable_brokers()], group,
                           {source: sorted(ends)}).final()
    outputs = [r.value for r in drain(cluster.bootstrap(), [sink], timeout_s=60.0,
                                      isolation_level="read_committed")[0]]
    report = transform_problems(source, [t for x in transformers for t in x.transactions],
                              [c for x in transformers for c in x.commits()],
                              {(r.partition, r.offset): r.value for r in source_reads if r.topic == source},
                              outputs, {p: o for (t, p), o in final.items() if t == source}, ends,
                              [v for v in read_by_members if v.startswith(OUTPUT_PREFIX)], caught_up)
    report.stall = "; ".join(f"{x.name}: {x.stall}" for x in transformers if x.stall)
    return report


def run_nemesis(cluster: NetnsFaultCluster, name: str, seed: int, duration_s: float, topic: str = "chaos",
                workload: Workload | None = None, log: Callable[[str], None] = lambda _: None) -> NemesisResult:
    """The ``workload`` through ``duration_s`` of the nemesis ``name`` (the last fault started before
    the deadline runs to its end), then heal, drain and check everything."""
    base_name = name.removesuffix("+kill")
    if base_name not in BASE:
        raise ValueError(f"unknown nemesis {name!r}; known: {', '.join(NEMESES)}")
    if base_name in NEEDS_DELAY and not cluster.network.can_delay:
        raise NemesisNotApplicable(f"{name} {delay_missing()}")  # checked before the cluster starts by callers
    load = workload or Workload()
    partitions = load.partitions
    started = time.monotonic()
    tx_topic = f"{topic}-tx"
    group = f"fault-group-{seed}"
    out_topic = f"{topic}-out"
    topics = [topic, *([tx_topic] if load.transactional_writers else []),
              *([out_topic] if load.transformers else [])]
    for t in topics:
        cluster.create_topic(t, partitions, 3, configs={"min.insync.replicas": str(MIN_INSYNC_REPLICAS)})
    monitor = IsrMonitor(cluster, [topic]).start()
    bootstrap = cluster.bootstrap()
    running = start_writers(cluster, topic, partitions, load.writers, load.rate, DELIVERY_TIMEOUT_MS,
                            client_debug=load.client_debug, debug_dir=cluster.quorum.base)
    java = [JavaWriter(f"j{i}", bootstrap, topic, partitions, cluster.history, load.rate,
                       cluster.quorum.base / f"java-writer-{i}.log", cluster.network.exec_prefix(CLIENT),
                       delivery_timeout_ms=DELIVERY_TIMEOUT_MS).start()
            for i in range(load.java_writers)]
    txns = [TransactionalWriter(f"t{i}", bootstrap, tx_topic, partitions, seed * 100 + i).start()
            for i in range(load.transactional_writers)]
    transformers = [Transformer(f"x{i}", bootstrap, f"fault-ctp-{seed}", topic, out_topic, seed * 100 + 50 + i).start()
                    for i in range(load.transformers)]
    members = [GroupMember(f"m{i}", bootstrap, group, topics, debug=load.client_debug,
                           debug_log=cluster.quorum.base / f"member-m{i}.log").start()
               for i in range(load.group_members)]
    observer = OffsetObserver(lambda: [(n.node_id, n.host, n.port) for n in cluster.reachable_brokers()], group,
                              {t: list(range(partitions)) for t in topics}) if members else None
    if observer:
        observer.start()
    ctx = Context(cluster, random.Random(seed), time.monotonic() + 3.0 + duration_s, topic, partitions,
                  name.endswith("+kill"), log, name=name, seed=seed)
    try:
        return _run_and_check(ctx, base_name, load, topics, tx_topic, out_topic, monitor, running, java, txns,
                              transformers, members, observer, started)
    finally:  # stopped already unless the run failed
        for x in transformers:
            x.stop()


def _run_and_check(ctx: Context, base_name: str, load: Workload, topics: list[str], tx_topic: str, out_topic: str,
                   monitor: IsrMonitor, running: list[Writer], java: list[JavaWriter],
                   txns: list[TransactionalWriter], transformers: list[Transformer], members: list[GroupMember],
                   observer: OffsetObserver | None, started: float) -> NemesisResult:
    cluster, topic, partitions, name, seed = ctx.cluster, ctx.topic, load.partitions, ctx.name, ctx.seed
    try:
        time.sleep(3.0)  # acknowledged writes before the first fault
        BASE[base_name](ctx)
        time.sleep(3.0)
    finally:
        try:
            ctx.cluster.network.heal()
            ctx.log_delayers()
            for node_id in list(cluster.paused):
                cluster.resume(cluster.nodes[node_id])
            for victim in ctx.killed:
                if not victim.alive:
                    cluster.restart(victim)
        finally:
            workers: list[JavaWriter | TransactionalWriter | GroupMember] = [*java, *txns, *members]
            for worker in workers:
                worker.stop()
            stop_writers(running, DELIVERY_TIMEOUT_MS)
            hung: list[AssertionError] = []
            for worker in workers:  # a Java writer's close waits for its sends as long as their delivery timeout
                try:  # every worker is joined (and so stopped) even when one of them hangs
                    worker.join(DELIVERY_TIMEOUT_MS / 1000 + 20 if isinstance(worker, JavaWriter) else 60.0)
                except AssertionError as ex:
                    hung.append(ex)
            if observer:
                observer.stop()
            monitor.stop()
            if hung:
                raise AssertionError("; ".join(str(ex) for ex in hung))
    report = cluster.verify([topic], settle_s=RESYNC_TIMEOUT_S)
    causes = duplicate_causes(duplicate_copies(cluster, topic, partitions,
                                               {d.split(" read ")[0] for d in report.duplicated}))
    sends = cluster.history.snapshot()
    uncommitted_reads, _, high_watermarks = drain(cluster.bootstrap(), topics, timeout_s=60.0)
    uncommitted = {r.value for r in uncommitted_reads if r.topic == topic}
    committed_reads = drain(cluster.bootstrap(), topics, timeout_s=60.0, isolation_level="read_committed")[0]
    committed = {r.value for r in committed_reads if r.topic == topic}
    differs = sorted(uncommitted ^ committed)
    group_report = GroupOffsetReport()
    if observer:
        group_report = group_offset_problems([c for m in members for c in m.commits], observer.observations,
                                             observer.final(), high_watermarks,
                                             merge_windows(cut_off_windows(ctx.cut_off, ZOMBIE_GRACE_S),
                                                           fenced_windows(cluster, ZOMBIE_GRACE_S)))
    transform_report = check_transformers(cluster, transformers, topic, out_topic, uncommitted_reads,
                                          high_watermarks, [v for m in members for v in m.read]) \
        if transformers else None
    # What the transactional clients were told, for the run's log.
    told = [(f"transactional producer {w.name}", w.errors) for w in txns]
    told += [(f"transformer {x.name}", x.errors) for x in transformers]
    for who, errors in told:
        for error in errors[:20]:
            ctx.log(f"{who}: {error}")
    txn_report = transaction_problems([x for w in txns for x in w.transactions],
                                      [r.value for r in committed_reads if r.topic == tx_topic],
                                      [v for m in members for v in m.read if v.startswith("tx-")])
    return NemesisResult(
        name, seed, report, unavailability_windows(sends),
        acks_below_min_isr(sends, monitor.samples, MIN_INSYNC_REPLICAS, pending=pending_isr_windows(cluster)), differs,
        sum(1 for f in cluster.history.faults if f.what != "heal"), time.monotonic() - started,
        [e for w in running for e in w.fatal_errors], group_report, txn_report, transform_report, layout_of(cluster),
        duplicates_by_cause=causes, sends=sends, fault_log=[f.what for f in cluster.history.faults],
        delay_problems=list(cluster.network.delay_problems))
