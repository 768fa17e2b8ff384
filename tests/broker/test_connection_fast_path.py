"""A connection's requests run in its reader's task until one has to wait (issue 14): no task
is started for a request that completes without waiting, a waiting request does not hold up
the requests behind it, and the answers still go out in request order."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time

import pytest
import trio

from broker.server.network import (
    COALESCE_RESPONSES,
    CloseConnection,
    Connection,
    ConnectionInfo,
    NetworkLimits,
    NetworkMemory,
    RequestFrame,
)
from wire.frame import encode_sasl_token
from wire.regions import EncodedParts

_SIZE = struct.Struct(">i")


class Handler:
    """Answers each frame with itself; a frame ``wait <ms>`` first sleeps that long, ``close``
    drops the connection, ``none`` gets no answer."""

    def __init__(self) -> None:
        self.started: list[bytes] = []
        self.finished: list[bytes] = []

    async def handle(self, conn: ConnectionInfo, frame: RequestFrame) -> EncodedParts | None:
        body = bytes(frame)
        self.started.append(body)
        if body.startswith(b"wait "):
            await trio.sleep(int(body[5:]) / 1000)
        if body == b"close":
            raise CloseConnection("asked to")
        self.finished.append(body)
        return None if body == b"none" else encode_sasl_token(body)


class TaskCounter(trio.abc.Instrument):
    def __init__(self) -> None:
        self.spawned = 0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.spawned += 1


def _frames(*bodies: bytes) -> bytes:
    return b"".join(_SIZE.pack(len(b)) + b for b in bodies)


def _answers(sock: socket.socket, count: int) -> list[bytes]:
    sock.settimeout(10)
    data = bytearray()
    answers: list[bytes] = []
    while len(answers) < count:
        got = sock.recv(65536)
        if not got:
            break
        data += got
        while len(data) >= 4 and len(data) >= 4 + _SIZE.unpack_from(data)[0]:
            size = _SIZE.unpack_from(data)[0]
            answers.append(bytes(data[4:4 + size]))
            del data[:4 + size]
    return answers


def _serve(handler: Handler, client: threading.Thread, ours: socket.socket,
           counter: TaskCounter | None = None, memory: NetworkMemory | None = None,
           limits: NetworkLimits | None = None) -> None:
    async def main() -> None:
        stream = trio.SocketStream(trio.socket.from_stdlib_socket(ours))
        info = ConnectionInfo("test", "PLAINTEXT", "127.0.0.1", 1, 2, 1)
        client.start()
        with trio.fail_after(20):
            await Connection(stream, info, handler, limits or NetworkLimits(), None, memory).run()
        await stream.aclose()  # as the listener does once a connection ends

    trio.run(main, instruments=[counter] if counter is not None else [])
    client.join(10)
    assert not client.is_alive()


def test_requests_that_do_not_wait_start_no_task() -> None:
    ours, theirs = socket.socketpair()
    handler = Handler()
    counter = TaskCounter()
    answers: list[bytes] = []

    def client() -> None:
        for i in range(200):  # one at a time: each is read and answered before the next is sent
            theirs.sendall(_frames(b"req %d" % i))
            answers.extend(_answers(theirs, 1))
        theirs.close()

    _serve(handler, threading.Thread(target=client), ours, counter)
    assert answers == [b"req %d" % i for i in range(200)]
    # trio.run's own tasks and main: none per request, and no writer task either.
    assert counter.spawned <= 3, counter.spawned


def test_a_waiting_request_does_not_hold_up_the_ones_behind_it_and_answers_keep_their_order() -> None:
    ours, theirs = socket.socketpair()
    handler = Handler()
    answers: list[bytes] = []
    bodies = [b"wait 300", b"a", b"wait 50", b"b", b"none", b"c"]

    def client() -> None:
        theirs.sendall(_frames(*bodies))
        answers.extend(_answers(theirs, 5))
        theirs.close()

    started = time.monotonic()
    _serve(handler, threading.Thread(target=client), ours)
    assert answers == [b"wait 300", b"a", b"wait 50", b"b", b"c"]
    assert time.monotonic() - started < 5
    # Everything behind the 300 ms wait was handled during it: it finished last.
    assert handler.started == bodies
    assert handler.finished[-1] == b"wait 300", handler.finished


def test_a_request_that_closes_the_connection_is_answered_after_the_ones_before_it() -> None:
    ours, theirs = socket.socketpair()
    handler = Handler()
    answers: list[bytes] = []

    def client() -> None:
        theirs.sendall(_frames(b"wait 100", b"a", b"close", b"never"))
        answers.extend(_answers(theirs, 3))
        theirs.close()

    _serve(handler, threading.Thread(target=client), ours)
    assert answers == [b"wait 100", b"a"]


def test_pipelined_requests_are_read_ahead_and_answered_together_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that sends many requests before reading gets them read in a few system calls
    and answered in a few sends (each send wakes the peer), in request order; the memory
    held for read-ahead and held-back answers is all given back."""
    ours, theirs = socket.socketpair()
    handler = Handler()
    memory = NetworkMemory(10 * 1024 * 1024)
    answers: list[bytes] = []
    count = 64
    reads = sends = 0
    real_readv = os.readv
    real_send_all = trio.SocketStream.send_all

    def counting_readv(fd: int, buffers: list[memoryview]) -> int:
        nonlocal reads
        reads += 1
        return real_readv(fd, buffers)

    async def counting_send_all(self: trio.SocketStream, data: bytes | bytearray | memoryview) -> None:
        nonlocal sends
        sends += 1
        await real_send_all(self, data)

    monkeypatch.setattr(os, "readv", counting_readv)
    monkeypatch.setattr(trio.SocketStream, "send_all", counting_send_all)

    def client() -> None:
        theirs.sendall(_frames(*(b"req %d" % i for i in range(count))))
        answers.extend(_answers(theirs, count))
        theirs.close()

    _serve(handler, threading.Thread(target=client), ours, memory=memory)
    assert answers == [b"req %d" % i for i in range(count)]
    # One at a time these were 2 reads and 1 send per request.
    assert sends <= 2 * count // COALESCE_RESPONSES, sends
    assert reads <= 8, reads
    assert (memory.small, memory.large, memory.responses) == (0, 0, 0)


