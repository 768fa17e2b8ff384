"""A scrape's costly part runs off the event loop; the instruments' callbacks run on it.

With 20,000 partitions a scrape is 120,000 series: over a second of CPU in OpenTelemetry's
aggregation and the Prometheus text. Done on the Trio thread it stalled every connection of the
broker for that long (under a loaded machine, long enough for consumer sessions to time out).
"""

from __future__ import annotations

import threading

import trio
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, generate_latest

from broker.observability.collection import CallbackSnapshot, SnapshotMeter

#: Under OpenTelemetry's default cardinality limit (2,000) of the provider built here.
SERIES = 1_900


def test_callbacks_run_on_the_loop_and_aggregation_in_a_worker_thread() -> None:
    registry = CollectorRegistry(auto_describe=False)
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)], shutdown_on_exit=False)
    snapshot = CallbackSnapshot()
    meter = SnapshotMeter(provider.get_meter("test"), snapshot)
    callback_threads: set[int] = set()
    generation = [0]
    collect_threads: set[int] = set()

    def partitions(_: CallbackOptions) -> list[Observation]:
        callback_threads.add(threading.get_ident())
        return [Observation(generation[0] + i, {"topic": f"t{i // 100}", "partition": str(i % 100)})
                for i in range(SERIES)]

    meter.create_observable_gauge("log.end_offset", [partitions])

    async def main() -> tuple[bytes, int, int]:
        loop_thread = threading.get_ident()
        ticks = 0
        done = trio.Event()

        async def tick() -> None:
            nonlocal ticks
            while not done.is_set():
                await trio.sleep(0)
                ticks += 1

        async def render() -> bytes:
            taken = snapshot.take()
            generation[0] = 1_000_000  # the state changes after the snapshot: the text shows the snapshot

            def collect() -> bytes:
                collect_threads.add(threading.get_ident())
                with snapshot.replaying(taken):
                    return generate_latest(registry)

            try:
                return await trio.to_thread.run_sync(collect)
            finally:
                done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(tick)
            body = await render()
        return body, loop_thread, ticks

    body, loop_thread, ticks = trio.run(main)
    assert callback_threads == {loop_thread}
    assert collect_threads and loop_thread not in collect_threads
    assert ticks > 0, "the event loop did not run while the scrape was aggregated"
    text = body.decode()
    assert text.count("log_end_offset{") == SERIES
    assert 'partition="7",topic="t0"} 7.0' in text
    assert "1.000007e+06" not in text
    # Outside a replay (an OTLP collection on the loop) the callback reads the state again.
    assert 'partition="7",topic="t0"} 1.000007e+06' in generate_latest(registry).decode()
    provider.shutdown()
