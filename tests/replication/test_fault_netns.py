"""The network-namespace fault harness itself: links cut one way and both ways, healed, loss, delay
(through the NFQUEUE delayer), and the namespaces removed afterwards. Needs root; skips in one line
where namespaces cannot be made."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.replication.netns import (
    CLIENT,
    NetnsUnavailable,
    Network,
    host_of,
    nfqueue_missing,
    remove_stale,
)

pytestmark = [pytest.mark.timeout(120)]

PORT = 9000
ECHO_PORT = 9001
LISTEN = ("import socket,time\n"
          "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
          "s.bind(('{host}', {port})); s.listen(64)\n"
          "while True:\n"
          "    c,_=s.accept(); c.sendall(b'ok'); c.close()\n")
ECHO = ("import socket\n"
        "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind(('{host}', {port})); s.listen(64)\n"
        "while True:\n"
        "    c,_=s.accept(); c.settimeout(30)\n"
        "    try:\n"
        "        c.sendall(c.recv(1))\n"
        "    except OSError:\n"
        "        pass\n"
        "    c.close()\n")
#: From a node's namespace: connect to another node's echo listener, send one byte, read it back;
#: prints the seconds that took.
ROUND_TRIP = ("import socket,time\n"
              "t=time.monotonic()\n"
              "s=socket.create_connection(('{host}', {port}), timeout=20.0)\n"
              "s.sendall(b'x'); assert s.recv(1) == b'x'\n"
              "print(time.monotonic()-t)\n")


@pytest.fixture
def network() -> Iterator[Network]:
    net = Network([1, 2])
    try:
        net.create()
    except NetnsUnavailable as ex:
        pytest.skip(str(ex))
    listeners = [subprocess.Popen([*net.exec_prefix(n), sys.executable, "-c", program.format(host=host_of(n), port=port)])
                 for n in (1, 2) for program, port in ((LISTEN, PORT), (ECHO, ECHO_PORT))]
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


def round_trip_s(net: Network, src: int, dst: int) -> float:
    """Seconds from ``src`` connecting to ``dst`` to its one-byte echo (two round trips)."""
    done = subprocess.run([*net.exec_prefix(src), sys.executable, "-c",
                           ROUND_TRIP.format(host=host_of(dst), port=ECHO_PORT)],
                          capture_output=True, text=True, timeout=40)
    assert done.returncode == 0, done.stderr
    return float(done.stdout)


@pytest.fixture
def nfqueue_network(network: Network) -> Network:
    """The network delaying through the NFQUEUE delayer (even where netem exists: this tests the delayer)."""
    missing = nfqueue_missing()
    if missing:
        pytest.skip(f"the NFQUEUE delay needs {', '.join(missing)}")
    network.delay_by, network.can_delay = "nfqueue", True
    assert wait_reaches(lambda: reaches(network, 1, 2))
    return network


def test_nfqueue_delay_slows_a_node_until_heal(nfqueue_network: Network) -> None:
    net = nfqueue_network
    assert round_trip_s(net, 1, 2) < 0.05
    assert net.set_delay(2, 200)
    delayer = net.delayers[2]
    # 200 ms each way at node 2: the connect and the echo are a round trip each.
    took = round_trip_s(net, 1, 2)
    assert 0.4 <= took < 2.0, took
    assert 0.4 <= round_trip_s(net, 2, 1) < 2.0
    assert round_trip_s(net, 1, 1) < 0.05  # the other node's own traffic is not delayed
    net.heal()
    assert delayer.poll() is not None and not os.path.exists(f"/proc/{delayer.pid}")
    assert not net.delayers and not net.delay_problems
    assert any("node 2: stopped queue 2" in note for note in net.delay_notes), net.delay_notes
    assert round_trip_s(net, 1, 2) < 0.05


def test_nfqueue_delay_with_loss_carries_tcp_and_stops_on_close(nfqueue_network: Network) -> None:
    net = nfqueue_network
    assert net.set_delay(2, 200)
    net.set_loss(2, 5)
    delayer = net.delayers[2]
    assert "200ms delay at 2 (nfqueue)" in net.describe()
    for _ in range(3):
        assert 0.4 <= round_trip_s(net, 1, 2) < 20.0
    net.close()  # the delayer is stopped without a heal too
    assert delayer.poll() is not None and not os.path.exists(f"/proc/{delayer.pid}")
    assert not net.delayers and not net.delay_problems


def test_a_delayer_that_dies_is_reported_at_heal(nfqueue_network: Network) -> None:
    """Without ``--queue-bypass`` the node's traffic stops with its delayer; the heal says so."""
    net = nfqueue_network
    assert net.set_delay(2, 200)
    net.delayers[2].kill()
    net.delayers[2].wait(10)
    assert not reaches(net, 1, 2)
    net.heal()
    assert len(net.delay_problems) == 1 and "node 2 had exited" in net.delay_problems[0], net.delay_problems
    assert wait_reaches(lambda: reaches(net, 1, 2))


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
