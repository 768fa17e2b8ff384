"""The slow-step watchdog: a step that holds the event loop is reported with the stack it
was running, steps that yield are not, and the longest step is kept."""

from __future__ import annotations

import time

import pytest
import trio

from broker.eventloop.watchdog import SlowStep, SlowStepWatchdog


def hold_the_loop_for(seconds: float) -> None:
    """Computes for ``seconds`` of CPU time (wall time is longer on a busy machine)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def run_with_watchdog(threshold_s: float, body: object) -> tuple[list[SlowStep], SlowStepWatchdog]:
    seen: list[SlowStep] = []

    async def main() -> None:
        watchdog = SlowStepWatchdog(threshold_s, seen.append)
        watchdog.start()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(body, name="adversary")  # type: ignore[arg-type]
        finally:
            watchdog.stop()
        holder.append(watchdog)

    holder: list[SlowStepWatchdog] = []
    trio.run(main)
    return seen, holder[0]


def test_a_step_over_the_threshold_is_reported_with_the_stack_it_ran() -> None:
    async def adversary() -> None:
        await trio.sleep(0)
        hold_the_loop_for(0.25)
        await trio.sleep(0)

    seen, watchdog = run_with_watchdog(0.05, adversary)
    assert len(seen) == 1
    step = seen[0]
    assert step.task == "adversary"
    assert step.wall_s >= step.cpu_s >= 0.25
    # Sampled while running: the stack names the function that held the loop.
    assert "hold_the_loop_for" in step.stack
    assert watchdog.slow_steps == 1 and watchdog.longest_step_s >= 0.25


def test_work_that_yields_between_slices_is_not_reported() -> None:
    async def polite() -> None:
        for _ in range(25):
            hold_the_loop_for(0.01)
            await trio.sleep(0)

    seen, watchdog = run_with_watchdog(0.2, polite)
    # Wall time of a 10 ms slice stretches on a loaded machine, so the bound is loose.
    assert seen == []
    assert 0.01 <= watchdog.longest_step_s < 0.2


def test_gc_inside_a_step_is_timed() -> None:
    import gc

    async def collector() -> None:
        junk = [[i] for i in range(300_000)]
        hold_the_loop_for(0.06)
        gc.collect()
        del junk

    seen, _ = run_with_watchdog(0.05, collector)
    assert len(seen) == 1 and seen[0].gc_s > 0


def test_full_collections_are_deferred_while_running_and_restored_after() -> None:
    import gc

    from broker.eventloop.pacing import full_collections

    before = gc.get_threshold()
    seen: list[tuple[int, int, int]] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(full_collections, 0.05, 1.0)
            await trio.sleep(0.2)
            seen.append(gc.get_threshold())
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        gc.unfreeze()  # the collections froze this test process's heap
    assert seen[0][2] == 2**31 - 1 and seen[0][:2] == before[:2]
    assert gc.get_threshold() == before


def test_a_full_collection_freezes_its_survivors_and_reclaims_young_cycles() -> None:
    """What survives a periodic full collection is frozen, so the next one walks only what
    was allocated since; cyclic garbage made before it is still reclaimed."""
    import gc
    import weakref

    from broker.eventloop.pacing import full_collections

    class Node:
        other: object = None

    frozen: list[int] = []
    survivors = [[i] for i in range(20_000)]
    cycle = Node()
    cycle.other = cycle
    gone = weakref.ref(cycle)
    del cycle

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            frozen.append(gc.get_freeze_count())
            nursery.start_soon(full_collections, 0.05, 1.0)
            await trio.sleep(0.2)
            frozen.append(gc.get_freeze_count())
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        gc.unfreeze()
    assert frozen[1] - frozen[0] >= len(survivors)
    assert gone() is None


def test_settling_the_heap_freezes_it_without_walking_it() -> None:
    """Start-up's heap is frozen after a collection of the young generations only: a full
    collection of 100,000 partitions' objects was a fifth of a clean start."""
    import gc
    import weakref

    from broker.eventloop.pacing import settle_heap

    generations: list[int] = []

    def record(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            generations.append(info["generation"])

    class Node:
        other: object = None

    held = [[i] for i in range(50_000)]  # tracked objects, some still young
    cycle = Node()
    cycle.other = cycle
    gone = weakref.ref(cycle)
    del cycle  # young cyclic garbage: collected, not frozen
    frozen_before = gc.get_freeze_count()
    gc.callbacks.append(record)
    try:
        settle_heap()
        frozen = gc.get_freeze_count() - frozen_before
        young = gc.get_count()
    finally:
        gc.callbacks.remove(record)
        gc.unfreeze()
    assert generations and max(generations) < 2
    assert frozen >= len(held)
    assert young[0] == 0 and young[1] == 0
    assert gone() is None


def test_the_pacer_asks_for_a_pause_once_its_slice_is_spent() -> None:
    from broker.eventloop.pacing import CHECK_EVERY, OFF_LOOP_ENTRIES, SLICE_S, LargeRequests, Pacer

    now = [0.0]
    pacer = Pacer(clock=lambda: now[0])
    assert not any(pacer.tick() for _ in range(10 * CHECK_EVERY))  # within the slice
    now[0] += SLICE_S
    assert any(pacer.tick() for _ in range(CHECK_EVERY))  # at most CHECK_EVERY entries later
    active = LargeRequests.active
    pacer.tick(OFF_LOOP_ENTRIES)
    assert pacer.large and LargeRequests.active == active + 1
    pacer.close()
    assert LargeRequests.active == active


def test_a_paused_large_request_runs_its_next_slice_only_once_the_others_are_done() -> None:
    """A small request passes through several tasks, each a scheduling round: a large request
    that only yielded for one round would run a slice in front of every one of them. Its pause
    waits until no other task is ready, so a chain of hand-offs runs without its slices."""
    from broker.eventloop.pacing import MAX_DEFER_S, Pacer

    slices: list[float] = []
    hops: list[int] = []

    async def large(done: trio.Event) -> None:
        pacer = Pacer()
        while not done.is_set():
            slices.append(trio.current_time())
            while not pacer.tick():  # one slice of work
                pass
            await pacer.pause()

    async def chain(hands: int) -> None:
        for _ in range(hands):  # e.g. reader -> handler -> writer, each woken by the last
            hops.append(len(slices))
            await trio.lowlevel.checkpoint()
        hops.append(len(slices))

    async def main() -> None:
        done = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(large, done)
            await trio.sleep(0.05)
            await chain(20)
            done.set()

    trio.run(main)
    # At most the slice under way when the chain started runs while it hands on.
    assert hops[-1] - hops[0] <= 1, hops
    # And a loop that is never idle still gives the large request its slices.
    slices.clear()
    started = time.perf_counter()

    async def never_idle() -> None:
        done = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(large, done)
            while time.perf_counter() - started < 10 * MAX_DEFER_S:
                await trio.lowlevel.checkpoint()
            done.set()

    trio.run(never_idle)
    assert len(slices) >= 5, slices


def test_a_large_message_is_freed_a_chunk_at_a_time_nested_lists_too() -> None:
    """One topic holding 100,000 partitions (ListOffsets, OffsetFetch) is as long to free as
    100,000 topics: its partitions are freed between pauses, not in one deallocation."""
    from broker.eventloop.pacing import RELEASE_CHUNK, Pacer, release
    from wire.generated.api_002_list_offsets import (
        ListOffsetsResponse,
        ListOffsetsResponseListOffsetsPartitionResponse,
        ListOffsetsResponseListOffsetsTopicResponse,
    )

    def topic(name: str, partitions: int) -> ListOffsetsResponseListOffsetsTopicResponse:
        return ListOffsetsResponseListOffsetsTopicResponse(name=name, partitions=[
            ListOffsetsResponseListOffsetsPartitionResponse(partition_index=i) for i in range(partitions)])

    one_large = topic("t", 100_000)
    response = ListOffsetsResponse(topics=[one_large])
    pacer = Pacer()
    trio.run(release, pacer, response)
    assert one_large.partitions == [] and pacer.pauses >= 100_000 // RELEASE_CHUNK
    # Many small topics add up: freed one topic at a time.
    response = ListOffsetsResponse(topics=[topic(f"t{i}", 20) for i in range(5_000)])
    trio.run(release, Pacer(), response)
    assert response.topics == []
    # Few entries in all: left as they are.
    small = [topic(f"t{i}", 20) for i in range(10)]
    response = ListOffsetsResponse(topics=list(small))
    trio.run(release, Pacer(), response)
    assert response.topics == small and all(len(t.partitions) == 20 for t in small)


class _Task:
    """Stands in for a Trio task in steps driven by hand."""

    name = "driven"

    def iter_await_frames(self) -> list[tuple[object, int]]:
        return []


def test_the_cpu_clock_is_read_at_most_once_a_millisecond_and_a_slow_step_still_gets_its_cpu_time() -> None:
    """The loop thread's CPU clock is a system call: it is not read on every step, and what a
    slow step reports is an upper bound of its CPU time, off by at most that millisecond."""
    from typing import Any, cast

    from broker.eventloop.watchdog import CPU_READ_INTERVAL_S

    wall, cpu, reads = [100.0], [5.0], [0]

    def cpu_clock() -> float:
        reads[0] += 1
        return cpu[0]

    seen: list[SlowStep] = []
    watchdog = SlowStepWatchdog(0.05, seen.append, wall_clock=lambda: wall[0], cpu_clock=cpu_clock)
    task = cast(Any, _Task())

    def step(wall_s: float, cpu_s: float) -> None:
        watchdog.before_task_step(task)
        wall[0] += wall_s
        cpu[0] += cpu_s
        watchdog.after_task_step(task)

    for _ in range(10_000):  # 10,000 steps of 10 us: 100 ms of wall clock
        step(10e-6, 10e-6)
    assert reads[0] <= 0.1 / CPU_READ_INTERVAL_S + 1
    assert seen == []
    step(0.08, 0.06)  # slow: 80 ms of wall clock, 60 ms of CPU
    assert len(seen) == 1
    assert 0.06 - 1e-9 <= seen[0].cpu_s <= 0.06 + CPU_READ_INTERVAL_S
    assert seen[0].wall_s == pytest.approx(0.08)
    # A step starting 0.5 ms after the last reading, computing all along: the bound is its wall clock.
    wall[0] += 0.5  # idle: the next step reads the clock
    step(0.0005, 0.0005)
    step(0.06, 0.06)
    assert len(seen) == 2 and seen[1].cpu_s == pytest.approx(0.06)
