"""Committed offsets of one shard's groups: OffsetCommit, TxnOffsetCommit and its completion,
OffsetFetch, and the removal of offsets (expiry, deleted topics, DeleteGroups, OffsetDelete).

Offsets are acknowledged only once committed to the log (acks=all); transactional offsets count
from their COMMIT marker. :class:`~broker.group.shard.GroupShard` combines this with the classic
protocol of :mod:`broker.group.classic_protocol`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from broker.coordinator.runtime import (
    AppendResult,
    CoordinatorRecord,
    PreparedBatch,
    ShardContext,
    free_in_chunks,
    prepare_batch,
)
from broker.eventloop.pacing import Pacer, discard
from broker.group.group import (
    UNKNOWN_MEMBER_ID,
    ClassicGroup,
    CommittedOffset,
    GroupState,
    IllegalStateError,
    Member,
)
from broker.group.records import (
    OffsetAndMetadata,
    group_metadata_key,
    offset_commit_key,
    offset_commit_value,
)
from broker.group.shard_types import (
    INVALID_OFFSET,
    CommitCallback,
    FetchedOffset,
    GroupConfig,
    GroupObserver,
    TopicPartition,
    commit_error,
)
from wire.errors import ErrorCode

log = structlog.get_logger(__name__)


def _java_length(text: str) -> int:
    """``String.length()``: UTF-16 code units."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


#: Offsets in one commit from which its records are built before the shard is called (in a
#: worker thread: :func:`prepare_commit`) and its outcome applied a chunk at a time
#: (:meth:`OffsetCommits.finish_prepared_commit`): a commit naming 100,000 partitions is
#: otherwise several event-loop steps of 100 ms and more.
LARGE_COMMIT = 2048


@dataclass(slots=True)
class PreparedCommit:
    """A large OffsetCommit's records, built as one batch before its shard is called."""

    accepted: dict[TopicPartition, OffsetAndMetadata]
    batch: PreparedBatch
    #: Set by the shard once the batch is written or has failed (None: refused before).
    group: ClassicGroup | None = None
    result: AppendResult | None = None


def prepare_commit(group_id: str, offsets: dict[TopicPartition, OffsetAndMetadata], metadata_max_bytes: int,
                   timestamp_ms: int) -> PreparedCommit:
    """The records of a commit of ``offsets`` (pure work: runs in a worker thread)."""
    accepted = {tp: o for tp, o in offsets.items() if _java_length(o.metadata) <= metadata_max_bytes}
    records = [CoordinatorRecord(offset_commit_key(group_id, t, p), offset_commit_value(o))
               for (t, p), o in accepted.items()]
    prepared = PreparedCommit(accepted, prepare_batch(records, timestamp_ms))
    free_in_chunks(records)
    return prepared


