"""A share group's ``share.isolation.level`` at the partition leader: which records of a
read it may acquire.

read_uncommitted (the default) acquires every data record below the high watermark.
read_committed, as Kafka's SharePartition does, reads only below the last stable offset
and never acquires a record of an aborted transaction (the partition's aborted-transaction
index says which); those offsets are passed over as control records are.
"""

from __future__ import annotations

from collections.abc import Sequence

from broker.replication.partition import Partition
from wire.records import RecordBatchHeader, iter_batch_headers


def fetch_upper_bound(partition: Partition, read_committed: bool) -> int:
    """Where the read of a share-partition ends: the last stable offset or the high watermark."""
    return partition.last_stable_offset if read_committed else partition.high_watermark


def acquirable_batches(partition: Partition, raw: bytes, start: int, upper: int,
                       read_committed: bool) -> list[tuple[int, int]]:
    """The data batches in ``raw`` (read from ``start`` up to ``upper``) whose records a share
    group at this isolation level may acquire: (base offset, last offset) each, ascending."""
    headers = [header for _, header in iter_batch_headers(raw) if not header.is_control]
    if read_committed:
        aborted = partition.producer_state.collect_aborted_transactions(start, upper)
        spans = [(t.producer_id, t.first_offset, t.last_offset) for t in aborted]
        headers = [h for h in headers if not _aborted(h, spans)]
    return [(h.base_offset, h.last_offset) for h in headers]


def _aborted(header: RecordBatchHeader, spans: Sequence[tuple[int, int, int]]) -> bool:
    """A transactional batch inside an aborted transaction of its producer (between the
    transaction's first offset and its abort marker)."""
    return header.is_transactional and any(
        pid == header.producer_id and first <= header.base_offset <= marker for pid, first, marker in spans)
