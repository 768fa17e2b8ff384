"""Retention over many partitions gives the event loop back as it goes: no step of it holds
the loop longer than a slice, what it deletes is what a single pass deletes, and
partitions deleted or made while it yields are handled as they are then."""

from __future__ import annotations

import gc
from pathlib import Path

import trio

from broker.eventloop.watchdog import SlowStep, SlowStepWatchdog
from broker.log import LogConfig
from broker.log.files import TopicPartition
from broker.log.manager import LogManager

from .helpers import T0, Clock, make_batch

PARTITIONS = 1000
RETENTION = LogConfig(retention_ms=60_000, file_delete_delay_ms=0)
#: Far above a slice (5 ms), far below what one pass over every partition takes.
BOUND_S = 0.05


def expired_partitions(root: Path, clock: Clock) -> LogManager:
    """PARTITIONS partitions whose only segment holds records older than their retention."""
    manager = LogManager([root], RETENTION, clock)
    for i in range(PARTITIONS):
        manager.get_or_create("old", i).append_as_leader(make_batch(2, timestamp=T0), 0)
    clock.advance(120_000)
    return manager


def run_watched(body: object) -> tuple[list[SlowStep], int]:
    """Runs ``body`` beside a task that ticks every millisecond; the slow steps and the ticks."""
    seen: list[SlowStep] = []
    ticks = 0

    async def ticker(done: trio.Event) -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await trio.sleep(0.001)

    async def main() -> None:
        watchdog = SlowStepWatchdog(BOUND_S, seen.append)
        watchdog.start()
        try:
            done = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ticker, done)
                await body()  # type: ignore[operator]
                done.set()
        finally:
            watchdog.stop()

    # A full collection of the test process's heap, which grows over a test session, would
    # be timed as part of whichever step it fell in (the broker paces its own collections).
    gc.collect()
    gc.disable()
    try:
        trio.run(main)
    finally:
        gc.enable()
    return seen, ticks


def high_watermark_of(manager: LogManager) -> object:
    return lambda tp: manager.logs[tp].log_end_offset if tp in manager.logs else None


def test_retention_of_many_partitions_holds_the_loop_no_longer_than_a_slice(tmp_path: Path) -> None:
    clock = Clock()
    manager = expired_partitions(tmp_path / "paced", clock)
    deleted: list[int] = []

    async def paced() -> None:
        deleted.append(await manager.apply_retention_paced(clock(), high_watermark_of(manager)))  # type: ignore[arg-type]

    slow, ticks = run_watched(paced)
    assert deleted == [PARTITIONS]
    assert all(plog.log_start_offset == 2 and plog.size == 0 for plog in manager.logs.values())
    # CPU time: a loaded machine stretches a step's wall time, not its CPU time.
    assert [step for step in slow if step.cpu_s > BOUND_S] == []
    assert ticks > 5
    manager.close()

    # The same pass in one go holds the loop for all of it: nothing else runs meanwhile.
    control = expired_partitions(tmp_path / "unpaced", Clock(clock()))

    async def unpaced() -> None:
        control.apply_retention(clock(), high_watermark_of(control))  # type: ignore[arg-type]

    _, ticks = run_watched(unpaced)
    assert ticks <= 1
    control.close()


def test_partitions_deleted_while_it_yields_are_skipped_and_their_directories_removed(tmp_path: Path) -> None:
    clock = Clock()
    manager = expired_partitions(tmp_path, clock)
    gone = [TopicPartition("old", i) for i in range(PARTITIONS - 100, PARTITIONS)]
    # Known for every partition, deleted or not: only the pass itself may skip the deleted.
    ends = {tp: plog.log_end_offset for tp, plog in manager.logs.items()}
    results: list[int] = []

    async def paced_while_deleting() -> None:
        async def delete_soon() -> None:  # runs at the pass's first yield
            manager.delete_partitions(gone)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(delete_soon)
            # Two yields, before the first two partitions (Trio may run either task first after
            # one), then none: the deleted partitions come long after them.
            yields_twice = iter([0.0, 1.0, 2.0, 3.0, 4.0] + [3.5] * 10 * PARTITIONS).__next__
            results.append(await manager.apply_retention_paced(clock(), ends.get, slice_s=0.0, clock=yields_twice))
        # The deleted directories are due now (file.delete.delay.ms is 0): removed by the next pass.
        results.append(await manager.apply_retention_paced(clock(), high_watermark_of(manager)))  # type: ignore[arg-type]

    run_watched(paced_while_deleting)
    assert results[0] == PARTITIONS - 100
    assert all(TopicPartition("old", i) not in manager.logs for i in range(PARTITIONS - 100, PARTITIONS))
    assert not [p for p in tmp_path.iterdir() if p.name.endswith("-delete")]
    manager.close()
