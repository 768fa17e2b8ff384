"""broker.quotas.client_quota_manager: Kafka's quota precedence, windowed rate and throttle time, with a fake clock."""

from __future__ import annotations

import time

import trio
import trio.testing

from broker.quotas.client_quota_manager import (
    PRODUCE,
    REQUEST,
    ClientQuotaManager,
    WindowedRate,
    quota_for,
)
from broker.quotas.managers import QuotaManagers
from controller.quotas import CLIENT_ID, QuotaEntity


def test_precedence() -> None:
    quotas: dict[QuotaEntity, dict[str, float]] = {
        (("client-id", None),): {PRODUCE: 1.0},
        (("client-id", "app"),): {PRODUCE: 2.0},
        (("user", None),): {PRODUCE: 3.0},
        (("client-id", "app"), ("user", "alice")): {PRODUCE: 4.0},
    }
    assert quota_for(quotas, PRODUCE, "alice", "app") == ((("client-id", "app"), ("user", "alice")), 4.0)
    assert quota_for(quotas, PRODUCE, "bob", "app") == ((("user", None),), 3.0)
    del quotas[(("user", None),)]
    assert quota_for(quotas, PRODUCE, "bob", "app") == ((("client-id", "app"),), 2.0)
    assert quota_for(quotas, PRODUCE, "bob", "other") == ((("client-id", None),), 1.0)
    assert quota_for({}, PRODUCE, "bob", "other") is None


def test_rate_counts_at_least_the_full_windows() -> None:
    rate = WindowedRate(window_ms=1000, windows=11)
    rate.record(10_000, 0)
    assert rate.rate(0) == 1000.0  # 10 000 bytes over the 10 s minimum
    for second in range(1, 30):
        rate.record(1000, second * 1000)
    # Eleven samples of 1000 bytes, the oldest started 10 s ago: 1100 B/s at a window's start (the
    # current window counts whole, as in Kafka), 11 000 / 10.5 s half-way through it.
    assert rate.rate(29_000) == 1100.0
    assert round(rate.rate(29_500), 1) == 1047.6


def test_throttle_time_is_kafkas() -> None:
    now = [0]
    quotas: dict[QuotaEntity, dict[str, float]] = {(("user", "alice"),): {PRODUCE: 1000.0}}
    manager = ClientQuotaManager(PRODUCE, 1000, 11, lambda: now[0], lambda: quotas)
    assert manager.record("alice", "c", 5000) == 0  # 500 B/s over 10 s
    assert manager.record("bob", "c", 10**9) == 0  # no quota applies to bob
    # 20 000 bytes at t=0 over a 10 s window: 2000 B/s, twice the bound: (2000 - 1000) / 1000 * 10 s
    # (byte rates are not bounded by a window, as Kafka's ClientQuotaManager).
    assert manager.record("alice", "c", 15_000) == 10_000
    wide = ClientQuotaManager(PRODUCE, 20_000, 2, lambda: now[0], lambda: quotas)
    assert wide.record("alice", "c", 30_000) == 10_000  # 1500 B/s over 20 s: half a window over
    # The request quota bounds its throttle by one window (ClientRequestQuotaManager).
    requests = ClientQuotaManager(REQUEST, 1000, 11, lambda: now[0], lambda: {(("user", "alice"),): {REQUEST: 10.0}})
    assert requests.record("alice", "c", 1000.0) == 1000
    now[0] = 20_000
    assert manager.record("alice", "c", 100) == 0  # the burst has left the window


def test_controller_mutation_token_bucket() -> None:
    from broker.quotas.managers import ControllerMutationQuotaManager

    now = [0]
    quotas: dict[QuotaEntity, dict[str, float]] = {(("user", None),): {"controller_mutation_rate": 2.0}}
    manager = ControllerMutationQuotaManager(1000, 11, lambda: now[0], lambda: quotas)
    # A full bucket of (11 - 1) windows x 2 = 20 partitions; one request may overdraw it.
    assert manager.record("u", "c", 15, strict=True) == (True, 0)
    assert manager.record("u", "c", 10, strict=True) == (True, 2500)  # -5 tokens: 2.5 s to refill
    assert manager.record("u", "c", 1, strict=True) == (False, 2500)  # exceeded: refused, not counted
    assert manager.record("u", "c", 1, strict=False) == (True, 3000)  # permissive: counted, throttled
    now[0] = 3000
    assert manager.record("u", "c", 1, strict=True) == (True, 500)  # refilled to 0, then -1
    assert manager.record("nobody", "c", 1, strict=True) == (False, 500)  # the same default-user bucket
    assert ControllerMutationQuotaManager(1000, 11, lambda: 0, lambda: {}).record("u", "c", 99, True) is None


async def _reader(io_task: list[trio.lowlevel.Task], go: trio.Event, done: trio.Event, closed: trio.Event) -> None:
    io_task.append(trio.lowlevel.current_task())
    await go.wait()
    time.sleep(0.05)  # one step of a connection's reader: reading and copying a frame
    done.set()
    await closed.wait()  # the connection stays open (an exited task's time is dropped)


def test_request_quota_counts_the_connections_network_time() -> None:
    # Kafka records the network thread's time on a request without throttling it; here the time
    # the connection's reader and writer tasks run goes into request_percentage the same way.
    entity: QuotaEntity = ((CLIENT_ID, None),)
    bounds: dict[QuotaEntity, dict[str, float]] = {entity: {REQUEST: 1000.0}}
    quotas = QuotaManagers.create(1000, 2, 1000, 2, lambda: 0, lambda: bounds)

    async def main() -> tuple[float, float]:
        recorded: list[float] = []
        for with_io in (False, True):
            io_task: list[trio.lowlevel.Task] = []
            go, done, closed = trio.Event(), trio.Event(), trio.Event()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(_reader, io_task, go, done, closed)
                await trio.testing.wait_all_tasks_blocked()
                throttle = quotas.start_request(0, "u", "c", False, io_task if with_io else ())
                go.set()
                await done.wait()
                quotas.finish_request(throttle)
                closed.set()
            rate = quotas.request._rates[entity]
            recorded.append(sum(sample[1] for sample in rate.samples))
        return recorded[0], recorded[1] - recorded[0]

    without_io, with_io = trio.run(main)
    assert without_io < 2.0  # the request's own steps only: well under 20 ms
    assert 5.0 <= with_io < 5.0 + 2.0 + without_io  # 50 ms of the reader: 5 percent-seconds
