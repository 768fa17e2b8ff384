"""Produce (0), v0-13: validate each partition's batch, assign offsets by rewriting
the batch header in place, append, and answer now (acks 0/1) or once the high
watermark passes the batch (acks=all).

Batches with a producer id go through the partition's producer state
(:mod:`broker.transaction.append`): an exact retry gets its original offset,
a gap OUT_OF_ORDER_SEQUENCE_NUMBER, a stale epoch INVALID_PRODUCER_EPOCH, and
a transaction's first write to a partition is verified with the transaction
coordinator (v12 on transactions v2: added to the transaction by it). v0-2 carry legacy message sets, up-converted to magic 2 on append. Errors are
per partition. v13 names topics by id (KIP-516): an id the metadata does not know gets
UNKNOWN_TOPIC_ID. With acks=0 nothing is answered, and any error closes the
connection so the client notices, as Kafka does.
"""

from __future__ import annotations

import uuid
from functools import partial

import structlog
import trio

from broker.acl_operations import AclOperation, ResourceType, authorize, checker
from broker.dispatch import RequestContext
from broker.limits import describe_error
from broker.network import CloseConnection
from broker.pacing import OFF_LOOP_RECORD_BYTES, off_loop
from broker.replica_manager import Partition
from broker.transaction.append import ProduceAppendError, append_produce, has_transactional_records
from broker.validation import RecordValidationError, validate_produce
from controller.image import INTERNAL_TOPICS
from wire.errors import ErrorCode
from wire.generated.api_000_produce import (
    ProduceRequest,
    ProduceResponse,
    ProduceResponseBatchIndexAndErrorMessage,
    ProduceResponsePartitionProduceResponse,
    ProduceResponseTopicProduceResponse,
)

log = structlog.get_logger(__name__)

API_KEY = 0
MIN_VERSION = 0
MAX_VERSION = 13


