"""The classic group protocol for the groups of one ``__consumer_offsets`` partition.

This module holds the shard's state, its loading and the admin APIs; the protocol is in
:mod:`broker.group.classic_protocol`, the offsets in :mod:`broker.group.offset_commits`.

Mirrors Kafka 3.9's default (classic) GroupCoordinator and GroupMetadataManager:
JoinGroup/SyncGroup/Heartbeat/LeaveGroup, static membership (KIP-345),
MEMBER_ID_REQUIRED (KIP-394), the initial rebalance delay, session, rebalance
(join), pending-member and pending-sync expirations, offset commits with
their fencing rules, offset expiry, DeleteGroups and OffsetDelete.

A shard is synchronous and single-threaded (Trio): a request either answers
through its callback at once or leaves the callback with the member (awaiting
join or sync) to be answered by a later event. Time, timers and the log come
from the :class:`~broker.coordinator.ShardContext`, so the whole protocol can
be driven with explicit time in tests. Assignors are the clients': the
coordinator picks the protocol all members support (by vote), hands the
leader everyone's metadata and stores the assignment the leader returns.

Persistence: a group's metadata (generation, protocol, leader, members and
their assignments) is written when the leader's assignment arrives and when
the group becomes empty; committed offsets on every commit. Both are
acknowledged only once committed to the log (acks=all). Loading replays them:
offsets and group records by key, tombstones delete, transactional offsets
count from their COMMIT marker.
"""

from __future__ import annotations

import structlog

from broker.coordinator.runtime import ReplayedRecord, ShardContext
from broker.group.classic_protocol import ClassicGroupProtocol
from broker.group.group import (
    ClassicGroup,
    CommittedOffset,
    GroupOverview,
    GroupState,
    GroupSummary,
    JoinResult,
    Member,
    SyncResult,
)
from broker.group.offset_commits import OffsetCommits
from broker.group.records import (
    GroupKey,
    OffsetKey,
    RecordFormatError,
    UnknownKey,
    parse_group_value,
    parse_key,
    parse_offset_value,
)
from broker.group.shard_types import (
    GroupConfig,
    GroupObserver,
    NullObserver,
    TopicPartition,
)
from wire.errors import ErrorCode
from wire.generated.coordinator.group_metadata_value import (
    GroupMetadataValue,
)

log = structlog.get_logger(__name__)


