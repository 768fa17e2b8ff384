"""Network namespaces for the fault suite: one per node, a bridge namespace for the clients, and the
network faults — links cut both ways or one way, random loss, delay — applied inside them only.

Topology (addresses exist only inside these namespaces; nothing is routed to or from the host)::

    <prefix><pid>x<run>-br   bridge br0, 10.77.0.254/24 (the clients: the test process joins it)
      v1 ---- eth0  <prefix><pid>x<run>-n1  10.77.0.1/24   (node 1)
      v2 ---- eth0  <prefix><pid>x<run>-n2  10.77.0.2/24   (node 2) ...

Cuts and loss are nftables rules in each node namespace (``table inet cormorant_fault``): "B does
not hear A" drops, in B's input hook, what comes from A's address; loss drops a random share of a
node's input and output. Delay needs the kernel's ``sch_netem`` (``tc qdisc ... netem`` on the
node's link, both ends); where the kernel has none, :attr:`Network.can_delay` is False and the
nemeses say so in their log instead of pretending.

Namespace names carry the creating process's pid and a random tag of the run
(``crmtfault<pid>x<hex>-n1``), so runs going at the same time on one machine — several in one
process too — never share a name: :func:`remove_stale` deletes only the namespaces of processes that
are gone (a killed run), and :meth:`Network.close` removes this run's, even after a failure.
"""

from __future__ import annotations

import ctypes
import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

PREFIX = "crmtfault"
SUBNET = "10.77.0"
CLIENT = 0  #: the endpoint id of the clients (the bridge namespace)
CLIENT_HOST = f"{SUBNET}.254"
CLONE_NEWNET = 0x40000000
TABLE = "cormorant_fault"


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
        self.can_delay = netem_available()
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
        """Delay everything to and from ``node`` by ``ms``; False where the kernel has no netem."""
        if not self.can_delay:
            return False
        self.delay[node] = ms
        for ns, dev in ((self.ns(node), "eth0"), (self.bridge, f"v{node}")):
            _run(["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", "netem", "delay",
                  f"{ms}ms"])
        return True

    def heal(self) -> None:
        """Remove every cut, loss and delay."""
        touched = {c.dst for c in self.cuts} | {c.src for c in self.cuts} | set(self.loss)
        self.cuts.clear()
        self.loss.clear()
        for node in touched - {CLIENT}:
            self._apply_rules(node)
        for node in list(self.delay):
            for ns, dev in ((self.ns(node), "eth0"), (self.bridge, f"v{node}")):
                _run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root"], check=False)
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
        parts += [f"{ms}ms delay at {n}" for n, ms in sorted(self.delay.items())]
        return ", ".join(parts) or "healed"
