"""The active controller: validates metadata changes and writes them as records.

It owns topics, partitions, leadership, ISR, broker registrations and dynamic
configs. Every change is a list of metadata records appended to the quorum;
nothing changes until they are committed and replayed (:mod:`controller.delta`); the
image's publishers then hear of each committed batch once, with what it changed.
Validation mirrors Kafka's ReplicationControlManager and ConfigurationControlManager.

Writes are serialized by one lock and validated against the image as of the
quorum's end, so each sees every earlier write. On a replicated quorum only the
active controller writes: the others raise :class:`NotControllerError`, which
the Kafka APIs answer with NOT_CONTROLLER (41).
"""

from __future__ import annotations

import random
import re
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TypeVar

import structlog
import trio

from config import BrokerConfig, client_metrics, default_config
from config import group as group_configs
from controller.acls import AclError, AclFilter, StandardAcl, matching_ids, validate_new_acl
from controller.delta import MetadataDelta, MetadataPublisher, image_publisher
from controller.elections import UNCLEAN, ElectionOutcome, elect_leaders
from controller.features import FeatureUpdate, bootstrap_records, plan_update
from controller.image import (
    BROKER_RESOURCE,
    CLIENT_METRICS_RESOURCE,
    COORDINATOR_TOPICS,
    GROUP_RESOURCE,
    TOPIC_RESOURCE,
    Endpoint,
    MetadataImage,
)
from controller.partition_budget import PER_REQUEST, PartitionBudget
from controller.placement import assign_rack_aware
from controller.quorum import MetadataQuorum, NotControllerError
from controller.quotas import CLIENT_KEYS, IP, IP_KEYS, QuotaError, check_value, entity_of
from controller.reassignment import ReassignmentOutcome, alter_reassignments
from controller.state import apply_all
from controller.topic_configs import TopicConfigChecker
from controller.topic_creation import settings_and_assignment_error
from wire.errors import ErrorCode
from wire.generated.metadata.rec_000_register_broker_record import (
    RegisterBrokerRecord,
    RegisterBrokerRecordBrokerEndpoint,
)
from wire.generated.metadata.rec_002_topic_record import TopicRecord
from wire.generated.metadata.rec_003_partition_record import PartitionRecord
from wire.generated.metadata.rec_004_config_record import ConfigRecord
from wire.generated.metadata.rec_008_unfence_broker_record import UnfenceBrokerRecord
from wire.generated.metadata.rec_009_remove_topic_record import RemoveTopicRecord
from wire.generated.metadata.rec_014_client_quota_record import (
    ClientQuotaRecord,
    ClientQuotaRecordEntityData,
)
from wire.generated.metadata.rec_015_producer_ids_record import ProducerIdsRecord
from wire.generated.metadata.rec_018_access_control_entry_record import AccessControlEntryRecord
from wire.generated.metadata.rec_019_remove_access_control_entry_record import (
    RemoveAccessControlEntryRecord,
)
from wire.primitives import Message

log = structlog.get_logger(__name__)

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
PRODUCER_ID_BLOCK_SIZE = 1000

_T = TypeVar("_T")

@dataclass(frozen=True, slots=True)
class ControllerSettings:
    num_partitions: int = 1
    default_replication_factor: int = 1
    #: Broker default; a topic's ``unclean.leader.election.enable`` overrides it.
    unclean_leader_election_enable: bool = False
    #: max.partitions.per.request and max.partitions.per.broker (controller/partition_budget.py).
    max_partitions_per_request: int = 10_000
    max_partitions_per_broker: int = 100_000
    #: This node's configuration: new and altered topic settings are validated against its defaults.
    config: BrokerConfig = field(default_factory=default_config)


@dataclass(slots=True)
class CreateTopicResult:
    name: str
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    topic_id: uuid.UUID = field(default_factory=lambda: uuid.UUID(int=0))
    num_partitions: int = -1
    replication_factor: int = -1


@dataclass(slots=True)
class TopicRequest:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    #: partition -> replicas; a request's (partition, replicas) pairs as given, repeats kept
    assignments: dict[int, list[int]] | list[tuple[int, list[int]]] = field(default_factory=dict)
    configs: dict[str, str] = field(default_factory=dict)

    def assignment_pairs(self) -> list[tuple[int, list[int]]]:
        """The manual assignment as (partition, replicas) pairs, in request order."""
        if isinstance(self.assignments, dict):
            return list(self.assignments.items())
        return list(self.assignments)


