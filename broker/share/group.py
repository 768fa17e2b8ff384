"""Share-group membership (KIP-932): members, epochs and the server-side assignment.

Kept by the group coordinator (broker/group/share_groups.py), in the shard of the
group's ``__consumer_offsets`` partition, with Kafka's share-group records
(broker/group/share_records.py).

A share group has no revocation: every heartbeat answers the current target
assignment at once, so a member's epoch becomes the group epoch at its next
heartbeat (never earlier: an epoch changed behind a member's back would fence it). The group epoch is
bumped whenever membership or a subscription changes. Assignment is Kafka's
"simple" idea: with fewer members than partitions the partitions are split;
with more, each partition goes to several members (records, not partitions,
are what members share).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

#: (topic id, partition)
TopicIdPartition = tuple[uuid.UUID, int]


@dataclass(slots=True)
class ShareMember:
    member_id: str
    member_epoch: int
    client_id: str
    client_host: str
    rack_id: str | None
    subscribed_topics: tuple[str, ...]
    assignment: frozenset[TopicIdPartition] = frozenset()
    #: The assignment last sent to the member (None: never).
    sent_assignment: frozenset[TopicIdPartition] | None = None
    #: Set on a member loaded from the records, which keep no member epoch: the lowest
    #: epoch it may have (the group epoch when its record was written). Its first
    #: heartbeat may bring any epoch from there up to the group epoch.
    loaded_epoch_floor: int | None = None


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    #: The share-partitions the group has state for (at their share coordinators).
    state_partitions: set[TopicIdPartition] = field(default_factory=set)

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"


def assign(members: list[ShareMember], partitions_by_topic: dict[str, tuple[uuid.UUID, int]]
           ) -> dict[str, frozenset[TopicIdPartition]]:
    """Target assignment: per topic, its partitions spread over the members subscribed to it."""
    out: dict[str, set[TopicIdPartition]] = {m.member_id: set() for m in members}
    for topic in sorted(partitions_by_topic):
        topic_id, count = partitions_by_topic[topic]
        subscribers = sorted(m.member_id for m in members if topic in m.subscribed_topics)
        if not subscribers or count <= 0:
            continue
        if len(subscribers) <= count:
            for p in range(count):
                out[subscribers[p % len(subscribers)]].add((topic_id, p))
        else:
            for i, member_id in enumerate(subscribers):
                out[member_id].add((topic_id, i % count))
    return {m: frozenset(v) for m, v in out.items()}
