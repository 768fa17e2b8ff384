"""DescribeTransactions (65), v0: the state of transactional ids this broker coordinates
(KIP-664): state name, timeout, start time, producer id and epoch, partitions.

An id this broker does not coordinate is NOT_COORDINATOR (admin clients ask
FindCoordinator first); an unknown one TRANSACTIONAL_ID_NOT_FOUND.
"""

from __future__ import annotations

from broker.security.acl_operations import AclOperation, ResourceType, authorize
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_065_describe_transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    DescribeTransactionsResponseTopicData,
    DescribeTransactionsResponseTransactionState,
)

API_KEY = 65
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: DescribeTransactionsRequest) -> DescribeTransactionsResponse:
    coordinator = ctx.services.transaction_coordinator
    response = DescribeTransactionsResponse()
    for transactional_id in request.transactional_ids:
        if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            response.transaction_states.append(DescribeTransactionsResponseTransactionState(
                error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, transactional_id=transactional_id))
            continue
        d = coordinator.describe(transactional_id)
        state = DescribeTransactionsResponseTransactionState(error_code=d.error, transactional_id=transactional_id)
        if d.error == 0:
            state.transaction_state = d.state
            state.transaction_timeout_ms = d.timeout_ms
            state.transaction_start_time_ms = d.start_time_ms
            state.producer_id = d.producer_id
            state.producer_epoch = d.producer_epoch
            topics: dict[str, DescribeTransactionsResponseTopicData] = {}
            for topic, partition in d.partitions:
                data = topics.get(topic)
                if data is None:
                    data = topics[topic] = DescribeTransactionsResponseTopicData(topic=topic)
                data.partitions.append(partition)
            state.topics = list(topics.values())
        response.transaction_states.append(state)
    return response
