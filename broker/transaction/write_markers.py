"""The partition-leader side of WriteTxnMarkers (Kafka's KafkaApis.handleWriteTxnMarkersRequest).

Each COMMIT or ABORT is one control batch per partition, appended through
:meth:`Partition.append_txn_marker` (origin COORDINATOR) and answered once replicated
(acks=all, the same wait as Produce: :mod:`broker.replication.delayed_produce`). A
marker on ``__consumer_offsets`` also tells the group coordinator to make the
transaction's offset commits visible (or drop them).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING

import structlog

from broker.replication.delayed_produce import PendingWrite, wait_for_replication
from broker.replication.partition import AppendRefusedError
from wire.errors import ErrorCode
from wire.generated.api_027_write_txn_markers import (
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
    WriteTxnMarkersResponseWritableTxnMarkerPartitionResult,
    WriteTxnMarkersResponseWritableTxnMarkerResult,
    WriteTxnMarkersResponseWritableTxnMarkerTopicResult,
)
from wire.records import ControlRecordType

if TYPE_CHECKING:
    from broker.replication.replica_manager import ReplicaManager

log = structlog.get_logger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
#: WriteTxnMarkers v2 names each marker's transaction version (KIP-1228).
MARKER_TRANSACTION_VERSION_VERSION = 2

#: Called after a marker reached ``__consumer_offsets`` partitions: (producer id, partitions, committed).
OffsetsMarkerListener = Callable[[int, list[int], bool], Awaitable[None] | None]


def _set_error(result: WriteTxnMarkersResponseWritableTxnMarkerPartitionResult, code: ErrorCode) -> None:
    result.error_code = code


async def write_txn_markers(
    replica_manager: ReplicaManager,
    clock_ms: Callable[[], int],
    request: WriteTxnMarkersRequest,
    timeout_ms: int,
    offsets_marker_listener: OffsetsMarkerListener | None = None,
    api_version: int = 1,
) -> WriteTxnMarkersResponse:
    """Write each marker to the partitions this broker leads and wait until they are replicated."""
    rm = replica_manager
    response = WriteTxnMarkersResponse()
    waiting: list[PendingWrite] = []
    for marker in request.markers:
        result = WriteTxnMarkersResponseWritableTxnMarkerResult(producer_id=marker.producer_id)
        response.markers.append(result)
        control_type = ControlRecordType.COMMIT if marker.transaction_result else ControlRecordType.ABORT
        transaction_version = marker.transaction_version if api_version >= MARKER_TRANSACTION_VERSION_VERSION else 0
        offsets_partitions: list[int] = []
        for topic in marker.topics:
            t_result = WriteTxnMarkersResponseWritableTxnMarkerTopicResult(name=topic.name)
            result.topics.append(t_result)
            for index in topic.partition_indexes:
                p_result = WriteTxnMarkersResponseWritableTxnMarkerPartitionResult(partition_index=index)
                t_result.partitions.append(p_result)
                partition = rm.get(topic.name, index)
                if partition is None:
                    p_result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                try:
                    info = partition.append_txn_marker(control_type, marker.producer_id, marker.producer_epoch,
                                                       marker.coordinator_epoch, clock_ms(),
                                                       transaction_version=transaction_version)
                except AppendRefusedError as ex:
                    p_result.error_code = ex.code
                    continue
                except OSError as ex:
                    # The marker may have partly landed: retriable, never -1.
                    p_result.error_code = ErrorCode.KAFKA_STORAGE_ERROR
                    log.error("txn_marker_append_failed", topic=topic.name, partition=index, error=str(ex))
                    continue
                waiting.append((partition, info.last_offset + 1, partial(_set_error, p_result)))
                if topic.name == OFFSETS_TOPIC:
                    offsets_partitions.append(index)
        if offsets_partitions and offsets_marker_listener is not None:
            outcome = offsets_marker_listener(marker.producer_id, offsets_partitions, marker.transaction_result)
            if outcome is not None:
                await outcome
    await wait_for_replication(waiting, timeout_ms)
    return response
