"""Work that grows with a request gives the event loop back at bounded intervals.

Every connection shares one event loop, so a request naming a million topics must not
hold it for seconds. Two tools, chosen by what the work is (docs/architecture.md,
"Isolation"):

- Handlers that loop over a request's entries call :meth:`Pacer.tick` per entry and
  ``await pacer.pause()`` when it says so: at most every ``SLICE_S`` of work, every
  other task runs until the loop is idle (large requests are background work). Broker
  state is only ever touched on the loop, so no locking is needed.
- Decoding a large frame and encoding a large response are pure functions of bytes or
  messages: they run in one worker thread with the pure-Python codec, which lets the
  event loop take the GIL back every switch interval (a C call would hold it until it
  returns). One thread per kind of work (LANES), so that the loop competes with a
  few GIL holders, not forty, and a large request waits only behind its own kind.

And the garbage collector: a full collection walks every tracked object in one go,
holding the GIL — 0.5-0.8 s while a million-entry request is alive, 140 ms for the
replicas of 10,000 partitions created since start-up. Full collections therefore never
start automatically (young generations still do, and they only walk young objects);
:func:`full_collections` runs them from a task, while no large request is in progress,
and freezes what survives (:func:`settle_heap`), as start-up does with what it loaded and
the broker does after creating replicas in bulk: each full collection then walks only
what was allocated since the one before.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any, TypeVar

import structlog
import trio
import trio.testing

log = structlog.get_logger(__name__)

#: Longest run of a handler's per-entry work between two yields: what a client's request
#: arriving while it runs may wait for it.
SLICE_S = 0.002
#: Longest a paused slice waits for the event loop to be idle before it runs anyway: on a
#: loop that is never idle, large requests still get a slice in every MAX_DEFER_S.
MAX_DEFER_S = 0.020
#: Entries handled between two looks at the clock.
CHECK_EVERY = 64
#: Request frames at least this large are decoded off the event loop.
OFF_LOOP_FRAME_BYTES = 256 * 1024
#: A large Produce frame is large for its record data, which decoding does not copy: one whose
#: arrays (topics, partitions) and tagged-field sections hold at most this many entries each is
#: decoded on the loop (2 µs in C for 4 partitions), which costs far less than the hand-off to a
#: worker thread (170 µs of CPU measured); any other is decoded off the loop, as before. The
#: worst frame decoded on the loop this way (127 topics of 127 partitions) is no longer to
#: decode than a frame just under OFF_LOOP_FRAME_BYTES, which is decoded on the loop anyway.
#: Both decoders hold every array to the limit, a compact one with a one-byte length too.
PRODUCE_ON_LOOP_ENTRIES = 127
#: Responses built from at least this many entries are encoded off the event loop.
OFF_LOOP_ENTRIES = 20_000
#: Produced record data at least this large is validated (copied, CRC-checked) off the loop.
OFF_LOOP_RECORD_BYTES = 1024 * 1024

_T = TypeVar("_T")


#: How often a full garbage collection runs, and the longest it waits for large
#: requests to finish before running anyway.
FULL_COLLECTION_INTERVAL_S = 300.0
FULL_COLLECTION_MAX_DEFER_S = 600.0


class LargeRequests:
    """How many requests in progress hold a large number of entries (process-wide, as
    the garbage collector is)."""

    active = 0


class Pacer:
    """Counts a request's entries and says when its handler should yield."""

    __slots__ = ("_clock", "_countdown", "_slice_end", "entries", "large", "pauses")

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._slice_end = clock() + SLICE_S
        self._countdown = CHECK_EVERY
        #: Entries counted so far: the size of the response being built.
        self.entries = 0
        self.pauses = 0
        #: Counted in LargeRequests.active until :meth:`close`.
        self.large = False

    def mark_large(self) -> None:
        if not self.large:
            self.large = True
            LargeRequests.active += 1

    def close(self) -> None:
        if self.large:
            self.large = False
            LargeRequests.active -= 1

    def tick(self, entries: int = 1) -> bool:
        """Counts ``entries``; True when the handler has run its slice and should pause."""
        self.entries += entries
        self._countdown -= entries
        if self._countdown > 0:
            return False
        self._countdown = CHECK_EVERY
        if self.entries >= OFF_LOOP_ENTRIES:
            self.mark_large()
        return self._clock() >= self._slice_end

    async def pause(self) -> None:
        """Lets the rest of the broker run first, then starts a new slice.

        The slice waits until the event loop is idle (no other task ready to run, no I/O
        pending), for at most ``MAX_DEFER_S``: a well-behaved client's request passes
        through several tasks (reader, handler, writer), each a scheduling round, and
        yielding for one round only would put one of this request's slices in front of
        every one of those rounds. One large request at a time waits for the idle moment
        (a lock), so the idle moment starts one slice, not one per large request."""
        self.pauses += 1
        async with _idle_lane():
            with trio.move_on_after(MAX_DEFER_S):
                await trio.testing.wait_all_tasks_blocked()
        self._slice_end = self._clock() + SLICE_S


_idle_lanes: trio.lowlevel.RunVar[trio.Lock] = trio.lowlevel.RunVar("idle_lane")


def _idle_lane() -> trio.Lock:
    try:
        return _idle_lanes.get()
    except LookupError:
        lane = trio.Lock()
        _idle_lanes.set(lane)
        return lane


#: Entries freed between two yields when a large request is released (about a slice of work).
RELEASE_CHUNK = 4096


