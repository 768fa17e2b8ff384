"""Fetch (1), v4-18: read from partition logs, long-polling until ``min_bytes`` arrive
or ``max_wait_ms`` passes. A waiting fetch is woken by appends and high-watermark
moves, never by polling.

Consumers read below the high watermark (the last stable offset for
read_committed, with the aborted transactions overlapping the data, from the
partitions' ``.txnindex``, for the client to skip); record data goes out as file regions with ``os.sendfile``. At
least one whole batch is returned even when it is larger than the size limits
(KIP-74). Fetch sessions (v7+, KIP-227, :mod:`broker.fetch_sessions`): a full
fetch with epoch 0 opens one; incremental fetches name only what changed and get
only partitions with news; an unknown session is FETCH_SESSION_ID_NOT_FOUND, a
wrong epoch INVALID_FETCH_SESSION_EPOCH. v13+ name topics by id.

v0-3 responses can only carry magic 0/1 message sets, which needs down-conversion;
Cormorant stores magic 2 only, so those versions are not offered.
"""

from __future__ import annotations

import structlog
import trio

from broker.acl_operations import AclOperation, replica_or_topic_checker
from broker.dispatch import RequestContext
from broker.fetch_sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    CachedPartition,
    FetchSession,
    next_epoch,
)
from broker.limits import describe_error
from broker.log.errors import OffsetOutOfRangeError
from broker.pacing import Pacer
from broker.replica_manager import Partition
from wire.errors import ErrorCode
from wire.generated.api_001_fetch import (
    FetchRequest,
    FetchRequestFetchPartition,
    FetchResponse,
    FetchResponseAbortedTransaction,
    FetchResponseFetchableTopicResponse,
    FetchResponsePartitionData,
)

log = structlog.get_logger(__name__)

API_KEY = 1
MIN_VERSION = 4
MAX_VERSION = 18

READ_COMMITTED = 1


