"""The slow-step watchdog: every Trio task step is timed, and one that holds the event
loop longer than ``event.loop.slow.step.ms`` is logged with the stack it was running.

Every connection shares one event loop, so a step that runs 100 ms delays every other
client by 100 ms. A Trio instrument times each step (wall clock, and the loop thread's
CPU time, which a busy machine does not inflate: that clock is a system call, so it is read
at most once a millisecond, see CPU_READ_INTERVAL_S); a sampler thread looks at the step in
progress every half threshold and, once it has run past the threshold, records the
loop thread's stack *while it is still running* — the stack at the end of a step only
shows where it stopped, not what took the time. Garbage collection inside a step is
timed too (``gc_ms``), since a full collection is a stall no stack explains.

With ``event.loop.stall.abort.ms`` set (test brokers set it), a step whose CPU time
passes it stops the broker after logging, so a stall fails the test that caused it.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
import trio

from broker.observability.metrics import BrokerMetrics

log = structlog.get_logger(__name__)

#: Exit status of a broker stopped by ``event.loop.stall.abort.ms`` (EX_SOFTWARE).
STALL_EXIT_STATUS = 70
#: Frames of the sampled stack kept in the log line (innermost last).
STACK_DEPTH = 40
#: The loop thread's CPU clock is read at a step's start only if its last reading is older
#: than this (wall clock). It is a system call (about 0.3-0.8 us, against 0.05 us for the
#: wall clock) and the loop runs tens of thousands of steps a second under load; a slow
#: step's CPU time is then counted from a reading at most this long before it started, so
#: it is overstated by at most this much (and never reported above the step's wall time).
CPU_READ_INTERVAL_S = 0.001


@dataclass(slots=True)
class SlowStep:
    """One task step that held the loop past the threshold."""

    task: str
    wall_s: float
    cpu_s: float
    gc_s: float
    stack: str
    #: The oldest generation collected during the step (-1: none).
    gc_generation: int = -1


class SlowStepWatchdog(trio.abc.Instrument):
    """Times task steps; reports those over ``threshold_s`` (wall clock) to ``on_slow``."""

    def __init__(
        self,
        threshold_s: float,
        on_slow: Callable[[SlowStep], None],
        abort_cpu_s: float = 0.0,
        wall_clock: Callable[[], float] = time.perf_counter,
        cpu_clock: Callable[[], float] = time.thread_time,
    ) -> None:
        self.threshold_s = threshold_s
        self.abort_cpu_s = abort_cpu_s
        self._on_slow = on_slow
        self._wall = wall_clock
        self._cpu = cpu_clock
        self._step_wall = 0.0
        #: The last reading of the loop thread's CPU clock, and the wall clock then.
        self._cpu_read = 0.0
        self._cpu_read_wall = -CPU_READ_INTERVAL_S
        self._step_task: trio.lowlevel.Task | None = None
        #: Increments per step, so the sampler knows which step a stack belongs to.
        self._step_seq = 0
        self._sampled_seq = -1
        self._sampled_stack = ""
        self._gc_s = 0.0
        self._gc_started = 0.0
        self._gc_generation = -1
        self.longest_step_s = 0.0
        self.slow_steps = 0
        self._loop_thread = threading.get_ident()
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None

    # ------------------------------------------------------------ Trio instrument

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._step_seq += 1
        self._step_task = task
        self._gc_s = 0.0
        self._gc_generation = -1
        now = self._wall()
        self._step_wall = now
        if now - self._cpu_read_wall >= CPU_READ_INTERVAL_S:
            self._cpu_read = self._cpu()
            self._cpu_read_wall = now

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        wall = self._wall() - self._step_wall
        if self._step_task is not task:  # the step that installed the instrument
            return
        self._step_task = None
        if wall > self.longest_step_s:
            self.longest_step_s = wall
        if wall > self.threshold_s:
            # From the last reading (at most CPU_READ_INTERVAL_S of wall clock before the step):
            # an upper bound of the step's CPU time, and so is its wall time.
            self._report(task, wall, min(self._cpu() - self._cpu_read, wall))

    # ------------------------------------------------------------ reporting

    def _report(self, task: trio.lowlevel.Task, wall: float, cpu: float) -> None:
        self.slow_steps += 1
        if self._sampled_seq == self._step_seq:
            stack = self._sampled_stack
        else:  # ended before the sampler looked: where the task stopped is all there is
            stack = "".join(traceback.format_list(_task_stack(task)))
        step = SlowStep(task.name, wall, cpu, self._gc_s, stack, self._gc_generation)
        self._on_slow(step)
        if self.abort_cpu_s and cpu > self.abort_cpu_s:
            log.critical("event_loop_stall_abort", task=step.task, cpu_ms=round(cpu * 1000, 1),
                         limit_ms=round(self.abort_cpu_s * 1000, 1))
            sys.stderr.flush()
            os._exit(STALL_EXIT_STATUS)

    def _gc_callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = self._wall()
            self._gc_generation = max(self._gc_generation, int(info.get("generation", -1)))
        elif self._gc_started:
            self._gc_s += self._wall() - self._gc_started
            self._gc_started = 0.0

    def _sample(self) -> None:
        interval = max(self.threshold_s / 2, 0.001)
        while not self._stop.wait(interval):
            seq = self._step_seq
            started = self._step_wall
            if self._step_task is None or seq == self._sampled_seq:
                continue
            if self._wall() - started < self.threshold_s:
                continue
            frame = sys._current_frames().get(self._loop_thread)
            if frame is None or seq != self._step_seq:
                continue
            stack = "".join(traceback.format_stack(frame, limit=STACK_DEPTH))
            self._sampled_stack = stack
            self._sampled_seq = seq

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Starts timing steps of the calling (event loop) thread's Trio run."""
        self._loop_thread = threading.get_ident()
        gc.callbacks.append(self._gc_callback)
        self._sampler = threading.Thread(target=self._sample, name="slow-step-sampler", daemon=True)
        self._sampler.start()
        trio.lowlevel.add_instrument(self)

    def disarm_abort(self) -> None:
        """Slow steps are still logged, but none stops the process any more: once the broker
        is stopping, closing every log and writing producer snapshots is one-time work that
        holds up no client (they are being disconnected)."""
        self.abort_cpu_s = 0.0

    def stop(self) -> None:
        try:
            trio.lowlevel.remove_instrument(self)
        except (KeyError, ValueError):
            pass
        if self._gc_callback in gc.callbacks:
            gc.callbacks.remove(self._gc_callback)
        self._stop.set()
        if self._sampler is not None:
            self._sampler.join(timeout=1.0)