async def release(pacer: Pacer, *messages: object) -> None:
    """Frees the long lists of finished messages a chunk at a time: dropping a million
    entries at once is one long deallocation that holds the loop (and the GIL). Nested
    lists count too: one topic holding 100,000 partitions is as long to free as 100,000
    topics, and so are 5,000 topics of 20 partitions. Short lists are left alone (a
    handler may have kept one)."""
    for message in messages:
        await _release_fields(pacer, message)


async def _release_fields(pacer: Pacer, message: object) -> int:
    """Frees what is long under ``message``; returns how many entries are left under it."""
    left = 0
    for name in getattr(type(message), "__slots__", ()):
        value = getattr(message, name, None)
        if isinstance(value, list) and value:
            left += await _release_list(pacer, value)
    return left


async def _release_list(pacer: Pacer, items: list[Any]) -> int:
    if not _holds_lists(items[-1]):
        if len(items) <= RELEASE_CHUNK:
            return len(items)
        while items:  # flat entries: freed in C a chunk at a time
            del items[-RELEASE_CHUNK:]
            await pacer.pause()
        return 0
    left = len(items)
    for item in items:
        left += await _release_fields(pacer, item)
        if pacer.tick():
            await pacer.pause()
    if left <= RELEASE_CHUNK:
        return left
    while items:  # entries with lists of their own, many in all: one at a time
        del items[-1]
        if pacer.tick():
            await pacer.pause()
    return 0


async def discard(pacer: Pacer, *containers: list[Any] | dict[Any, Any] | set[Any]) -> None:
    """Empties a handler's own large lists, dicts and sets a chunk at a time before it
    returns: freed with the handler's frame, 100,000 entries are one 10-20 ms step."""
    for container in containers:
        if isinstance(container, list):
            while len(container) > RELEASE_CHUNK:
                del container[-RELEASE_CHUNK:]
                await pacer.pause()
        elif isinstance(container, dict):
            while len(container) > RELEASE_CHUNK:
                for _ in range(RELEASE_CHUNK):
                    container.popitem()
                await pacer.pause()
        else:
            while len(container) > RELEASE_CHUNK:
                for _ in range(RELEASE_CHUNK):
                    container.pop()
                await pacer.pause()
        container.clear()


def _holds_lists(entry: object) -> bool:
    return any(isinstance(getattr(entry, name, None), list) and getattr(entry, name)
               for name in getattr(type(entry), "__slots__", ()))


_lanes: trio.lowlevel.RunVar[dict[str, trio.CapacityLimiter]] = trio.lowlevel.RunVar("codec_lanes")

#: Worker lanes, one thread each: a large request waits only behind work of its kind, so a
#: client's million-topic Metadata does not hold up a producer's 1 MB batches.
LANES = ("codec", "produce", "records")


async def off_loop(fn: Callable[..., _T], *args: object, lane: str = "codec") -> _T:
    """Runs pure work in the worker thread of ``lane`` (see LANES)."""
    try:
        lanes = _lanes.get()
    except LookupError:
        lanes = {name: trio.CapacityLimiter(1) for name in LANES}
        _lanes.set(lanes)
    return await trio.to_thread.run_sync(fn, *args, limiter=lanes[lane])


#: How long a thread holds the GIL before another that wants it gets it (CPython's
#: default is 5 ms): while a worker thread works, the event loop waits about this long for
#: the GIL each time it has released it — every socket call and every poll, a dozen or
#: more for one small request — so it is kept well under a millisecond.
SWITCH_INTERVAL_S = 0.0002


def defer_full_collections() -> tuple[int, int, int]:
    """Full collections no longer start on their own (see :func:`full_collections`);
    returns the thresholds before."""
    before = gc.get_threshold()
    gc.set_threshold(before[0], before[1], 2**31 - 1)
    return before


def settle_heap() -> None:
    """Moves every object alive now out of the garbage collector's reach (``gc.freeze``).

    A full collection walks every tracked object; with start-up's ~80,000 of them that
    stalled the event loop for 25-45 ms several times a second under load, and the replicas
    of 10,000 partitions created at run time made a periodic full collection a 140 ms step.
    Frozen objects are never walked again; what traffic allocates is still collected as usual.
    The cost: a reference cycle among frozen objects is not reclaimed once it becomes garbage
    (objects without cycles are freed by their reference counts, frozen or not), which is
    why only long-lived state is frozen — what start-up loaded, replicas created in bulk,
    and what survived a full collection.

    Only the young generations are collected first: a full collection here walked the whole
    heap (about 3 s of CPU, a fifth of a clean start, with 100,000 partitions) to find a few
    dozen unreachable objects (76 after loading 2,000 or 20,000 partitions, 20 in an empty
    broker); those few are frozen with the rest.
    """
    gc.collect(1)
    gc.freeze()


async def full_collections(
    interval_s: float = FULL_COLLECTION_INTERVAL_S, max_defer_s: float = FULL_COLLECTION_MAX_DEFER_S
) -> None:
    """Runs a full collection every ``interval_s`` once no large request is in progress
    (or after ``max_defer_s`` regardless, so cycles cannot pile up for ever), and freezes its
    survivors, so that the next one walks only what was allocated since."""
    before = defer_full_collections()
    try:
        while True:
            await trio.sleep(interval_s)
            deferred = 0.0
            while LargeRequests.active and deferred < max_defer_s:
                await trio.sleep(0.1)
                deferred += 0.1
            started = time.perf_counter()
            collected = gc.collect()
            gc.freeze()
            log.debug("full_collection", collected=collected, ms=round((time.perf_counter() - started) * 1000, 1))
    finally:
        gc.set_threshold(*before)
