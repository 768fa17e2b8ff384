"""Produce (0), v0-13: each partition's data is validated and appended by the partition
leader (:func:`broker.server.produce.append_request`, :meth:`Partition.append_records_to_leader`),
and answered now (acks 0/1) or once the high watermark passes it (acks=all,
:mod:`broker.replication.delayed_produce`). Errors are per partition. With acks=0 nothing
is answered, and any error closes the connection so the client notices, as Kafka does.
v13 names topics by id (KIP-516): an id the metadata does not know gets UNKNOWN_TOPIC_ID.
"""

from __future__ import annotations

from broker.quotas.client_quota_manager import PRODUCE
from broker.replication.delayed_produce import wait_for_replication
from broker.security.acl_operations import AclOperation, ResourceType, authorize, checker
from broker.server.dispatch import RequestContext
from broker.server.network import CloseConnection
from broker.server.produce import append_request
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
    if request.transactional_id is not None and not authorize(
            ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return error_response(request, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    response, waiting, failed = await append_request(ctx, request, checker(ctx, AclOperation.WRITE, ResourceType.TOPIC))
    # producer_byte_rate counts the whole request, as Kafka's request.sizeInBytes; the dispatcher
    # puts the throttle in the response and mutes the connection.
    services = ctx.services
    ctx.throttle.add(PRODUCE, services.quotas.produce.record(ctx.principal.name, ctx.client_id or "", ctx.request_size))
    if request.acks == 0:
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


def error_response(request: ProduceRequest, code: ErrorCode) -> ProduceResponse:
    """Every partition gets ``code`` (used when the handler failed before appending)."""
    return ProduceResponse(responses=[
        ProduceResponseTopicProduceResponse(name=t.name, topic_id=t.topic_id, partition_responses=[
            ProduceResponsePartitionProduceResponse(index=p.index, error_code=code, base_offset=-1)
            for p in t.partition_data])
        for t in request.topic_data])