def validate_topic_name(name: str) -> str | None:
    """Kafka's Topic.validate: an error message, or None."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "Topic name cannot be \".\" or \"..\""
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, topic name: {name}"
    if not _LEGAL_TOPIC.fullmatch(name):
        return f"Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
    return None


class Controller:
    def __init__(
        self,
        node_id: int,
        quorum: MetadataQuorum,
        settings: ControllerSettings,
        rng: random.Random,
    ) -> None:
        self.node_id = node_id
        self.quorum = quorum
        self.settings = settings
        self.topic_configs = TopicConfigChecker(node_id, settings.config)
        self._group_bounds = group_configs.bounds_from(settings.config)
        self.rng = rng
        self.image = MetadataImage()
        self._publishers: list[MetadataPublisher] = []
        #: The image the publishers last heard of: each delta they get starts from it.
        self._published = self.image
        # While this controller's own batch commits, publishers hear of it once, at its end:
        # a CreateTopics of 10,000 partitions is one delta, not 10,000.
        self._holding_images = False
        self._held_records: list[tuple[int, Message]] = []
        self._write_lock = trio.Lock()
        quorum.add_listener(self._on_commit)

    # ------------------------------------------------------------ image

    def replay(self, records: Sequence[tuple[int, Message]]) -> None:
        """Start-up: the journal's records, before anyone listens."""
        self.image = self._published = apply_all(self.image, records)

    def _on_commit(self, records: Sequence[tuple[int, Message]]) -> None:
        if not records:
            return
        if self._holding_images:
            # Applied together when this controller's own batch has committed.
            self._held_records.extend(records)
            return
        delta = MetadataDelta(self.image)
        delta.replay_all(records)
        self.image = delta.apply()
        self._publish(delta)

    def _publish(self, delta: MetadataDelta) -> None:
        image = delta.apply()
        if delta.image is not self._published:
            # A snapshot came between: the publishers hear of everything since their image.
            delta = MetadataDelta.between(self._published, image)
        self._published = image
        for publisher in self._publishers:
            publisher(delta, image)

    def add_metadata_publisher(self, publisher: MetadataPublisher) -> None:
        """``publisher(delta, image)`` hears of each committed batch once (Kafka's MetadataPublisher)."""
        self._publishers.append(publisher)

    def add_image_listener(self, listener: Callable[[MetadataImage], None]) -> None:
        self._publishers.append(image_publisher(listener))

    def reset_image(self, image: MetadataImage) -> None:
        """The quorum replaced the applied state with a snapshot."""
        self.image = image
        self._publish(MetadataDelta.between(self._published, image))

    def require_active(self) -> None:
        if not self.quorum.is_leader():
            raise NotControllerError(f"node {self.node_id} is not the active controller")

    async def _write(self, records: list[Message]) -> None:
        if not records:
            return
        self._holding_images = True
        try:
            await self.quorum.append(records)
        finally:
            self._holding_images = False
            # A snapshot installed meanwhile (reset_image) already holds the earlier ones.
            held = [(offset, record) for offset, record in self._held_records if offset > self.image.offset]
            self._held_records = []
            if held:
                delta = MetadataDelta(self.image)
                delta.replay_all(held)
                self.image = delta.apply()
                self._publish(delta)

    @asynccontextmanager
    async def _writing(self) -> AsyncIterator[None]:
        """The write lock, on the active controller, with a new cluster's first records written.

        Every write waits for the bootstrap records (the features, as Kafka's first activation
        writes them before anything else): a broker registered, or a topic created, on an image
        without them would serve a cluster with no feature levels, and a consumer-protocol
        member would be refused as if group.version were 0.
        """
        async with self._write_lock:
            self.require_active()
            await self._write(list(bootstrap_records(self.image.features)))
            yield

    async def submit(self, build: Callable[[MetadataImage], tuple[_T, list[Message]]]) -> _T:
        """Runs ``build`` on the current image and writes the records it returns, atomically.

        For changes decided outside this class (broker registration and fencing,
        AlterPartition): ``build`` validates against the image and returns its
        result with the records to write.
        """
        async with self._writing():
            result, records = build(self.image)
            await self._write(records)
            return result

    # ------------------------------------------------------------ brokers

    async def bootstrap(self) -> None:
        """Writes the records a brand-new cluster starts with (if not yet written)."""
        async with self._writing():
            pass

    async def update_features(
        self, updates: Sequence[FeatureUpdate], validate_only: bool
    ) -> tuple[ErrorCode, str | None]:
        """UpdateFeatures on the active controller: every update is applied, or none."""
        async with self._writing():
            error, message, records = plan_update(self.image.features, updates)
            if error is ErrorCode.NONE and not validate_only:
                await self._write(list(records))
            return error, message

    async def register_broker(
        self, broker_id: int, endpoints: Sequence[Endpoint], rack: str | None
    ) -> int:
        """Registers (or re-registers) a broker and unfences it; returns its epoch."""
        async with self._writing():
            epoch = self.quorum.end_offset
            reg = RegisterBrokerRecord(
                broker_id=broker_id,
                incarnation_id=uuid.UUID(int=self.rng.getrandbits(128)),
                broker_epoch=epoch,
                end_points=[
                    RegisterBrokerRecordBrokerEndpoint(
                        name=ep.name, host=ep.host, port=ep.port, security_protocol=ep.security_protocol
                    )
                    for ep in endpoints
                ],
                rack=rack,
                fenced=True,
            )
            await self._write([reg, UnfenceBrokerRecord(id=broker_id, epoch=epoch)])
            return epoch

    # ------------------------------------------------------------ topics

    def _assign(self, partitions: int, replication_factor: int, start_partition: int = 0) -> list[list[int]]:
        """Kafka's rack-unaware assignment: round robin from a random start, replicas shifted;
        rack-aware as soon as a live broker has ``broker.rack``."""
        live = self.image.live_brokers()
        if any(b.rack is not None for b in live):
            return assign_rack_aware({b.broker_id: b.rack or "" for b in live}, partitions, replication_factor,
                                     start_partition, self.rng)
        brokers = sorted(b.broker_id for b in live)
        n = len(brokers)
        start = self.rng.randrange(n)
        shift = self.rng.randrange(n)
        out = []
        for p in range(start_partition, start_partition + partitions):
            if p > 0 and p % n == 0:
                shift += 1
            first = (p + start) % n
            replicas = [brokers[first]]
            for j in range(replication_factor - 1):
                replicas.append(brokers[(first + 1 + (shift + j) % (n - 1)) % n] if n > 1 else brokers[first])
            out.append(replicas)
        return out

    def _partition_records(self, topic_id: uuid.UUID, assignment: list[list[int]], first: int) -> list[Message]:
        live = {b.broker_id for b in self.image.live_brokers()}
        records: list[Message] = []
        for i, replicas in enumerate(assignment):
            isr = [r for r in replicas if r in live]
            leader = isr[0] if isr else -1
            records.append(
                PartitionRecord(
                    partition_id=first + i,
                    topic_id=topic_id,
                    replicas=list(replicas),
                    isr=isr,
                    leader=leader,
                    leader_epoch=0,
                    partition_epoch=0,
                )
            )
        return records

    async def create_topics(
        self, requests: Sequence[TopicRequest], validate_only: bool = False
    ) -> list[CreateTopicResult]:
        async with self._writing():
            results: list[CreateTopicResult] = []
            records: list[Message] = []
            seen: set[str] = set()
            budget = self._partition_budget()
            for req in requests:
                result, recs = self._create_topic(req, seen, budget)
                results.append(result)
                if result.error == ErrorCode.NONE and not validate_only:
                    records.extend(recs)
            await self._write(records)
            for r in results:
                if r.error == ErrorCode.NONE:
                    log.info("topic_created" if not validate_only else "topic_validated", topic=r.name,
                             partitions=r.num_partitions, replication_factor=r.replication_factor)
            return results

    def _partition_budget(self) -> PartitionBudget:
        return PartitionBudget(self.image, self.settings.max_partitions_per_request,
                               self.settings.max_partitions_per_broker)

    def _create_topic(
        self, req: TopicRequest, seen: set[str], budget: PartitionBudget
    ) -> tuple[CreateTopicResult, list[Message]]:
        res = CreateTopicResult(req.name)

        def fail(code: ErrorCode, msg: str) -> tuple[CreateTopicResult, list[Message]]:
            res.error, res.message = code, msg
            return res, []

        if validate_topic_name(req.name) is None and self.image.topic(req.name) is None:
            # Kafka's order: a new topic's settings and manual assignment come first.
            refused = settings_and_assignment_error(
                self.image, self.topic_configs, req.configs, req.num_partitions, req.replication_factor,
                req.assignment_pairs())
            if refused is not None:
                return fail(*refused)
        if budget.created >= budget.per_request:  # cheaply, for a request naming a million topics
            return fail(ErrorCode.POLICY_VIOLATION, f"This request would create more than {PER_REQUEST}="
                                                    f"{budget.per_request} partitions.")

        problem = validate_topic_name(req.name)
        if problem:
            return fail(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
        if req.name in seen:
            return fail(ErrorCode.INVALID_REQUEST, f"Create topics request from client contains duplicate topic {req.name}")
        seen.add(req.name)
        if self.image.topic(req.name) is not None:
            return fail(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{req.name}' already exists.")
        canonical = req.name.replace(".", "_")
        for other in self.image.topic_ids:
            if other.replace(".", "_") == canonical:
                return fail(ErrorCode.INVALID_TOPIC_EXCEPTION,
                            f"Topic '{req.name}' collides with existing topic: {other}")
        live = self.image.live_brokers()
        if req.assignments:
            # Checked above (settings_and_assignment_error): consecutive partitions, same replica counts.
            assignment = [replicas for _, replicas in sorted(req.assignment_pairs())]
            rf = len(assignment[0])
            partitions = len(assignment)
        else:
            partitions = self.settings.num_partitions if req.num_partitions == -1 else req.num_partitions
            rf = self.settings.default_replication_factor if req.replication_factor == -1 else req.replication_factor
            if partitions <= 0:
                return fail(ErrorCode.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value.")
            too_many = budget.too_many(partitions)
            if too_many is not None:
                return fail(*too_many)
            if rf <= 0:
                return fail(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0, or -1 to use the default value.")
            if rf > len(live):
                return fail(ErrorCode.INVALID_REPLICATION_FACTOR,
                            f"Unable to replicate the partition {rf} time(s): The target replication factor of {rf} cannot be reached because only {len(live)} broker(s) are registered.")
            assignment = self._assign(partitions, rf)
        over = budget.admit(assignment, internal=req.name in COORDINATOR_TOPICS)
        if over is not None:
            return fail(*over)
        topic_id = uuid.UUID(int=self.rng.getrandbits(128), version=4)
        records: list[Message] = [TopicRecord(name=req.name, topic_id=topic_id)]
        records += self._partition_records(topic_id, assignment, 0)
        for key, value in sorted(req.configs.items()):
            records.append(ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name=req.name, name=key, value=value))
        res.topic_id = topic_id
        res.num_partitions = partitions
        res.replication_factor = rf
        return res, records

    async def delete_topics(self, names: Sequence[str]) -> dict[str, ErrorCode]:
        async with self._writing():
            out: dict[str, ErrorCode] = {}
            records: list[Message] = []
            for name in names:
                topic = self.image.topic(name)
                if topic is None:
                    out[name] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                if name in out:
                    continue
                out[name] = ErrorCode.NONE
                records.append(RemoveTopicRecord(topic_id=topic.topic_id))
            await self._write(records)
            for name, code in out.items():
                if code == ErrorCode.NONE:
                    log.info("topic_deleted", topic=name)
            return out

    async def elect_leaders(
        self, election_type: int, partitions: Sequence[tuple[str, int]] | None
    ) -> dict[tuple[str, int], ElectionOutcome]:
        """Preferred or unclean elections (ElectLeaders; ``None`` = every partition)."""
        outcomes = await self.submit(lambda image: elect_leaders(image, election_type, partitions))
        elected = [f"{t}-{p}" for (t, p), o in outcomes.items() if o.error == ErrorCode.NONE]
        if elected:
            log.info("leaders_elected", election_type="unclean" if election_type == UNCLEAN else "preferred",
                     partitions=elected)
        return outcomes

    async def alter_reassignments(
        self, requests: Sequence[tuple[str, int, Sequence[int] | None]]
    ) -> dict[tuple[str, int], ReassignmentOutcome]:
        """AlterPartitionReassignments: start, replace or cancel (target None) reassignments."""
        outcomes = await self.submit(lambda image: alter_reassignments(image, requests))
        for (topic, index), outcome in outcomes.items():
            if outcome.error == ErrorCode.NONE:
                target = next(t for n, i, t in requests if (n, i) == (topic, index))
                log.info("partition_reassignment_requested", topic=topic, partition=index,
                         target=None if target is None else list(target))
        return outcomes

    async def create_partitions(
        self, changes: Sequence[tuple[str, int, list[list[int]] | None]], validate_only: bool
    ) -> dict[str, tuple[ErrorCode, str | None]]:
        async with self._writing():
            out: dict[str, tuple[ErrorCode, str | None]] = {}
            records: list[Message] = []
            budget = self._partition_budget()
            for name, count, assignments in changes:
                topic = self.image.topic(name)
                if topic is None:
                    out[name] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
                    continue
                current = len(topic.partitions)
                if count < current:
                    out[name] = (ErrorCode.INVALID_PARTITIONS,
                                 f"Topic currently has {current} partitions, which is higher than the requested {count}.")
                    continue
                if count == current:
                    out[name] = (ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partitions.")
                    continue
                too_many = budget.too_many(count - current)
                if too_many is not None:
                    out[name] = too_many
                    continue
                rf = len(topic.partitions[0].replicas) if topic.partitions else 1
                if assignments is not None:
                    if len(assignments) != count - current:
                        out[name] = (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                     f"Attempted to add {count - current} additional partition(s), but only {len(assignments)} assignment(s) were specified.")
                        continue
                    if any(r not in self.image.brokers for a in assignments for r in a):
                        out[name] = (ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Replica assignment names a broker that is not registered")
                        continue
                    assignment = [list(a) for a in assignments]
                else:
                    if rf > len(self.image.live_brokers()):
                        out[name] = (ErrorCode.INVALID_REPLICATION_FACTOR, "Not enough live brokers for the topic's replication factor")
                        continue
                    assignment = self._assign(count - current, rf, current)
                over = budget.admit(assignment)
                if over is not None:
                    out[name] = over
                    continue
                out[name] = (ErrorCode.NONE, None)
                if not validate_only:
                    records += self._partition_records(topic.topic_id, assignment, current)
            await self._write(records)
            return out

    async def alter_configs(
        self,
        resource_type: int,
        resource_name: str,
        changes: Mapping[str, str | None],
        replace_all: bool,
        validate_only: bool,
    ) -> tuple[ErrorCode, str | None]:
        """Sets (value) or deletes (None) configs of a topic, broker, group or client metrics subscription.

        ``replace_all`` is the legacy AlterConfigs semantics: every config not named
        returns to its default.
        """
        async with self._writing():
            if resource_type == TOPIC_RESOURCE:
                if not resource_name:
                    return ErrorCode.INVALID_REQUEST, "Default topic resources are not allowed."
                problem = validate_topic_name(resource_name)
                if problem is not None:
                    return ErrorCode.INVALID_TOPIC_EXCEPTION, problem
                current = dict(self.image.topic_config(resource_name))
            elif resource_type == BROKER_RESOURCE:
                if resource_name not in ("", str(self.node_id)) and not (
                    resource_name.isdigit() and int(resource_name) in self.image.brokers
                ):
                    return ErrorCode.INVALID_REQUEST, f"Unexpected broker id {resource_name}"
                current = dict(self.image.broker_config(resource_name))
            elif resource_type == GROUP_RESOURCE:
                if not resource_name:
                    return ErrorCode.INVALID_REQUEST, "Group name must not be empty"
                current = dict(self.image.group_config(resource_name))
            elif resource_type == CLIENT_METRICS_RESOURCE:
                current = dict(self.image.configs.get((CLIENT_METRICS_RESOURCE, resource_name), {}))
            else:
                return ErrorCode.INVALID_REQUEST, f"Unsupported resource type {resource_type}"
            target = {} if replace_all else dict(current)
            for key, value in changes.items():
                if value is None:
                    target.pop(key, None)
                else:
                    target[key] = value
            if resource_type == TOPIC_RESOURCE:
                # Kafka's controller: the settings are validated first, then the topic's existence.
                bad = self.topic_configs.error(self.image, target)
                if bad is not None:
                    return ErrorCode.INVALID_CONFIG, bad
                if self.image.topic(resource_name) is None:
                    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{resource_name}' does not exist."
            if resource_type == GROUP_RESOURCE and (bad := group_configs.error(target, self._group_bounds)) is not None:
                return ErrorCode.INVALID_CONFIG, bad
            if resource_type == CLIENT_METRICS_RESOURCE:
                try:
                    client_metrics.validate(resource_name, target)
                except client_metrics.ClientMetricsConfigError as ex:
                    return (ErrorCode.INVALID_REQUEST if ex.invalid_request else ErrorCode.INVALID_CONFIG), str(ex)
            if validate_only:
                return ErrorCode.NONE, None
            records: list[Message] = []
            for key in sorted(set(current) | set(target)):
                if current.get(key) != target.get(key):
                    records.append(ConfigRecord(resource_type=resource_type, resource_name=resource_name,
                                                name=key, value=target.get(key)))
            await self._write(records)
            return ErrorCode.NONE, None

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> tuple[int, int]:
        """Hands out the next block of producer ids: (first id, block size)."""
        async with self._writing():
            first = self.image.next_producer_id
            await self._write([ProducerIdsRecord(broker_id=broker_id, broker_epoch=broker_epoch,
                                                 next_producer_id=first + PRODUCER_ID_BLOCK_SIZE)])
            return first, PRODUCER_ID_BLOCK_SIZE

    # ------------------------------------------------------------ ACLs

    async def create_acls(self, acls: Sequence[StandardAcl]) -> list[tuple[ErrorCode, str | None]]:
        """Kafka's AclControlManager.createAcls: each valid new ACL becomes a record;
        an ACL that exists already succeeds without one; an invalid one is INVALID_REQUEST."""
        async with self._writing():
            existing = set(self.image.acls.values())
            results: list[tuple[ErrorCode, str | None]] = []
            records: list[Message] = []
            for acl in acls:
                try:
                    validate_new_acl(acl)
                except AclError as ex:
                    results.append((ErrorCode.INVALID_REQUEST, str(ex)))
                    continue
                results.append((ErrorCode.NONE, None))
                if acl in existing:
                    continue
                existing.add(acl)
                records.append(AccessControlEntryRecord(
                    id=uuid.UUID(int=self.rng.getrandbits(128)), resource_type=acl.resource_type,
                    resource_name=acl.resource_name, pattern_type=acl.pattern_type, principal=acl.principal,
                    host=acl.host, operation=acl.operation, permission_type=acl.permission))
            await self._write(records)
            return results

    async def delete_acls(
        self, filters: Sequence[AclFilter]
    ) -> list[tuple[ErrorCode, str | None, list[StandardAcl]]]:
        """Kafka's AclControlManager.deleteAcls: per filter, the ACLs it matched (each removed
        once even when several filters match it); a filter with UNKNOWN parts is INVALID_REQUEST."""
        async with self._writing():
            acls = self.image.acls
            removed: set[uuid.UUID] = set()
            results: list[tuple[ErrorCode, str | None, list[StandardAcl]]] = []
            records: list[Message] = []
            for flt in filters:
                try:
                    flt.validate()
                except AclError as ex:
                    results.append((ErrorCode.INVALID_REQUEST, str(ex), []))
                    continue
                ids = matching_ids(acls, flt)
                for acl_id in ids:
                    if acl_id not in removed:
                        removed.add(acl_id)
                        records.append(RemoveAccessControlEntryRecord(id=acl_id))
                results.append((ErrorCode.NONE, None, [acls[i] for i in ids]))
            await self._write(records)
            return results

    # ------------------------------------------------------------ client quotas

    async def alter_client_quotas(
        self, entries: Sequence[tuple[Sequence[tuple[str, str | None]], Mapping[str, float | None]]],
        validate_only: bool,
    ) -> list[tuple[ErrorCode, str | None]]:
        """Kafka's ClientQuotaControlManager.alterClientQuotas: per entry, set (value) or remove
        (None) quota keys of one entity; an invalid entry is INVALID_REQUEST and changes nothing."""
        async with self._writing():
            results: list[tuple[ErrorCode, str | None]] = []
            records: list[Message] = []
            for pairs, ops in entries:
                try:
                    entity = entity_of(pairs)
                    for key, value in ops.items():
                        if value is not None:
                            check_value(entity, key, value)
                        elif key not in (IP_KEYS if entity[0][0] == IP else CLIENT_KEYS):
                            raise QuotaError(f"Invalid configuration key {key}")
                except QuotaError as ex:
                    results.append((ErrorCode.INVALID_REQUEST, str(ex)))
                    continue
                results.append((ErrorCode.NONE, None))
                current = self.image.client_quotas.get(entity, {})
                for key, value in ops.items():
                    if (value is None and key not in current) or (value is not None and current.get(key) == value):
                        continue
                    records.append(ClientQuotaRecord(
                        entity=[ClientQuotaRecordEntityData(entity_type=t, entity_name=n) for t, n in entity],
                        key=key, value=0.0 if value is None else value, remove=value is None))
            if not validate_only:
                await self._write(records)
            return results
