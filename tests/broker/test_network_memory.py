"""Request memory (queued.max.request.bytes): admission first fit, accounting exact
when a waiting connection goes away."""

from __future__ import annotations

import trio
import trio.testing

from broker.server.network import NetworkMemory

MiB = 1024 * 1024


async def _a_frame_that_fits_passes_one_that_does_not() -> None:
    memory = NetworkMemory(4 * MiB)
    admitted: list[str] = []

    async def frame(name: str, size: int) -> None:
        await memory.reserve(size)
        admitted.append(name)

    await memory.reserve(3 * MiB)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(frame, "big", 2 * MiB)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(frame, "fits", 512 * 1024)
        await trio.testing.wait_all_tasks_blocked()
        assert admitted == ["fits"] and memory.waiting == 1
        memory.release(3 * MiB)
        await trio.testing.wait_all_tasks_blocked()
    assert admitted == ["fits", "big"]
    assert memory.large == 2 * MiB + 512 * 1024 and memory.waiting == 0


async def _one_frame_over_the_limit_gets_through_alone() -> None:
    memory = NetworkMemory(1 * MiB)
    await memory.reserve(8 * MiB)
    assert memory.large == 8 * MiB
    with trio.move_on_after(0.05) as scope:
        await memory.reserve(256 * 1024)
    assert scope.cancelled_caught and memory.waiting == 0 and memory.large == 8 * MiB
    memory.release(8 * MiB)
    assert memory.requests == 0


async def _a_cancelled_waiter_holds_nothing() -> None:
    memory = NetworkMemory(2 * MiB)

    async def connection() -> None:
        await memory.reserve(1 * MiB)
        try:
            await trio.sleep_forever()  # reading its frame
        finally:
            memory.release(1 * MiB)

    await memory.reserve(2 * MiB)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection)
        await trio.testing.wait_all_tasks_blocked()
        assert memory.waiting == 1
        nursery.cancel_scope.cancel()  # closed while waiting
    assert memory.waiting == 0 and memory.requests == 2 * MiB
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection)
        await trio.testing.wait_all_tasks_blocked()
        # Admitted and closed in the same step: what it took is given back.
        memory.release(2 * MiB)
        nursery.cancel_scope.cancel()
    assert memory.requests == 0 and memory.waiting == 0


async def _small_frames_have_their_own_budget() -> None:
    memory = NetworkMemory(8 * MiB)
    await memory.reserve(64 * MiB)  # one huge frame fills the large budget
    await memory.reserve(1000)  # a small request is still admitted
    assert memory.small == 1000


def test_a_frame_that_fits_passes_one_that_does_not() -> None:
    trio.run(_a_frame_that_fits_passes_one_that_does_not)


def test_one_frame_over_the_limit_gets_through_alone() -> None:
    trio.run(_one_frame_over_the_limit_gets_through_alone)


def test_a_cancelled_waiter_holds_nothing() -> None:
    trio.run(_a_cancelled_waiter_holds_nothing)


def test_small_frames_have_their_own_budget() -> None:
    trio.run(_small_frames_have_their_own_budget)


def test_a_100_mb_frame_is_read_in_place_without_a_long_step() -> None:
    """A frame above 1 MiB is read into a buffer mapped once at its announced size: no step
    grows (and copies) it. A growing bytearray is copied by each reallocation while it is
    below the allocator's mmap threshold, which a freed large buffer raises to 32 MB, so
    the test frees one first, as a broker that served a large request has."""
    import socket
    import threading
    import zlib

    from broker.eventloop.watchdog import SlowStep, SlowStepWatchdog
    from broker.server.network import Connection, ConnectionInfo, NetworkLimits, RequestFrame

    size = 100 * MiB
    body = bytes(range(256)) * (size // 256)
    del bytearray(40 * MiB)[:]  # raises glibc's mmap threshold, as in a running broker
    seen: list[RequestFrame] = []
    steps: list[SlowStep] = []

    class Recorder:
        async def handle(self, conn: ConnectionInfo, frame: RequestFrame) -> None:
            seen.append(frame)  # checked after the run: a checksum here would be a long step itself

    async def main() -> None:
        ours, theirs = socket.socketpair()
        sender = threading.Thread(target=lambda: (theirs.sendall(size.to_bytes(4, "big") + body), theirs.close()))
        watchdog = SlowStepWatchdog(0.001, steps.append)
        watchdog.start()
        try:
            sender.start()
            stream = trio.SocketStream(trio.socket.from_stdlib_socket(ours))
            info = ConnectionInfo("test", "PLAINTEXT", "127.0.0.1", 1, 2, 1)
            with trio.fail_after(60):
                await Connection(stream, info, Recorder(), NetworkLimits()).run()
        finally:
            watchdog.stop()
            sender.join(10)

    trio.run(main)
    assert [(len(frame), zlib.crc32(frame)) for frame in seen] == [(size, zlib.crc32(body))]
    cpu_ms = sorted(step.cpu_s * 1000 for step in steps)
    assert not cpu_ms or cpu_ms[-1] < 3.0, cpu_ms[-5:]
