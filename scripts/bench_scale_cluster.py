#!/usr/bin/env python3
"""Partition scale on a 3-node cluster (``scripts/bench scale-cluster``), replication factor 3.

Starts three combined broker+controller nodes on 127.0.0.1 as a user does, with
``cormorant cluster up --nodes 3`` (every setting at its default unless ``--override``
changes it; the broker session timeout is Kafka's 9 s), under ``prlimit --nofile=LIMIT``
(default 4,096, every node inherits it). Rows:

- creation: TOPICS topics of PARTITIONS partitions, replication factor 3, through
  confluent-kafka's AdminClient, 20 topics per CreateTopics request. The row times from the
  first request sent until the Metadata of every one of the three brokers shows every
  partition with a leader and all three replicas in its ISR; partitions per second. The
  CreateTopics answers alone are timed too.
- with ``--kill`` (after the creation row): ``kill -9`` of one node (by default one that is not
  the active controller, ``--kill-controller`` for the active controller). Seconds until
  every partition the node led has another leader, as one surviving broker's Metadata shows
  it (and, of that, until the controller logged ``broker_fenced``: the session timeout and
  the fence's commit), and until the node is out of every ISR; then the node is restarted (``cormorant
  cluster up`` on the same directory restarts the nodes that are down): seconds to its
  ready line, and until it is back in the ISR of every partition it hosts.

The machine's load average is printed with the results, and the CPU seconds each node used
in each phase. Size of the issue's rows: ``--topics 100 --partitions 100`` (creation) and
``--topics 300 --partitions 100 --kill`` (30,000 partitions, a node killed).

Usage: scripts/bench scale-cluster [--topics N] [--partitions N] [--nofile N] [--kill]
       [--kill-controller] [--override KEY=VALUE] [--dir D]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from broker.tools.client import ClientError, KafkaClient  # noqa: E402
from broker.tools.metadata import describe_quorum  # noqa: E402
from wire.generated.api_003_metadata import MetadataRequest, MetadataResponse  # noqa: E402

NODES = 3
REPLICATION = 3
TOPICS_PER_REQUEST = 20
PREFIX = "scale-"
#: Bounds of the waits (a 30,000-partition start on a loaded machine takes minutes).
TIMEOUT_S = 900.0
POLL_S = 0.2
_TICKS = os.sysconf("SC_CLK_TCK")

#: Partition (topic, index) -> (leader, replicas, isr), as one broker's Metadata has it.
Partitions = dict[tuple[str, int], tuple[int, tuple[int, ...], tuple[int, ...]]]
_T = TypeVar("_T")


class Cluster:
    """Three nodes started with ``cormorant cluster up`` in ``directory``, under a descriptor limit."""

    def __init__(self, directory: Path, nofile: int, overrides: list[str]) -> None:
        self.directory = directory
        self.nofile = nofile
        self.overrides = overrides
        self.ports: dict[int, int] = {}

    def up(self, timeout_s: float = TIMEOUT_S) -> None:
        """``cluster up``: starts the nodes that are down and waits for every ready line (the
        command itself gives a start 60 s; a start of tens of thousands of partitions on a
        loaded machine takes longer, so a late node is waited for here)."""
        command = ["prlimit", f"--nofile={self.nofile}:{self.nofile}", sys.executable, "-m", "broker", "cluster",
                   "up", "--dir", str(self.directory), "--nodes", str(NODES)]
        for item in self.overrides:
            command += ["--override", item]
        subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s, check=False)
        state = json.loads((self.directory / "cluster.json").read_text())
        self.ports = {n["node_id"]: n["port"] for n in state["nodes"]}
        deadline = time.monotonic() + timeout_s
        for node in self.ports:
            while "cormorant ready " not in self._stdout(node):
                if self.pid(node) is None:
                    raise SystemExit(f"node {node} exited:\n{self.log_tail(node)}")
                if time.monotonic() > deadline:
                    raise SystemExit(f"node {node} not ready in {timeout_s:.0f} s:\n{self.log_tail(node)}")
                time.sleep(POLL_S)

    def down(self) -> None:
        subprocess.run([sys.executable, "-m", "broker", "cluster", "down", "--dir", str(self.directory),
                        "--timeout", "120"], cwd=ROOT, capture_output=True, timeout=300, check=False)

    def _stdout(self, node: int) -> str:
        path = self.directory / f"node-{node}" / "stdout.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def log_tail(self, node: int, lines: int = 20) -> str:
        path = self.directory / f"node-{node}" / "node.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def pid(self, node: int) -> int | None:
        """The node's pid from its pid file, if that process is alive."""
        try:
            pid = int((self.directory / f"node-{node}" / "cormorant.pid").read_text().strip())
            os.kill(pid, 0)
        except (OSError, ValueError):
            return None
        return pid

    def bootstrap(self, node: int) -> str:
        return f"127.0.0.1:{self.ports[node]}"

    def kill9(self, node: int) -> None:
        pid = self.pid(node)
        assert pid is not None, f"node {node} is not running"
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while self.pid(node) is not None and time.monotonic() < deadline:
            time.sleep(0.05)

    def cpu(self) -> dict[int, float]:
        """CPU seconds (user + system) of each running node."""
        out = {}
        for node in self.ports:
            pid = self.pid(node)
            if pid is None:
                continue
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[node] = (int(fields[11]) + int(fields[12])) / _TICKS
        return out

    def active_controller(self) -> int:
        with KafkaClient.connect(self.bootstrap(min(self.ports)), timeout_s=30.0) as client:
            return int(describe_quorum(client)["leader_id"])

    def partitions(self, node: int) -> Partitions:
        with KafkaClient.connect(self.bootstrap(node), timeout_s=60.0) as client:
            reply = client.send(MetadataRequest(topics=None), MetadataResponse)
        return {(t.name or "", p.partition_index): (p.leader_id, tuple(p.replica_nodes), tuple(p.isr_nodes))
                for t in reply.topics if (t.name or "").startswith(PREFIX) for p in t.partitions}


