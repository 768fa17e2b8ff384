"""The broker's checkpoint task: the high watermark, recovery point and log start checkpoints,
and the periodic flushes, in a worker thread.

A round runs every ``min(replica.high.watermark.checkpoint.interval.ms,
log.flush.offset.checkpoint.interval.ms)``, or at once when the log manager asks for one
(partitions deleted or truncated: their fsyncs and checkpoints are this task's, not the event
loop's). A follower that truncated awaits :meth:`CheckpointTask.durable` before it appends
again: a round that started after the truncation has rewritten the recovery points, so a crash
cannot skip recovery of what it appends next.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import structlog
import trio

from broker.log.files import TopicPartition
from broker.log.manager import LogManager
from broker.log.partition_log import PartitionLog
from broker.observability.metrics import BrokerMetrics
from broker.replication.partition import Partition
from broker.replication.replica_manager import ReplicaManager

log = structlog.get_logger(__name__)


class CheckpointTask:
    def __init__(self, log_manager: LogManager, replica_manager: ReplicaManager, metrics: BrokerMetrics,
                 interval_s: float, clock_ms: Callable[[], int]) -> None:
        self.log_manager = log_manager
        self.replica_manager = replica_manager
        self.metrics = metrics
        self.interval_s = interval_s
        self.clock_ms = clock_ms
        self._requested = trio.Event()
        #: Rounds started, and the latest (by that count) whose checkpoints were all written.
        self._started = 0
        self._written = 0
        self._round_ended = trio.Event()
        #: The round a truncation waits for: the first to start after it.
        self._needed = 0

    def request(self) -> None:
        """The next round now, not at its interval (the log manager's ``request_checkpoint``)."""
        self._requested.set()

    def truncated(self) -> None:
        """A log was truncated (and :meth:`request` called): :meth:`durable` waits for a round
        that starts after now."""
        self._needed = self._started + 1
        self._requested.set()

    async def durable(self) -> None:
        """Returns once every truncation so far is durable and checkpointed (at once if none waits)."""
        needed = self._needed
        while self._written < needed:
            await self._round_ended.wait()

    async def run(self) -> None:
        while True:
            with trio.move_on_after(self.interval_s):
                await self._requested.wait()
            self._requested = trio.Event()
            self._started += 1
            started = self._started
            # The checkpoint files and the periodic fsyncs are disk waits that grow with
            # the partition count and stretch to seconds when the disk is busy: they run
            # in a worker thread so that no client waits for them (they once held every
            # connection up for 1.5 s). The loop copies only the two collections, a C-speed
            # step; reading 10,000 high watermarks into checkpoint keys took it 20 ms.
            partitions = list(self.replica_manager.partitions.items())
            logs = list(self.log_manager.logs.values())
            flush_started = time.perf_counter()
            try:
                written, flushed = await trio.to_thread.run_sync(self._checkpoint_and_flush, partitions, logs,
                                                                 self.clock_ms())
            finally:
                self._round_ended.set()
                self._round_ended = trio.Event()
            if written:
                self._written = started
            elif self._written < self._needed:
                self._requested.set()  # a truncation waits: again at once
            if flushed:
                self.metrics.log_flushed(time.perf_counter() - flush_started)

    def _checkpoint_and_flush(
        self, partitions: list[tuple[tuple[str, int], Partition]], logs: list[PartitionLog], now_ms: int
    ) -> tuple[bool, bool]:
        """Off the event loop; whether the checkpoints were written, and whether a log was
        flushed. The loop keeps appending meanwhile: a high watermark read here is the one in
        force when it is read (at least as new as one read when the round started), a flush may
        record a recovery point below the newest one (recovering a little more after a crash,
        never less), and a segment deleted by retention meanwhile is skipped."""
        high_watermarks = checkpoint_entries(partitions)
        flushed_before = sum(plog.recovery_point for plog in logs)
        written = True
        try:
            self.log_manager.write_high_watermarks(high_watermarks)
            self.log_manager.checkpoint_all()
        except RuntimeError:  # a partition was created or deleted meanwhile: next round
            log.debug("checkpoint_deferred")
            written = False
        for plog in logs:
            try:
                plog.maybe_flush(now_ms)
            except (OSError, ValueError) as ex:  # closed by retention or deletion meanwhile
                log.debug("flush_skipped", error=str(ex))
        return written, sum(plog.recovery_point for plog in logs) != flushed_before


def checkpoint_entries(partitions: Iterable[tuple[tuple[str, int], Partition]]) -> dict[TopicPartition, int]:
    """The replication-offset-checkpoint's entries: each partition's high watermark."""
    return {TopicPartition(t, i): p.high_watermark for (t, i), p in partitions}
