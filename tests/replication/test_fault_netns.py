"""The network-namespace fault harness itself: links cut one way and both ways, healed, loss, and
the namespaces removed afterwards. Needs root; skips in one line where namespaces cannot be made."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.replication.netns import CLIENT, NetnsUnavailable, Network, host_of, remove_stale

pytestmark = [pytest.mark.timeout(120)]

PORT = 9000
LISTEN = ("import socket,time\n"
          "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
          "s.bind(('{host}', {port})); s.listen(64)\n"
          "while True:\n"
          "    c,_=s.accept(); c.sendall(b'ok'); c.close()\n")


@pytest.fixture
def network() -> Iterator[Network]:
    net = Network([1, 2])
    try:
        net.create()
    except NetnsUnavailable as ex:
        pytest.skip(str(ex))
    listeners = [subprocess.Popen([*net.exec_prefix(n), sys.executable, "-c",
                                   LISTEN.format(host=host_of(n), port=PORT)]) for n in (1, 2)]
    try:
        net.enter()
        yield net
    finally:
        for proc in listeners:
            proc.kill()
            proc.wait(10)
        net.close()


def reaches_from_client(node: int) -> bool:
    try:
        with socket.create_connection((host_of(node), PORT), timeout=1.0) as s:
            return s.recv(2) == b"ok"
    except OSError:
        return False


def reaches(net: Network, src: int, dst: int) -> bool:
    probe = (f"import socket\ns=socket.create_connection(('{host_of(dst)}', {PORT}), timeout=1.0)\n"
             "assert s.recv(2) == b'ok'")
    return subprocess.run([*net.exec_prefix(src), sys.executable, "-c", probe], capture_output=True,
                          timeout=20).returncode == 0


def wait_reaches(check: object, timeout_s: float = 10.0) -> bool:
    assert callable(check)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return False


def test_cuts_one_way_and_both_ways_then_heal(network: Network) -> None:
    assert wait_reaches(lambda: reaches_from_client(1) and reaches_from_client(2))
    assert reaches(network, 1, 2) and reaches(network, 2, 1)

    network.cut(1, 2)  # 2 stops hearing 1: a TCP connection needs both ways, so 1 -> 2 and 2 -> 1 fail
    assert not reaches(network, 1, 2) and not reaches(network, 2, 1)
    assert reaches_from_client(1) and reaches_from_client(2)  # the clients still reach both

    network.heal()
    assert reaches(network, 1, 2) and reaches(network, 2, 1)

    network.isolate(1, [2, CLIENT])
    assert not reaches_from_client(1) and reaches_from_client(2)
    assert not reaches(network, 2, 1)
    network.heal()
    assert wait_reaches(lambda: reaches_from_client(1))


def test_loss_drops_a_share_of_packets(network: Network) -> None:
    network.set_loss(2, 100)  # every packet to and from node 2's peers dropped (clients exempt)
    assert not reaches(network, 1, 2)
    assert reaches_from_client(2)
    network.heal()
    assert reaches(network, 1, 2)


def test_namespaces_removed_on_close_and_stale_ones_at_start() -> None:
    net = Network([1])
    try:
        net.create()
    except NetnsUnavailable as ex:
        pytest.skip(str(ex))
    names = {net.ns(1), net.bridge}
    net.close()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not names & {line.split()[0] for line in listed.splitlines() if line.split()}
    # Namespaces left by runs whose process is gone (pid 999999: no process), old and new style; the
    # namespaces of a live process (this one) are kept.
    live = Network([1])
    live.create()
    try:
        for stale in ("crmtfault999999-n1", "crmtfault999999xab12cd-n1"):
            subprocess.run(["ip", "netns", "add", stale], check=True)
        removed = remove_stale()
        assert {"crmtfault999999-n1", "crmtfault999999xab12cd-n1"} <= set(removed)
        assert live.ns(1) not in removed and live.bridge not in removed
    finally:
        live.close()


def test_runs_in_one_process_never_share_a_namespace_name() -> None:
    """Two clusters of one process (or two runs at the same time) get names of their own."""
    first, second = Network([1, 2]), Network([1, 2])
    names = {first.bridge, first.ns(1), first.ns(2)}
    assert not names & {second.bridge, second.ns(1), second.ns(2)}
    assert all(n.startswith(f"crmtfault{os.getpid()}x") for n in names)
