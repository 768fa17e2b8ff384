"""Leader elections asked for by operators (ElectLeaders) or by the controller's own
leader-balance check (``auto.leader.rebalance.enable``).

Pure functions of the metadata image: each returns the outcome per partition and the
PartitionChangeRecords that carry it out, for :meth:`controller.service.Controller.submit`.
Elections after a broker failure are the fencing path's (:mod:`controller.apis`).

As Kafka's ReplicationControlManager:

- **preferred**: the first replica of the assignment leads again if it is live and in
  the ISR; ELECTION_NOT_NEEDED when it already leads, PREFERRED_LEADER_NOT_AVAILABLE
  when it cannot.
- **unclean**: only for a partition without a live leader; the first live ISR member
  if any, else the first live replica (then alone in the ISR, its log the new truth);
  ELECTION_NOT_NEEDED when a live leader exists, ELIGIBLE_LEADERS_NOT_AVAILABLE when no
  replica is live.
- Asked for every partition (no list), partitions that need no election are left out
  of the answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from controller.image import NO_CHANGE, MetadataImage, PartitionImage, TopicImage
from wire.errors import ErrorCode
from wire.generated.metadata.rec_005_partition_change_record import PartitionChangeRecord
from wire.primitives import Message

PREFERRED = 0
UNCLEAN = 1
ELECTION_TYPES = (PREFERRED, UNCLEAN)



@dataclass(frozen=True, slots=True)
class ElectionOutcome:
    error: ErrorCode
    message: str | None = None


def _change(topic: TopicImage, part: PartitionImage, leader: int, isr: tuple[int, ...]) -> PartitionChangeRecord:
    return PartitionChangeRecord(
        topic_id=topic.topic_id,
        partition_id=part.partition,
        leader=leader if leader != part.leader else NO_CHANGE,
        isr=list(isr) if isr != part.isr else None,
    )


def _elect_one(image: MetadataImage, live: set[int], topic: TopicImage, part: PartitionImage,
               election_type: int) -> tuple[ElectionOutcome, PartitionChangeRecord | None]:
    name = f"{topic.name}-{part.partition}"
    if election_type == PREFERRED:
        preferred = part.replicas[0] if part.replicas else -1
        if part.leader == preferred:
            return ElectionOutcome(ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."), None
        if preferred not in live or preferred not in part.isr:
            return ElectionOutcome(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                                   f"Failed to elect leader for partition {name} under strategy "
                                   "PreferredReplicaPartitionLeaderElectionStrategy"), None
        return ElectionOutcome(ErrorCode.NONE), _change(topic, part, preferred, part.isr)
    if part.leader in live:
        return ElectionOutcome(ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."), None
    for replica in part.replicas:
        if replica in part.isr and replica in live:
            return ElectionOutcome(ErrorCode.NONE), _change(topic, part, replica, part.isr)
    for replica in part.replicas:
        if replica in live:
            return ElectionOutcome(ErrorCode.NONE), _change(topic, part, replica, (replica,))
    return ElectionOutcome(ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                           f"Failed to elect leader for partition {name} under strategy "
                           "UncleanLeaderElectionStrategy"), None


def elect_leaders(
    image: MetadataImage, election_type: int, partitions: Sequence[tuple[str, int]] | None
) -> tuple[dict[tuple[str, int], ElectionOutcome], list[Message]]:
    """Outcome per (topic, partition) and the records; ``partitions=None`` means all of them."""
    live = image.serving_broker_ids()
    outcomes: dict[tuple[str, int], ElectionOutcome] = {}
    records: list[Message] = []
    every = partitions is None
    wanted: Iterable[tuple[str, int]] = (
        [(t.name, p) for t in sorted(image.topics_by_id.values(), key=lambda t: t.name) for p in sorted(t.partitions)]
        if partitions is None else partitions
    )
    for name, index in wanted:
        if (name, index) in outcomes:
            continue
        topic = image.topic(name)
        part = topic.partitions.get(index) if topic is not None else None
        if topic is None or part is None:
            outcomes[(name, index)] = ElectionOutcome(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                      "The partition does not exist.")
            continue
        outcome, record = _elect_one(image, live, topic, part, election_type)
        if every and outcome.error == ErrorCode.ELECTION_NOT_NEEDED:
            continue
        outcomes[(name, index)] = outcome
        if record is not None:
            records.append(record)
    return outcomes, records


def imbalanced_partitions(image: MetadataImage, imbalance_percentage: int) -> list[tuple[str, int]]:
    """Partitions to hand back to their preferred leader: on every broker whose share of
    partitions led by someone else, among those it is preferred for, is above
    ``leader.imbalance.per.broker.percentage``, the ones it can take back now (live, in the ISR)."""
    live = image.serving_broker_ids()
    preferred_for: dict[int, list[tuple[TopicImage, PartitionImage]]] = {}
    for topic in image.topics_by_id.values():
        for part in topic.partitions.values():
            if part.replicas:
                preferred_for.setdefault(part.replicas[0], []).append((topic, part))
    out: list[tuple[str, int]] = []
    for broker, parts in sorted(preferred_for.items()):
        if broker not in live:
            continue
        not_leading = [(t, p) for t, p in parts if p.leader != broker]
        if not not_leading or len(not_leading) * 100 <= imbalance_percentage * len(parts):
            continue
        out += sorted((t.name, p.partition) for t, p in not_leading if broker in p.isr)
    return out
