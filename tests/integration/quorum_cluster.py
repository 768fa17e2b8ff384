"""Multi-node clusters of real ``cormorant serve`` processes on 127.0.0.1, for the quorum tests.

Ports are picked free up front (a client and a controller listener per node) so
``controller.quorum.voters`` can name them; every process is started with
``--override`` settings, as an operator would, logs JSON lines to its own file,
and is killed by its pid when the cluster is closed.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

from broker.tools.client import ClientError, KafkaClient
from broker.tools.metadata import describe_image, describe_quorum
from tests.shared import EPHEMERAL_METRICS, ROOT, STALL_GUARD

READY = "cormorant ready "
START_TIMEOUT_S = 60.0


def free_ports(count: int, avoid: Collection[int] = ()) -> list[int]:
    """``count`` distinct ports free now and not in ``avoid``: ports handed out by an earlier
    call are free again until their broker binds them, and the kernel may hand them out again."""
    socks = []
    ports: list[int] = []
    try:
        # Every socket holds its port until the end, so each port in ``avoid`` comes back once at most.
        for _ in range(count + len(avoid)):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            port = s.getsockname()[1]
            if port not in avoid:
                ports.append(port)
                if len(ports) == count:
                    return ports
        raise AssertionError(f"no {count} free ports outside {sorted(avoid)}")
    finally:
        for s in socks:
            s.close()


class Node:
    def __init__(self, cluster: QuorumCluster, node_id: int, port: int, controller_port: int | None) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self.port = port
        self.controller_port = controller_port
        self.dir = cluster.base / f"node-{node_id}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.dir / "node.log"
        self.out_path = self.dir / "stdout.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._out_offset = 0
        #: The address the node listens on, and a command prefix that starts it elsewhere (e.g. in a
        #: network namespace: ``ip netns exec NAME``).
        self.host = "127.0.0.1"
        self.exec_prefix: list[str] = []

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def args(self) -> list[str]:
        roles = "broker,controller" if self.controller_port else "broker"
        listeners = f"PLAINTEXT://{self.host}:{self.port}"
        if self.controller_port:
            listeners += f",CONTROLLER://{self.host}:{self.controller_port}"
        settings = {
            "node.id": str(self.node_id),
            "process.roles": roles,
            "controller.quorum.voters": self.cluster.voters,
            "controller.listener.names": "CONTROLLER",
            "listeners": listeners,
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "log.dirs": str(self.dir / "data"),
            "log.format": "json",
            "metrics.enabled": "false",
            **EPHEMERAL_METRICS,
            "broker.session.timeout.ms": str(self.cluster.session_timeout_ms),
            "broker.heartbeat.interval.ms": "500",
            **STALL_GUARD,
            **self.cluster.overrides,
        }
        out = [*self.exec_prefix, sys.executable, "-m", "broker", "serve"]
        for key, value in settings.items():
            out += ["--override", f"{key}={value}"]
        return out

    def start(self) -> None:
        assert not self.alive
        self._out_offset = self.out_path.stat().st_size if self.out_path.exists() else 0
        with open(self.log_path, "ab") as err, open(self.out_path, "ab") as out:
            self.proc = subprocess.Popen(self.args(), cwd=ROOT, stdout=out, stderr=err, stdin=subprocess.DEVNULL)

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with open(self.out_path, "rb") as f:
                f.seek(self._out_offset)
                if READY.encode() in f.read():
                    return
            if not self.alive:
                break
            time.sleep(0.05)
        raise AssertionError(f"node {self.node_id} not ready:\n{self.log_tail()}")

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self, timeout_s: float = 30.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise AssertionError(f"node {self.node_id} ignored SIGTERM for {timeout_s}s") from None
        return self.proc.returncode

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def events(self, name: str) -> Iterator[dict[str, Any]]:
        if not self.log_path.exists():
            return
        for line in self.log_path.read_text(errors="replace").splitlines():
            if name in line and line.startswith("{"):
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if event.get("event") == name:
                    yield event


class QuorumCluster:
    def __init__(self, base: Path, nodes: int = 3, controllers: int = 3, session_timeout_ms: int = 3000,
                 overrides: dict[str, str] | None = None) -> None:
        self.base = base
        self.session_timeout_ms = session_timeout_ms
        self.overrides = dict(overrides or {})
        ports = free_ports(nodes + controllers)
        self.nodes = {
            i + 1: Node(self, i + 1, ports[i], ports[nodes + i] if i < controllers else None) for i in range(nodes)
        }

    @property
    def voters(self) -> str:
        return ",".join(f"{n.node_id}@{n.host}:{n.controller_port}" for n in self.nodes.values() if n.controller_port)

    def start(self, timeout_s: float = START_TIMEOUT_S) -> QuorumCluster:
        """Starts every node and waits up to ``timeout_s`` for each; if one fails, the ones
        started are ended (``with`` never reaches ``__exit__`` when ``__enter__`` raises)."""
        try:
            for node in self.nodes.values():
                node.start()
            for node in self.nodes.values():
                node.wait_ready(timeout_s)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        for node in self.nodes.values():
            node.kill9()

    def __enter__(self) -> QuorumCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def live(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.alive]

    def client(self, node: Node | None = None, timeout_s: float = 10.0) -> KafkaClient:
        target = node or self.live()[0]
        return KafkaClient(target.host, target.port, timeout_s=timeout_s)

    def quorum(self, node: Node | None = None) -> dict[str, Any]:
        with self.client(node) as c:
            return describe_quorum(c)

    def image(self, node: Node | None = None) -> dict[str, Any]:
        with self.client(node) as c:
            return describe_image(c)

    def wait_for(self, check: Any, timeout_s: float, what: str) -> Any:
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = check()
                if last:
                    return last
            except (ClientError, AssertionError, OSError) as ex:
                last = ex
            time.sleep(0.1)
        raise AssertionError(f"{what} not within {timeout_s}s (last: {last!r})\n"
                             + "\n".join(f"--- node {n.node_id}\n{n.log_tail(15)}" for n in self.nodes.values()))

    def wait_value(self, produce: Any, accept: Any, timeout_s: float, what: str) -> Any:
        """Polls ``produce()`` until ``accept(value)``; returns that value."""
        found: list[Any] = []

        def check() -> bool:
            value = produce()
            if accept(value):
                found.append(value)
                return True
            raise AssertionError(f"not yet: {value!r}")

        self.wait_for(check, timeout_s, what)
        return found[-1]

    def leaders_by_term(self) -> dict[int, set[int]]:
        """Every ``raft_leader_elected`` line of every node's log: term -> leaders."""
        out: dict[int, set[int]] = {}
        for node in self.nodes.values():
            for event in node.events("raft_leader_elected"):
                out.setdefault(int(event["term"]), set()).add(int(event["leader"]))
        return out


def topics_summary(image: dict[str, Any]) -> dict[str, tuple[str, list[list[int]]]]:
    """Topic name -> (id, each partition's replicas): what restarts must never change."""
    return {t["name"]: (t["topic_id"], [p["replicas"] for p in t["partitions"]]) for t in image["topics"]}

