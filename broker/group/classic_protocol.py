"""The classic group protocol of one shard: JoinGroup, SyncGroup, Heartbeat and LeaveGroup.

Mirrors Kafka 3.9's classic GroupCoordinator: static membership (KIP-345), MEMBER_ID_REQUIRED
(KIP-394), the initial rebalance delay, and the session, rebalance (join), pending-member and
pending-sync expirations. :class:`~broker.group.shard.GroupShard` combines it with the offset
commits of :mod:`broker.group.offset_commits`.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from broker.coordinator.runtime import CoordinatorRecord, ShardContext
from broker.group.group import (
    UNKNOWN_MEMBER_ID,
    ClassicGroup,
    GroupState,
    IllegalStateError,
    JoinCallback,
    JoinResult,
    Member,
    SyncCallback,
    SyncResult,
)
from broker.group.records import (
    group_metadata_key,
    group_metadata_value,
)
from broker.group.shard_types import (
    GroupConfig,
    GroupObserver,
    JoinRequest,
    LeavingMember,
    SyncRequest,
    store_group_error,
)
from wire.errors import ErrorCode
from wire.generated.coordinator.group_metadata_value import (
    GroupMetadataValue,
    GroupMetadataValueMemberMetadata,
)

log = structlog.get_logger(__name__)

_SEP = "\x00"  # timer-key separator: cannot appear in a group or member id on the wire


class ClassicGroupProtocol:
    """JoinGroup/SyncGroup/Heartbeat/LeaveGroup over the groups of one ``__consumer_offsets`` partition."""

    ctx: ShardContext
    config: GroupConfig
    observer: GroupObserver
    groups: dict[str, ClassicGroup]

    # ================================================================ JoinGroup

    def join_group(self, req: JoinRequest, callback: JoinCallback) -> None:
        cfg = self.config
        if not cfg.min_session_timeout_ms <= req.session_timeout_ms <= cfg.max_session_timeout_ms:
            callback(JoinResult(req.member_id, ErrorCode.INVALID_SESSION_TIMEOUT))
            return
        is_unknown = req.member_id == UNKNOWN_MEMBER_ID
        group = self.groups.get(req.group_id)
        if group is None:
            if not is_unknown:
                callback(JoinResult(req.member_id, ErrorCode.UNKNOWN_MEMBER_ID))
                return
            group = ClassicGroup(req.group_id, GroupState.EMPTY, self.ctx.now_ms())
            self.groups[req.group_id] = group
        if not self._accept_joining_member(group, req.member_id):
            group.remove(req.member_id)
            self.ctx.cancel(self._heartbeat_key(group, req.member_id))
            callback(JoinResult(UNKNOWN_MEMBER_ID, ErrorCode.GROUP_MAX_SIZE_REACHED))
        elif is_unknown:
            self._new_member_join(group, req, callback)
        else:
            self._current_member_join(group, req, callback)
        if group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        if group.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.state is GroupState.PREPARING_REBALANCE:
            # Counting members that rejoined lets a shrunk group.max.size shed the last ones.
            return ((group.has(member_id) and group.get(member_id).is_awaiting_join)
                    or group.num_awaiting_join < self.config.max_size)
        return group.has(member_id) or group.size < self.config.max_size

    def _new_member_join(self, group: ClassicGroup, req: JoinRequest, callback: JoinCallback) -> None:
        if group.state is GroupState.DEAD:
            callback(JoinResult(UNKNOWN_MEMBER_ID, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(req.protocol_type, (p for p, _ in req.protocols)):
            callback(JoinResult(UNKNOWN_MEMBER_ID, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        prefix = req.group_instance_id if req.group_instance_id is not None else req.client_id
        new_member_id = f"{prefix}-{self.ctx.random_uuid()}"
        if req.group_instance_id is not None:
            old_member_id = group.current_static_member_id(req.group_instance_id)
            if old_member_id is not None:
                log.info("static_member_rejoined", group_id=group.group_id, instance_id=req.group_instance_id,
                         state=group.state.value, old_member_id=old_member_id, member_id=new_member_id)
                self._update_static_member_and_rebalance(group, old_member_id, new_member_id, req, callback)
            else:
                self._add_member_and_rebalance(group, req, new_member_id, callback)
        elif req.require_known_member_id:
            group.add_pending_member(new_member_id)
            self._schedule_pending_member_expiration(group, new_member_id, req.session_timeout_ms)
            callback(JoinResult(new_member_id, ErrorCode.MEMBER_ID_REQUIRED))
        else:
            self._add_member_and_rebalance(group, req, new_member_id, callback)

    def _current_member_join(self, group: ClassicGroup, req: JoinRequest, callback: JoinCallback) -> None:
        member_id = req.member_id
        if group.state is GroupState.DEAD:
            callback(JoinResult(member_id, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(req.protocol_type, (p for p, _ in req.protocols)):
            callback(JoinResult(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        if group.is_pending_member(member_id):
            if req.group_instance_id is not None:
                raise IllegalStateError(f"static member {req.group_instance_id} cannot be pending")
            self.ctx.cancel(self._pending_key(group, member_id))
            self._add_member_and_rebalance(group, req, member_id, callback)
            return
        error = self._validate_current_member(group, member_id, req.group_instance_id)
        if error is not None:
            callback(JoinResult(member_id, error))
            return
        member = group.get(member_id)
        reason = req.reason or "not provided"
        if group.state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, req, callback, f"member joining during rebalance: {reason}")
        elif group.state is GroupState.COMPLETING_REBALANCE:
            if member.matches(req.protocols):
                # Probably a retry after a lost response: the current generation again.
                callback(self._join_result(group, member_id, with_members=group.is_leader(member_id)))
            else:
                self._update_member_and_rebalance(group, member, req, callback, f"metadata changed: {reason}")
        elif group.state is GroupState.STABLE:
            if group.is_leader(member_id):
                # The leader rejoins to rebalance for changes only it sees (topic metadata).
                self._update_member_and_rebalance(group, member, req, callback, f"leader rejoined: {reason}")
            elif not member.matches(req.protocols):
                self._update_member_and_rebalance(group, member, req, callback, f"metadata changed: {reason}")
            else:
                callback(self._join_result(group, member_id, with_members=False))
        else:
            log.warning("join_in_unexpected_state", group_id=group.group_id, member_id=member_id,
                        state=group.state.value)
            callback(JoinResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID))

    def _join_result(self, group: ClassicGroup, member_id: str, *, with_members: bool,
                     leader_id: str | None = None, skip_assignment: bool = False) -> JoinResult:
        return JoinResult(
            member_id=member_id,
            error=ErrorCode.NONE,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader_id=(group.leader_id if leader_id is None else leader_id) or "",
            skip_assignment=skip_assignment,
            members=group.current_member_metadata() if with_members else (),
        )

    def _add_member_and_rebalance(self, group: ClassicGroup, req: JoinRequest, member_id: str,
                                  callback: JoinCallback) -> None:
        member = Member(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            session_timeout_ms=req.session_timeout_ms,
            protocol_type=req.protocol_type,
            supported_protocols=list(req.protocols),
            is_new=True,
        )
        if group.state is GroupState.PREPARING_REBALANCE and group.generation_id == 0:
            group.new_member_added = True  # lets the initial delay wait for more
        group.add(member, callback)
        # A new member cannot heartbeat until it has a generation; its JoinGroup is bounded instead.
        self._schedule_heartbeat(group, member, self.config.new_member_join_timeout_ms)
        log.info("member_joined", group_id=group.group_id, member_id=member_id,
                 instance_id=req.group_instance_id, client_id=req.client_id, state=group.state.value)
        self._maybe_prepare_rebalance(group, f"adding new member {member_id}: {req.reason or 'not provided'}")

    def _update_member_and_rebalance(self, group: ClassicGroup, member: Member, req: JoinRequest,
                                     callback: JoinCallback, reason: str) -> None:
        group.update_member(member, list(req.protocols), req.rebalance_timeout_ms, req.session_timeout_ms, callback)
        self._maybe_prepare_rebalance(group, reason)

    def _update_static_member_and_rebalance(self, group: ClassicGroup, old_member_id: str, new_member_id: str,
                                            req: JoinRequest, callback: JoinCallback) -> None:
        instance_id = req.group_instance_id
        assert instance_id is not None
        current_leader = group.leader_id
        member = group.replace_static_member(instance_id, old_member_id, new_member_id)
        self.ctx.cancel(self._heartbeat_key(group, old_member_id))
        self._schedule_heartbeat(group, member)
        old_protocols = list(member.supported_protocols)
        old_rebalance_timeout_ms = member.rebalance_timeout_ms
        old_session_timeout_ms = member.session_timeout_ms
        group.update_member(member, list(req.protocols), req.rebalance_timeout_ms, req.session_timeout_ms, callback)
        if group.state is GroupState.STABLE:
            if group.protocol_name == group.select_protocol():
                # Same protocol: only the member id changed. Persist it; no rebalance.
                assignment = {m.member_id: m.assignment for m in group.members.values()}

                def stored(error: ErrorCode) -> None:
                    if error is not ErrorCode.NONE:
                        log.warning("static_member_persist_failed", group_id=group.group_id,
                                    instance_id=instance_id, error=error.name)
                        group.update_member(member, old_protocols, old_rebalance_timeout_ms,
                                            old_session_timeout_ms, None)
                        old = group.replace_static_member(instance_id, new_member_id, old_member_id)
                        self.ctx.cancel(self._heartbeat_key(group, new_member_id))
                        self._schedule_heartbeat(group, old)
                        callback(JoinResult(UNKNOWN_MEMBER_ID, error, group.generation_id, group.protocol_type,
                                            group.protocol_name, current_leader or ""))
                    elif req.support_skip_assignment:
                        # v9+: the (static) leader learns it leads but must not reassign.
                        is_leader = group.is_leader(new_member_id)
                        group.maybe_invoke_join_callback(member, self._join_result(
                            group, new_member_id, with_members=is_leader, skip_assignment=is_leader))
                    else:
                        # Older versions: answer with the old leader id so nobody reassigns.
                        group.maybe_invoke_join_callback(member, self._join_result(
                            group, new_member_id, with_members=False, leader_id=current_leader or ""))

                self._store_group(group, assignment, stored)
            else:
                self._maybe_prepare_rebalance(
                    group, f"static member {instance_id} rejoined with a change of protocol")
        elif group.state is GroupState.COMPLETING_REBALANCE:
            # The leader may already have assigned to the old member id: start over.
            self._prepare_rebalance(group, f"static member {instance_id} rejoined during CompletingRebalance")
        elif group.state is not GroupState.PREPARING_REBALANCE:
            raise IllegalStateError(f"static member {instance_id} rejoined group {group.group_id} "
                                    f"in state {group.state.value}")

    # ================================================================ rebalances

    def _maybe_prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        self._remove_sync_expiration(group)
        initial = group.state is GroupState.EMPTY
        if group.state is not GroupState.COMPLETING_REBALANCE:
            group.rebalance_started_ms = self.ctx.now_ms()  # a restart from Completing continues it
        rebalance_timeout_ms = group.rebalance_timeout_ms()
        group.transition_to(GroupState.PREPARING_REBALANCE, self.ctx.now_ms())
        log.info("group_rebalance_preparing", group_id=group.group_id, generation=group.generation_id,
                 partition=self.ctx.partition, reason=reason)
        if initial:
            delay = self.config.initial_rebalance_delay_ms
            group.initial_join_delay = True
            self._schedule_initial_join(group, delay, max(rebalance_timeout_ms - delay, 0))
        else:
            group.initial_join_delay = False
            self.ctx.schedule(self._join_key(group), rebalance_timeout_ms, lambda: self._on_complete_join(group))
            self._try_complete_join(group)

    def _schedule_initial_join(self, group: ClassicGroup, delay_ms: int, remaining_ms: int) -> None:
        """Kafka's InitialDelayedJoin: wait ``delay_ms``, longer while new members keep coming."""

        def fire() -> None:
            if group.state is not GroupState.PREPARING_REBALANCE:
                return
            if group.new_member_added and remaining_ms != 0:
                group.new_member_added = False
                self._schedule_initial_join(group, min(self.config.initial_rebalance_delay_ms, remaining_ms),
                                            max(remaining_ms - delay_ms, 0))
            else:
                group.initial_join_delay = False
                self._on_complete_join(group)

        self.ctx.schedule(self._join_key(group), delay_ms, fire)

    def _try_complete_join(self, group: ClassicGroup) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE or group.initial_join_delay:
            return
        if group.has_all_members_joined():
            self._on_complete_join(group)

    def _on_complete_join(self, group: ClassicGroup) -> None:
        self.ctx.cancel(self._join_key(group))
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        now = self.ctx.now_ms()
        gone = [m for m in group.not_yet_rejoined_members() if not m.is_static]
        if gone:
            log.info("group_members_removed", group_id=group.group_id, reason="did not rejoin in time",
                     member_ids=[m.member_id for m in gone])
        for member in gone:
            group.maybe_invoke_sync_callback(member, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
            group.remove(member.member_id)
            self.ctx.cancel(self._heartbeat_key(group, member.member_id))
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that have not rejoined are left: wait for them (or their expiry).
            log.error("group_rebalance_stalled", group_id=group.group_id, reason="no members rejoined")
            self.ctx.schedule(self._join_key(group), group.rebalance_timeout_ms(),
                              lambda: self._on_complete_join(group))
            return
        group.init_next_generation(now)
        if not group.members:  # now Empty
            log.info("group_empty", group_id=group.group_id, generation=group.generation_id,
                     partition=self.ctx.partition)

            def stored(error: ErrorCode) -> None:
                if error is not ErrorCode.NONE:
                    # The previous generation stays in the log; harmless for an empty group.
                    log.warning("group_empty_persist_failed", group_id=group.group_id, error=error.name)

            self._store_group(group, {}, stored)
            return
        log.info("group_stabilizing", group_id=group.group_id, generation=group.generation_id,
                 protocol=group.protocol_name, members=group.size, leader=group.leader_id)
        for member in group.members.values():
            group.maybe_invoke_join_callback(
                member, self._join_result(group, member.member_id, with_members=group.is_leader(member.member_id)))
            self._schedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        generation = group.generation_id
        self.ctx.schedule(self._sync_key(group), group.rebalance_timeout_ms(),
                          lambda: self._on_expire_pending_sync(group, generation))

    def _on_expire_pending_sync(self, group: ClassicGroup, generation: int) -> None:
        if generation != group.generation_id:
            return
        if group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        if group.pending_sync_members:
            missing = sorted(group.pending_sync_members)
            for member_id in missing:
                group.remove(member_id)
                self.ctx.cancel(self._heartbeat_key(group, member_id))
            self._prepare_rebalance(group, f"members {missing} did not send SyncGroup in time")

    def _remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            self.ctx.cancel(self._sync_key(group))

    def _remove_sync_expiration(self, group: ClassicGroup) -> None:
        group.pending_sync_members.clear()
        self.ctx.cancel(self._sync_key(group))

    def _reset_and_propagate_assignment_error(self, group: ClassicGroup, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _set_and_propagate_assignment(self, group: ClassicGroup, assignment: dict[str, bytes]) -> None:
        for member in group.members.values():
            member.assignment = assignment.get(member.member_id, b"")
        self._propagate_assignment(group, ErrorCode.NONE)

    def _propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        ok = error is ErrorCode.NONE
        for member in list(group.members.values()):
            result = SyncResult(error, group.protocol_type if ok else None, group.protocol_name if ok else None,
                                member.assignment)
            if group.maybe_invoke_sync_callback(member, result):
                # Expiries that fired while it waited were ignored: restart its session now.
                self._schedule_heartbeat(group, member)

    # ================================================================ SyncGroup

    def sync_group(self, req: SyncRequest, callback: SyncCallback) -> None:
        group = self.groups.get(req.group_id)
        if group is None:
            callback(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
            return
        error = self._validate_sync(group, req)
        if error is not None:
            callback(SyncResult(error))
            return
        if group.state is GroupState.EMPTY:
            callback(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        elif group.state is GroupState.PREPARING_REBALANCE:
            callback(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        elif group.state is GroupState.COMPLETING_REBALANCE:
            member = group.get(req.member_id)
            if member.awaiting_sync is not None:
                member.awaiting_sync(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))  # superseded retry
            member.awaiting_sync = callback
            self._remove_pending_sync_member(group, req.member_id)
            if group.is_leader(req.member_id):
                self._on_leader_assignment(group, req)
        elif group.state is GroupState.STABLE:
            self._remove_pending_sync_member(group, req.member_id)
            member = group.get(req.member_id)
            callback(SyncResult(ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment))
            self._schedule_heartbeat(group, member)
        else:
            raise IllegalStateError(f"SyncGroup for dead group {group.group_id}")

    def _on_leader_assignment(self, group: ClassicGroup, req: SyncRequest) -> None:
        log.info("group_assignment_received", group_id=group.group_id, generation=group.generation_id,
                 leader=req.member_id, members=group.size,
                 static_members=len(group.static_members))
        assignment = dict(req.assignments)
        missing = [m for m in group.members if m not in assignment]
        if missing:
            log.warning("group_assignment_incomplete", group_id=group.group_id, generation=group.generation_id,
                        member_ids=missing)
        for member_id in missing:
            assignment[member_id] = b""
        generation = group.generation_id

        def stored(error: ErrorCode) -> None:
            # Members may have joined meanwhile: only the same generation, still completing, moves on.
            if group.state is GroupState.COMPLETING_REBALANCE and group.generation_id == generation:
                if error is not ErrorCode.NONE:
                    self._reset_and_propagate_assignment_error(group, error)
                    self._maybe_prepare_rebalance(group, f"error {error.name} storing the assignment")
                else:
                    self._set_and_propagate_assignment(group, assignment)
                    now = self.ctx.now_ms()
                    group.transition_to(GroupState.STABLE, now)
                    log.info("group_stable", group_id=group.group_id, generation=generation, members=group.size)
                    self.observer.rebalance_completed(group.group_id, generation, group.size,
                                                      max(now - group.rebalance_started_ms, 0))

        self._store_group(group, assignment, stored)

    def _validate_sync(self, group: ClassicGroup, req: SyncRequest) -> ErrorCode | None:
        if group.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self._validate_current_member(group, req.member_id, req.group_instance_id)
        if error is not None:
            return error
        if req.generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if req.protocol_type is not None and req.protocol_type != group.protocol_type:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if req.protocol_name is not None and req.protocol_name != group.protocol_name:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        return None

    def _store_group(self, group: ClassicGroup, assignment: dict[str, bytes],
                     done: Callable[[ErrorCode], None]) -> None:
        protocol = group.protocol_name
        members = []
        for m in group.members.values():
            if protocol is None:
                raise IllegalStateError(f"non-empty group {group.group_id} has no protocol")
            members.append(GroupMetadataValueMemberMetadata(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout=m.rebalance_timeout_ms,
                session_timeout=m.session_timeout_ms,
                subscription=m.metadata(protocol),
                assignment=assignment[m.member_id],
            ))
        value = GroupMetadataValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation_id,
            protocol=protocol,
            leader=group.leader_id,
            current_state_timestamp=-1 if group.state_timestamp_ms is None else group.state_timestamp_ms,
            members=members,
        )
        record = CoordinatorRecord(group_metadata_key(group.group_id), group_metadata_value(value))
        self.ctx.append([record], lambda result: done(store_group_error(result.error)))

    # ================================================================ Heartbeat / LeaveGroup

    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self._validate_current_member(group, member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.state is GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._schedule_heartbeat(group, group.get(member_id))
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave_group(self, group_id: str, members: list[LeavingMember]) -> tuple[ErrorCode, list[ErrorCode]]:
        """(top-level error, one error per leaving member in request order)."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.NONE, [ErrorCode.UNKNOWN_MEMBER_ID for _ in members]
        if group.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        results = []
        for leaving in members:
            reason = leaving.reason or "not provided"
            if leaving.member_id == UNKNOWN_MEMBER_ID:
                # An administrative removal names the static member by instance id only.
                current = (group.current_static_member_id(leaving.group_instance_id)
                           if leaving.group_instance_id is not None else None)
                if current is None:
                    results.append(ErrorCode.UNKNOWN_MEMBER_ID)
                    continue
                self._remove_current_member(group, current, reason)
                results.append(ErrorCode.NONE)
            elif group.is_pending_member(leaving.member_id):
                group.remove(leaving.member_id)
                self.ctx.cancel(self._pending_key(group, leaving.member_id))
                self._try_complete_join(group)
                log.info("member_left", group_id=group_id, member_id=leaving.member_id, pending=True)
                results.append(ErrorCode.NONE)
            else:
                error = self._validate_current_member(group, leaving.member_id, leaving.group_instance_id)
                if error is None:
                    self._remove_current_member(group, leaving.member_id, reason)
                    results.append(ErrorCode.NONE)
                else:
                    results.append(error)
        return ErrorCode.NONE, results

    def _remove_current_member(self, group: ClassicGroup, member_id: str, reason: str) -> None:
        member = group.get(member_id)
        log.info("member_left", group_id=group.group_id, member_id=member_id,
                 instance_id=member.group_instance_id, reason=reason)
        self._remove_member_and_update_group(group, member, f"member {member_id} left: {reason}")

    def _remove_member_and_update_group(self, group: ClassicGroup, member: Member, reason: str) -> None:
        # A new member may be waiting on its JoinGroup: it learns it must join again.
        group.maybe_invoke_join_callback(member, JoinResult(UNKNOWN_MEMBER_ID, ErrorCode.UNKNOWN_MEMBER_ID))
        group.maybe_invoke_sync_callback(member, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        self.ctx.cancel(self._heartbeat_key(group, member.member_id))
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, reason)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)

    def _validate_current_member(self, group: ClassicGroup, member_id: str,
                                 group_instance_id: str | None) -> ErrorCode | None:
        if group_instance_id is not None:
            current = group.current_static_member_id(group_instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if current != member_id:
                log.info("static_member_fenced", group_id=group.group_id, instance_id=group_instance_id,
                         member_id=member_id, current_member_id=current)
                return ErrorCode.FENCED_INSTANCE_ID
        if not group.has(member_id):
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    # ================================================================ timers

    @staticmethod
    def _heartbeat_key(group: ClassicGroup, member_id: str) -> str:
        return f"heartbeat{_SEP}{group.group_id}{_SEP}{member_id}"

    @staticmethod
    def _pending_key(group: ClassicGroup, member_id: str) -> str:
        return f"pending{_SEP}{group.group_id}{_SEP}{member_id}"

    @staticmethod
    def _join_key(group: ClassicGroup) -> str:
        return f"join{_SEP}{group.group_id}"

    @staticmethod
    def _sync_key(group: ClassicGroup) -> str:
        return f"sync{_SEP}{group.group_id}"

    def _schedule_heartbeat(self, group: ClassicGroup, member: Member, timeout_ms: int | None = None) -> None:
        member_id = member.member_id

        def expired() -> None:
            if group.state is GroupState.DEAD or not group.has(member_id):
                return
            m = group.get(member_id)
            if not m.has_satisfied_heartbeat():
                log.info("member_session_expired", group_id=group.group_id, member_id=member_id,
                         instance_id=m.group_instance_id, state=group.state.value)
                self._remove_member_and_update_group(group, m, f"member {member_id} session expired")

        self.ctx.schedule(self._heartbeat_key(group, member_id),
                          member.session_timeout_ms if timeout_ms is None else timeout_ms, expired)

    def _schedule_pending_member_expiration(self, group: ClassicGroup, member_id: str, timeout_ms: int) -> None:
        def expired() -> None:
            if group.state is not GroupState.DEAD and group.is_pending_member(member_id):
                log.info("pending_member_expired", group_id=group.group_id, member_id=member_id)
                group.remove(member_id)
                self._try_complete_join(group)

        self.ctx.schedule(self._pending_key(group, member_id), timeout_ms, expired)