def wait_until(check: Callable[[], _T | None], what: str, timeout_s: float = TIMEOUT_S) -> _T:
    """Polls ``check`` (connection errors count as not yet) until it returns a value."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value is not None:
                return value
        except (ClientError, OSError) as ex:
            last = ex
        time.sleep(POLL_S)
    raise SystemExit(f"{what}: not within {timeout_s:.0f} s (last error: {last!r})")


def full(partitions: Partitions, expected: int) -> bool:
    return len(partitions) == expected and all(
        leader >= 0 and len(replicas) == REPLICATION and sorted(isr) == sorted(replicas)
        for leader, replicas, isr in partitions.values())


def create(cluster: Cluster, names: list[str], partitions: int) -> tuple[float, float]:
    """(seconds until every CreateTopics was answered, seconds until every broker's Metadata
    shows every partition with a leader and a full ISR), both from the first request."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": ",".join(cluster.bootstrap(n) for n in cluster.ports)})
    admin.list_topics(timeout=30)  # connected before the clock starts
    started = time.monotonic()
    for i in range(0, len(names), TOPICS_PER_REQUEST):
        batch = [NewTopic(n, partitions, REPLICATION) for n in names[i : i + TOPICS_PER_REQUEST]]
        for future in admin.create_topics(batch, operation_timeout=300, request_timeout=310).values():
            try:
                future.result(TIMEOUT_S)
            except KafkaException as ex:  # a retried request finds the topic it created
                if ex.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
    answered = time.monotonic() - started
    expected = len(names) * partitions
    for node in cluster.ports:
        wait_until(lambda node=node: True if full(cluster.partitions(node), expected) else None,  # type: ignore[misc]
                   f"every partition with a leader and a full ISR on node {node}")
    return answered, time.monotonic() - started


def fenced_at(cluster: Cluster, victim: int, since: float) -> float | None:
    """The wall-clock time of the ``broker_fenced`` line (session expired) of ``victim`` after
    ``since``, in any node's log (the active controller logs it)."""
    for node in cluster.ports:
        path = cluster.directory / f"node-{node}" / "node.log"
        if node == victim or not path.exists():
            continue
        for line in path.read_text(errors="replace").splitlines():
            if "broker_fenced" in line and f"broker_id={victim} " in line and "session expired" in line:
                at = datetime.fromisoformat(line.split()[0]).timestamp()
                if at >= since:
                    return at
    return None


