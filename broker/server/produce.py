"""The produce path of one partition (Kafka's ReplicaManager.appendRecords, for one
partition of a Produce request): check the partition, validate its record data, verify
a transaction's first write with the coordinator, and append through
:meth:`Partition.append_records_to_leader`. The handler (:mod:`broker.handlers.h00_produce`)
decodes, calls :func:`append_request`, charges the produce quota, waits for acks=all and answers.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from functools import partial

import structlog

from broker.eventloop.limits import describe_error
from broker.eventloop.pacing import OFF_LOOP_RECORD_BYTES, off_loop
from broker.log.producer_state import AppendOrigin
from broker.log.validation import RecordValidationError, validate_produce
from broker.replication.delayed_produce import PendingWrite
from broker.replication.partition import AppendRefusedError
from broker.server.dispatch import RequestContext
from broker.transaction.verification import has_transactional_records, verify_transactional_write
from controller.image import INTERNAL_TOPICS
from wire.errors import ErrorCode
from wire.generated.api_000_produce import (
    ProduceRequest,
    ProduceRequestPartitionProduceData,
    ProduceResponse,
    ProduceResponseBatchIndexAndErrorMessage,
    ProduceResponsePartitionProduceResponse,
    ProduceResponseTopicProduceResponse,
)

log = structlog.get_logger(__name__)

#: Kafka's AdminUtils.ADMIN_CLIENT_ID: a Produce with this client id may append to internal topics.
ADMIN_CLIENT_ID = "__admin_client"


async def append_request(
    ctx: RequestContext, request: ProduceRequest, may_write: Callable[[str], bool]
) -> tuple[ProduceResponse, list[PendingWrite], bool]:
    """Appends every partition of a Produce request: the response with each partition's
    outcome, the writes acks=all waits for, and whether any partition failed."""
    acks = request.acks
    # Transactional records need a transactional id (Kafka answers every partition so).
    refused = (ErrorCode.INVALID_REQUIRED_ACKS if acks not in (-1, 0, 1) else
               ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED if request.transactional_id is None and any(
                   has_transactional_records(p.records) for t in request.topic_data for p in t.partition_data)
               else None)
    response = ProduceResponse()
    waiting: list[PendingWrite] = []
    failed = False
    by_id = ctx.api_version >= 13
    # One connection's produces append in the order they arrived, as Kafka's one request at a
    # time per connection does: a pause below must not let a later request overtake.
    lock = ctx.conn.append_lock
    if lock.locked():
        await lock.acquire()
    else:
        lock.acquire_nowait()  # free: taken without a trip through the scheduler
    try:
        for topic in request.topic_data:
            name = _topic_name(ctx, topic.topic_id) if by_id else topic.name
            t_resp = ProduceResponseTopicProduceResponse(name=topic.name, topic_id=topic.topic_id)
            response.responses.append(t_resp)
            for pdata in topic.partition_data:
                if ctx.pacer.tick():
                    await ctx.pacer.pause()
                p_resp = ProduceResponsePartitionProduceResponse(index=pdata.index, base_offset=-1)
                t_resp.partition_responses.append(p_resp)
                error = (refused if refused is ErrorCode.INVALID_REQUIRED_ACKS
                         else ErrorCode.UNKNOWN_TOPIC_ID if name is None
                         else refused if refused is not None
                         else None if may_write(name) else ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                if error is not None or name is None:
                    p_resp.error_code = error or ErrorCode.UNKNOWN_TOPIC_ID
                    pending = None
                else:
                    pending = await append_to_partition(ctx, name, pdata, acks, request.transactional_id, p_resp)
                failed = failed or pending is None
                if pending is not None and acks == -1:
                    waiting.append(pending)
    finally:
        lock.release()
    return response, waiting, failed


def _topic_name(ctx: RequestContext, topic_id: uuid.UUID) -> str | None:
    topic = ctx.services.image.topics_by_id.get(topic_id)
    return None if topic is None else topic.name


def _set_error(p_resp: ProduceResponsePartitionProduceResponse, code: ErrorCode) -> None:
    p_resp.error_code = code


async def append_to_partition(
    ctx: RequestContext,
    topic: str,
    pdata: ProduceRequestPartitionProduceData,
    acks: int,
    transactional_id: str | None,
    p_resp: ProduceResponsePartitionProduceResponse,
) -> PendingWrite | None:
    """Append one partition's data; fills ``p_resp`` (its error code, else the offsets).
    Returns the write to wait for (acks=all) when it was appended."""
    services = ctx.services
    if topic in INTERNAL_TOPICS and ctx.client_id != ADMIN_CLIENT_ID:
        # Only the coordinators write there (not through Produce), as in Kafka, whose
        # ReplicaManager lets only the client id of its own admin tools append.
        p_resp.error_code = ErrorCode.INVALID_TOPIC_EXCEPTION
        p_resp.error_message = f"Cannot append to internal topic {topic}"
        return None
    partition = services.replica_manager.get(topic, pdata.index)
    if partition is None:
        p_resp.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return None
    records = pdata.records
    try:
        partition.check_leader_append(acks)
        if not isinstance(records, (bytes, bytearray, memoryview)):  # absent, or a file region
            raise AppendRefusedError(ErrorCode.INVALID_RECORD)
        timestamps, target = services.topic_configs.produce_policy_for(partition)
        validate = partial(
            validate_produce, records, ctx.api_version, partition.config, services.clock_ms(),
            timestamps, topic_partition=f"{topic}-{pdata.index}", target=target,
        )
        # A large batch's CRC and inflating would hold the loop; crc32c and the codecs release the GIL.
        validated = (await off_loop(validate, lane="records") if len(records) >= OFF_LOOP_RECORD_BYTES
                     else validate())
        span = services.tracing.start_append(topic, pdata.index, validated.data, validated.batches,
                                             validated.record_count) if services.tracing.active else None
        guard = await verify_transactional_write(partition, validated, transactional_id, ctx.api_version,
                                                 services.transaction_coordinator)
        info = partition.append_records_to_leader(validated.data, origin=AppendOrigin.CLIENT, required_acks=acks,
                                                  batches=validated.batches, verification_guard=guard)
    except RecordValidationError as ex:
        p_resp.error_code = ex.code
        p_resp.error_message = ex.message
        p_resp.record_errors = [
            ProduceResponseBatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m)
            for i, m in ex.record_errors
        ]
        services.log_client_error("produce_rejected", topic=topic, partition=pdata.index,
                                  error=ex.code.name, reason=ex.message, client_id=ctx.client_id)
        return None
    except AppendRefusedError as ex:
        p_resp.error_code = ex.code
        p_resp.error_message = ex.message
        return None
    except OSError as ex:
        # The write may have partly landed: never answer -1 (clients turn it into duplicates).
        p_resp.error_code = ErrorCode.KAFKA_STORAGE_ERROR
        p_resp.error_message = describe_error(ex)
        log.error("append_failed", topic=topic, partition=pdata.index, error=p_resp.error_message)
        return None
    services.metrics.record_produce(validated.record_count, len(validated.data))
    services.metrics.record_batches(validated.batches)
    if span is not None:
        services.tracing.end_append(span, info.first_offset)
    p_resp.base_offset = info.first_offset
    p_resp.log_append_time_ms = info.log_append_time_ms
    p_resp.log_start_offset = partition.log_start_offset
    return partition, info.last_offset + 1, partial(_set_error, p_resp)
