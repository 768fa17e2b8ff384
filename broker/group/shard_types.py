"""What the classic group shard takes and answers: its settings, the requests of the classic
protocol, fetched offsets, the observer of group events, and how a failed write of the group's
records becomes the error a client sees (Kafka's GroupCoordinator conversions)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from wire.errors import ErrorCode

TopicPartition = tuple[str, int]
#: A new member's JoinGroup is answered within this even if the rebalance lasts longer.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The broker settings the classic protocol uses (Kafka's names in comments)."""

    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    max_size: int = 2**31 - 1  # group.max.size
    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    new_member_join_timeout_ms: int = NEW_MEMBER_JOIN_TIMEOUT_MS


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    #: JoinGroup v4+ from a dynamic member: answer MEMBER_ID_REQUIRED first.
    require_known_member_id: bool
    #: JoinGroup v9+: a static leader rejoining a stable group is told to skip assignment.
    support_skip_assignment: bool
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class SyncRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: dict[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LeavingMember:
    member_id: str
    group_instance_id: str | None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    offset: int
    leader_epoch: int | None
    metadata: str
    error: ErrorCode = ErrorCode.NONE


INVALID_OFFSET = FetchedOffset(-1, None, "")

CommitCallback = Callable[[dict[TopicPartition, ErrorCode]], None]


class GroupObserver(Protocol):
    """Where group events go for metrics (see docs/metrics.md); every method is optional work."""

    def rebalance_completed(self, group_id: str, generation: int, members: int, duration_ms: int) -> None: ...

    def offsets_committed(self, group_id: str, count: int) -> None: ...

    def offsets_removed(self, group_id: str, count: int, reason: str) -> None: ...


class NullObserver:
    def rebalance_completed(self, group_id: str, generation: int, members: int, duration_ms: int) -> None:
        pass

    def offsets_committed(self, group_id: str, count: int) -> None:
        pass

    def offsets_removed(self, group_id: str, count: int, reason: str) -> None:
        pass


def store_group_error(error: ErrorCode) -> ErrorCode:
    """What a failed group-metadata write tells the members (Kafka's storeGroup)."""
    if error in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                 ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if error is ErrorCode.REQUEST_TIMED_OUT:
        return ErrorCode.REBALANCE_IN_PROGRESS
    if error in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return error


def commit_error(error: ErrorCode) -> ErrorCode:
    """What a failed offset-commit write tells the client (Kafka's maybeConvertOffsetCommitError)."""
    if error is ErrorCode.NETWORK_EXCEPTION:
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    if error in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                 ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if error in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    return error