class GroupShard(ClassicGroupProtocol, OffsetCommits):
    """The groups and committed offsets of one partition of ``__consumer_offsets``."""

    def __init__(self, ctx: ShardContext, config: GroupConfig, observer: GroupObserver | None = None) -> None:
        self.ctx = ctx
        self.config = config
        self.observer: GroupObserver = observer or NullObserver()
        self.groups: dict[str, ClassicGroup] = {}
        #: producer id -> groups it has transactional offset commits pending in
        self._producer_groups: dict[int, set[str]] = {}
        # State built while replaying the log, turned into groups by on_loaded().
        self._loaded_offsets: dict[tuple[str, TopicPartition], CommittedOffset] = {}
        self._loaded_groups: dict[str, tuple[int, GroupMetadataValue]] = {}
        self._replay_txn: dict[int, dict[tuple[str, TopicPartition], CommittedOffset]] = {}

    # ================================================================ loading

    def replay(self, record: ReplayedRecord) -> None:
        try:
            key = parse_key(record.key)
            if isinstance(key, OffsetKey):
                gtp = (key.group_id, (key.topic, key.partition))
                value = None if record.value is None else parse_offset_value(record.value)
                if record.is_transactional:
                    pending = self._replay_txn.setdefault(record.producer_id, {})
                    if value is None:
                        pending.pop(gtp, None)
                    else:
                        pending[gtp] = CommittedOffset(record.offset, value)
                elif value is None:
                    self._loaded_offsets.pop(gtp, None)
                else:
                    self._loaded_offsets[gtp] = CommittedOffset(record.offset, value)
            elif isinstance(key, GroupKey):
                if record.value is None:
                    self._loaded_groups.pop(key.group_id, None)
                else:
                    self._loaded_groups[key.group_id] = parse_group_value(record.value)
            elif isinstance(key, UnknownKey):
                log.debug("coordinator_record_skipped", partition=self.ctx.partition, key_version=key.version,
                          offset=record.offset)
        except RecordFormatError as ex:
            log.warning("coordinator_record_unreadable", partition=self.ctx.partition, offset=record.offset,
                        error=str(ex))

    def replay_end_transaction(self, producer_id: int, committed: bool, offset: int) -> None:
        pending = self._replay_txn.pop(producer_id, {})
        if committed:
            for gtp, c in pending.items():
                current = self._loaded_offsets.get(gtp)
                if current is None or (current.record_offset or -1) < (c.record_offset or -1):
                    self._loaded_offsets[gtp] = c

    def on_loaded(self) -> None:
        now = self.ctx.now_ms()
        offsets_by_group: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        for (group_id, tp), c in self._loaded_offsets.items():
            offsets_by_group.setdefault(group_id, {})[tp] = c
        pending_by_group: dict[str, dict[int, dict[TopicPartition, CommittedOffset]]] = {}
        for producer_id, offsets in self._replay_txn.items():
            for (group_id, tp), c in offsets.items():
                pending_by_group.setdefault(group_id, {}).setdefault(producer_id, {})[tp] = c
        for group_id, (version, value) in self._loaded_groups.items():
            group = self._group_from_record(group_id, version, value, now)
            group.offsets.update(offsets_by_group.pop(group_id, {}))
            group.pending_txn_offsets.update(pending_by_group.pop(group_id, {}))
            self.groups[group_id] = group
        # Groups that only store offsets (no metadata, or their metadata was deleted).
        for group_id in set(offsets_by_group) | set(pending_by_group):
            group = ClassicGroup(group_id, GroupState.EMPTY, now)
            group.offsets.update(offsets_by_group.get(group_id, {}))
            group.pending_txn_offsets.update(pending_by_group.get(group_id, {}))
            self.groups[group_id] = group
        for group in self.groups.values():
            for producer_id in group.pending_txn_offsets:
                self._producer_groups.setdefault(producer_id, set()).add(group.group_id)
        self._loaded_offsets.clear()
        self._loaded_groups.clear()
        self._replay_txn.clear()
        for group in self.groups.values():
            self._on_group_loaded(group)
        self._schedule_offsets_expiration()

    def _group_from_record(self, group_id: str, version: int, value: GroupMetadataValue, now_ms: int) -> ClassicGroup:
        group = ClassicGroup(
            group_id,
            GroupState.STABLE if value.members else GroupState.EMPTY,
            None if value.current_state_timestamp == -1 else value.current_state_timestamp,
            protocol_type=value.protocol_type or None,
            protocol_name=value.protocol,
            generation_id=value.generation,
            leader_id=value.leader,
        )
        for m in value.members:
            group.add(Member(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                # Version 0 had no rebalance timeout: the session timeout served for both.
                rebalance_timeout_ms=m.session_timeout if version == 0 else m.rebalance_timeout,
                session_timeout_ms=m.session_timeout,
                protocol_type=value.protocol_type,
                supported_protocols=[(value.protocol or "", m.subscription)],
                assignment=m.assignment,
            ))
        group.subscribed_topics = group.compute_subscribed_topics()
        return group

    def _on_group_loaded(self, group: ClassicGroup) -> None:
        log.info("group_loaded", group_id=group.group_id, generation=group.generation_id, state=group.state.value,
                 members=group.size, offsets=len(group.offsets))
        if group.size > self.config.max_size:
            self._prepare_rebalance(group, f"freshly-loaded group is over capacity ({self.config.max_size})")
        for member in group.members.values():
            self._schedule_heartbeat(group, member)

    def on_unloaded(self) -> None:
        for group in list(self.groups.values()):
            previous = group.state
            group.transition_to(GroupState.DEAD, self.ctx.now_ms())
            for member in list(group.members.values()):
                group.maybe_invoke_join_callback(member, JoinResult(member.member_id, ErrorCode.NOT_COORDINATOR))
                group.maybe_invoke_sync_callback(member, SyncResult(ErrorCode.NOT_COORDINATOR))
            log.info("group_unloaded", group_id=group.group_id, generation=group.generation_id,
                     previous_state=previous.value)
        self.groups.clear()

    # ================================================================ admin

    def describe_group(self, group_id: str) -> GroupSummary:
        group = self.groups.get(group_id)
        if group is None:
            return GroupSummary(GroupState.DEAD.value, "", "", ())
        return group.summary()

    def list_groups(self, states: set[str], types: set[str]) -> list[GroupOverview]:
        """``states`` lower-cased; ``types`` as given (only "classic" groups exist here)."""
        if types and "classic" not in {t.lower() for t in types}:
            return []
        return [g.overview() for g in self.groups.values() if not states or g.state.value.lower() in states]

    def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        eligible: list[ClassicGroup] = []
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is None or group.state is GroupState.DEAD:
                results[group_id] = ErrorCode.GROUP_ID_NOT_FOUND
            elif group.state is GroupState.EMPTY:
                group.transition_to(GroupState.DEAD, self.ctx.now_ms())
                eligible.append(group)
            else:
                results[group_id] = ErrorCode.NON_EMPTY_GROUP
        if eligible:
            removed = self._cleanup_group_metadata(eligible, lambda g: g.remove_offsets(list(g.offsets)), "deleted")
            for group in eligible:
                results[group.group_id] = ErrorCode.NONE
            log.info("groups_deleted", group_ids=[g.group_id for g in eligible], offsets=removed)
        return results

    def delete_offsets(self, group_id: str,
                       partitions: list[TopicPartition]) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        results: dict[TopicPartition, ErrorCode] = {}
        if group.state is GroupState.EMPTY:
            eligible = list(partitions)
        elif group.is_consumer_group:
            eligible = []
            for tp in partitions:
                if group.is_subscribed_to_topic(tp[0]):
                    results[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    eligible.append(tp)
        else:
            return ErrorCode.NON_EMPTY_GROUP, {}
        if eligible:
            removed = self._cleanup_group_metadata([group], lambda g: g.remove_offsets(eligible), "deleted")
            for tp in eligible:
                results[tp] = ErrorCode.NONE
            log.info("offsets_deleted", group_id=group_id, partitions=len(eligible), offsets=removed)
        return ErrorCode.NONE, results
