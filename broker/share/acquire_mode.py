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
(``group.share.partition.max.record.locks``), going past it, as Kafka does, to the end of
the log batch the limit falls in. The acquisition itself is ``SharePartition.acquire_fetched``
(broker/share/partition.py).
"""

from __future__ import annotations

BATCH_OPTIMIZED = 0
RECORD_LIMIT = 1
#: Kafka's ShareAcquireMode ids and names.
ACQUIRE_MODES = {BATCH_OPTIMIZED: "batch_optimized", RECORD_LIMIT: "record_limit"}


def unknown_mode_message(mode: int) -> str:
    return f"Unknown share acquire mode id: {mode}"
