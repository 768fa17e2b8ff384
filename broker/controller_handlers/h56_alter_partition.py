"""AlterPartition (56), v0-3: a partition leader changes its ISR (KIP-497, KIP-866).

Topics are named (v0-1) or given by id (v2+); v3 names each new ISR member with
its broker epoch (``new_isr_with_epochs``). Checks, per partition, in Kafka's
spirit: unknown topic (UNKNOWN_TOPIC_OR_PARTITION, or UNKNOWN_TOPIC_ID from v2),
an older leader epoch (FENCED_LEADER_EPOCH), a newer one (NOT_CONTROLLER), a
requester that is not the leader or an ISR without it or outside the replicas
(INVALID_REQUEST), a stale partition epoch (INVALID_UPDATE_VERSION), a fenced,
unregistered or re-registered member (INELIGIBLE_REPLICA; OPERATION_NOT_ATTEMPTED
in v0). A stale broker epoch of the requester fails the whole request
(STALE_BROKER_EPOCH). Accepted changes answer the new ISR and partition epoch.
"""

from __future__ import annotations

from broker.controller_handlers._common import call, controller_role
from broker.server.dispatch import RequestContext
from controller.apis import IsrChange
from wire.errors import ErrorCode
from wire.generated.api_056_alter_partition import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionResponsePartitionData,
    AlterPartitionResponseTopicData,
)

API_KEY = 56
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(ctx: RequestContext, request: AlterPartitionRequest) -> AlterPartitionResponse:
    role = controller_role(ctx)
    by_id = ctx.api_version >= 2
    changes: list[IsrChange] = []
    for topic in request.topics:
        for p in topic.partitions:
            if ctx.api_version >= 3:
                isr = tuple(b.broker_id for b in p.new_isr_with_epochs)
                epochs: tuple[int, ...] | None = tuple(b.broker_epoch for b in p.new_isr_with_epochs)
            else:
                isr, epochs = tuple(p.new_isr), None
            changes.append(IsrChange(
                topic_id=topic.topic_id if by_id else None,
                topic_name=None if by_id else topic.topic_name,
                partition=p.partition_index,
                leader_epoch=p.leader_epoch,
                partition_epoch=p.partition_epoch,
                new_isr=isr,
                isr_broker_epochs=epochs,
                leader_recovery_state=p.leader_recovery_state,
            ))
    outcome, code = await call(role.cluster_control.alter_partition(
        request.broker_id, request.broker_epoch, changes, ctx.api_version))
    if outcome is None:
        return AlterPartitionResponse(error_code=code)
    top, results = outcome
    response = AlterPartitionResponse(error_code=top)
    topics: dict[object, AlterPartitionResponseTopicData] = {}
    for result in results:
        change = result.change
        key = change.topic_id if by_id else change.topic_name
        out = topics.get(key)
        if out is None:
            out = AlterPartitionResponseTopicData(
                topic_name=change.topic_name or "", topic_id=change.topic_id or AlterPartitionResponseTopicData().topic_id)
            topics[key] = out
            response.topics.append(out)
        data = AlterPartitionResponsePartitionData(partition_index=change.partition, error_code=result.error)
        if result.error == ErrorCode.NONE:
            data.leader_id = result.leader
            data.leader_epoch = result.leader_epoch
            data.isr = list(result.isr)
            data.partition_epoch = result.partition_epoch
        out.partitions.append(data)
    return response