def _task_stack(task: trio.lowlevel.Task) -> traceback.StackSummary:
    frames = [(f, lineno) for f, lineno in task.iter_await_frames()]
    return traceback.StackSummary.extract(frames, limit=STACK_DEPTH)


def log_slow_step(step: SlowStep) -> None:
    log.warning(
        "slow_task_step",
        task=step.task,
        wall_ms=round(step.wall_s * 1000, 1),
        cpu_ms=round(step.cpu_s * 1000, 1),
        gc_ms=round(step.gc_s * 1000, 1),
        gc_generation=step.gc_generation,
        stack=step.stack,
    )


def start_watchdog(slow_step_ms: int, stall_abort_ms: int, metrics: BrokerMetrics) -> SlowStepWatchdog | None:
    """The watchdog for the running Trio loop (None when ``slow_step_ms`` is 0), started
    once the broker is ready: recovery and start-up are allowed their long steps."""
    if slow_step_ms <= 0:
        return None

    def on_slow(step: SlowStep) -> None:
        log_slow_step(step)
        metrics.slow_task_step(step.wall_s)

    watchdog = SlowStepWatchdog(slow_step_ms / 1000, on_slow, stall_abort_ms / 1000)
    metrics.watch_longest_step(lambda: watchdog.longest_step_s)
    watchdog.start()
    return watchdog
