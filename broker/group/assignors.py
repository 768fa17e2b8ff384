"""Server-side partition assignors of the consumer rebalance protocol (KIP-848).

The group coordinator computes each member's target assignment itself, with the
assignor the members ask for (``server_assignor``) or the first of
``group.consumer.assignors``. Both assignors here are sticky: a partition stays
with its current owner while that keeps the assignment balanced, so a
rebalance moves as few partitions as it can.

- ``uniform`` (Kafka's UniformAssignor): every subscribed partition of every
  topic, spread so that member counts differ by at most one among members that
  could take it.
  Rack-aware (KIP-881): a partition that has to be placed goes preferably to a member
  whose ``rack_id`` holds one of its replicas, so consumers fetch within their rack.
- ``range`` (Kafka's RangeAssignor): per topic, the members subscribed to it get
  contiguous-sized shares (the first ``partitions % members`` one more), so
  members subscribed to co-partitioned topics get the same partition numbers.

Assignments are by topic id, as the protocol carries them. Everything is a pure
function of its input (members sorted by id), so a replayed coordinator
computes the same assignment.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

#: topic id -> partitions
Assignment = dict[uuid.UUID, set[int]]


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """What an assignor knows of a member: what it subscribes to and what it has now."""

    member_id: str
    subscribed_topic_ids: frozenset[uuid.UUID]
    current: Mapping[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    rack_id: str | None = None


class PartitionAssignor(Protocol):
    name: str

    def assign(self, members: Mapping[str, MemberSpec], partitions: Mapping[uuid.UUID, int],
               partition_racks: Mapping[tuple[uuid.UUID, int], frozenset[str]] | None = None,
               ) -> dict[str, Assignment]:
        """``partitions``: topic id -> partition count of every subscribed topic;
        ``partition_racks``: the racks of each partition's replicas (where known)."""
        ...


def _empty(members: Mapping[str, MemberSpec]) -> dict[str, Assignment]:
    return {member_id: {} for member_id in members}


class UniformAssignor:
    name = "uniform"

    def assign(self, members: Mapping[str, MemberSpec], partitions: Mapping[uuid.UUID, int],
               partition_racks: Mapping[tuple[uuid.UUID, int], frozenset[str]] | None = None,
               ) -> dict[str, Assignment]:
        racks = partition_racks or {}
        out = _empty(members)
        counts = {member_id: 0 for member_id in members}
        eligible: dict[tuple[uuid.UUID, int], list[str]] = {}
        for topic_id in sorted(partitions):
            subscribers = sorted(m for m, spec in members.items() if topic_id in spec.subscribed_topic_ids)
            if subscribers:
                for p in range(partitions[topic_id]):
                    eligible[(topic_id, p)] = subscribers
        if not eligible:
            return out
        # The most a member should hold if every member could take every partition.
        quota = -(-len(eligible) // max(1, sum(1 for m in members.values() if m.subscribed_topic_ids)))
        owner: dict[tuple[uuid.UUID, int], str] = {}
        # 1. Stickiness: keep what members already own, up to the quota.
        for member_id in sorted(members):
            for topic_id, parts in sorted(members[member_id].current.items()):
                for p in sorted(parts):
                    tp = (topic_id, p)
                    if tp in eligible and tp not in owner and member_id in eligible[tp] and counts[member_id] < quota:
                        owner[tp] = member_id
                        counts[member_id] += 1
        # 2. The rest to the least loaded member that subscribes (ties by member id); rack-aware:
        #    first to the least loaded one in a rack holding a replica, while under the quota.
        def same_rack(tp: tuple[uuid.UUID, int]) -> list[str]:
            return [m for m in eligible[tp] if members[m].rack_id is not None and members[m].rack_id in racks.get(tp, ())
                    and counts[m] < quota]

        for tp in sorted(eligible):
            if tp not in owner:
                member_id = min(same_rack(tp) or eligible[tp], key=lambda m: (counts[m], m))
                owner[tp] = member_id
                counts[member_id] += 1
        # 3. Balance heterogeneous subscriptions: move from the most to the least loaded.
        moved = True
        while moved:
            moved = False
            for tp in sorted(owner):
                holder = owner[tp]
                target = min(eligible[tp], key=lambda m: (counts[m], m))
                if counts[holder] - counts[target] > 1:
                    owner[tp] = target
                    counts[holder] -= 1
                    counts[target] += 1
                    moved = True
        for (topic_id, p), member_id in owner.items():
            out[member_id].setdefault(topic_id, set()).add(p)
        return out


class RangeAssignor:
    name = "range"

    def assign(self, members: Mapping[str, MemberSpec], partitions: Mapping[uuid.UUID, int],
               partition_racks: Mapping[tuple[uuid.UUID, int], frozenset[str]] | None = None,
               ) -> dict[str, Assignment]:
        out = _empty(members)
        for topic_id in sorted(partitions):
            subscribers = sorted(m for m, spec in members.items() if topic_id in spec.subscribed_topic_ids)
            count = partitions[topic_id]
            if not subscribers or count <= 0:
                continue
            base, extra = divmod(count, len(subscribers))
            quotas = {m: base + (1 if i < extra else 0) for i, m in enumerate(subscribers)}
            taken: set[int] = set()
            # Sticky: a member keeps its partitions up to its quota.
            for m in subscribers:
                kept = sorted(p for p in members[m].current.get(topic_id, ()) if p < count and p not in taken)
                kept = kept[:quotas[m]]
                if kept:
                    out[m][topic_id] = set(kept)
                    taken.update(kept)
            free = iter(p for p in range(count) if p not in taken)
            for m in subscribers:
                have = out[m].setdefault(topic_id, set())
                while len(have) < quotas[m]:
                    have.add(next(free))
                if not have:
                    del out[m][topic_id]
        return out


ASSIGNORS: dict[str, PartitionAssignor] = {a.name: a for a in (UniformAssignor(), RangeAssignor())}
