"""Partition reassignment (KIP-455), as pure functions of the metadata image.

A reassignment moves a partition onto a target replica set. The controller first
widens the replica set to target + the old replicas not in it, recording which are
being added and which removed (``adding_replicas``, ``removing_replicas``): the added
brokers create their replica and fetch from the leader like any follower. Once every
target replica is in the ISR (the leader reports it through AlterPartition) the
controller writes the final state: replicas = target, the removed brokers leave the ISR,
and if the leader itself was removed the first in-sync target replica takes over. A
broker drops its copy when it stops being a replica.

As Kafka's ReplicationControlManager: a new target for a partition being reassigned
replaces the old one (from the replicas before the first one started); a null target
cancels (back to the original replicas; NO_REASSIGNMENT_IN_PROGRESS when there is none);
targets must be non-empty, without duplicates, and name registered brokers
(INVALID_REPLICA_ASSIGNMENT).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from controller.image import NO_CHANGE, NO_LEADER, MetadataImage, PartitionImage, TopicImage
from controller.state import apply
from wire.errors import ErrorCode
from wire.generated.metadata.rec_005_partition_change_record import PartitionChangeRecord
from wire.primitives import Message


@dataclass(frozen=True, slots=True)
class ReassignmentOutcome:
    error: ErrorCode
    message: str | None = None


@dataclass(frozen=True, slots=True)
class OngoingReassignment:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


def original_replicas(part: PartitionImage) -> tuple[int, ...]:
    """The replicas before the ongoing reassignment (or the replicas, without one)."""
    return tuple(r for r in part.replicas if r not in part.adding_replicas)


def target_replicas(part: PartitionImage) -> tuple[int, ...]:
    return tuple(r for r in part.replicas if r not in part.removing_replicas)


def is_reassigning(part: PartitionImage) -> bool:
    return bool(part.adding_replicas or part.removing_replicas)


def _finish(image: MetadataImage, topic: TopicImage, part: PartitionImage,
            replicas: tuple[int, ...]) -> PartitionChangeRecord:
    """The record that settles ``part`` on ``replicas`` (completion or cancellation)."""
    isr = tuple(r for r in part.isr if r in replicas)
    leader = part.leader
    if leader not in replicas:
        live = image.serving_broker_ids()
        leader = next((r for r in replicas if r in isr and r in live), NO_LEADER)
    if not isr:
        isr = part.isr  # never an empty ISR: keep who has the data until a replica catches up
    return PartitionChangeRecord(
        topic_id=topic.topic_id,
        partition_id=part.partition,
        replicas=list(replicas),
        isr=list(isr) if isr != part.isr else None,
        leader=leader if leader != part.leader else NO_CHANGE,
        adding_replicas=[],
        removing_replicas=[],
    )


def settle(image: MetadataImage, topic: TopicImage, part: PartitionImage) -> PartitionChangeRecord | None:
    """The completion record when every target replica is in the ISR, else None."""
    if not is_reassigning(part):
        return None
    target = target_replicas(part)
    if not set(target) <= set(part.isr):
        return None
    return _finish(image, topic, part, target)


def alter_reassignments(
    image: MetadataImage, requests: Sequence[tuple[str, int, Sequence[int] | None]]
) -> tuple[dict[tuple[str, int], ReassignmentOutcome], list[Message]]:
    """Starts, replaces or cancels (target None) reassignments; outcome per partition."""
    outcomes: dict[tuple[str, int], ReassignmentOutcome] = {}
    records: list[Message] = []
    for name, index, target in requests:
        key = (name, index)
        topic = image.topic(name)
        part = topic.partitions.get(index) if topic is not None else None
        if topic is None or part is None:
            outcomes[key] = ReassignmentOutcome(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
            continue
        original = original_replicas(part)
        if target is None:
            if not is_reassigning(part):
                outcomes[key] = ReassignmentOutcome(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                                                    f"No ongoing reassignment for partition {name}-{index}.")
                continue
            record = _finish(image, topic, part, original)
        else:
            wanted = tuple(target)
            if not wanted:
                outcomes[key] = ReassignmentOutcome(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                                    "The manual partition assignment includes an empty replica list.")
                continue
            if len(set(wanted)) != len(wanted):
                outcomes[key] = ReassignmentOutcome(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                                    "The manual partition assignment includes duplicate replicas.")
                continue
            unknown = [r for r in wanted if r not in image.brokers]
            if unknown:
                outcomes[key] = ReassignmentOutcome(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes broker {unknown[0]}, but no such broker is registered.")
                continue
            adding = [r for r in wanted if r not in original]
            removing = [r for r in original if r not in wanted]
            if not adding and not removing:
                if wanted == part.replicas and not is_reassigning(part):
                    outcomes[key] = ReassignmentOutcome(ErrorCode.NONE)
                    continue
                record = _finish(image, topic, part, wanted)  # a reorder, or back to the original
            else:
                replicas = list(wanted) + removing
                record = PartitionChangeRecord(topic_id=topic.topic_id, partition_id=index, replicas=replicas,
                                               adding_replicas=adding, removing_replicas=removing)
                widened = apply(image, record, image.offset)
                settled = settle(widened, topic, widened.topics_by_id[topic.topic_id].partitions[index])
                records.append(record)
                outcomes[key] = ReassignmentOutcome(ErrorCode.NONE)
                if settled is not None:  # only replicas removed, the rest already in sync
                    records.append(settled)
                image = apply(image, record, image.offset)
                if settled is not None:
                    image = apply(image, settled, image.offset)
                continue
        records.append(record)
        image = apply(image, record, image.offset)
        outcomes[key] = ReassignmentOutcome(ErrorCode.NONE)
    return outcomes, records


def completions(image: MetadataImage, partitions: Iterable[tuple[TopicImage, int]]) -> list[Message]:
    """Completion records for reassignments among ``partitions`` whose targets are all in sync."""
    out: list[Message] = []
    for topic, index in partitions:
        current = image.topics_by_id.get(topic.topic_id)
        part = current.partitions.get(index) if current is not None else None
        if current is not None and part is not None:
            record = settle(image, current, part)
            if record is not None:
                out.append(record)
    return out


def ongoing(image: MetadataImage, topics: Sequence[tuple[str, Sequence[int]]] | None) -> list[OngoingReassignment]:
    """ListPartitionReassignments: the partitions being reassigned (all, or among those named)."""
    wanted: list[tuple[TopicImage, PartitionImage]] = []
    if topics is None:
        for topic in sorted(image.topics_by_id.values(), key=lambda t: t.name):
            wanted += [(topic, topic.partitions[i]) for i in sorted(topic.partitions)]
    else:
        for name, indexes in topics:
            named = image.topic(name)
            if named is not None:
                wanted += [(named, named.partitions[i]) for i in indexes if i in named.partitions]
    return [OngoingReassignment(t.name, p.partition, p.replicas, p.adding_replicas, p.removing_replicas)
            for t, p in wanted if is_reassigning(p)]
