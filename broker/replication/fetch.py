"""Reading partitions for a Fetch (Kafka's ReplicaManager.fetchMessages and
Partition.fetchRecords): leadership and leader-epoch checks, divergence (KIP-320),
a follower's fetch position, the isolation level's upper bound, the reads, and the
long-poll until ``min_bytes`` arrive or ``max_wait_ms`` passes — woken by appends and
high-watermark moves, never by polling.

Consumers read below the high watermark (the last stable offset for read_committed,
with the aborted transactions overlapping the data, from the partitions'
``.txnindex``, for the client to skip); followers read to the log end. At least one
whole batch is returned even when it is larger than the size limits (KIP-74).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog
import trio

from broker.eventloop.limits import describe_error
from broker.eventloop.pacing import Pacer
from broker.log.errors import OffsetOutOfRangeError
from broker.replication.delayed_produce import wait_for_change
from broker.replication.partition import Partition
from wire.errors import ErrorCode
from wire.generated.api_001_fetch import (
    FetchRequestFetchPartition,
    FetchResponseAbortedTransaction,
    FetchResponsePartitionData,
)

if TYPE_CHECKING:
    from broker.replication.replica_manager import ReplicaManager

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class FetchSlot:
    """One partition of a fetch: what was asked, and the answer being filled in."""

    #: The topic's name ("" when the fetcher named an unknown topic id).
    topic: str
    request: FetchRequestFetchPartition
    response: FetchResponsePartitionData
    #: The partition to read, once the checks passed; None for a final answer.
    partition: Partition | None = None


@dataclass(frozen=True, slots=True)
class FetchParams:
    """The request-level parameters of a fetch (Kafka's FetchParams)."""

    #: The follower's broker id, or -1 for a consumer.
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    read_committed: bool

    @property
    def is_from_follower(self) -> bool:
        return self.replica_id >= 0


def check_leadership(partition: Partition, fp: FetchRequestFetchPartition) -> ErrorCode:
    if not partition.is_leader:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    if fp.current_leader_epoch >= 0:
        if fp.current_leader_epoch < partition.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if fp.current_leader_epoch > partition.leader_epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
    return ErrorCode.NONE


def check_divergence(partition: Partition, fp: FetchRequestFetchPartition, pd: FetchResponsePartitionData) -> ErrorCode:
    """KIP-320, for followers and consumers alike (as Kafka's Partition.fetchRecords): if
    the fetcher's last fetched epoch ends before its fetch offset in this leader's log,
    answer where it diverges instead of data. A follower truncates there and fetches
    again; a consumer detects the truncation (and resets per its offset reset policy,
    or reports it)."""
    if fp.last_fetched_epoch < 0:
        return ErrorCode.NONE
    epoch, end_offset = partition.log.end_offset_for_epoch(fp.last_fetched_epoch)
    if epoch < 0 or end_offset < 0:
        return ErrorCode.OFFSET_OUT_OF_RANGE
    if fp.fetch_offset < partition.log_start_offset:
        return ErrorCode.OFFSET_OUT_OF_RANGE
    if epoch < fp.last_fetched_epoch or end_offset < fp.fetch_offset:
        pd.diverging_epoch.epoch = epoch
        pd.diverging_epoch.end_offset = end_offset
    return ErrorCode.NONE


def prepare(rm: ReplicaManager, slot: FetchSlot, params: FetchParams,
            on_follower_out_of_isr: Callable[[], None] | None) -> None:
    """Checks one partition; a slot that may be read gets its :attr:`FetchSlot.partition`."""
    pd, fp = slot.response, slot.request
    partition = rm.get(slot.topic, fp.partition)
    if partition is None:
        pd.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        pd.records = b""
        return
    error = check_leadership(partition, fp)
    if error == ErrorCode.NONE:
        error = check_divergence(partition, fp, pd)
    if error != ErrorCode.NONE or pd.diverging_epoch.epoch >= 0:
        pd.error_code = error
        pd.records = b""
        if error == ErrorCode.NONE:
            pd.high_watermark = partition.high_watermark
            pd.last_stable_offset = partition.last_stable_offset
            pd.log_start_offset = partition.log_start_offset
        return
    if params.is_from_follower:
        rm.record_follower_fetch(partition, params.replica_id, fp.fetch_offset)
        if params.replica_id not in partition.isr and on_follower_out_of_isr is not None:
            on_follower_out_of_isr()  # it may be back in sync
    slot.partition = partition


async def fetch_records(
    rm: ReplicaManager,
    requested: Iterable[FetchSlot],
    params: FetchParams,
    pacer: Pacer,
    *,
    on_follower_out_of_isr: Callable[[], None] | None = None,
    on_wait: Callable[[int], None] | None = None,
) -> tuple[list[FetchSlot], int]:
    """Fills every slot's answer, waiting up to ``max_wait_ms`` for ``min_bytes``; returns
    the slots (in order) and the record bytes read. Slots that already carry an error are
    left alone. ``requested`` may be a generator: it is consumed here, a paced step at a time."""
    slots: list[FetchSlot] = []
    for slot in requested:
        if pacer.tick():
            await pacer.pause()
        if slot.response.error_code == ErrorCode.NONE:
            prepare(rm, slot, params, on_follower_out_of_isr)
        slots.append(slot)
    deadline = trio.current_time() + max(params.max_wait_ms, 0) / 1000
    while True:
        total = await _read_all(slots, params, pacer)
        live = [s.partition for s in slots if s.partition is not None]
        if total >= params.min_bytes or not live or trio.current_time() >= deadline:
            return slots, total
        if any(s.response.error_code != ErrorCode.NONE or s.response.diverging_epoch.epoch >= 0 for s in slots):
            return slots, total
        if on_wait is not None:
            on_wait(1)
        try:
            await wait_for_change(live, deadline)
        finally:
            if on_wait is not None:
                on_wait(-1)


async def _read_all(slots: Sequence[FetchSlot], params: FetchParams, pacer: Pacer) -> int:
    """Fills every live partition's data; returns the total record bytes."""
    total = 0
    budget = params.max_bytes
    read_committed = params.read_committed
    for slot in slots:
        partition, pd, fp = slot.partition, slot.response, slot.request
        if partition is None:
            continue
        if pacer.tick():
            await pacer.pause()
        pd.high_watermark = high_watermark = partition.high_watermark
        pd.last_stable_offset = last_stable_offset = partition.last_stable_offset
        pd.log_start_offset = log_start_offset = partition.log_start_offset
        # Followers read to the log end; consumers never above the high watermark.
        upper = (None if params.is_from_follower
                 else (last_stable_offset if read_committed else high_watermark))
        # read_committed clients drop aborted transactions' records themselves (KIP-98).
        pd.aborted_transactions = [] if read_committed else None
        if upper is not None and log_start_offset <= fp.fetch_offset == upper:
            # A consumer that has read everything (most partitions of most Fetches, and every
            # one while a Fetch waits): nothing to read, and no reason to look at the segments.
            pd.records = b""
            continue
        limit = min(fp.partition_max_bytes, budget)
        try:
            data = partition.log.read(fp.fetch_offset, max(limit, 0), upper, min_one_batch=total == 0)
        except OffsetOutOfRangeError:
            pd.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
            pd.records = b""
            continue
        except OSError as ex:
            # The file could not be opened or read (a limit, a failing disk): this partition only.
            pd.error_code = ErrorCode.KAFKA_STORAGE_ERROR
            pd.records = b""
            log.error("fetch_read_failed", topic=partition.topic, partition=partition.index,
                      error=describe_error(ex))
            continue
        if data.region is None or len(data.region) == 0:
            pd.records = b""
            continue
        pd.records = data.region
        if read_committed and upper is not None:
            # Up to the LSO rather than the end of this data: extra entries are ignored by clients.
            pd.aborted_transactions = [
                FetchResponseAbortedTransaction(producer_id=t.producer_id, first_offset=t.first_offset)
                for t in partition.producer_state.collect_aborted_transactions(fp.fetch_offset, upper)
            ]
        total += len(data.region)
        budget -= len(data.region)
    return total