async def handle(ctx: RequestContext, request: ProduceRequest) -> ProduceResponse | None:
    node = ctx.node
    rm = node.replica_manager
    acks = request.acks
    response = ProduceResponse()
    waiting: list[tuple[Partition, int, ProduceResponsePartitionProduceResponse]] = []
    failed = False
    # Transactional records need a transactional id (Kafka answers every partition so).
    untransacted = request.transactional_id is None and any(
        has_transactional_records(p.records) for t in request.topic_data for p in t.partition_data)
    if request.transactional_id is not None and not authorize(
            ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return error_response(request, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    may_write = checker(ctx, AclOperation.WRITE, ResourceType.TOPIC)
    pacer = ctx.pacer
    # One connection's produces append in the order they arrived, as Kafka's one request at a
    # time per connection does: a pause below must not let a later request overtake.
    by_id = ctx.api_version >= 13
    async with ctx.conn.append_lock:
        for topic in request.topic_data:
            name = _topic_name(ctx, topic.topic_id) if by_id else topic.name
            t_resp = ProduceResponseTopicProduceResponse(name=topic.name, topic_id=topic.topic_id)
            response.responses.append(t_resp)
            for pdata in topic.partition_data:
                if pacer.tick():
                    await pacer.pause()
                p_resp = ProduceResponsePartitionProduceResponse(index=pdata.index, base_offset=-1)
                t_resp.partition_responses.append(p_resp)
                if acks not in (-1, 0, 1):
                    p_resp.error_code = ErrorCode.INVALID_REQUIRED_ACKS
                    failed = True
                    continue
                if name is None:
                    p_resp.error_code = ErrorCode.UNKNOWN_TOPIC_ID
                    failed = True
                    continue
                if untransacted:
                    p_resp.error_code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                    failed = True
                    continue
                if not may_write(name):
                    p_resp.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    failed = True
                    continue
                if name in INTERNAL_TOPICS:
                    # Only the coordinators write there (not through Produce), as in Kafka.
                    p_resp.error_code = ErrorCode.INVALID_TOPIC_EXCEPTION
                    p_resp.error_message = f"Cannot append to internal topic {name}"
                    failed = True
                    continue
                partition = rm.get(name, pdata.index)
                if partition is None:
                    p_resp.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    failed = True
                    continue
                if not rm.is_leader(partition):
                    p_resp.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                    failed = True
                    continue
                if acks == -1 and len(partition.isr) < node.min_insync_replicas(name):
                    p_resp.error_code = ErrorCode.NOT_ENOUGH_REPLICAS
                    failed = True
                    continue
                records = pdata.records
                if not isinstance(records, (bytes, bytearray, memoryview)):  # absent, or a file region
                    p_resp.error_code = ErrorCode.INVALID_RECORD
                    failed = True
                    continue
                try:
                    validate = partial(
                        validate_produce, records, ctx.api_version, partition.config, node.clock_ms(),
                        node.timestamp_policy_for(partition), topic_partition=f"{name}-{pdata.index}",
                        target=node.target_compression_for(partition),
                    )
                    # A large batch's copy and CRC would hold the loop; crc32c releases the GIL.
                    validated = (await off_loop(validate, lane="records") if len(records) >= OFF_LOOP_RECORD_BYTES
                                 else validate())
                except RecordValidationError as ex:
                    p_resp.error_code = ex.code
                    p_resp.error_message = ex.message
                    p_resp.record_errors = [
                        ProduceResponseBatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m)
                        for i, m in ex.record_errors
                    ]
                    node.log_client_error("produce_rejected", topic=name, partition=pdata.index,
                                          error=ex.code.name, reason=ex.message, client_id=ctx.client_id)
                    failed = True
                    continue
                span = node.tracing.start_append(name, pdata.index, validated.data, validated.batches,
                                                 validated.record_count) if node.tracing.active else None
                try:
                    info = await append_produce(partition, validated, request.transactional_id, ctx.api_version,
                                                node.transaction_coordinator)
                except ProduceAppendError as ex:
                    p_resp.error_code = ex.code
                    p_resp.error_message = ex.message
                    failed = True
                    continue
                except OSError as ex:
                    # The write may have partly landed: never answer -1 (clients turn it into duplicates).
                    p_resp.error_code = ErrorCode.KAFKA_STORAGE_ERROR
                    p_resp.error_message = describe_error(ex)
                    log.error("append_failed", topic=name, partition=pdata.index, error=p_resp.error_message)
                    failed = True
                    continue
                node.metrics.record_produce(validated.record_count, len(validated.data))
                node.metrics.record_batches(validated.batches)
                if span is not None:
                    node.tracing.end_append(span, info.first_offset)
                p_resp.base_offset = info.first_offset
                p_resp.log_append_time_ms = info.log_append_time_ms
                p_resp.log_start_offset = partition.log_start_offset
                rm.maybe_advance_high_watermark(partition)
                partition.wake()
                if acks == -1:
                    waiting.append((partition, info.last_offset + 1, p_resp))
    # producer_byte_rate: the client waits throttle_time_ms (KIP-219); the channel itself is not muted.
    response.throttle_time_ms = node.produce_quotas.record(ctx.principal.name, ctx.client_id or "", sum(
        len(p.records) for t in request.topic_data for p in t.partition_data if p.records is not None))
    if acks == 0:
        if failed:
            raise CloseConnection("produce with acks=0 failed", client_id=ctx.client_id)
        return None
    if waiting:
        node.metrics.produce_waiting(1)
        try:
            await _wait_for_replication(ctx, waiting, request.timeout_ms)
        finally:
            node.metrics.produce_waiting(-1)
    return response


async def _wait_for_replication(
    ctx: RequestContext,
    waiting: list[tuple[Partition, int, ProduceResponsePartitionProduceResponse]],
    timeout_ms: int,
) -> None:
    """acks=all: each batch is acknowledged once the high watermark passes it."""
    rm = ctx.node.replica_manager
    deadline = trio.current_time() + max(timeout_ms, 0) / 1000
    pending = list(waiting)
    while pending:
        still = []
        for partition, required, p_resp in pending:
            if partition.high_watermark >= required:
                continue
            if partition.leader != ctx.node.node_id or rm.get(partition.topic, partition.index) is not partition:
                p_resp.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER  # leadership moved while waiting
                continue
            if len(partition.isr) < ctx.node.min_insync_replicas(partition.topic):
                p_resp.error_code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
                continue
            still.append((partition, required, p_resp))
        pending = still
        if not pending or trio.current_time() >= deadline:
            break
        await rm.wait_for_change([p for p, _, _ in pending], deadline)
    for _, _, p_resp in pending:
        p_resp.error_code = ErrorCode.REQUEST_TIMED_OUT


def _topic_name(ctx: RequestContext, topic_id: uuid.UUID) -> str | None:
    topic = ctx.node.image.topics_by_id.get(topic_id)
    return None if topic is None else topic.name


def error_response(request: ProduceRequest, code: ErrorCode) -> ProduceResponse:
    """Every partition gets ``code`` (used when the handler failed before appending)."""
    return ProduceResponse(
        responses=[
            ProduceResponseTopicProduceResponse(
                name=t.name,
                topic_id=t.topic_id,
                partition_responses=[
                    ProduceResponsePartitionProduceResponse(index=p.index, error_code=code, base_offset=-1)
                    for p in t.partition_data
                ],
            )
            for t in request.topic_data
        ]
    )
