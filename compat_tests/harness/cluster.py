"""A local multi-node Cormorant cluster, started as a user starts one: ``cormorant cluster up``.

:class:`LocalCluster` runs ``python -m broker cluster up --dir D --nodes N`` (each node a
``node.id``-configured process, the first three also the controller quorum), reads the
bootstrap servers it prints, and stops it with ``cluster down`` (which signals only the
pids recorded in D). :meth:`coordinator` asks FindCoordinator which node coordinates a
group or transactional id, so tests can force the two coordinators apart.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from broker.tools.client import ClientError, KafkaClient
from compat_tests.harness.settings import PROJECT_ROOT
from wire.errors import ErrorCode
from wire.generated.api_010_find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse

UP_TIMEOUT_S = 120.0
DOWN_TIMEOUT_S = 60.0
COORDINATOR_TIMEOUT_S = 30.0
GROUP_KEY, TRANSACTION_KEY = 0, 1

#: Replicated internal topics with few partitions (quick to create), as in a small production cluster.
CLUSTER_SETTINGS = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "6",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "6",
}

_BOOTSTRAP = re.compile(r"^bootstrap\.servers=(\S+)$", re.MULTILINE)


class LocalCluster:
    def __init__(self, directory: Path, nodes: int = 3, overrides: Mapping[str, str] | None = None) -> None:
        self.dir = directory
        self.nodes = nodes
        self.overrides = {**CLUSTER_SETTINGS, **(overrides or {})}
        self.bootstrap = ""
        self.servers: list[str] = []

    def _cli(self, *args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "broker", "cluster", *args, "--dir", str(self.dir)],
                              cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=timeout_s, check=False)

    def up(self) -> LocalCluster:
        args = ["up", "--nodes", str(self.nodes)]
        for key, value in self.overrides.items():
            args += ["--override", f"{key}={value}"]
        done = self._cli(*args, timeout_s=UP_TIMEOUT_S)
        found = _BOOTSTRAP.search(done.stdout)
        if done.returncode != 0 or found is None:
            self.down()
            raise RuntimeError(f"cormorant cluster up failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
                               f"\n{self.log_tail()}")
        self.bootstrap = found.group(1)
        self.servers = self.bootstrap.split(",")
        return self

    def down(self) -> None:
        self._cli("down", timeout_s=DOWN_TIMEOUT_S)

    def __enter__(self) -> LocalCluster:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    def log_tail(self, limit: int = 3000) -> str:
        out = []
        for log in sorted(self.dir.glob("node-*/node.log")):
            out.append(f"--- {log.parent.name}\n{log.read_text(errors='replace')[-limit:]}")
        return "\n".join(out)

    def server_of(self, node_id: int) -> str:
        """The bootstrap address of node ``node_id`` (``cluster up`` numbers nodes from 1)."""
        return self.servers[node_id - 1]

    def wait_for(self, check: Callable[[], object], timeout_s: float, what: str) -> object:
        deadline = time.monotonic() + timeout_s
        last: object = None
        while time.monotonic() < deadline:
            try:
                value = check()
                if value:
                    return value
                last = value
            except (AssertionError, ClientError, OSError) as ex:
                last = ex
            time.sleep(0.2)
        raise AssertionError(f"{what}: not within {timeout_s}s (last: {last!r})")

    def coordinator(self, key: str, key_type: int) -> int:
        """The node id coordinating group (``GROUP_KEY``) or transactional id ``key``."""
        def ask() -> int:
            with KafkaClient.connect(self.servers[0], timeout_s=5.0) as client:
                reply = client.send(FindCoordinatorRequest(key=key, key_type=key_type), FindCoordinatorResponse, 3)
            assert reply.error_code == ErrorCode.NONE, ErrorCode.for_code(reply.error_code)
            return reply.node_id

        node_id = self.wait_for(ask, COORDINATOR_TIMEOUT_S, f"the coordinator of {key!r}")
        assert isinstance(node_id, int)
        return node_id

    def separated_coordinators(self, tag: str, attempts: int = 64) -> tuple[str, str, int, int]:
        """A group id and a transactional id whose coordinators are different nodes:
        (group id, transactional id, group coordinator, transaction coordinator)."""
        group_ids = [f"{tag}-group-{i}" for i in range(attempts)]
        txn_ids = [f"{tag}-txn-{i}" for i in range(attempts)]
        group_nodes: dict[int, str] = {}
        for group_id in group_ids:
            group_nodes.setdefault(self.coordinator(group_id, GROUP_KEY), group_id)
            if len(group_nodes) == self.nodes:
                break
        for txn_id in txn_ids:
            txn_node = self.coordinator(txn_id, TRANSACTION_KEY)
            for group_node, group_id in group_nodes.items():
                if group_node != txn_node:
                    return group_id, txn_id, group_node, txn_node
        raise AssertionError(f"no group and transactional id with separate coordinators among {attempts}")