class OffsetCommits:
    """The committed offsets of the groups of one ``__consumer_offsets`` partition."""

    ctx: ShardContext
    config: GroupConfig
    observer: GroupObserver
    groups: dict[str, ClassicGroup]
    _producer_groups: dict[int, set[str]]

    if TYPE_CHECKING:  # the classic protocol's, see ClassicGroupProtocol
        def _validate_current_member(self, group: ClassicGroup, member_id: str,
                                     group_instance_id: str | None) -> ErrorCode | None: ...

        def _schedule_heartbeat(self, group: ClassicGroup, member: Member, timeout_ms: int | None = None) -> None: ...

    # ================================================================ offsets

    def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: dict[TopicPartition, OffsetAndMetadata],
        callback: CommitCallback,
        prepared: PreparedCommit | None = None,
    ) -> None:
        """``prepared``: the records of a large commit, built already; its outcome is then left
        in it, for :meth:`finish_prepared_commit`, and ``callback`` gets an empty map."""
        group = self.groups.get(group_id)
        if group is None:
            if generation_id < 0:
                # A simple consumer (or an admin tool): Kafka stores offsets for it.
                group = ClassicGroup(group_id, GroupState.EMPTY, self.ctx.now_ms())
                self.groups[group_id] = group
            else:
                callback({tp: ErrorCode.ILLEGAL_GENERATION for tp in offsets})
                return
        error = self._validate_offset_commit(group, generation_id, member_id, group_instance_id)
        if error is not None:
            callback({tp: error for tp in offsets})
            return
        if group.state is GroupState.EMPTY:
            self._store_offsets(group, offsets, callback, prepared)
        elif group.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            # During a rebalance commits still count; the heartbeat answer tells the member to rejoin.
            self._schedule_heartbeat(group, group.get(member_id))
            self._store_offsets(group, offsets, callback, prepared)
        elif group.state is GroupState.COMPLETING_REBALANCE:
            callback({tp: ErrorCode.REBALANCE_IN_PROGRESS for tp in offsets})
        else:
            raise IllegalStateError(f"offset commit for group {group_id} in state {group.state.value}")

    def _validate_offset_commit(self, group: ClassicGroup, generation_id: int, member_id: str,
                                group_instance_id: str | None, transactional: bool = False) -> ErrorCode | None:
        if group.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.state is GroupState.EMPTY:
            return None  # admin client or a consumer without group management
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            error = self._validate_current_member(group, member_id, group_instance_id)
            if error is not None:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
            return None
        if not transactional and group.state is not GroupState.EMPTY:
            # Only members commit while the group has members; TxnOffsetCommit before v3
            # carries no member id, so it is exempt.
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    def _valid_metadata(self, o: OffsetAndMetadata) -> bool:
        return _java_length(o.metadata) <= self.config.offset_metadata_max_bytes

    def _store_offsets(self, group: ClassicGroup, offsets: dict[TopicPartition, OffsetAndMetadata],
                       callback: CommitCallback, prepared: PreparedCommit | None = None) -> None:
        if prepared is not None:
            if not prepared.accepted:
                callback({tp: ErrorCode.OFFSET_METADATA_TOO_LARGE for tp in offsets})
                return
            group.prepare_offset_commit(prepared.accepted)

            def prepared_written(result: AppendResult) -> None:
                prepared.group, prepared.result = group, result
                callback({})

            self.ctx.append(prepared.batch, prepared_written)
            return
        accepted = {tp: o for tp, o in offsets.items() if self._valid_metadata(o)}
        if not accepted:
            callback({tp: ErrorCode.OFFSET_METADATA_TOO_LARGE for tp in offsets})
            return
        group.prepare_offset_commit(accepted)
        records = [CoordinatorRecord(offset_commit_key(group.group_id, t, p), offset_commit_value(o))
                   for (t, p), o in accepted.items()]

        def written(result: AppendResult) -> None:
            if result.error is ErrorCode.NONE:
                if group.state is not GroupState.DEAD:
                    for tp, o in accepted.items():
                        group.on_offset_commit_append(tp, CommittedOffset(result.base_offset, o))
                self.observer.offsets_committed(group.group_id, len(accepted))
                error = ErrorCode.NONE
            else:
                if group.state is not GroupState.DEAD:
                    for tp, o in accepted.items():
                        group.fail_pending_offset_write(tp, o)
                error = commit_error(result.error)
                log.info("offset_commit_failed", group_id=group.group_id, error=result.error.name)
            callback({tp: error if tp in accepted else ErrorCode.OFFSET_METADATA_TOO_LARGE for tp in offsets})

        self.ctx.append(records, written)

    async def finish_prepared_commit(self, prepared: PreparedCommit,
                                     offsets: dict[TopicPartition, OffsetAndMetadata]) -> dict[TopicPartition, ErrorCode]:
        """Applies a written large commit to its group (or drops its pending offsets if the
        write failed) a chunk at a time, and answers every partition of ``offsets``. Until a
        partition's turn comes, its offset is still pending: a fetch with require_stable sees
        UNSTABLE_OFFSET_COMMIT, as it does until the write is committed."""
        group, result = prepared.group, prepared.result
        assert group is not None and result is not None
        pacer = Pacer()
        accepted = prepared.accepted
        ok = result.error is ErrorCode.NONE
        for tp, o in accepted.items():
            if group.state is not GroupState.DEAD:
                if ok:
                    group.on_offset_commit_append(tp, CommittedOffset(result.base_offset, o))
                else:
                    group.fail_pending_offset_write(tp, o)
            if pacer.tick():
                await pacer.pause()
        if ok:
            self.observer.offsets_committed(group.group_id, len(accepted))
            error = ErrorCode.NONE
        else:
            error = commit_error(result.error)
            log.info("offset_commit_failed", group_id=group.group_id, error=result.error.name)
        errors: dict[TopicPartition, ErrorCode] = {}
        for tp in offsets:
            errors[tp] = error if tp in accepted else ErrorCode.OFFSET_METADATA_TOO_LARGE
            if pacer.tick():
                await pacer.pause()
        await discard(pacer, accepted)
        return errors

    # ---------------------------------------------------------------- transactional offsets

    def commit_transactional_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: dict[TopicPartition, OffsetAndMetadata],
        callback: CommitCallback,
    ) -> None:
        """TxnOffsetCommit (Kafka's handleTxnCommitOffsets; the transaction coordinator has
        verified the partition): written with the producer's id and epoch, the offsets count
        once its COMMIT marker is here (:meth:`complete_transaction`); until then fetches with
        require_stable see UNSTABLE_OFFSET_COMMIT. No member check before TxnOffsetCommit v3,
        which carries no member id."""
        group = self.groups.get(group_id)
        if group is None:
            group = ClassicGroup(group_id, GroupState.EMPTY, self.ctx.now_ms())
            self.groups[group_id] = group
        error = self._validate_offset_commit(group, generation_id, member_id, group_instance_id, transactional=True)
        if error is not None:
            callback({tp: error for tp in offsets})
            return
        accepted = {tp: o for tp, o in offsets.items() if self._valid_metadata(o)}
        if not accepted:
            callback({tp: ErrorCode.OFFSET_METADATA_TOO_LARGE for tp in offsets})
            return
        self._producer_groups.setdefault(producer_id, set()).add(group_id)
        group.prepare_txn_offset_commit(producer_id, accepted)
        records = [CoordinatorRecord(offset_commit_key(group_id, t, p), offset_commit_value(o))
                   for (t, p), o in accepted.items()]

        def written(result: AppendResult) -> None:
            if result.error is ErrorCode.NONE:
                if group.state is not GroupState.DEAD:
                    for tp, o in accepted.items():
                        group.on_txn_offset_commit_append(producer_id, tp, CommittedOffset(result.base_offset, o))
                error = ErrorCode.NONE
            else:
                if group.state is not GroupState.DEAD:
                    for tp in accepted:
                        group.fail_pending_txn_offset_commit(producer_id, tp)
                    if not group.has_pending_txn_offsets(producer_id):
                        self._producer_groups.get(producer_id, set()).discard(group_id)
                error = commit_error(result.error)
            callback({tp: error if tp in accepted else ErrorCode.OFFSET_METADATA_TOO_LARGE for tp in offsets})

        self.ctx.append(records, written, producer_id=producer_id, producer_epoch=producer_epoch, transactional=True)

    def complete_transaction(self, producer_id: int, committed: bool) -> None:
        """The producer's COMMIT or ABORT marker reached this partition (Kafka's handleTxnCompletion)."""
        for group_id in sorted(self._producer_groups.pop(producer_id, set())):
            group = self.groups.get(group_id)
            if group is not None and group.state is not GroupState.DEAD:
                count = len(group.pending_txn_offsets.get(producer_id, {}))
                group.complete_pending_txn_offset_commit(producer_id, committed)
                if committed and count:
                    self.observer.offsets_committed(group_id, count)
                log.info("txn_offsets_completed", group_id=group_id, producer_id=producer_id, committed=committed)

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None,
                      require_stable: bool) -> dict[TopicPartition, FetchedOffset]:
        """Committed offsets of ``partitions`` (None: every partition with one)."""
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return {tp: INVALID_OFFSET for tp in partitions or []}
        out: dict[TopicPartition, FetchedOffset] = {}
        for tp in (list(group.offsets) if partitions is None else partitions):
            if require_stable and group.has_pending_offset_commit(tp):
                out[tp] = FetchedOffset(-1, None, "", ErrorCode.UNSTABLE_OFFSET_COMMIT)
                continue
            o = group.offset(tp)
            out[tp] = INVALID_OFFSET if o is None else FetchedOffset(o.offset, o.leader_epoch, o.metadata)
        return out

    def _cleanup_group_metadata(
        self,
        groups: Iterable[ClassicGroup],
        selector: Callable[[ClassicGroup], dict[TopicPartition, OffsetAndMetadata]],
        reason: str,
    ) -> int:
        """Remove offsets chosen by ``selector``; an Empty group left without offsets dies.

        Tombstones are appended without waiting (acks=0, as Kafka): if one is lost,
        the next pass or the next load removes the data again.
        """
        removed_total = 0
        for group in list(groups):
            removed = selector(group)
            if group.state is GroupState.EMPTY and not group.has_offsets():
                log.info("group_dead", group_id=group.group_id, generation=group.generation_id)
                group.transition_to(GroupState.DEAD, self.ctx.now_ms())
            tombstones = [CoordinatorRecord(offset_commit_key(group.group_id, t, p), None) for (t, p) in removed]
            if group.state is GroupState.DEAD and self.groups.get(group.group_id) is group:
                del self.groups[group.group_id]
                if group.generation_id > 0:  # generation 0: the group only ever stored offsets
                    tombstones.append(CoordinatorRecord(group_metadata_key(group.group_id), None))
            if tombstones:
                self.ctx.append(tombstones)
            if removed:
                self.observer.offsets_removed(group.group_id, len(removed), reason)
            removed_total += len(removed)
        return removed_total

    def _schedule_offsets_expiration(self) -> None:
        def run() -> None:
            self.expire_offsets()
            self._schedule_offsets_expiration()

        self.ctx.schedule("expire-offsets", self.config.offsets_retention_check_interval_ms, run)

    def expire_offsets(self) -> int:
        now = self.ctx.now_ms()
        removed = self._cleanup_group_metadata(
            self.groups.values(), lambda g: g.remove_expired_offsets(now, self.config.offsets_retention_ms),
            "expired")
        if removed:
            log.info("offsets_expired", partition=self.ctx.partition, offsets=removed)
        return removed

    def on_topics_deleted(self, topics: set[str]) -> int:
        removed = self._cleanup_group_metadata(
            self.groups.values(), lambda g: g.remove_offsets([tp for tp in g.offsets if tp[0] in topics]),
            "topic deleted")
        if removed:
            log.info("offsets_removed", partition=self.ctx.partition, offsets=removed, reason="topics deleted",
                     topics=sorted(topics))
        return removed

