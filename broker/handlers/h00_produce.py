"""Produce (0), v0-13: each partition's data is validated and appended by the partition
leader (:func:`broker.produce.append_to_partition`, :meth:`Partition.append_records_to_leader`),
and answered now (acks 0/1) or once the high watermark passes it (acks=all,
:mod:`broker.replication.delayed_produce`). Errors are per partition. With acks=0 nothing
is answered, and any error closes the connection so the client notices, as Kafka does.
v13 names topics by id (KIP-516): an id the metadata does not know gets UNKNOWN_TOPIC_ID.
"""

from __future__ import annotations

import uuid

from broker.acl_operations import AclOperation, ResourceType, authorize, checker
from broker.dispatch import RequestContext
from broker.network import CloseConnection
from broker.produce import append_to_partition
from broker.quota_manager import PRODUCE
from broker.replication.delayed_produce import PendingWrite, wait_for_replication
from broker.transaction.verification import has_transactional_records
from wire.errors import ErrorCode
from wire.generated.api_000_produce import (
    ProduceRequest,
    ProduceResponse,
    ProduceResponsePartitionProduceResponse,
    ProduceResponseTopicProduceResponse,
)

API_KEY = 0
MIN_VERSION = 0
MAX_VERSION = 13


async def handle(ctx: RequestContext, request: ProduceRequest) -> ProduceResponse | None:
    services, acks = ctx.services, request.acks
    if request.transactional_id is not None and not authorize(
            ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return error_response(request, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    # Transactional records need a transactional id (Kafka answers every partition so).
    refused = (ErrorCode.INVALID_REQUIRED_ACKS if acks not in (-1, 0, 1) else
               ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED if request.transactional_id is None and any(
                   has_transactional_records(p.records) for t in request.topic_data for p in t.partition_data)
               else None)
    may_write = checker(ctx, AclOperation.WRITE, ResourceType.TOPIC)
    response = ProduceResponse()
    waiting: list[PendingWrite] = []
    failed = False
    by_id = ctx.api_version >= 13
    # One connection's produces append in the order they arrived, as Kafka's one request at a
    # time per connection does: a pause below must not let a later request overtake.
    async with ctx.conn.append_lock:
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
    # producer_byte_rate counts the whole request, as Kafka's request.sizeInBytes; the dispatcher
    # puts the throttle in the response and mutes the connection.
    ctx.throttle.add(PRODUCE, services.quotas.produce.record(ctx.principal.name, ctx.client_id or "", ctx.request_size))
    if acks == 0:
        if failed:
            raise CloseConnection("produce with acks=0 failed", client_id=ctx.client_id)
        return None
    if waiting:
        services.metrics.produce_waiting(1)
        try:
            await wait_for_replication(waiting, request.timeout_ms)
        finally:
            services.metrics.produce_waiting(-1)
    return response


def _topic_name(ctx: RequestContext, topic_id: uuid.UUID) -> str | None:
    topic = ctx.services.image.topics_by_id.get(topic_id)
    return None if topic is None else topic.name


def error_response(request: ProduceRequest, code: ErrorCode) -> ProduceResponse:
    """Every partition gets ``code`` (used when the handler failed before appending)."""
    return ProduceResponse(responses=[
        ProduceResponseTopicProduceResponse(name=t.name, topic_id=t.topic_id, partition_responses=[
            ProduceResponsePartitionProduceResponse(index=p.index, error_code=code, base_offset=-1)
            for p in t.partition_data])
        for t in request.topic_data])
