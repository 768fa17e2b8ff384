"""``cormorant cluster up|down|status --dir D``: a local multi-node cluster in one command.

``up`` picks free ports on 127.0.0.1 (a client listener and a controller
listener per node), writes one ``server.properties`` per node under
``D/node-N/`` (KRaft names: ``process.roles``, ``node.id``,
``controller.quorum.voters``, ``listeners``, ``advertised.listeners``,
``log.dirs``), starts every node as a daemon in its own session (``D/node-N/
cormorant.pid``, log in ``D/node-N/node.log``), waits until each says it is
ready and prints the bootstrap servers. Run again on the same directory, it
restarts the nodes that are down with their saved configuration (same ports,
same ``log.dirs``). ``down`` stops every node with SIGTERM (SIGKILL after
``--timeout``) by its pid file. The first three nodes (at most) run both roles;
more nodes run as brokers only.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TextIO

EXIT_FAILURE = 1
READY_PREFIX = "cormorant ready "
STATE_FILE = "cluster.json"
PID_FILE = "cormorant.pid"
MAX_VOTERS = 3
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class NodeSpec:
    node_id: int
    roles: str
    port: int
    controller_port: int | None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


def free_ports(count: int) -> list[int]:
    """Ports the kernel hands out as free on 127.0.0.1 (held together so they differ)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def plan(nodes: int, controllers: int) -> list[NodeSpec]:
    ports = free_ports(nodes + controllers)
    out = []
    for i in range(nodes):
        voter = i < controllers
        out.append(NodeSpec(i + 1, "broker,controller" if voter else "broker", ports[i],
                            ports[nodes + i] if voter else None))
    return out


def properties(spec: NodeSpec, specs: list[NodeSpec], directory: Path, cluster_id: str,
               overrides: dict[str, str]) -> str:
    voters = ",".join(f"{s.node_id}@127.0.0.1:{s.controller_port}" for s in specs if s.controller_port)
    listeners = f"PLAINTEXT://127.0.0.1:{spec.port}"
    if spec.controller_port:
        listeners += f",CONTROLLER://127.0.0.1:{spec.controller_port}"
    values = {
        "process.roles": spec.roles,
        "node.id": str(spec.node_id),
        "cluster.id": cluster_id,
        "controller.quorum.voters": voters,
        "controller.listener.names": "CONTROLLER",
        "listeners": listeners,
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{spec.port}",
        "log.dirs": str(directory / "data"),
        # Each node's metrics endpoint on a port of its own.
        "metrics.listener": "127.0.0.1:0",
        **overrides,
    }
    lines = ["# Written by `cormorant cluster up`; edit and run `cormorant cluster up` again to apply."]
    lines += [f"{k}={v}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


def _node_dir(root: Path, node_id: int) -> Path:
    return root / f"node-{node_id}"


def read_pid(path: Path) -> int | None:
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if _is_ours(pid, path.parent) else None


def _is_ours(pid: int, node_dir: Path) -> bool:
    # A pid file may outlive its process; the pid may since belong to someone else.
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True
    return str(node_dir / "server.properties").encode() in cmdline


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][:1] != "Z"
    except OSError:
        return True


def start_node(node_dir: Path) -> int:
    log = open(node_dir / "node.log", "ab")
    out = open(node_dir / "stdout.log", "wb")
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "broker", "serve", str(node_dir / "server.properties")],
            stdin=subprocess.DEVNULL, stdout=out, stderr=log,
            start_new_session=True, close_fds=True, cwd=node_dir,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (_source_root(), os.environ.get(
                "PYTHONPATH", "")) if p)},
        )
    finally:
        log.close()
        out.close()
    (node_dir / PID_FILE).write_text(f"{proc.pid}\n")
    return proc.pid


def _source_root() -> str:
    # The children import the same cormorant as this process, installed or not.
    return str(Path(__file__).resolve().parent.parent.parent)


def wait_ready(started: dict[Path, int], timeout_s: float) -> list[Path]:
    """The nodes (node dir -> pid just started) that did not print their ready line within
    ``timeout_s``, or exited first."""
    deadline = time.monotonic() + timeout_s
    waiting = dict(started)
    while waiting and time.monotonic() < deadline:
        for node_dir, pid in list(waiting.items()):
            text = (node_dir / "stdout.log").read_text(errors="replace") if (node_dir / "stdout.log").exists() else ""
            if READY_PREFIX in text:
                del waiting[node_dir]
                continue
            # The pid is known to be ours: a child that has not exec'd yet still shows this
            # process's command line, so read_pid() could not tell it from a stranger.
            if not _alive(pid):
                return list(waiting)
        time.sleep(0.1)
    return list(waiting)


def node_metrics_url(node_dir: Path) -> str | None:
    """The metrics URL from the node's ready line (each node binds a port of its own)."""
    try:
        text = (node_dir / "stdout.log").read_text(errors="replace")
    except OSError:
        return None
    for line in reversed(text.splitlines()):
        if line.startswith(READY_PREFIX):
            for word in line.split():
                if word.startswith("metrics="):
                    return word.removeprefix("metrics=")
            return None
    return None


