"""The active controller's side of the broker lifecycle: registration, heartbeats,
fencing, leader elections and ISR changes.

Mirrors Kafka's ClusterControlManager and BrokerHeartbeatManager (KIP-631) and
the election parts of ReplicationControlManager:

- A broker registers (BrokerRegistration) and gets as its epoch the offset of
  its RegisterBrokerRecord; it starts fenced.
- Heartbeats (BrokerHeartbeat) keep its session. A fenced broker whose metadata
  offset has reached its registration is unfenced; leaderless partitions it is
  in sync for get it as leader.
- Sessions live in the active controller's memory, not in the log: a broker
  without a heartbeat for ``broker.session.timeout.ms`` is fenced, and a newly
  active controller starts every broker's session afresh. Time the controller
  itself did not run (its session check came late) is not counted against them.
- Fencing a broker removes it from ISRs (never emptying one) and moves the
  leadership of its partitions to the first live replica in the ISR; with
  ``unclean.leader.election.enable`` false and no live ISR member, the partition
  is left without a leader (-1) rather than given to an out-of-sync replica.
- AlterPartition lets a partition's leader change its ISR, guarded by leader
  and partition epochs.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import structlog
import trio

from controller.image import (
    NO_CHANGE,
    NO_LEADER,
    TOPIC_RESOURCE,
    BrokerImage,
    Endpoint,
    MetadataImage,
    PartitionImage,
    TopicImage,
)
from controller.quorum import NotControllerError, QuorumTimeoutError
from controller.reassignment import is_reassigning, settle
from controller.service import Controller
from controller.state import apply
from wire.errors import ErrorCode
from wire.generated.metadata.rec_000_register_broker_record import (
    RegisterBrokerRecord,
    RegisterBrokerRecordBrokerEndpoint,
)
from wire.generated.metadata.rec_005_partition_change_record import PartitionChangeRecord
from wire.generated.metadata.rec_007_fence_broker_record import FenceBrokerRecord
from wire.generated.metadata.rec_008_unfence_broker_record import UnfenceBrokerRecord
from wire.primitives import Message

log = structlog.get_logger(__name__)

#: How often the active controller looks for expired sessions (at most).
SESSION_CHECK_INTERVAL_S = 0.5
#: A session check this late means the controller itself did not run meanwhile.
STALL_CREDIT_MIN_S = 0.25


@dataclass(frozen=True, slots=True)
class Registration:
    broker_id: int
    cluster_id: str
    incarnation_id: uuid.UUID
    endpoints: tuple[Endpoint, ...]
    rack: str | None


@dataclass(frozen=True, slots=True)
class HeartbeatReply:
    error: ErrorCode = ErrorCode.NONE
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shut_down: bool = False


@dataclass(frozen=True, slots=True)
class IsrChange:
    """One partition of an AlterPartition request."""

    topic_id: uuid.UUID | None
    topic_name: str | None
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]
    #: v3+: the broker epoch of each new ISR member.
    isr_broker_epochs: tuple[int, ...] | None = None
    leader_recovery_state: int = 0


@dataclass(frozen=True, slots=True)
class IsrResult:
    change: IsrChange
    error: ErrorCode
    leader: int = NO_LEADER
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    partition_epoch: int = -1


def unclean_allowed(image: MetadataImage, topic: TopicImage, default: bool) -> bool:
    value = image.configs.get((TOPIC_RESOURCE, topic.name), {}).get("unclean.leader.election.enable")
    return default if value is None else value.strip().lower() == "true"


def _live(image: MetadataImage, excluding: int | None = None) -> set[int]:
    return image.serving_broker_ids() - {excluding}


def _elect(part: PartitionImage, isr: Sequence[int], live: set[int], unclean: bool) -> tuple[int, tuple[int, ...]]:
    """Leader and ISR for ``part``: the first live ISR member in replica order; else, if unclean
    elections are allowed, the first live replica (alone in the ISR); else no leader."""
    for replica in part.replicas:
        if replica in isr and replica in live:
            return replica, tuple(isr)
    if unclean:
        for replica in part.replicas:
            if replica in live:
                return replica, (replica,)
    return NO_LEADER, tuple(isr)


def _change(topic: TopicImage, part: PartitionImage, leader: int, isr: tuple[int, ...]) -> PartitionChangeRecord | None:
    if leader == part.leader and isr == part.isr:
        return None
    return PartitionChangeRecord(
        topic_id=topic.topic_id,
        partition_id=part.partition,
        isr=list(isr) if isr != part.isr else None,
        leader=leader if leader != part.leader else NO_CHANGE,
    )


def fence_changes(image: MetadataImage, broker_id: int, unclean_default: bool) -> list[Message]:
    """Partition changes for taking ``broker_id`` out of service (Kafka's handleBrokerFenced)."""
    live = _live(image, excluding=broker_id)
    out: list[Message] = []
    for topic in sorted(image.topics_by_id.values(), key=lambda t: t.name):
        for index in sorted(topic.partitions):
            part = topic.partitions[index]
            if broker_id not in part.isr and part.leader != broker_id:
                continue
            # Never an empty ISR: the last member stays, so it can lead again when it is back.
            isr = tuple(r for r in part.isr if r != broker_id) or part.isr
            leader = part.leader
            if leader == broker_id or leader not in live:
                leader, isr = _elect(part, isr, live, unclean_allowed(image, topic, unclean_default))
            record = _change(topic, part, leader, isr)
            if record is not None:
                out.append(record)
    return out


def unfence_changes(image: MetadataImage, broker_id: int, unclean_default: bool) -> list[Message]:
    """Leaders for partitions that have none and can have ``broker_id`` (handleBrokerUnfenced)."""
    live = _live(image) | {broker_id}
    out: list[Message] = []
    for topic in sorted(image.topics_by_id.values(), key=lambda t: t.name):
        for index in sorted(topic.partitions):
            part = topic.partitions[index]
            if broker_id not in part.replicas or part.leader in live:
                continue
            leader, isr = _elect(part, part.isr, live, unclean_allowed(image, topic, unclean_default))
            record = _change(topic, part, leader, isr)
            if record is not None:
                out.append(record)
    return out


class ClusterControl:
    """Broker registrations, sessions and elections on the active controller."""

    def __init__(
        self,
        controller: Controller,
        cluster_id: str,
        session_timeout_s: float,
        clock: Callable[[], float] = trio.current_time,
        colocated: bool = False,
    ) -> None:
        self.controller = controller
        self.cluster_id = cluster_id
        self.session_timeout_s = session_timeout_s
        self.clock = clock
        #: The quorum of one of a single node: this controller and the only broker it can
        #: have start and stop together, so a registration found in the log belongs to an
        #: incarnation that stopped with the previous controller.
        self.colocated = colocated
        self._last_contact: dict[int, float] = {}
        self._activated = trio.Event()
        self._needs_bootstrap = False

    @property
    def unclean_default(self) -> bool:
        return self.controller.settings.unclean_leader_election_enable

    # ------------------------------------------------------------ activation and sessions

    def activate(self, term: int) -> None:
        """This node just became the active controller: every broker gets a fresh session."""
        now = self.clock()
        # Colocated, the brokers of the log stopped with the previous controller: no session is live.
        self._last_contact = {} if self.colocated else {
            broker_id: now for broker_id in self.controller.image.brokers}
        self._needs_bootstrap = True
        self._activated.set()
        self._activated = trio.Event()

    def _session_alive(self, broker_id: int) -> bool:
        last = self._last_contact.get(broker_id)
        return last is not None and self.clock() - last < self.session_timeout_s

    async def run(self) -> None:
        """Fences brokers whose sessions expire, while this node is the active controller."""
        interval = min(SESSION_CHECK_INTERVAL_S, self.session_timeout_s / 4)
        checked = self.clock()
        while True:
            await trio.sleep(interval)
            now = self.clock()
            self.credit_stall(now - checked - interval)
            checked = now
            if not self.controller.quorum.is_leader():
                continue
            try:
                if self._needs_bootstrap:
                    await self.controller.bootstrap()
                    self._needs_bootstrap = False
                await self._expire_sessions()
            except (NotControllerError, QuorumTimeoutError) as ex:
                log.info("controller_task_deferred", reason=str(ex))

    def credit_stall(self, late_s: float) -> None:
        """The session check ran ``late_s`` late: this process did not run (a stalled event loop,
        a paused or starved process). Heartbeats that arrived meanwhile still wait in the sockets,
        unread, so that silence is not the brokers': their sessions are extended by it."""
        if late_s < STALL_CREDIT_MIN_S:
            return  # scheduling jitter
        for broker_id in self._last_contact:
            self._last_contact[broker_id] += late_s
        log.info("controller_stall_credited", stalled_s=round(late_s, 3))

    async def _expire_sessions(self) -> None:
        now = self.clock()
        for broker in sorted(self.controller.image.brokers.values(), key=lambda b: b.broker_id):
            if broker.fenced:
                continue
            if self.colocated and broker.broker_id not in self._last_contact:
                continue  # its previous incarnation, replaced when the broker registers
            last = self._last_contact.setdefault(broker.broker_id, now)
            if now - last >= self.session_timeout_s:
                log.warning("broker_session_expired", broker_id=broker.broker_id, epoch=broker.epoch,
                            silent_s=round(now - last, 3))
                await self._fence(broker.broker_id, broker.epoch, reason="session expired")

    async def _fence(self, broker_id: int, epoch: int, reason: str) -> bool:
        def build(image: MetadataImage) -> tuple[bool, list[Message]]:
            broker = image.brokers.get(broker_id)
            if broker is None or broker.epoch != epoch or broker.fenced:
                return False, []
            changes = fence_changes(image, broker_id, self.unclean_default)
            return True, [FenceBrokerRecord(id=broker_id, epoch=epoch), *changes]

        fenced = await self.controller.submit(build)
        if fenced:
            log.info("broker_fenced", broker_id=broker_id, epoch=epoch, reason=reason)
        return fenced

    async def _unfence(self, broker_id: int, epoch: int) -> bool:
        def build(image: MetadataImage) -> tuple[bool, list[Message]]:
            broker = image.brokers.get(broker_id)
            if broker is None or broker.epoch != epoch or not broker.fenced:
                return False, []
            unfenced = image.brokers[broker_id]
            changes = unfence_changes(_with_broker(image, unfenced, fenced=False), broker_id, self.unclean_default)
            return True, [UnfenceBrokerRecord(id=broker_id, epoch=epoch), *changes]

        unfenced = await self.controller.submit(build)
        if unfenced:
            log.info("broker_unfenced", broker_id=broker_id, epoch=epoch)
        return unfenced

    # ------------------------------------------------------------ BrokerRegistration

    async def register(self, reg: Registration) -> tuple[ErrorCode, int]:
        """(error, broker epoch) for a BrokerRegistration request."""
        self.controller.require_active()
        if reg.cluster_id != self.cluster_id:
            return ErrorCode.INCONSISTENT_CLUSTER_ID, -1

        def build(image: MetadataImage) -> tuple[tuple[ErrorCode, int], list[Message]]:
            existing = image.brokers.get(reg.broker_id)
            if existing is not None and existing.incarnation_id == reg.incarnation_id:
                # A retry of a registration that already committed.
                return (ErrorCode.NONE, existing.epoch), []
            if (existing is not None and not existing.fenced and not self.colocated
                    and self._session_alive(reg.broker_id)):
                return (ErrorCode.DUPLICATE_BROKER_REGISTRATION, -1), []
            epoch = image.offset + 1
            records: list[Message] = [RegisterBrokerRecord(
                broker_id=reg.broker_id,
                incarnation_id=reg.incarnation_id,
                broker_epoch=epoch,
                end_points=[
                    RegisterBrokerRecordBrokerEndpoint(name=e.name, host=e.host, port=e.port,
                                                       security_protocol=e.security_protocol)
                    for e in reg.endpoints
                ],
                rack=reg.rack,
                fenced=True,
            )]
            if existing is not None and not existing.fenced and not self.colocated:
                # The previous incarnation stopped without telling us: fence it as a dead broker.
                # (Colocated, it is this broker restarting with its controller: no other replica
                # could take its leaderships over, so they stay at their epochs until it unfences.)
                records += fence_changes(image, reg.broker_id, self.unclean_default)
            return (ErrorCode.NONE, epoch), records

        code, epoch = await self.controller.submit(build)
        if code == ErrorCode.NONE:
            self._last_contact[reg.broker_id] = self.clock()
            log.info("broker_registered", broker_id=reg.broker_id, epoch=epoch,
                     incarnation_id=str(reg.incarnation_id))
        return code, epoch

    # ------------------------------------------------------------ BrokerHeartbeat

    async def heartbeat(
        self,
        broker_id: int,
        broker_epoch: int,
        current_metadata_offset: int,
        want_fence: bool,
        want_shut_down: bool,
    ) -> HeartbeatReply:
        self.controller.require_active()
        broker = self.controller.image.brokers.get(broker_id)
        if broker is None:
            return HeartbeatReply(ErrorCode.BROKER_ID_NOT_REGISTERED)
        if broker.epoch != broker_epoch:
            return HeartbeatReply(ErrorCode.STALE_BROKER_EPOCH)
        self._last_contact[broker_id] = self.clock()
        caught_up = current_metadata_offset >= broker.epoch
        if want_shut_down:
            # Controlled shutdown: leadership moves away now, not after the session expires.
            await self._fence(broker_id, broker_epoch, reason="controlled shutdown")
            return HeartbeatReply(is_caught_up=caught_up, is_fenced=True, should_shut_down=True)
        if want_fence and not broker.fenced:
            await self._fence(broker_id, broker_epoch, reason="asked by the broker")
        elif broker.fenced and caught_up and not want_fence:
            await self._unfence(broker_id, broker_epoch)
        now = self.controller.image.brokers.get(broker_id)
        fenced = now is None or now.fenced
        return HeartbeatReply(is_caught_up=caught_up, is_fenced=fenced)

    # ------------------------------------------------------------ AllocateProducerIds

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> tuple[ErrorCode, int, int]:
        self.controller.require_active()
        broker = self.controller.image.brokers.get(broker_id)
        if broker is None:
            return ErrorCode.BROKER_ID_NOT_REGISTERED, -1, 0
        if broker.epoch != broker_epoch:
            return ErrorCode.STALE_BROKER_EPOCH, -1, 0
        first, size = await self.controller.allocate_producer_ids(broker_id, broker_epoch)
        return ErrorCode.NONE, first, size

    # ------------------------------------------------------------ AlterPartition

    async def alter_partition(
        self, broker_id: int, broker_epoch: int, changes: Sequence[IsrChange], version: int
    ) -> tuple[ErrorCode, list[IsrResult]]:
        self.controller.require_active()

        def build(image: MetadataImage) -> tuple[tuple[ErrorCode, list[IsrResult]], list[Message]]:
            broker = image.brokers.get(broker_id)
            if broker is None or broker.epoch != broker_epoch:
                return (ErrorCode.STALE_BROKER_EPOCH, []), []
            results: list[IsrResult] = []
            records: list[Message] = []
            for change in changes:
                result, record = self._alter_one(image, broker_id, change, version)
                results.append(result)
                if record is not None:
                    records.append(record)
            return (ErrorCode.NONE, results), records

        return await self.controller.submit(build)

    def _alter_one(
        self, image: MetadataImage, broker_id: int, change: IsrChange, version: int
    ) -> tuple[IsrResult, PartitionChangeRecord | None]:
        topic = (image.topics_by_id.get(change.topic_id) if change.topic_id is not None
                 else image.topic(change.topic_name or ""))
        if topic is None:
            code = ErrorCode.UNKNOWN_TOPIC_ID if change.topic_id is not None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            return IsrResult(change, code), None
        part = topic.partitions.get(change.partition)
        if part is None:
            return IsrResult(change, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), None

        def fail(code: ErrorCode) -> tuple[IsrResult, None]:
            return IsrResult(change, code), None

        if change.leader_epoch < part.leader_epoch:
            return fail(ErrorCode.FENCED_LEADER_EPOCH)
        if change.leader_epoch > part.leader_epoch:
            # The requester knows a newer epoch than this controller: it is not the active one.
            return fail(ErrorCode.NOT_CONTROLLER)
        if part.leader != broker_id:
            return fail(ErrorCode.INVALID_REQUEST)
        if change.partition_epoch != part.partition_epoch:
            return fail(ErrorCode.INVALID_UPDATE_VERSION)
        isr = change.new_isr
        if broker_id not in isr or len(set(isr)) != len(isr) or any(r not in part.replicas for r in isr):
            return fail(ErrorCode.INVALID_REQUEST)
        if change.leader_recovery_state == 1 and len(isr) > 1:
            return fail(ErrorCode.INVALID_REQUEST)
        epochs = change.isr_broker_epochs
        for i, replica in enumerate(isr):
            member = image.brokers.get(replica)
            stale_epoch = epochs is not None and epochs[i] != -1 and member is not None and member.epoch != epochs[i]
            if member is None or member.fenced or member.in_controlled_shutdown or stale_epoch:
                return fail(ErrorCode.INELIGIBLE_REPLICA if version >= 1 else ErrorCode.OPERATION_NOT_ATTEMPTED)
        if isr == part.isr:
            return IsrResult(change, ErrorCode.NONE, part.leader, part.leader_epoch, part.isr, part.partition_epoch), None
        record = PartitionChangeRecord(topic_id=topic.topic_id, partition_id=part.partition, isr=list(isr))
        if not is_reassigning(part):
            # The record's outcome, as replaying it makes it: no image is built per partition (an
            # AlterPartition of 30,000 partitions built 60,000 images of every topic).
            after = replace(part, isr=tuple(isr), partition_epoch=part.partition_epoch + 1)
            log.info("partition_isr_changed", topic=topic.name, partition=part.partition, isr=list(after.isr),
                     partition_epoch=after.partition_epoch)
            return IsrResult(change, ErrorCode.NONE, after.leader, after.leader_epoch, after.isr,
                             after.partition_epoch), record
        # A reassignment whose target replicas are now all in sync completes in the same record.
        widened = apply(image, record, image.offset)
        settled = settle(widened, widened.topics_by_id[topic.topic_id],
                         widened.topics_by_id[topic.topic_id].partitions[part.partition])
        if settled is not None:
            settled.isr = settled.isr if settled.isr is not None else list(isr)
            record = settled
            log.info("partition_reassignment_completed", topic=topic.name, partition=part.partition,
                     replicas=record.replicas)
        after = apply(image, record, image.offset).topics_by_id[topic.topic_id].partitions[part.partition]
        log.info("partition_isr_changed", topic=topic.name, partition=part.partition, isr=list(after.isr),
                 partition_epoch=after.partition_epoch)
        return IsrResult(change, ErrorCode.NONE, after.leader, after.leader_epoch, after.isr,
                         after.partition_epoch), record


def _with_broker(image: MetadataImage, broker: BrokerImage, fenced: bool) -> MetadataImage:
    brokers = dict(image.brokers)
    brokers[broker.broker_id] = replace(broker, fenced=fenced)
    return replace(image, brokers=brokers)

