"""The leader's upkeep of its partitions' in-sync replica sets.

A follower leaves the ISR when it has not caught up with the leader's log end for
``replica.lag.time.max.ms``; it joins again once its log reaches the high watermark and
the start of the current leader epoch (Kafka's Partition.maybeShrinkIsr / maybeExpandIsr).
The leader never changes the ISR itself: it asks the active controller (AlterPartition,
with its leader and partition epochs) and the new ISR takes effect when the committed
PartitionChangeRecord comes back through the metadata log. One request per partition is
in flight; an error, or no answer in time, lets the next check ask again.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog
import trio

from broker.cluster.controller_channel import (
    ChannelError,
    ControllerChannel,
    ControllerRequestError,
)
from broker.replication.replica_manager import Partition, ReplicaManager
from controller.image import MetadataImage
from wire.errors import ErrorCode
from wire.generated.api_056_alter_partition import (
    AlterPartitionRequest,
    AlterPartitionRequestPartitionData,
    AlterPartitionRequestTopicData,
    AlterPartitionResponse,
)

log = structlog.get_logger(__name__)

ALTER_PARTITION_VERSION = 2
#: A request whose outcome never showed up in the metadata is asked again after this.
PENDING_TIMEOUT_MS = 10_000


def epoch_start_offset(p: Partition) -> int | None:
    """Where the current leader epoch begins in this leader's log."""
    for entry in reversed(p.log.leader_epoch_cache.entries):
        if entry.epoch == p.leader_epoch:
            return entry.start_offset
    return None


def wanted_isr(p: Partition, node_id: int, now_ms: int, lag_max_ms: int,
               live: Callable[[int], bool]) -> tuple[int, ...] | None:
    """The ISR this leader should ask for, or None to keep the current one."""
    if p.leader != node_id:
        return None
    kept = [r for r in p.isr
            if r == node_id or now_ms - p.follower_caught_up_ms.get(r, now_ms) <= lag_max_ms]
    if len(kept) == len(p.isr) == len(p.replicas):
        return None  # every replica in sync and none lagging: the common case, checked for every partition
    start: int | None = None
    for replica in p.replicas:
        if replica in kept or replica == node_id or not live(replica):
            continue
        start = epoch_start_offset(p) if start is None else start
        # Back in sync: its log reaches the high watermark and this epoch's start, and it is
        # fetching (Kafka expands on a follower's fetch; a silent follower stays out).
        end = p.follower_end_offsets.get(replica, -1)
        caught_up = p.follower_caught_up_ms.get(replica)
        fetching = caught_up is not None and now_ms - caught_up <= lag_max_ms
        if fetching and end >= p.high_watermark and start is not None and end >= start:
            kept.append(replica)
    if node_id not in kept:
        kept.insert(0, node_id)
    return tuple(kept) if set(kept) != set(p.isr) else None


class IsrManager:
    def __init__(self, node_id: int, replica_manager: ReplicaManager, channel: ControllerChannel,
                 broker_epoch: Callable[[], int], image: Callable[[], MetadataImage], lag_max_ms: int,
                 clock_ms: Callable[[], int]) -> None:
        self.node_id = node_id
        self.rm = replica_manager
        self.channel = channel
        self.broker_epoch = broker_epoch
        self.image = image
        self.lag_max_ms = lag_max_ms
        self.clock_ms = clock_ms
        self._pending_since: dict[tuple[str, int], int] = {}
        self._wake = trio.Event()

    def poke(self) -> None:
        """A follower fetched: an expansion may be due now rather than at the next check."""
        self._wake.set()

    def _live(self, broker_id: int) -> bool:
        return broker_id in self.image().serving_broker_ids()

    def changes(self) -> list[tuple[Partition, tuple[int, ...]]]:
        now = self.clock_ms()
        out = []
        for key, p in self.rm.partitions.items():
            if p.leader != self.node_id:
                continue  # only a leader changes an ISR
            if p.pending_isr is not None:
                if now - self._pending_since.get(key, now) < PENDING_TIMEOUT_MS:
                    continue
                p.pending_isr = None
            isr = wanted_isr(p, self.node_id, now, self.lag_max_ms, self._live)
            if isr is not None:
                out.append((p, isr))
        return out

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        interval_s = min(self.lag_max_ms / 2, 1000) / 1000
        while True:
            with trio.move_on_after(interval_s):
                await self._wake.wait()
            self._wake = trio.Event()
            changes = self.changes()
            if changes and self.broker_epoch() >= 0:
                await self._alter(changes)

    async def _alter(self, changes: list[tuple[Partition, tuple[int, ...]]]) -> None:
        now = self.clock_ms()
        topics: dict[str, AlterPartitionRequestTopicData] = {}
        for p, isr in changes:
            p.pending_isr = isr
            self._pending_since[(p.topic, p.index)] = now
            log.info("isr_change_proposed", topic=p.topic, partition=p.index, isr=list(p.isr), proposed=list(isr),
                     leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch)
            topic = topics.setdefault(p.topic, AlterPartitionRequestTopicData(topic_name=p.topic, topic_id=p.topic_id))
            topic.partitions.append(AlterPartitionRequestPartitionData(
                partition_index=p.index, leader_epoch=p.leader_epoch, new_isr=list(isr),
                partition_epoch=p.partition_epoch))
        request = AlterPartitionRequest(broker_id=self.node_id, broker_epoch=self.broker_epoch(),
                                        topics=list(topics.values()))
        try:
            reply = await self.channel.send_to_active(request, AlterPartitionResponse, timeout_s=5.0,
                                                      version=ALTER_PARTITION_VERSION)
        except (ChannelError, ControllerRequestError, trio.TooSlowError) as ex:
            log.info("isr_change_failed", reason=str(ex))
            for p, _ in changes:
                p.pending_isr = None
            return
        by_id = {p.topic_id: p.topic for p, _ in changes}
        if reply.error_code != ErrorCode.NONE:
            log.info("isr_change_refused", error=ErrorCode.for_code(reply.error_code).name)
            for p, _ in changes:
                p.pending_isr = None
            return
        for answered in reply.topics:
            name = by_id.get(answered.topic_id, answered.topic_name)
            for data in answered.partitions:
                partition = self.rm.get(name, data.partition_index)
                if partition is None:
                    continue
                if data.error_code != ErrorCode.NONE:
                    # Stale epochs mean newer metadata is on its way; either way ask again later.
                    log.info("isr_change_refused", topic=name, partition=data.partition_index,
                             error=ErrorCode.for_code(data.error_code).name)
                    partition.pending_isr = None