def test_answers_held_back_go_out_before_those_of_a_request_that_waits() -> None:
    ours, theirs = socket.socketpair()
    handler = Handler()
    memory = NetworkMemory(10 * 1024 * 1024)
    answers: list[bytes] = []
    bodies = [b"a", b"b", b"wait 300", b"c", b"none", b"d"]

    def client() -> None:
        theirs.sendall(_frames(*bodies))
        answers.extend(_answers(theirs, 2))
        # Those two came while the waiting request still waited, not held behind it.
        answers.append(b"finished %d" % len(handler.finished))
        answers.extend(_answers(theirs, 3))
        theirs.close()

    _serve(handler, threading.Thread(target=client), ours, memory=memory)
    assert answers[:2] == [b"a", b"b"]
    assert answers[2] != b"finished %d" % len(bodies), answers
    assert answers[3:] == [b"wait 300", b"c", b"d"]
    assert (memory.small, memory.large, memory.responses) == (0, 0, 0)


def test_answers_read_before_a_frame_that_is_refused_are_sent_before_the_close() -> None:
    ours, theirs = socket.socketpair()
    handler = Handler()
    answers: list[bytes] = []

    def client() -> None:
        theirs.sendall(_frames(b"a", b"b", b"x" * 200))  # the last is over max_frame_bytes
        answers.extend(_answers(theirs, 3))
        theirs.close()

    _serve(handler, threading.Thread(target=client), ours, limits=NetworkLimits(max_frame_bytes=100))
    assert answers == [b"a", b"b"]
