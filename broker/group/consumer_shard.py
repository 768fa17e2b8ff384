"""The consumer rebalance protocol (KIP-848) in a ``__consumer_offsets`` shard.

:class:`ConsumerGroupShard` is the classic :class:`~broker.group.shard.GroupShard`
plus the groups of the consumer protocol (Kafka's new GroupMetadataManager):
ConsumerGroupHeartbeat joins, reconciles, leaves and fences members;
ConsumerGroupDescribe describes them. Both kinds of group share a shard, its
offsets and its records. A consumer group's committed offsets are kept by an
offsets-only classic group of the same id (Empty, no members), so offset commit,
fetch, expiry and deletion stay the classic code's; commits are fenced here
first by member id and member epoch (STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID).

Every change is written as Kafka's records (:mod:`broker.group.consumer_records`)
and the heartbeat is answered once they are committed; loading replays them,
so a restarted or new coordinator has every group, member, epoch and
assignment, and gives each member a fresh session.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import structlog

from broker.coordinator.runtime import AppendResult, CoordinatorRecord, ReplayedRecord, ShardContext
from broker.group.assignors import ASSIGNORS, MemberSpec
from broker.group.consumer_group import (
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerGroupMember,
    ConsumerGroupState,
    FrozenAssignment,
    MemberState,
    TopicMetadata,
    freeze,
    is_subset,
    reconcile,
)
from broker.group.consumer_records import (
    CONSUMER_GROUP_KEY_VERSIONS,
    ConsumerGroupLoader,
    group_epoch_record,
    member_records,
    member_removal_records,
    subscription_metadata_record,
    target_epoch_record,
    target_member_record,
)
from broker.group.group import (
    ClassicGroup,
    GroupOverview,
    GroupState,
    GroupSummary,
    JoinCallback,
    JoinResult,
)
from broker.group.offset_commits import PreparedCommit
from broker.group.records import OffsetAndMetadata, RecordFormatError
from broker.group.shard import GroupShard
from broker.group.shard_types import (
    CommitCallback,
    GroupConfig,
    GroupObserver,
    JoinRequest,
    TopicPartition,
)
from broker.group.topic_regex import matches
from config.group import CONSUMER_HEARTBEAT_INTERVAL_MS, CONSUMER_SESSION_TIMEOUT_MS, int_config
from wire.errors import ErrorCode

log = structlog.get_logger(__name__)

_SEP = "\x00"
CONSUMER_GROUP_TYPE = "consumer"
CONSUMER_PROTOCOL_TYPE = "consumer"
OwnedPartitions = list[tuple[uuid.UUID, list[int]]]
#: (subscribed topic names, subscribed regexes) -> what the metadata image says of the
#: topics that exist among those names or match one of the regexes
TopicLookup = Callable[[set[str], set[str]], dict[str, TopicMetadata]]


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    """``group.consumer.*`` (Kafka's names and defaults), which a group's own group configs
    (``consumer.session.timeout.ms``, ``consumer.heartbeat.interval.ms``) override."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 2**31 - 1
    assignors: tuple[str, ...] = ("uniform", "range")
    #: group id -> its group configs (from the metadata image)
    group_configs: Callable[[str], Mapping[str, str]] = lambda group_id: {}

    def session_timeout_for(self, group_id: str) -> int:
        return int_config(self.group_configs(group_id), CONSUMER_SESSION_TIMEOUT_MS, self.session_timeout_ms)

    def heartbeat_interval_for(self, group_id: str) -> int:
        return int_config(self.group_configs(group_id), CONSUMER_HEARTBEAT_INTERVAL_MS, self.heartbeat_interval_ms)


@dataclass(frozen=True, slots=True)
class ConsumerHeartbeat:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int
    subscribed_topic_names: list[str] | None
    subscribed_topic_regex: str | None
    server_assignor: str | None
    owned: OwnedPartitions | None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class ConsumerHeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: FrozenAssignment | None = None


HeartbeatCallback = Callable[[ConsumerHeartbeatResult], None]


def _failure(error: ErrorCode, message: str | None = None) -> ConsumerHeartbeatResult:
    return ConsumerHeartbeatResult(error, message)


def write_error(error: ErrorCode) -> ErrorCode:
    """What a failed write of group records tells the member."""
    if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if error in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                 ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return ErrorCode.UNKNOWN_SERVER_ERROR if error is not ErrorCode.NONE else error


class ConsumerGroupShard(GroupShard):
    """The classic groups and the consumer-protocol groups of one ``__consumer_offsets`` partition."""

    def __init__(self, ctx: ShardContext, config: GroupConfig, observer: GroupObserver | None = None,
                 consumer_config: ConsumerGroupConfig | None = None) -> None:
        super().__init__(ctx, config, observer)
        self.consumer_config = consumer_config or ConsumerGroupConfig()
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        self._consumer_loader = ConsumerGroupLoader()
        #: group id -> when its epoch moved and the group stopped being Stable (for metrics)
        self._rebalancing_since: dict[str, int] = {}
        #: what the metadata image says of subscribed topics, for requests that do not bring it
        self._topic_lookup: TopicLookup | None = None

    # ================================================================ loading

    def replay(self, record: ReplayedRecord) -> None:
        version = int.from_bytes(record.key[:2], "big", signed=True) if len(record.key) >= 2 else -1
        if version not in CONSUMER_GROUP_KEY_VERSIONS:
            super().replay(record)
            return
        try:
            self._consumer_loader.replay(version, record.key, record.value)
        except RecordFormatError as ex:
            log.warning("coordinator_record_unreadable", partition=self.ctx.partition, offset=record.offset,
                        error=str(ex))

    def on_loaded(self) -> None:
        super().on_loaded()
        for group in self._consumer_loader.groups():
            self.consumer_groups[group.group_id] = group
            log.info("consumer_group_loaded", group_id=group.group_id, epoch=group.group_epoch,
                     members=len(group.members), state=group.state.value)
            for member in group.members.values():
                self._schedule_session(group, member.member_id)

    def on_unloaded(self) -> None:
        for group in self.consumer_groups.values():
            group.dead = True
        self.consumer_groups.clear()
        self._rebalancing_since.clear()
        super().on_unloaded()

    # ================================================================ heartbeat

    def consumer_heartbeat(self, req: ConsumerHeartbeat, topics: TopicLookup, callback: HeartbeatCallback) -> None:
        classic = self.groups.get(req.group_id)
        if classic is not None and classic.size > 0:
            callback(_failure(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a consumer group."))
            return
        group = self.consumer_groups.get(req.group_id)
        if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            self._leave(group, req, callback)
            return
        records: list[CoordinatorRecord] = []
        if group is None:
            if req.member_epoch != JOIN_GROUP_MEMBER_EPOCH:
                callback(_failure(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {req.group_id} not found."))
                return
            group = ConsumerGroup(req.group_id)
        member = group.members.get(req.member_id)
        bump = False
        if req.member_epoch == JOIN_GROUP_MEMBER_EPOCH:
            if req.instance_id is not None:
                error = self._maybe_replace_static_member(group, req, records)
                if error is not None:
                    callback(_failure(error))
                    return
                member = group.members.get(req.member_id)
            if member is None:
                if len(group.members) >= self.consumer_config.max_size:
                    callback(_failure(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                      f"The consumer group has reached its maximum capacity of "
                                      f"{self.consumer_config.max_size} members."))
                    return
                member = ConsumerGroupMember(req.member_id or str(self.ctx.random_uuid()))
                bump = True
        else:
            if member is None:
                callback(_failure(ErrorCode.UNKNOWN_MEMBER_ID,
                                  f"Member {req.member_id} is not a member of group {req.group_id}."))
                return
            error = self._check_epoch(member, req)
            if error is not None:
                callback(_failure(error))
                return
        if req.group_id not in self.consumer_groups:
            self.consumer_groups[req.group_id] = group
        before = group.members.get(member.member_id)
        updated = replace(
            member,
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            client_id=req.client_id, client_host=req.client_host,
            subscribed_topic_names=(tuple(sorted(req.subscribed_topic_names))
                                    if req.subscribed_topic_names is not None else member.subscribed_topic_names),
            subscribed_topic_regex=(req.subscribed_topic_regex if req.subscribed_topic_regex is not None
                                    else member.subscribed_topic_regex),
            rebalance_timeout_ms=(req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
                                  else member.rebalance_timeout_ms),
            server_assignor=req.server_assignor if req.server_assignor is not None else member.server_assignor,
        )
        if (updated.subscribed_topic_names, updated.subscribed_topic_regex, updated.server_assignor,
                updated.rack_id) != (member.subscribed_topic_names, member.subscribed_topic_regex,
                                     member.server_assignor, member.rack_id):
            bump = True
        group.put_member(updated)
        bump = self._refresh_subscription_metadata(group, topics, records) or bump
        if bump:
            group.group_epoch += 1
            self._rebalancing_since.setdefault(group.group_id, self.ctx.now_ms())
            records.append(group_epoch_record(group.group_id, group.group_epoch))
            log.info("consumer_group_epoch_bumped", group_id=group.group_id, epoch=group.group_epoch,
                     member_id=updated.member_id)
        if group.group_epoch > group.assignment_epoch:
            self._compute_target(group, records)
        reconciled = self._reconcile(group, updated, req.owned, records, before)
        self._schedule_session(group, reconciled.member_id)
        full = (req.rebalance_timeout_ms != -1 and req.owned is not None
                and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None))
        send_assignment = req.member_epoch == JOIN_GROUP_MEMBER_EPOCH or full or reconciled.assigned != member.assigned
        self._maybe_rebalance_completed(group)
        result = ConsumerHeartbeatResult(
            ErrorCode.NONE, None, reconciled.member_id, reconciled.member_epoch,
            self.consumer_config.heartbeat_interval_for(group.group_id), reconciled.assigned if send_assignment else None)
        self._write(records, lambda error: callback(result if error is ErrorCode.NONE else _failure(error)))

    def _check_epoch(self, member: ConsumerGroupMember, req: ConsumerHeartbeat) -> ErrorCode | None:
        """Kafka's throwIfConsumerGroupMemberEpochIsInvalid: a member one epoch behind may have
        lost our last answer; it is accepted if what it owns is still assigned to it."""
        if req.member_epoch > member.member_epoch:
            return ErrorCode.FENCED_MEMBER_EPOCH
        if req.member_epoch < member.member_epoch and (
                req.member_epoch != member.previous_member_epoch or not is_subset(req.owned, member.assigned)):
            return ErrorCode.FENCED_MEMBER_EPOCH
        return None

    def _maybe_replace_static_member(self, group: ConsumerGroup, req: ConsumerHeartbeat,
                                     records: list[CoordinatorRecord]) -> ErrorCode | None:
        """A static member rejoining under a new member id takes over its predecessor's
        assignment and epoch without a rebalance, once the predecessor left (epoch -2)."""
        assert req.instance_id is not None
        old_id = group.static_member_id(req.instance_id)
        if old_id is None or old_id == req.member_id:
            return None
        old = group.members[old_id]
        if old.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            return ErrorCode.UNRELEASED_INSTANCE_ID
        target = group.target.get(old_id, {})
        group.remove_member(old_id)
        self._cancel_timers(group, old_id)
        records.extend(member_removal_records(group.group_id, old_id))
        new = replace(old, member_id=req.member_id or str(self.ctx.random_uuid()))
        group.put_member(new)
        group.target[new.member_id] = target
        records.extend(member_records(group.group_id, None, new))
        records.append(target_member_record(group.group_id, new.member_id, target))
        log.info("static_member_replaced", group_id=group.group_id, instance_id=req.instance_id,
                 old_member_id=old_id, member_id=new.member_id)
        return None

    def _refresh_subscription_metadata(self, group: ConsumerGroup, topics: TopicLookup,
                                       records: list[CoordinatorRecord]) -> bool:
        current = topics(group.subscribed_topic_names(), group.subscribed_regexes())
        if current == group.subscription_metadata:
            return False
        group.subscription_metadata = current
        records.append(subscription_metadata_record(group.group_id, current))
        return True

    def _assignor_for(self, group: ConsumerGroup) -> str:
        """The assignor most members ask for, else the first configured (Kafka's preferredServerAssignor)."""
        votes = Counter(m.server_assignor for m in group.members.values()
                        if m.server_assignor in self.consumer_config.assignors)
        if votes:
            return sorted(votes.items(), key=lambda kv: (-kv[1], kv[0] or ""))[0][0] or ""
        return self.consumer_config.assignors[0]

    def _compute_target(self, group: ConsumerGroup, records: list[CoordinatorRecord]) -> None:
        meta = group.subscription_metadata
        specs = {
            m.member_id: MemberSpec(
                m.member_id,
                frozenset(t.topic_id for name, t in meta.items()
                          if name in m.subscribed_topic_names or matches(m.subscribed_topic_regex, name)),
                group.target.get(m.member_id, {}),
                m.rack_id)
            for m in group.members.values()
        }
        assignor = group.assignor = self._assignor_for(group)
        racks = {(t.topic_id, p): frozenset(r) for t in meta.values() for p, r in enumerate(t.partition_racks) if r}
        computed = ASSIGNORS[assignor].assign(specs, {t.topic_id: t.num_partitions for t in meta.values()}, racks)
        for member_id, assignment in sorted(computed.items()):
            frozen = freeze(assignment)
            if group.target.get(member_id) != frozen or member_id not in group.target:
                group.target[member_id] = frozen
                records.append(target_member_record(group.group_id, member_id, frozen))
        group.assignment_epoch = group.group_epoch
        records.append(target_epoch_record(group.group_id, group.assignment_epoch))
        log.info("consumer_group_target_assignment", group_id=group.group_id, epoch=group.assignment_epoch,
                 assignor=assignor, members=len(specs))

    def _reconcile(self, group: ConsumerGroup, member: ConsumerGroupMember, owned: OwnedPartitions | None,
                   records: list[CoordinatorRecord], before: ConsumerGroupMember | None) -> ConsumerGroupMember:
        mine = {(t, p) for source in (member.assigned, member.pending_revocation)
                for t, ps in source.items() for p in ps}

        def owner_epoch(topic_id: uuid.UUID, partition: int) -> int:
            return -1 if (topic_id, partition) in mine else group.owner_epoch(topic_id, partition)

        updated = reconcile(member, group.assignment_epoch, group.target.get(member.member_id, {}), owner_epoch,
                            owned)
        group.put_member(updated)
        records.extend(member_records(group.group_id, before, updated))
        key = self._rebalance_key(group, updated.member_id)
        if updated.state is MemberState.UNREVOKED_PARTITIONS:
            if member.state is not MemberState.UNREVOKED_PARTITIONS or before is None:
                epoch = updated.member_epoch
                self.ctx.schedule(key, max(updated.rebalance_timeout_ms, 0),
                                  lambda: self._on_rebalance_timeout(group, updated.member_id, epoch))
        else:
            self.ctx.cancel(key)
        return updated

    # ================================================================ leaving and fencing

    def _leave(self, group: ConsumerGroup | None, req: ConsumerHeartbeat, callback: HeartbeatCallback) -> None:
        if group is None:
            callback(_failure(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {req.group_id} not found."))
            return
        member = group.members.get(req.member_id)
        if member is None:
            callback(_failure(ErrorCode.UNKNOWN_MEMBER_ID,
                              f"Member {req.member_id} is not a member of group {req.group_id}."))
            return
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH and member.instance_id is not None:
            # Kept with its assignment until its session expires, for the next instance.
            left = replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, pending_revocation={})
            group.put_member(left)
            records = member_records(group.group_id, member, left)
            log.info("static_member_left", group_id=group.group_id, member_id=member.member_id,
                     instance_id=member.instance_id)
        else:
            records = self._remove_member(group, member.member_id, "the member left the group")
        result = ConsumerHeartbeatResult(ErrorCode.NONE, None, member.member_id, req.member_epoch, 0)
        self._write(records, lambda error: callback(result if error is ErrorCode.NONE else _failure(error)))

    def _remove_member(self, group: ConsumerGroup, member_id: str, reason: str) -> list[CoordinatorRecord]:
        group.remove_member(member_id)
        self._cancel_timers(group, member_id)
        records = member_removal_records(group.group_id, member_id)
        group.group_epoch += 1
        self._rebalancing_since.setdefault(group.group_id, self.ctx.now_ms())
        records.append(group_epoch_record(group.group_id, group.group_epoch))
        # The subscription may have lost topics; the target is recomputed at the new epoch.
        if group.subscription_metadata:
            names, regexes = group.subscribed_topic_names(), group.subscribed_regexes()
            kept = {n: t for n, t in group.subscription_metadata.items()
                    if n in names or any(matches(r, n) for r in regexes)}
            if kept != group.subscription_metadata:
                group.subscription_metadata = kept
                records.append(subscription_metadata_record(group.group_id, kept))
        self._compute_target(group, records)
        self._maybe_rebalance_completed(group)
        log.info("consumer_group_member_removed", group_id=group.group_id, member_id=member_id, reason=reason,
                 epoch=group.group_epoch)
        return records

    def _fence(self, group: ConsumerGroup, member_id: str, reason: str) -> None:
        if group.dead or self.consumer_groups.get(group.group_id) is not group or member_id not in group.members:
            return
        self._write(self._remove_member(group, member_id, reason), lambda error: None)

    def _on_rebalance_timeout(self, group: ConsumerGroup, member_id: str, epoch: int) -> None:
        member = group.members.get(member_id)
        if member is not None and member.state is MemberState.UNREVOKED_PARTITIONS and member.member_epoch == epoch:
            self._fence(group, member_id, "the member did not revoke its partitions within its rebalance timeout")

    def _schedule_session(self, group: ConsumerGroup, member_id: str) -> None:
        member = group.members.get(member_id)
        classic = None if member is None else member.classic
        timeout_ms = (self.consumer_config.session_timeout_for(group.group_id) if classic is None
                      else classic.session_timeout_ms)
        self.ctx.schedule(self._session_key(group, member_id), timeout_ms,
                          lambda: self._fence(group, member_id, "session timeout"))

    def _cancel_timers(self, group: ConsumerGroup, member_id: str) -> None:
        self.ctx.cancel(self._session_key(group, member_id))
        self.ctx.cancel(self._rebalance_key(group, member_id))

    @staticmethod
    def _session_key(group: ConsumerGroup, member_id: str) -> str:
        return f"cg-session{_SEP}{group.group_id}{_SEP}{member_id}"

    @staticmethod
    def _rebalance_key(group: ConsumerGroup, member_id: str) -> str:
        return f"cg-rebalance{_SEP}{group.group_id}{_SEP}{member_id}"

    def _maybe_rebalance_completed(self, group: ConsumerGroup) -> None:
        """A rebalance ends when every member reconciled to the target (the group is Stable)."""
        if group.state in (ConsumerGroupState.STABLE, ConsumerGroupState.EMPTY):
            started = self._rebalancing_since.pop(group.group_id, None)
            if started is not None and group.members:
                self.observer.rebalance_completed(group.group_id, group.group_epoch, len(group.members),
                                                  self.ctx.now_ms() - started)

    def _write(self, records: list[CoordinatorRecord], done: Callable[[ErrorCode], None]) -> None:
        if not records:
            done(ErrorCode.NONE)
            return

        def written(result: AppendResult) -> None:
            if result.error is not ErrorCode.NONE:
                log.info("consumer_group_write_failed", partition=self.ctx.partition, error=result.error.name)
            done(write_error(result.error))

        self.ctx.append(records, written)

    # ================================================================ classic APIs on consumer groups

    def join_group(self, req: JoinRequest, callback: JoinCallback) -> None:
        group = self.consumer_groups.get(req.group_id)
        if group is not None and group.members:
            callback(JoinResult(req.member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        if group is not None:  # an empty consumer group becomes a classic one
            self._drop_consumer_group(group)
        super().join_group(req, callback)

    def _drop_consumer_group(self, group: ConsumerGroup) -> None:
        group.dead = True
        del self.consumer_groups[group.group_id]
        self._rebalancing_since.pop(group.group_id, None)
        self.ctx.append([target_epoch_record(group.group_id, None),
                         subscription_metadata_record(group.group_id, None),
                         group_epoch_record(group.group_id, None)])

    def _offsets_holder(self, group_id: str) -> ClassicGroup:
        holder = self.groups.get(group_id)
        if holder is None or holder.state is GroupState.DEAD:
            holder = ClassicGroup(group_id, GroupState.EMPTY, self.ctx.now_ms())
            self.groups[group_id] = holder
        return holder

    def validate_consumer_commit(self, group: ConsumerGroup, member_id: str, member_epoch: int,
                                 transactional: bool) -> ErrorCode | None:
        """Kafka's ConsumerGroup.validateOffsetCommit."""
        if member_epoch < 0 and not member_id and not group.members:
            return None  # an admin tool commits for an empty group
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            # A classic member's generation is its member epoch: it is told so as classic groups do.
            classic = transactional or member.classic is not None
            return ErrorCode.ILLEGAL_GENERATION if classic else ErrorCode.STALE_MEMBER_EPOCH
        return None

    def validate_consumer_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode | None:
        """Kafka's ConsumerGroup.validateOffsetFetch: without a member id and epoch (an admin
        client, an older client) anyone may fetch; a member must have the epoch it names."""
        group = self.consumer_groups.get(group_id)
        if group is None or (member_id is None and member_epoch < 0):
            return None
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return None

    def commit_offsets(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int,
                       offsets: dict[TopicPartition, OffsetAndMetadata], callback: CommitCallback,
                       prepared: PreparedCommit | None = None) -> None:
        group = self.consumer_groups.get(group_id)
        if group is None:
            super().commit_offsets(group_id, member_id, group_instance_id, generation_id, offsets, callback, prepared)
            return
        error = self.validate_consumer_commit(group, member_id, generation_id, transactional=False)
        if error is not None:
            callback({tp: error for tp in offsets})
            return
        self._store_offsets(self._offsets_holder(group_id), offsets, callback, prepared)

    def commit_transactional_offsets(self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
                                     group_instance_id: str | None, generation_id: int,
                                     offsets: dict[TopicPartition, OffsetAndMetadata],
                                     callback: CommitCallback) -> None:
        group = self.consumer_groups.get(group_id)
        if group is not None:
            if generation_id >= 0 or member_id:  # TxnOffsetCommit v3+ names the member
                error = self.validate_consumer_commit(group, member_id, generation_id, transactional=True)
                if error is not None:
                    callback({tp: error for tp in offsets})
                    return
            self._offsets_holder(group_id)
            member_id, group_instance_id, generation_id = "", None, -1  # checked here, not as a classic member
        super().commit_transactional_offsets(group_id, producer_id, producer_epoch, member_id, group_instance_id,
                                             generation_id, offsets, callback)

    # ================================================================ admin

    def consumer_group(self, group_id: str) -> ConsumerGroup | None:
        group = self.consumer_groups.get(group_id)
        if group is not None and not group.assignor:
            group.assignor = self._assignor_for(group)  # loaded: as the next assignment would choose
        return group

    def describe_group(self, group_id: str) -> GroupSummary:
        if group_id in self.consumer_groups:
            # Kafka 4: a consumer-protocol group "is not a classic group"; DescribeGroups up
            # to v5 answers Dead without an error (v6 would add GROUP_ID_NOT_FOUND).
            return GroupSummary(GroupState.DEAD.value, "", "", ())
        return super().describe_group(group_id)

    def list_groups(self, states: set[str], types: set[str]) -> list[GroupOverview]:
        lowered = {t.lower() for t in types}
        out = [g for g in super().list_groups(states, types) if g.group_id not in self.consumer_groups]
        if not lowered or CONSUMER_GROUP_TYPE in lowered:
            out.extend(GroupOverview(g.group_id, CONSUMER_PROTOCOL_TYPE, g.state.value, CONSUMER_GROUP_TYPE)
                       for g in self.consumer_groups.values()
                       if not states or g.state.value.lower() in states)
        return out

    def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        classic: list[str] = []
        for group_id in group_ids:
            group = self.consumer_groups.get(group_id)
            if group is None:
                classic.append(group_id)
            elif group.members:
                results[group_id] = ErrorCode.NON_EMPTY_GROUP
            else:
                self._drop_consumer_group(group)
                holder = self.groups.get(group_id)
                if holder is not None and holder.state is GroupState.EMPTY:
                    classic.append(group_id)
                else:
                    results[group_id] = ErrorCode.NONE
                log.info("consumer_group_deleted", group_id=group_id)
        if classic:
            results.update(super().delete_groups(classic))
        return results

    def delete_offsets(self, group_id: str,
                       partitions: list[TopicPartition]) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        group = self.consumer_groups.get(group_id)
        if group is None or not group.members:
            return super().delete_offsets(group_id, partitions)
        subscribed = group.subscribed_topics()
        results = {tp: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC for tp in partitions if tp[0] in subscribed}
        rest = [tp for tp in partitions if tp[0] not in subscribed]
        if rest:
            error, removed = super().delete_offsets(group_id, rest)
            if error is not ErrorCode.NONE:
                return error, {}
            results.update(removed)
        return ErrorCode.NONE, results

    def expire_offsets(self) -> int:
        """As the classic groups' expiry, except that an active consumer group keeps the
        offsets of the topics it subscribes to (Kafka's OffsetExpirationCondition)."""
        now = self.ctx.now_ms()

        def expired(g: ClassicGroup) -> dict[TopicPartition, OffsetAndMetadata]:
            group = self.consumer_groups.get(g.group_id)
            if group is not None and group.members:
                subscribed = group.subscribed_topics()
                candidates = {tp: c for tp, c in g.offsets.items() if tp[0] not in subscribed}
                tps = [tp for tp, c in candidates.items()
                       if now - c.value.commit_timestamp_ms >= self.config.offsets_retention_ms]
                return g.remove_offsets(tps)
            return g.remove_expired_offsets(now, self.config.offsets_retention_ms)

        removed = self._cleanup_group_metadata(self.groups.values(), expired, "expired")
        if removed:
            log.info("offsets_expired", partition=self.ctx.partition, offsets=removed)
        return removed
