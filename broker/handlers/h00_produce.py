"""Produce (0), v0-11: each partition's data is validated and appended by the partition
leader (:func:`broker.produce.append_to_partition`, :meth:`Partition.append_records_to_leader`),
and answered now (acks 0/1) or once the high watermark passes it (acks=all,
:mod:`broker.replication.delayed_produce`). Errors are per partition. With acks=0 nothing
is answered, and any error closes the connection so the client notices, as Kafka does.
"""

from __future__ import annotations

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
MAX_VERSION = 11


async def handle(ctx: RequestContext, request: ProduceRequest) -> ProduceResponse | None:
    node, acks = ctx.node, request.acks
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
    # One connection's produces append in the order they arrived, as Kafka's one request at a
    # time per connection does: a pause below must not let a later request overtake.
    async with ctx.conn.append_lock:
        for topic in request.topic_data:
            t_resp = ProduceResponseTopicProduceResponse(name=topic.name)
            response.responses.append(t_resp)
            for pdata in topic.partition_data:
                if ctx.pacer.tick():
                    await ctx.pacer.pause()
                p_resp = ProduceResponsePartitionProduceResponse(index=pdata.index, base_offset=-1)
                t_resp.partition_responses.append(p_resp)
                if refused is not None or not may_write(topic.name):
                    p_resp.error_code = refused or ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    pending = None
                else:
                    pending = await append_to_partition(ctx, topic.name, pdata, acks, request.transactional_id, p_resp)
                failed = failed or pending is None
                if pending is not None and acks == -1:
                    waiting.append(pending)
    # producer_byte_rate: the dispatcher puts the throttle in the response and mutes the connection.
    ctx.throttle.add(PRODUCE, node.quotas.produce.record(ctx.principal.name, ctx.client_id or "", sum(
        len(p.records) for t in request.topic_data for p in t.partition_data if p.records is not None)))
    if acks == 0:
        if failed:
            raise CloseConnection("produce with acks=0 failed", client_id=ctx.client_id)
        return None
    if waiting:
        node.metrics.produce_waiting(1)
        try:
            await wait_for_replication(waiting, request.timeout_ms)
        finally:
            node.metrics.produce_waiting(-1)
    return response


def error_response(request: ProduceRequest, code: ErrorCode) -> ProduceResponse:
    """Every partition gets ``code`` (used when the handler failed before appending)."""
    return ProduceResponse(responses=[
        ProduceResponseTopicProduceResponse(name=t.name, partition_responses=[
            ProduceResponsePartitionProduceResponse(index=p.index, error_code=code, base_offset=-1)
            for p in t.partition_data])
        for t in request.topic_data])
