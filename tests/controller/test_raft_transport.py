"""The voters' TCP links recover promptly after a network partition heals.

A connection attempt whose SYN is dropped stays in SYN-SENT while the kernel retransmits the
SYN (1, 2, 4, 8, 16 s apart) and pysyncobj never times it out (it checks a connection's timeout
only on a socket event or a send). Here the SYN is dropped the way a listener with a full accept
queue drops it, on loopback.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator

from pysyncobj.poller import createPoller
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection

from controller.raft.core import expire_stalled_connects, tune_socket


@contextlib.contextmanager
def full_listener() -> Iterator[int]:
    """A listener that accepts nothing, its accept queue filled: further SYNs are dropped."""
    server = socket.socket()
    fillers: list[socket.socket] = []
    try:
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        port = int(server.getsockname()[1])
        for _ in range(3):
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
            fillers.append(filler)
        time.sleep(0.2)
        yield port
    finally:
        for s in [*fillers, server]:
            s.close()


def test_a_connect_whose_syn_is_dropped_is_given_up_after_the_timeout() -> None:
    poller = createPoller("auto")
    conn = TcpConnection(poller=poller, timeout=2.0)
    with full_listener() as port:
        assert conn.connect("127.0.0.1", port)
        started = time.monotonic()
        while time.monotonic() - started < 0.5:
            poller.poll(0.05)
        # pysyncobj alone leaves it there: no event comes while the SYN goes unanswered.
        assert conn.state == CONNECTION_STATE.CONNECTING
        assert expire_stalled_connects({"n1": conn}, 2.0) == []  # not yet past the timeout
        later = time.monotonic() + 2.5
        assert expire_stalled_connects({"n1": conn}, 2.0, now=lambda: later) == ["n1"]
        assert conn.state == CONNECTION_STATE.DISCONNECTED


def test_established_connections_are_left_alone() -> None:
    poller = createPoller("auto")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    conn = TcpConnection(poller=poller, timeout=2.0)
    try:
        assert conn.connect("127.0.0.1", server.getsockname()[1])
        deadline = time.monotonic() + 5.0
        while conn.state != CONNECTION_STATE.CONNECTED and time.monotonic() < deadline:
            poller.poll(0.05)
        assert conn.state == CONNECTION_STATE.CONNECTED
        later = time.monotonic() + 60.0
        assert expire_stalled_connects({"n1": conn}, 2.0, now=lambda: later) == []
        assert conn.state == CONNECTION_STATE.CONNECTED
    finally:
        conn.disconnect()
        server.close()


def test_sent_data_may_stay_unacknowledged_for_the_user_timeout_only() -> None:
    sock = socket.socket()
    try:
        tune_socket(sock, 4.0)
        if hasattr(socket, "TCP_USER_TIMEOUT"):
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 4000
    finally:
        sock.close()
