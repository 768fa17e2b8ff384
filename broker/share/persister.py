"""The share-partition persister (Kafka's DefaultStatePersister): how a partition leader
reads and writes a share-partition's durable state at its share coordinator.

The coordinator of (group, topic id, partition) is the leader of the
``__share_group_state`` partition its coordinator key hashes to
(broker/share/state_store.py). This broker's own shards are asked directly;
another broker through the inter-broker listener (APIs 83-87). NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE and an unreachable
broker are retried (the leader is looked up again) until ``timeout_s``; the
last error is then returned. Fencing errors (FENCED_LEADER_EPOCH,
FENCED_STATE_EPOCH) are returned at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import structlog
import trio

from broker.coordinator import partition_for
from broker.share.partition import RecordState, StateBatch
from broker.share.state_service import ShareStateService
from broker.share.state_store import (
    DEFAULT_STATE_EPOCH,
    UNINITIALIZED_START_OFFSET,
    SharePartitionKey,
    coordinator_key,
)
from controller.image import MetadataImage
from wire.errors import ErrorCode
from wire.generated.api_083_initialize_share_group_state import (
    InitializeShareGroupStateRequest,
    InitializeShareGroupStateRequestInitializeStateData,
    InitializeShareGroupStateRequestPartitionData,
    InitializeShareGroupStateResponse,
)
from wire.generated.api_084_read_share_group_state import (
    ReadShareGroupStateRequest,
    ReadShareGroupStateRequestPartitionData,
    ReadShareGroupStateRequestReadStateData,
    ReadShareGroupStateResponse,
)
from wire.generated.api_085_write_share_group_state import (
    WriteShareGroupStateRequest,
    WriteShareGroupStateRequestPartitionData,
    WriteShareGroupStateRequestStateBatch,
    WriteShareGroupStateRequestWriteStateData,
    WriteShareGroupStateResponse,
)
from wire.generated.api_086_delete_share_group_state import (
    DeleteShareGroupStateRequest,
    DeleteShareGroupStateRequestDeleteStateData,
    DeleteShareGroupStateRequestPartitionData,
    DeleteShareGroupStateResponse,
)
from wire.generated.api_087_read_share_group_state_summary import (
    ReadShareGroupStateSummaryRequest,
    ReadShareGroupStateSummaryRequestPartitionData,
    ReadShareGroupStateSummaryRequestReadStateSummaryData,
    ReadShareGroupStateSummaryResponse,
)
from wire.primitives import Message

log = structlog.get_logger(__name__)

_R = TypeVar("_R", bound=Message)

RETRIABLE = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                       ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.REQUEST_TIMED_OUT,
                       ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_ENOUGH_REPLICAS})
#: How long one persister call keeps looking for the coordinator.
DEFAULT_TIMEOUT_S = 15.0
#: One inter-broker request.
REQUEST_TIMEOUT_S = 5.0
RETRY_BACKOFF_S = 0.1


class PeerRequester(Protocol):
    """The inter-broker channel (broker/cluster/peers.py): None when the broker cannot be reached."""

    async def request(self, broker_id: int, message: Message, response_type: type[_R], timeout_s: float,
                      version: int | None = None) -> _R | None: ...


@dataclass(frozen=True, slots=True)
class PersistedState:
    """What ReadShareGroupState answered for one share-partition."""

    error: ErrorCode
    state_epoch: int = DEFAULT_STATE_EPOCH
    start_offset: int = UNINITIALIZED_START_OFFSET
    batches: tuple[StateBatch, ...] = ()


@dataclass(frozen=True, slots=True)
class PersistedSummary:
    error: ErrorCode
    state_epoch: int = DEFAULT_STATE_EPOCH
    leader_epoch: int = -1
    start_offset: int = UNINITIALIZED_START_OFFSET
    delivery_complete_count: int = -1


class SharePersister:
    def __init__(self, *, node_id: int, image: Callable[[], MetadataImage], state_topic: str,
                 local: ShareStateService, peers: Callable[[], PeerRequester],
                 ensure_topic: Callable[[], Awaitable[None]], timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.node_id = node_id
        self._image = image
        self._state_topic = state_topic
        self._local = local
        self._peers = peers
        self._ensure_topic = ensure_topic
        self.timeout_s = timeout_s

    # ------------------------------------------------------------ operations

    async def read(self, key: SharePartitionKey, leader_epoch: int) -> PersistedState:
        group, topic_id, partition = key
        request = ReadShareGroupStateRequest(group_id=group, topics=[ReadShareGroupStateRequestReadStateData(
            topic_id=topic_id, partitions=[ReadShareGroupStateRequestPartitionData(
                partition=partition, leader_epoch=leader_epoch)])])
        error, response = await self._call(key, request, ReadShareGroupStateResponse, self._local.read)
        if response is None:
            return PersistedState(error)
        p = response.results[0].partitions[0]
        if p.error_code:
            return PersistedState(ErrorCode(p.error_code))
        return PersistedState(ErrorCode.NONE, p.state_epoch, p.start_offset, tuple(
            StateBatch(b.first_offset, b.last_offset, RecordState(b.delivery_state), b.delivery_count)
            for b in p.state_batches))

    async def write(self, key: SharePartitionKey, state_epoch: int, leader_epoch: int, start_offset: int,
                    batches: Sequence[StateBatch]) -> ErrorCode:
        group, topic_id, partition = key
        request = WriteShareGroupStateRequest(group_id=group, topics=[WriteShareGroupStateRequestWriteStateData(
            topic_id=topic_id, partitions=[WriteShareGroupStateRequestPartitionData(
                partition=partition, state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=start_offset,
                state_batches=[WriteShareGroupStateRequestStateBatch(
                    first_offset=b.first_offset, last_offset=b.last_offset, delivery_state=int(b.state),
                    delivery_count=b.delivery_count) for b in batches])])])
        error, response = await self._call(key, request, WriteShareGroupStateResponse, self._local.write)
        return error if response is None else ErrorCode(response.results[0].partitions[0].error_code)

    async def initialize(self, key: SharePartitionKey, state_epoch: int, start_offset: int) -> ErrorCode:
        group, topic_id, partition = key
        request = InitializeShareGroupStateRequest(group_id=group, topics=[
            InitializeShareGroupStateRequestInitializeStateData(topic_id=topic_id, partitions=[
                InitializeShareGroupStateRequestPartitionData(
                    partition=partition, state_epoch=state_epoch, start_offset=start_offset)])])
        error, response = await self._call(key, request, InitializeShareGroupStateResponse, self._local.initialize)
        return error if response is None else ErrorCode(response.results[0].partitions[0].error_code)

    async def delete(self, key: SharePartitionKey) -> ErrorCode:
        group, topic_id, partition = key
        request = DeleteShareGroupStateRequest(group_id=group, topics=[DeleteShareGroupStateRequestDeleteStateData(
            topic_id=topic_id, partitions=[DeleteShareGroupStateRequestPartitionData(partition=partition)])])
        error, response = await self._call(key, request, DeleteShareGroupStateResponse, self._local.delete)
        return error if response is None else ErrorCode(response.results[0].partitions[0].error_code)

    async def read_summary(self, key: SharePartitionKey) -> PersistedSummary:
        group, topic_id, partition = key
        request = ReadShareGroupStateSummaryRequest(group_id=group, topics=[
            ReadShareGroupStateSummaryRequestReadStateSummaryData(topic_id=topic_id, partitions=[
                ReadShareGroupStateSummaryRequestPartitionData(partition=partition, leader_epoch=-1)])])
        error, response = await self._call(key, request, ReadShareGroupStateSummaryResponse,
                                           self._local.read_summary)
        if response is None:
            return PersistedSummary(error)
        p = response.results[0].partitions[0]
        if p.error_code:
            return PersistedSummary(ErrorCode(p.error_code))
        return PersistedSummary(ErrorCode.NONE, p.state_epoch, p.leader_epoch, p.start_offset,
                                p.delivery_complete_count)

    # ------------------------------------------------------------ routing

    def coordinator_of(self, key: SharePartitionKey) -> int:
        """The broker leading the state partition of ``key`` (-1: none known)."""
        topic = self._image().topic(self._state_topic)
        if topic is None or not topic.partitions:
            return -1
        part = topic.partitions.get(partition_for(coordinator_key(key), len(topic.partitions)))
        return -1 if part is None else part.leader

    async def _call(self, key: SharePartitionKey, request: Message, response_type: type[_R],
                    local: Callable[[Any], Awaitable[_R]],
                    ) -> tuple[ErrorCode, _R | None]:
        """Sends ``request`` (about one share-partition) to its coordinator, retrying while the
        coordinator moves; (error, None) when no answer came, else (NONE, the answer)."""
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        with trio.move_on_after(self.timeout_s):
            while True:
                if self._image().topic(self._state_topic) is None:
                    await self._ensure_topic()
                leader = self.coordinator_of(key)
                response: _R | None = None
                if leader == self.node_id:
                    response = await local(request)
                elif leader >= 0:
                    response = await self._peers().request(leader, request, response_type, REQUEST_TIMEOUT_S)
                if response is not None:
                    error = _first_error(response)
                    if error not in RETRIABLE:
                        return ErrorCode.NONE, response
                log.debug("share_persister_retry", api=type(request).__name__, coordinator=leader, error=error.name)
                await trio.sleep(RETRY_BACKOFF_S)
        log.warning("share_persister_gave_up", api=type(request).__name__, group_id=key[0],
                    topic_id=str(key[1]), partition=key[2], error=error.name)
        return error, None


def _first_error(response: Message) -> ErrorCode:
    for result in getattr(response, "results", ()):
        for p in result.partitions:
            if p.error_code:
                return ErrorCode(p.error_code)
    return ErrorCode.NONE
