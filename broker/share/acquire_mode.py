"""ShareFetch's ShareAcquireMode (v2, KIP-1206): how many of the acquirable records one
fetch takes, as Kafka's ``SharePartition.acquire`` decides it.

- 0 ``batch_optimized`` (the default, and what v1 gets): up to MaxRecords records, and
  then on to the end of the log batch the last of them is in, so that acquisitions and
  acknowledgements stay on whole batches (MaxRecords "can be exceeded for alignment of
  batch boundaries");
- 1 ``record_limit``: MaxRecords records at most, splitting a log batch when needed (the
  rest of the batch stays available to the next fetch). The Java consumer asks for it
  with ``share.acquire.mode=record_limit``: each ``poll()`` then returns at most
  ``max.poll.records`` records.

Kafka answers any other mode with UNKNOWN_SERVER_ERROR (its ``ShareAcquireMode.forId``
throws IllegalArgumentException when the fetch is prepared), and so does Cormorant.

Both modes stop at the share-partition's in-flight limit
(``group.share.partition.max.record.locks``); Kafka may go past it to finish a batch.
"""

from __future__ import annotations

from collections.abc import Sequence

BATCH_OPTIMIZED = 0
RECORD_LIMIT = 1
#: Kafka's ShareAcquireMode ids and names.
ACQUIRE_MODES = {BATCH_OPTIMIZED: "batch_optimized", RECORD_LIMIT: "record_limit"}


def unknown_mode_message(mode: int) -> str:
    return f"Unknown share acquire mode id: {mode}"


def records_to_acquire(mode: int, acquirable: Sequence[int], batches: Sequence[tuple[int, int]],
                       max_records: int) -> list[int]:
    """The offsets a fetch acquires among ``acquirable`` (ascending, from
    ``SharePartition.acquirable``) of the log batches ``batches`` (base and last offset of each
    data batch read, ascending)."""
    if max_records <= 0:
        return []
    if mode == RECORD_LIMIT:
        return record_limit(acquirable, max_records)
    return batch_aligned(acquirable, batches, max_records)


def record_limit(acquirable: Sequence[int], max_records: int) -> list[int]:
    """``record_limit``: never more than ``max_records``, a log batch split if need be."""
    return list(acquirable[:max_records])


def batch_aligned(acquirable: Sequence[int], batches: Sequence[tuple[int, int]], max_records: int) -> list[int]:
    """``batch_optimized``: ``max_records`` records, then the rest of the log batch holding the
    last of them."""
    if len(acquirable) <= max_records:
        return list(acquirable)
    cut = acquirable[max_records - 1]
    end = next((last for base, last in batches if base <= cut <= last), cut)
    return [o for o in acquirable if o <= end]
