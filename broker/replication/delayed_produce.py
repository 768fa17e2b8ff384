"""The one wait for replication (Kafka's DelayedProduce): acks=all produces,
transaction markers and the coordinators' writes each end once the high watermark
passes what they appended, or with the error :meth:`Partition.replication_outcome`
gives (leadership moved, the ISR shrank below ``min.insync.replicas``), or
REQUEST_TIMED_OUT at their deadline. Woken by the partitions' changes, never by polling.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import trio

from broker.replication.partition import Partition
from wire.errors import ErrorCode

#: One write waiting: its partition, the offset the high watermark must reach, and
#: what to do with the outcome.
PendingWrite = tuple[Partition, int, Callable[[ErrorCode], None]]


async def wait_for_change(partitions: Iterable[Partition], deadline: float) -> None:
    """Returns when any of ``partitions`` changes (append, HW move, leadership) or at
    ``deadline`` (trio time)."""
    event = trio.Event()
    watched = list(partitions)
    for p in watched:
        p.waiters.add(event)
    try:
        with trio.move_on_at(deadline):
            await event.wait()
    finally:
        for p in watched:
            p.waiters.discard(event)


async def wait_for_replication(pending: Sequence[PendingWrite], timeout_ms: int) -> None:
    """Completes every write of ``pending`` (``NONE`` or an error) within ``timeout_ms``."""
    deadline = trio.current_time() + max(timeout_ms, 0) / 1000
    waiting = list(pending)
    while waiting:
        still = []
        for write in waiting:
            outcome = write[0].replication_outcome(write[1])
            if outcome is None:
                still.append(write)
            else:
                write[2](outcome)
        waiting = still
        if not waiting or trio.current_time() >= deadline:
            break
        await wait_for_change([p for p, _, _ in waiting], deadline)
    for _, _, complete in waiting:
        complete(ErrorCode.REQUEST_TIMED_OUT)