async def handle(ctx: RequestContext, request: FetchRequest) -> FetchResponse:
    node = ctx.node
    rm = node.replica_manager
    by_id = ctx.api_version >= 13
    # A follower names itself (replica id, ReplicaState from v15); consumers send -1.
    follower = request.replica_state.replica_id if ctx.api_version >= 15 else request.replica_id
    sessions = node.fetch_sessions
    epoch = request.session_epoch if ctx.api_version >= 7 else FINAL_EPOCH
    session: FetchSession | None = None
    if epoch > INITIAL_EPOCH:
        session = sessions.get(request.session_id)
        if session is None:
            return FetchResponse(error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND, session_id=0)
        if session.epoch != epoch:
            return FetchResponse(error_code=ErrorCode.INVALID_FETCH_SESSION_EPOCH, session_id=0)
        session.update(request.topics, request.forgotten_topics_data)
        session.epoch = next_epoch(epoch)
        wanted = list(session.partitions.items())
    else:
        if request.session_id != 0:
            sessions.remove(request.session_id)  # a new full fetch (epoch 0) or a close (-1)
        wanted = [
            ((t.topic_id if by_id else t.topic, fp.partition), CachedPartition(t.topic, t.topic_id, fp))
            for t in request.topics
            for fp in t.partitions
        ]
    image = node.image
    may_read = replica_or_topic_checker(ctx, follower, AclOperation.READ)
    # Resolve every wanted partition once; errors are final, the rest are re-read.
    slots: list[tuple[FetchResponsePartitionData, FetchRequestFetchPartition, Partition | None]] = []
    pacer = ctx.pacer
    for _, cached in wanted:
        if pacer.tick():
            await pacer.pause()
        fp = cached.request
        name = cached.topic
        if by_id:
            t = image.topics_by_id.get(cached.topic_id)
            name = t.name if t is not None else ""
        pd = FetchResponsePartitionData(partition_index=fp.partition, high_watermark=-1,
                                        last_stable_offset=-1, log_start_offset=-1)
        partition = rm.get(name, fp.partition) if name else None
        if name and not may_read(name):
            pd.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            pd.records = b""
            slots.append((pd, fp, None))
            continue
        if partition is None:
            if by_id and (not name or image.topics_by_id.get(cached.topic_id) is None):
                pd.error_code = ErrorCode.UNKNOWN_TOPIC_ID
            else:
                pd.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            pd.records = b""
            slots.append((pd, fp, None))
            continue
        error = _check_leadership(ctx, partition, fp)
        if error == ErrorCode.NONE:
            error = _check_divergence(partition, fp, pd)
        if error != ErrorCode.NONE or pd.diverging_epoch.epoch >= 0:
            pd.error_code = error
            pd.records = b""
            if error == ErrorCode.NONE:
                pd.high_watermark = partition.high_watermark
                pd.last_stable_offset = partition.last_stable_offset
                pd.log_start_offset = partition.log_start_offset
            slots.append((pd, fp, None))
            continue
        if follower >= 0:
            rm.record_follower_fetch(partition, follower, fp.fetch_offset)
            if follower not in partition.isr and node.isr_manager is not None:
                node.isr_manager.poke()  # it may be back in sync
        slots.append((pd, fp, partition))

    deadline = trio.current_time() + max(request.max_wait_ms, 0) / 1000
    read_committed = request.isolation_level == READ_COMMITTED and ctx.api_version >= 4
    while True:
        total = await _read_all(slots, request.max_bytes, read_committed, pacer, follower >= 0)
        live = [p for _, _, p in slots if p is not None]
        if total >= request.min_bytes or not live or trio.current_time() >= deadline:
            break
        if any(pd.error_code != ErrorCode.NONE or pd.diverging_epoch.epoch >= 0 for pd, _, _ in slots):
            break
        node.metrics.fetch_waiting(1)
        try:
            await rm.wait_for_change(live, deadline)
        finally:
            node.metrics.fetch_waiting(-1)
    node.metrics.record_fetch(total, follower=follower >= 0)

    response = FetchResponse(session_id=0)
    if session is not None:
        response.session_id = session.id
    elif epoch == INITIAL_EPOCH:
        created = sessions.create(by_id, dict(wanted))
        if created is not None:
            response.session_id = created.id
    # Only a session remembers what it was told; sessionless fetches skip the bookkeeping.
    tracked = response.session_id != 0
    current: FetchResponseFetchableTopicResponse | None = None
    for (key, cached), (pd, _, _) in zip(wanted, slots, strict=True):
        must_respond = cached.note_response(pd) if tracked else True
        if session is not None:
            # Incremental: only what changed; a partition that returned records goes last.
            if not must_respond:
                continue
            if pd.records is not None and len(pd.records) > 0:
                session.move_to_end(key)
        # Consecutive partitions of one topic share an entry, as Kafka groups them.
        if current is None or current.topic != cached.topic or current.topic_id != cached.topic_id:
            current = FetchResponseFetchableTopicResponse(topic=cached.topic, topic_id=cached.topic_id)
            response.responses.append(current)
        current.partitions.append(pd)
    return response


def _check_leadership(ctx: RequestContext, partition: Partition, fp: FetchRequestFetchPartition) -> ErrorCode:
    if partition.leader != ctx.node.node_id:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    if fp.current_leader_epoch >= 0:
        if fp.current_leader_epoch < partition.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if fp.current_leader_epoch > partition.leader_epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
    return ErrorCode.NONE


def _check_divergence(partition: Partition, fp: FetchRequestFetchPartition,
                      pd: FetchResponsePartitionData) -> ErrorCode:
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


async def _read_all(
    slots: list[tuple[FetchResponsePartitionData, FetchRequestFetchPartition, Partition | None]],
    max_bytes: int,
    read_committed: bool,
    pacer: Pacer,
    follower: bool = False,
) -> int:
    """Fills every partition's data; returns the total record bytes."""
    total = 0
    budget = max_bytes
    for pd, fp, partition in slots:
        if partition is None:
            continue
        if pacer.tick():
            await pacer.pause()
        pd.high_watermark = partition.high_watermark
        pd.last_stable_offset = partition.last_stable_offset
        pd.log_start_offset = partition.log_start_offset
        # Followers read to the log end; consumers never above the high watermark.
        upper = None if follower else (partition.last_stable_offset if read_committed else partition.high_watermark)
        # read_committed clients drop aborted transactions' records themselves (KIP-98).
        pd.aborted_transactions = [] if read_committed else None
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





def error_response(request: FetchRequest, code: ErrorCode) -> FetchResponse:
    """Every partition gets ``code``."""
    return FetchResponse(
        error_code=code,
        responses=[
            FetchResponseFetchableTopicResponse(
                topic=t.topic,
                topic_id=t.topic_id,
                partitions=[
                    FetchResponsePartitionData(partition_index=p.partition, error_code=code, records=b"")
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ],
    )
