"""Network namespaces for the fault suite: one per node, a bridge namespace for the clients, and the
network faults — links cut both ways or one way, random loss, delay — applied inside them only.

Topology (addresses exist only inside these namespaces; nothing is routed to or from the host)::

    <prefix><pid>x<run>-br   bridge br0, 10.77.0.254/24 (the clients: the test process joins it)
      v1 ---- eth0  <prefix><pid>x<run>-n1  10.77.0.1/24   (node 1)
      v2 ---- eth0  <prefix><pid>x<run>-n2  10.77.0.2/24   (node 2) ...

Cuts and loss are nftables rules in each node namespace (``table inet cormorant_fault``): "B does
not hear A" drops, in B's input hook, what comes from A's address; loss drops a random share of a
node's input and output. Delay uses the kernel's ``sch_netem`` (``tc qdisc ... netem`` on the
node's link, both ends) where the kernel has it; elsewhere ``iptables ... -j NFQUEUE`` hands every
packet the node sends or receives to a delayer in user space (:mod:`tests.replication.nfqueue_delay`,
one process in the node's namespace, owned by the :class:`Network`). Where neither can run,
:attr:`Network.can_delay` is False and the nemeses say so in their log instead of pretending.

Namespace names carry the creating process's pid and a random tag of the run
(``crmtfault<pid>x<hex>-n1``), so runs going at the same time on one machine — several in one
process too — never share a name: :func:`remove_stale` deletes only the namespaces of processes that
are gone (a killed run), and :meth:`Network.close` removes this run's, even after a failure.
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
import re
import secrets
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

PREFIX = "crmtfault"
SUBNET = "10.77.0"
CLIENT = 0  #: the endpoint id of the clients (the bridge namespace)
CLIENT_HOST = f"{SUBNET}.254"
CLONE_NEWNET = 0x40000000
TABLE = "cormorant_fault"
ROOT = Path(__file__).resolve().parents[2]
#: How long a delayer may take to bind its queue, and to exit on SIGTERM.
DELAYER_READY_S = 15.0
DELAYER_STOP_S = 5.0


class NetnsUnavailable(Exception):
    """Namespaces cannot be made here (not root, no ``ip``/``nft``, or the kernel refuses)."""


def _run(args: Sequence[str], check: bool = True, input_text: str | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(list(args), capture_output=True, text=True, input=input_text, timeout=30)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {result.stderr.strip()}")
    return result


def host_of(node_id: int) -> str:
    return CLIENT_HOST if node_id == CLIENT else f"{SUBNET}.{node_id}"


def remove_stale() -> list[str]:
    """Delete the namespaces of earlier runs whose process is gone; returns their names."""
    listed = _run(["ip", "netns", "list"], check=False).stdout
    removed = []
    for line in listed.splitlines():
        name = line.split()[0] if line.split() else ""
        match = re.fullmatch(rf"{PREFIX}(\d+)(?:x[0-9a-f]+)?-\w+", name)
        if match and not os.path.exists(f"/proc/{match.group(1)}"):
            _run(["ip", "netns", "del", name], check=False)
            removed.append(name)
    return removed


def netem_available() -> bool:
    """Whether the kernel has ``sch_netem`` (the delay qdisc)."""
    try:
        with open("/proc/config.gz", "rb") as f:
            import gzip
            return b"CONFIG_NET_SCH_NETEM=" in gzip.decompress(f.read())
    except OSError:
        return os.path.exists("/sys/module/sch_netem")


def _kernel_has(proc_path: str, listed: str | None, module: str) -> bool:
    """Whether the kernel has a feature: shown in ``proc_path`` (containing ``listed``), or as a
    module that is not loaded yet (iptables and nfnetlink load it on first use)."""
    try:
        with open(proc_path) as f:
            if listed is None or listed in f.read().split():
                return True
    except OSError:
        pass
    return bool(glob.glob(f"/lib/modules/{os.uname().release}/**/{module}.ko*", recursive=True))


def nfqueue_missing() -> list[str]:
    """What the user-space delay (NFQUEUE and :mod:`tests.replication.nfqueue_delay`) lacks here."""
    missing = []
    if not _kernel_has("/proc/net/netfilter/nfnetlink_queue", None, "nfnetlink_queue"):
        missing.append("the kernel's nfnetlink_queue")
    # The queue rule is iptables' NFQUEUE target: nftables' own ``queue`` needs nft_queue, which
    # kernels without sch_netem tend to lack as well.
    if not _kernel_has("/proc/net/ip_tables_targets", "NFQUEUE", "xt_NFQUEUE"):
        missing.append("the kernel's NFQUEUE target")
    if shutil.which("iptables-restore") is None:
        missing.append("iptables")
    if importlib.util.find_spec("netfilterqueue") is None:
        missing.append("the Python package NetfilterQueue")
    return missing


def delay_mechanism() -> str | None:
    """How :meth:`Network.set_delay` delays packets here: ``netem``, ``nfqueue``, or None (it cannot)."""
    if netem_available():
        return "netem"
    return None if nfqueue_missing() else "nfqueue"


def delay_missing() -> str | None:
    """Why packets cannot be delayed here (None: they can)."""
    if delay_mechanism() is not None:
        return None
    return ("needs the kernel's sch_netem (tc qdisc netem) or NFQUEUE with the Python package NetfilterQueue "
            f"(scripts/install_test_deps.sh) for its delay; this machine lacks sch_netem and "
            f"{', '.join(nfqueue_missing())}")


@dataclass(frozen=True)
class Cut:
    """``dst`` does not hear ``src`` (node ids; :data:`CLIENT` for the clients)."""

    src: int
    dst: int


class Network:
    """The namespaces of one cluster and the faults currently applied to them."""

    def __init__(self, node_ids: Iterable[int]) -> None:
        self.node_ids = sorted(node_ids)
        assert all(0 < i < 254 for i in self.node_ids)
        self.tag = f"{PREFIX}{os.getpid()}x{secrets.token_hex(3)}"
        self.bridge = f"{self.tag}-br"
        self.cuts: set[Cut] = set()
        self.loss: dict[int, int] = {}  # node -> percent
        self.delay: dict[int, int] = {}  # node -> ms
        self.delay_by = delay_mechanism()
        self.can_delay = self.delay_by is not None
        #: node -> its delayer process (NFQUEUE delay), from set_delay to heal or close.
        self.delayers: dict[int, subprocess.Popen[str]] = {}
        self._delayer_errors: dict[int, IO[bytes]] = {}
        #: What the delayers did (one line each, at heal), and what went wrong with them: a delayer
        #: that died during a fault left the node without any traffic, not slow.
        self.delay_notes: list[str] = []
        self.delay_problems: list[str] = []
        self._home: int | None = None
        self._created: list[str] = []

    def ns(self, node_id: int) -> str:
        return self.bridge if node_id == CLIENT else f"{self.tag}-n{node_id}"

    def exec_prefix(self, node_id: int) -> list[str]:
        return ["ip", "netns", "exec", self.ns(node_id)]

    # -- lifecycle ---------------------------------------------------------------------------------

    @staticmethod
    def check_available() -> None:
        if os.geteuid() != 0:
            raise NetnsUnavailable("network namespaces need root")
        for tool in ("ip", "nft"):
            if shutil.which(tool) is None:
                raise NetnsUnavailable(f"no {tool} on PATH (scripts/install_test_deps.sh installs it)")

    def create(self) -> Network:
        self.check_available()
        remove_stale()
        try:
            self._create()
        except (RuntimeError, OSError) as ex:
            self.close()
            raise NetnsUnavailable(f"cannot make network namespaces: {ex}") from ex
        return self

    def _create(self) -> None:
        br = self.bridge
        _run(["ip", "netns", "add", br])
        self._created.append(br)
        _run(["ip", "-n", br, "link", "set", "lo", "up"])
        _run(["ip", "-n", br, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", br, "addr", "add", f"{CLIENT_HOST}/24", "dev", "br0"])
        _run(["ip", "-n", br, "link", "set", "br0", "up"])
        for node in self.node_ids:
            ns = self.ns(node)
            _run(["ip", "netns", "add", ns])
            self._created.append(ns)
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            _run(["ip", "-n", br, "link", "add", f"v{node}", "type", "veth", "peer", "name", "eth0", "netns", ns])
            _run(["ip", "-n", br, "link", "set", f"v{node}", "master", "br0"])
            _run(["ip", "-n", br, "link", "set", f"v{node}", "up"])
            _run(["ip", "-n", ns, "addr", "add", f"{host_of(node)}/24", "dev", "eth0"])
            _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
            self._apply_rules(node)

    def close(self) -> None:
        try:
            self._stop_delayers()
        finally:
            self.leave()
            for ns in reversed(self._created):
                _run(["ip", "netns", "del", ns], check=False)
            self._created.clear()

    def __enter__(self) -> Network:
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the clients' side: this thread (and the threads it starts) in the bridge namespace ---------

    def enter(self) -> None:
        """Move the calling thread into the bridge namespace (threads it starts afterwards inherit it)."""
        if self._home is not None:
            return
        libc = ctypes.CDLL(None, use_errno=True)
        self._home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(f"/run/netns/{self.bridge}", os.O_RDONLY)
        try:
            if libc.setns(target, CLONE_NEWNET) != 0:
                raise NetnsUnavailable(f"setns: {os.strerror(ctypes.get_errno())}")
        finally:
            os.close(target)

    def leave(self) -> None:
        if self._home is None:
            return
        libc = ctypes.CDLL(None, use_errno=True)
        try:
            libc.setns(self._home, CLONE_NEWNET)
        finally:
            os.close(self._home)
            self._home = None

    # -- faults ------------------------------------------------------------------------------------

    def cut(self, src: int, dst: int) -> None:
        """``dst`` stops hearing ``src`` (one way)."""
        self.cuts.add(Cut(src, dst))
        self._apply_rules(dst if dst != CLIENT else src)

    def cut_both(self, a: int, b: int) -> None:
        self.cut(a, b)
        self.cut(b, a)

    def isolate(self, node: int, from_: Iterable[int]) -> None:
        """Cut ``node`` off from each of ``from_`` in both directions."""
        for other in from_:
            if other != node:
                self.cut_both(node, other)

    def split(self, side: Iterable[int], other: Iterable[int]) -> None:
        rest = list(other)
        for a in side:
            self.isolate(a, rest)

    def set_loss(self, node: int, percent: int) -> None:
        self.loss[node] = percent
        self._apply_rules(node)

    def set_delay(self, node: int, ms: int) -> bool:
        """Delay everything to and from ``node`` by ``ms`` (so a round trip with it by twice that);
        False where neither netem nor the NFQUEUE delayer can run here."""
        if self.delay_by == "netem":
            self.delay[node] = ms
            for ns, dev in ((self.ns(node), "eth0"), (self.bridge, f"v{node}")):
                _run(["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", "netem", "delay",
                      f"{ms}ms"])
            return True
        if self.delay_by != "nfqueue":
            return False
        if node in self.delayers:
            self._apply_queue(node, False)
            self._stop_delayer(node)
        self._start_delayer(node, ms)  # bound before the rule sends it packets: without it they drop
        self.delay[node] = ms
        self._apply_queue(node, True)
        return True

    def heal(self) -> None:
        """Remove every cut, loss and delay."""
        touched = {c.dst for c in self.cuts} | {c.src for c in self.cuts} | set(self.loss)
        self.cuts.clear()
        self.loss.clear()
        for node in touched - {CLIENT}:
            self._apply_rules(node)
        try:
            for node in list(self.delay):
                if self.delay_by == "netem":
                    for ns, dev in ((self.ns(node), "eth0"), (self.bridge, f"v{node}")):
                        _run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root"], check=False)
                else:
                    self._apply_queue(node, False)  # no new packets for the delayer, then it lets go of its own
        finally:
            self._stop_delayers()
            self.delay.clear()

    def heal_cut(self, src: int, dst: int) -> None:
        self.cuts.discard(Cut(src, dst))
        self._apply_rules(dst if dst != CLIENT else src)

    def _apply_rules(self, node: int) -> None:
        """Replace ``node``'s fault table with the rules for the current cuts and loss, atomically
        (the clients' namespace has none: a node deaf to the clients drops them in its own output)."""
        inputs = [f"ip saddr {host_of(c.src)} drop" for c in sorted(self.cuts, key=lambda c: c.src) if c.dst == node]
        outputs = [f"ip daddr {CLIENT_HOST} drop" for c in self.cuts if c.src == node and c.dst == CLIENT]
        percent = self.loss.get(node, 0)
        if percent:
            share = "" if percent >= 100 else f" numgen random mod 100 < {percent}"
            inputs.append(f"ip saddr != {CLIENT_HOST}{share} drop")
            outputs.append(f"ip daddr != {CLIENT_HOST}{share} drop")
        script = (f"table inet {TABLE}\ndelete table inet {TABLE}\ntable inet {TABLE} {{\n"
                  "  chain input {\n    type filter hook input priority 0; policy accept;\n"
                  + "".join(f"    {r}\n" for r in inputs) + "  }\n"
                  "  chain output {\n    type filter hook output priority 0; policy accept;\n"
                  + "".join(f"    {r}\n" for r in outputs) + "  }\n}\n")
        _run(["ip", "netns", "exec", self.ns(node), "nft", "-f", "-"], input_text=script)

    def _apply_queue(self, node: int, on: bool) -> None:
        """Replace ``node``'s NFQUEUE rules, atomically: everything it sends or receives (its loopback
        aside, which netem on its link would not delay either) goes to its delayer's queue. The queue
        is in the mangle table, before the fault table's cuts and loss: a packet the loss drops is
        dropped after its delay, as netem on the receiving end of the link does. No ``--queue-bypass``:
        should the delayer die, the node's traffic stops rather than silently flowing undelayed, and
        :meth:`heal` reports it."""
        rules = [f"-A INPUT ! -i lo -j NFQUEUE --queue-num {node}",
                 f"-A OUTPUT ! -o lo -j NFQUEUE --queue-num {node}"] if on else []
        script = "*mangle\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n" + "".join(f"{r}\n" for r in rules) + "COMMIT\n"
        _run([*self.exec_prefix(node), "iptables-restore"], input_text=script)

    def _start_delayer(self, node: int, ms: int) -> None:
        """Start the delayer of ``node``'s queue (queue numbers are per namespace: the node's id) in
        its namespace and wait, bounded, for it to have bound the queue."""
        errors = tempfile.TemporaryFile()
        proc = subprocess.Popen([*self.exec_prefix(node), sys.executable, "-m", "tests.replication.nfqueue_delay",
                                 "--queue", str(node), "--delay-ms", str(ms)],
                                stdout=subprocess.PIPE, stderr=errors, text=True, cwd=ROOT)
        self.delayers[node] = proc
        self._delayer_errors[node] = errors
        assert proc.stdout is not None
        deadline = time.monotonic() + DELAYER_READY_S
        line = ""
        while not line and proc.poll() is None and time.monotonic() < deadline:
            if select.select([proc.stdout], [], [], 0.2)[0]:
                line = proc.stdout.readline()
        if not line.startswith("ready"):
            why = "exited" if proc.poll() is not None else f"was not ready within {DELAYER_READY_S:.0f} s"
            _, stderr = self._stop_delayer(node)
            raise RuntimeError(f"the delayer of node {node} {why}: {stderr[-2000:] or 'no output'}")

    def _stop_delayer(self, node: int) -> tuple[int | None, str]:
        """SIGTERM ``node``'s delayer (it accepts the packets it holds), SIGKILL it if it does not
        exit in time. Returns its exit code if it had exited already, and its stderr."""
        proc = self.delayers.pop(node)
        errors = self._delayer_errors.pop(node)
        died = proc.poll()
        if died is None:
            proc.terminate()
            try:
                proc.wait(DELAYER_STOP_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(DELAYER_STOP_S)
                self.delay_problems.append(f"the delayer of node {node} did not exit on SIGTERM; killed")
        out = proc.stdout.read() if proc.stdout else ""
        if proc.stdout:
            proc.stdout.close()
        errors.seek(0)
        stderr = errors.read().decode(errors="replace").strip()
        errors.close()
        self.delay_notes += [f"node {node}: {line}" for line in out.splitlines() if line.startswith("stopped")]
        return died, stderr

    def _stop_delayers(self) -> None:
        """Stop every delayer; one found dead already is a problem of the run (its node's traffic
        stopped instead of being delayed)."""
        for node in list(self.delayers):
            died, stderr = self._stop_delayer(node)
            if died is not None:
                self.delay_problems.append(f"the delayer of node {node} had exited (code {died}) during the "
                                           f"fault, so the node's traffic stopped instead of being delayed: "
                                           f"{stderr[-2000:] or 'no output'}")

    def cut_off(self, voters: Iterable[int]) -> set[int]:
        """The nodes that cannot exchange packets both ways with a majority of ``voters`` (themselves
        included when they are one) under the current cuts; loss and delay do not count."""
        quorum = sorted(voters)
        out = set()
        for node in self.node_ids:
            reached = sum(1 for v in quorum
                          if v == node or (Cut(node, v) not in self.cuts and Cut(v, node) not in self.cuts))
            if reached <= len(quorum) // 2:
                out.add(node)
        return out

    def describe(self) -> str:
        parts = [f"{c.dst} deaf to {c.src}" for c in sorted(self.cuts, key=lambda c: (c.src, c.dst))]
        parts += [f"{p}% loss at {n}" for n, p in sorted(self.loss.items())]
        parts += [f"{ms}ms delay at {n} ({self.delay_by})" for n, ms in sorted(self.delay.items())]
        return ", ".join(parts) or "healed"
