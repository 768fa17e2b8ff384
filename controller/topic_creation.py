"""The checks of a new topic that come before its placement, in Kafka's order and with
Kafka's messages (``ControllerApis``, ``ReplicationControlManager``): its settings
(INVALID_CONFIG), then a manual assignment (INVALID_REQUEST, INVALID_REPLICA_ASSIGNMENT).
"""

from __future__ import annotations

from collections.abc import Sequence

from controller.image import MetadataImage
from controller.topic_configs import TopicConfigChecker
from wire.errors import ErrorCode

#: Kafka's controller writes at most this many records for one request (QuorumController).
MAX_RECORDS_PER_USER_OP = 10_000


def manual_assignment_error(
    image: MetadataImage, replicas: list[int], replication_factor: int | None
) -> str | None:
    """Kafka's validateManualPartitionAssignment: a message, or None when the replicas are fine."""
    if not replicas:
        return "The manual partition assignment includes an empty replica list."
    previous: int | None = None
    for broker_id in sorted(replicas):
        if broker_id not in image.brokers:
            return f"The manual partition assignment includes broker {broker_id}, but no such broker is registered."
        if broker_id == previous:
            return f"The manual partition assignment includes the broker {previous} more than once."
        previous = broker_id
    if replication_factor is not None and len(replicas) != replication_factor:
        return (
            f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but this is "
            f"not consistent with previous partitions, which have {replication_factor} replica(s)."
        )
    return None


def settings_and_assignment_error(
    image: MetadataImage,
    checker: TopicConfigChecker,
    configs: dict[str, str],
    num_partitions: int,
    replication_factor: int,
    assignments: Sequence[tuple[int, list[int]]],
) -> tuple[ErrorCode, str] | None:
    """The error of a new topic's settings or manual assignment, or None."""
    bad = checker.error(image, configs)
    if bad is not None:
        return ErrorCode.INVALID_CONFIG, bad
    if not assignments:
        return None
    if replication_factor != -1:
        return ErrorCode.INVALID_REQUEST, (
            "A manual partition assignment was specified, but replication factor was not set to -1."
        )
    if num_partitions != -1:
        return ErrorCode.INVALID_REQUEST, (
            "A manual partition assignment was specified, but numPartitions was not set to -1."
        )
    seen: set[int] = set()
    rf: int | None = None
    live = {b.broker_id for b in image.live_brokers()}
    for partition_index, broker_ids in assignments:
        if partition_index in seen:
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, (
                f"Found multiple manual partition assignments for partition {partition_index}"
            )
        seen.add(partition_index)
        problem = manual_assignment_error(image, broker_ids, rf)
        if problem is not None:
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem
        rf = len(broker_ids)
        if live.isdisjoint(broker_ids):
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, (
                f"All brokers specified in the manual partition assignment for partition {partition_index} "
                "are fenced or in controlled shutdown."
            )
    if seen != set(range(len(seen))):
        return ErrorCode.INVALID_REPLICA_ASSIGNMENT, "partitions should be a consecutive 0-based integer sequence"
    return None
