"""The share coordinator's inter-broker APIs (83-87): Initialize/Read/Write/DeleteShareGroupState
and ReadShareGroupStateSummary, served from the shards of ``__share_group_state``.

Each share-partition of a request is routed to the shard of its coordinator key
(broker/share/state_store.py); a partition of ``__share_group_state`` this
broker does not lead answers NOT_COORDINATOR, one still loading
COORDINATOR_LOAD_IN_PROGRESS, and the caller (the persister) looks the leader
up again. A change is answered once its record is committed (acks=all).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import trio

from broker.coordinator import AppendResult, CoordinatorRecord
from broker.observability.share_metrics import ShareMetrics
from broker.share.partition import RecordState, StateBatch
from broker.share.shard import ShareGroupShard
from broker.share.state_store import SharePartitionKey, ShareState, coordinator_key
from wire.errors import ErrorCode
from wire.generated.api_083_initialize_share_group_state import (
    InitializeShareGroupStateRequest,
    InitializeShareGroupStateResponse,
    InitializeShareGroupStateResponseInitializeStateResult,
    InitializeShareGroupStateResponsePartitionResult,
)
from wire.generated.api_084_read_share_group_state import (
    ReadShareGroupStateRequest,
    ReadShareGroupStateResponse,
    ReadShareGroupStateResponsePartitionResult,
    ReadShareGroupStateResponseReadStateResult,
    ReadShareGroupStateResponseStateBatch,
)
from wire.generated.api_085_write_share_group_state import (
    WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
    WriteShareGroupStateResponsePartitionResult,
    WriteShareGroupStateResponseWriteStateResult,
)
from wire.generated.api_086_delete_share_group_state import (
    DeleteShareGroupStateRequest,
    DeleteShareGroupStateResponse,
    DeleteShareGroupStateResponseDeleteStateResult,
    DeleteShareGroupStateResponsePartitionResult,
)
from wire.generated.api_087_read_share_group_state_summary import (
    ReadShareGroupStateSummaryRequest,
    ReadShareGroupStateSummaryResponse,
    ReadShareGroupStateSummaryResponsePartitionResult,
    ReadShareGroupStateSummaryResponseReadStateSummaryResult,
)

#: The shard serving a coordinator key here, or why none does.
ShardLookup = Callable[[str], tuple[ErrorCode, ShareGroupShard | None]]

_STATES = frozenset(int(s) for s in (RecordState.AVAILABLE, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED))


class _Commits:
    """Appends made for one request, answered together once all are settled."""

    def __init__(self) -> None:
        self._waiting = 0
        self._done = trio.Event()

    def append(self, shard: ShareGroupShard, records: Sequence[CoordinatorRecord],
               settle: Callable[[ErrorCode], None]) -> None:
        if not records:
            return
        self._waiting += 1

        def completed(result: AppendResult) -> None:
            settle(result.error)
            self._waiting -= 1
            if self._waiting == 0:
                self._done.set()

        shard.ctx.append(list(records), completed)

    async def wait(self) -> None:
        if self._waiting:
            await self._done.wait()


class ShareStateService:
    def __init__(self, shard_for: ShardLookup, metrics: ShareMetrics | None = None) -> None:
        self._shard_for = shard_for
        self._metrics = metrics or ShareMetrics()

    def _shard(self, key: SharePartitionKey, refused: ErrorCode | None) -> tuple[ErrorCode, ShareGroupShard | None]:
        """``refused``: every share-partition of the request answers that error (authorization)."""
        if refused is not None:
            return refused, None
        if not key[0]:
            return ErrorCode.INVALID_REQUEST, None
        return self._shard_for(coordinator_key(key))

    async def initialize(self, request: InitializeShareGroupStateRequest, refused: ErrorCode | None = None) -> InitializeShareGroupStateResponse:
        response = InitializeShareGroupStateResponse()
        commits = _Commits()
        for t in request.topics:
            result = InitializeShareGroupStateResponseInitializeStateResult(topic_id=t.topic_id)
            response.results.append(result)
            for p in t.partitions:
                out = InitializeShareGroupStateResponsePartitionResult(partition=p.partition)
                result.partitions.append(out)
                error, shard = self._shard((request.group_id, t.topic_id, p.partition), refused)
                if shard is None:
                    out.error_code = error
                    continue
                error, records = shard.state.initialize((request.group_id, t.topic_id, p.partition),
                                                        p.state_epoch, p.start_offset)
                out.error_code = error
                commits.append(shard, records, _setter(out))
        await commits.wait()
        return response

    async def read(self, request: ReadShareGroupStateRequest, refused: ErrorCode | None = None) -> ReadShareGroupStateResponse:
        response = ReadShareGroupStateResponse()
        commits = _Commits()
        for t in request.topics:
            result = ReadShareGroupStateResponseReadStateResult(topic_id=t.topic_id)
            response.results.append(result)
            for p in t.partitions:
                out = ReadShareGroupStateResponsePartitionResult(partition=p.partition, start_offset=-1)
                result.partitions.append(out)
                error, shard = self._shard((request.group_id, t.topic_id, p.partition), refused)
                if shard is None:
                    out.error_code = error
                    continue
                error, state, records = shard.state.read((request.group_id, t.topic_id, p.partition),
                                                         p.leader_epoch)
                out.error_code = error
                if state is not None:
                    _fill_read(out, state)
                commits.append(shard, records, _setter(out))
        await commits.wait()
        return response

    async def write(self, request: WriteShareGroupStateRequest, refused: ErrorCode | None = None) -> WriteShareGroupStateResponse:
        started = trio.current_time()
        response = WriteShareGroupStateResponse()
        commits = _Commits()
        for t in request.topics:
            result = WriteShareGroupStateResponseWriteStateResult(topic_id=t.topic_id)
            response.results.append(result)
            for p in t.partitions:
                out = WriteShareGroupStateResponsePartitionResult(partition=p.partition)
                result.partitions.append(out)
                if any(b.delivery_state not in _STATES or b.last_offset < b.first_offset or b.delivery_count < 0
                       for b in p.state_batches):
                    out.error_code = ErrorCode.INVALID_REQUEST
                    out.error_message = "Invalid state batch."
                    continue
                error, shard = self._shard((request.group_id, t.topic_id, p.partition), refused)
                if shard is None:
                    out.error_code = error
                    continue
                batches = [StateBatch(b.first_offset, b.last_offset, RecordState(b.delivery_state), b.delivery_count)
                           for b in p.state_batches]
                error, records = shard.state.write((request.group_id, t.topic_id, p.partition), p.state_epoch,
                                                   p.leader_epoch, p.start_offset, batches)
                out.error_code = error
                commits.append(shard, records, _setter(out))
        await commits.wait()
        written = sum(1 for r in response.results for p in r.partitions if p.error_code == ErrorCode.NONE)
        for _ in range(written):
            self._metrics.state_written(trio.current_time() - started)
        return response

    async def delete(self, request: DeleteShareGroupStateRequest, refused: ErrorCode | None = None) -> DeleteShareGroupStateResponse:
        response = DeleteShareGroupStateResponse()
        commits = _Commits()
        for t in request.topics:
            result = DeleteShareGroupStateResponseDeleteStateResult(topic_id=t.topic_id)
            response.results.append(result)
            for p in t.partitions:
                out = DeleteShareGroupStateResponsePartitionResult(partition=p.partition)
                result.partitions.append(out)
                error, shard = self._shard((request.group_id, t.topic_id, p.partition), refused)
                if shard is None:
                    out.error_code = error
                    continue
                commits.append(shard, shard.state.delete((request.group_id, t.topic_id, p.partition)), _setter(out))
        await commits.wait()
        return response

    async def read_summary(self, request: ReadShareGroupStateSummaryRequest, refused: ErrorCode | None = None) -> ReadShareGroupStateSummaryResponse:
        response = ReadShareGroupStateSummaryResponse()
        for t in request.topics:
            result = ReadShareGroupStateSummaryResponseReadStateSummaryResult(topic_id=t.topic_id)
            response.results.append(result)
            for p in t.partitions:
                out = ReadShareGroupStateSummaryResponsePartitionResult(partition=p.partition, start_offset=-1,
                                                                        leader_epoch=-1)
                result.partitions.append(out)
                error, shard = self._shard((request.group_id, t.topic_id, p.partition), refused)
                if shard is None:
                    out.error_code = error
                    continue
                state = shard.state.summary((request.group_id, t.topic_id, p.partition))
                out.state_epoch, out.leader_epoch = state.state_epoch, state.leader_epoch
                out.start_offset = state.start_offset
                out.delivery_complete_count = state.delivery_complete_count()
        return response


class _HasError(Protocol):
    error_code: int
    error_message: str | None


def _setter(out: _HasError) -> Callable[[ErrorCode], None]:
    def settle(error: ErrorCode) -> None:
        if error is not ErrorCode.NONE:
            out.error_code = error
            out.error_message = error.description
    return settle


def _fill_read(out: ReadShareGroupStateResponsePartitionResult, state: ShareState) -> None:
    out.state_epoch = state.state_epoch
    out.start_offset = state.start_offset
    out.state_batches = [ReadShareGroupStateResponseStateBatch(
        first_offset=b.first_offset, last_offset=b.last_offset, delivery_state=int(b.state),
        delivery_count=b.delivery_count) for b in state.batches]