def up(root: Path, nodes: int, controllers: int | None, overrides: dict[str, str], out: TextIO) -> int:
    root = root.resolve()
    root.mkdir(parents=True, exist_ok=True)
    state_path = root / STATE_FILE
    if state_path.exists():
        state = json.loads(state_path.read_text())
        specs = [NodeSpec(**n) for n in state["nodes"]]
    else:
        voters = controllers if controllers is not None else min(nodes, MAX_VOTERS)
        if not 1 <= voters <= nodes:
            print(f"cormorant cluster: --controllers must be between 1 and {nodes}", file=sys.stderr)
            return EXIT_FAILURE
        specs = plan(nodes, voters)
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        for spec in specs:
            node_dir = _node_dir(root, spec.node_id)
            node_dir.mkdir(parents=True, exist_ok=True)
            (node_dir / "server.properties").write_text(properties(spec, specs, node_dir, cluster_id, overrides))
        state = {"cluster_id": cluster_id, "nodes": [asdict(s) for s in specs]}
        state_path.write_text(json.dumps(state, indent=2) + "\n")
    started: dict[Path, int] = {}
    for spec in specs:
        node_dir = _node_dir(root, spec.node_id)
        pid = read_pid(node_dir / PID_FILE)
        if pid is not None and _alive(pid):
            continue
        started[node_dir] = start_node(node_dir)
    late = wait_ready(started, START_TIMEOUT_S)
    if late:
        for node_dir in late:
            print(f"cormorant cluster: {node_dir.name} did not start; see {node_dir / 'node.log'}", file=sys.stderr)
        return EXIT_FAILURE
    bootstrap = ",".join(s.bootstrap for s in specs if "broker" in s.roles)
    print(f"cluster {state['cluster_id']} up: {len(specs)} nodes in {root}", file=out)
    for spec in specs:
        metrics = node_metrics_url(_node_dir(root, spec.node_id))
        if metrics:
            print(f"node {spec.node_id} metrics: cormorant top --metrics-url {metrics} "
                  f"--bootstrap-server {spec.bootstrap}", file=out)
    print(f"bootstrap.servers={bootstrap}", file=out)
    return 0


def down(root: Path, timeout_s: float, out: TextIO) -> int:
    root = root.resolve()
    if not (root / STATE_FILE).exists():
        print(f"cormorant cluster: no cluster in {root}", file=sys.stderr)
        return EXIT_FAILURE
    pids: dict[Path, int] = {}
    for pid_file in sorted(root.glob(f"node-*/{PID_FILE}")):
        pid = read_pid(pid_file)
        if pid is not None and _alive(pid):
            os.kill(pid, signal.SIGTERM)
            pids[pid_file] = pid
        else:
            pid_file.unlink(missing_ok=True)
    deadline = time.monotonic() + timeout_s
    while pids and time.monotonic() < deadline:
        for pid_file, pid in list(pids.items()):
            if not _alive(pid):
                pid_file.unlink(missing_ok=True)
                del pids[pid_file]
        time.sleep(0.1)
    for pid_file, pid in pids.items():
        print(f"cormorant cluster: {pid_file.parent.name} (pid {pid}) ignored SIGTERM; sending SIGKILL",
              file=sys.stderr)
        os.kill(pid, signal.SIGKILL)
        pid_file.unlink(missing_ok=True)
    print(f"cluster in {root} down", file=out)
    return 0


def status(root: Path, out: TextIO) -> int:
    root = root.resolve()
    state_path = root / STATE_FILE
    if not state_path.exists():
        print(f"cormorant cluster: no cluster in {root}", file=sys.stderr)
        return EXIT_FAILURE
    state = json.loads(state_path.read_text())
    for n in state["nodes"]:
        spec = NodeSpec(**n)
        pid = read_pid(_node_dir(root, spec.node_id) / PID_FILE)
        running = pid is not None and _alive(pid)
        controller = f" controller=127.0.0.1:{spec.controller_port}" if spec.controller_port else ""
        metrics = node_metrics_url(_node_dir(root, spec.node_id)) if running else None
        print(f"node {spec.node_id} roles={spec.roles} broker={spec.bootstrap}{controller} "
              f"{'running pid=' + str(pid) if running else 'stopped'}"
              f"{f' metrics={metrics}' if metrics else ''}", file=out)
    return 0


def run_cluster(args: argparse.Namespace) -> int:
    root = Path(args.dir)
    if args.action == "up":
        overrides: dict[str, str] = {}
        for item in args.override or []:
            key, sep, value = item.partition("=")
            if not sep:
                print(f"cormorant cluster: --override {item!r} is not KEY=VALUE", file=sys.stderr)
                return EXIT_FAILURE
            overrides[key.strip()] = value.strip()
        return up(root, args.nodes, args.controllers, overrides, sys.stdout)
    if args.action == "down":
        return down(root, args.timeout, sys.stdout)
    return status(root, sys.stdout)