def kill_and_restart(cluster: Cluster, victim: int, expected: int, row: dict[str, float]) -> None:
    survivor = min(n for n in cluster.ports if n != victim)
    before = cluster.partitions(survivor)
    led = {tp for tp, (leader, _, _) in before.items() if leader == victim}
    hosted = {tp for tp, (_, replicas, _) in before.items() if victim in replicas}
    print(f"  node {victim} leads {len(led)} partitions and hosts {len(hosted)}; node {survivor} answers Metadata",
          flush=True)
    cpu = cluster.cpu()
    killed, killed_wall = time.monotonic(), time.time()
    cluster.kill9(victim)

    def new_leaders() -> Partitions | None:
        now = cluster.partitions(survivor)
        return now if all(now[tp][0] not in (victim, -1) for tp in led) else None

    after = wait_until(new_leaders, f"a new leader for the {len(led)} partitions node {victim} led")
    show(row, "new leader for all it led s", time.monotonic() - killed)
    fenced = fenced_at(cluster, victim, killed_wall)
    if fenced is not None:
        # The session timeout, then the fence's records committed: the rest is the brokers'.
        show(row, "  of which until fenced (session expired) s", fenced - killed_wall)
    wait_until(lambda: True if all(victim not in isr for _, _, isr in cluster.partitions(survivor).values())
               else None, f"node {victim} out of every ISR")
    show(row, "out of every ISR s", time.monotonic() - killed)
    assert all(after[tp][0] != victim for tp in led)
    report_cpu("kill", cpu, cluster.cpu())
    cpu = cluster.cpu()
    restarted = time.monotonic()
    cluster.up()
    show(row, "restart to ready s", time.monotonic() - restarted)
    wait_until(lambda: True if full(cluster.partitions(survivor), expected) else None,
               f"node {victim} back in every ISR")
    show(row, "restart until back in every ISR s", time.monotonic() - restarted)
    report_cpu("restart", cpu, cluster.cpu())


def report_cpu(phase: str, before: dict[int, float], after: dict[int, float]) -> None:
    used = ", ".join(f"node {n} {after[n] - before.get(n, 0.0):.1f} s" for n in sorted(after))
    print(f"  CPU used during {phase}: {used}; load average {os.getloadavg()}", flush=True)


def show(row: dict[str, float], key: str, value: float) -> None:
    print(f"  {key} = {value:.3f}", flush=True)
    row[key] = value


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench scale-cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--nofile", type=int, default=4096)
    parser.add_argument("--kill", action="store_true", help="then kill -9 a node and restart it")
    parser.add_argument("--kill-controller", action="store_true",
                        help="kill the active controller (default: a node that is not)")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting for every node (cormorant cluster up --override)")
    parser.add_argument("--dir", help="the cluster's directory (kept); default a temporary one, removed")
    args = parser.parse_args(argv)
    directory = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="cormorant-bench-scale-cluster-"))
    cluster = Cluster(directory, args.nofile, args.override)
    names = [f"{PREFIX}{i}" for i in range(args.topics)]
    total = args.topics * args.partitions
    row: dict[str, float] = {}
    try:
        print(f"load average before: {os.getloadavg()}, cpus {os.cpu_count()}", flush=True)
        print(f"{NODES} nodes, {args.topics} topics x {args.partitions} partitions, replication factor "
              f"{REPLICATION}, nofile={args.nofile}", flush=True)
        cluster.up()
        cpu = cluster.cpu()
        answered, in_sync = create(cluster, names, args.partitions)
        show(row, "CreateTopics answered s", answered)
        show(row, "create until leader + full ISR on every broker s", in_sync)
        show(row, "create partitions/s", total / in_sync)
        report_cpu("creation", cpu, cluster.cpu())
        if args.kill:
            controller = cluster.active_controller()
            victim = controller if args.kill_controller else max(n for n in cluster.ports if n != controller)
            print(f"  active controller: node {controller}; killing node {victim}", flush=True)
            kill_and_restart(cluster, victim, total, row)
        print(f"load average after: {os.getloadavg()}")
        for key, value in row.items():
            print(f"{key:<52}{value:>12.3f}")
    finally:
        cluster.down()
        if not args.dir:
            shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
