"""Kafka's rack-aware replica placement for new partitions."""

from __future__ import annotations

import random
from collections.abc import Mapping


def rack_alternated(racks: Mapping[int, str]) -> list[int]:
    """Brokers taking each rack in turn (racks and brokers in sorted order), so neighbours
    in the list sit in different racks while any rack has brokers left."""
    by_rack: dict[str, list[int]] = {}
    for broker, rack in sorted(racks.items()):
        by_rack.setdefault(rack, []).append(broker)
    queues = [by_rack[r] for r in sorted(by_rack)]
    out: list[int] = []
    while len(out) < len(racks):
        for queue in queues:
            if queue:
                out.append(queue.pop(0))
    return out


def assign_rack_aware(racks: Mapping[int, str], partitions: int, replication_factor: int,
                      start_partition: int, rng: random.Random) -> list[list[int]]:
    """Kafka's rack-aware assignment: leaders round robin over the rack-alternated broker
    list from a random start; each further replica is the next broker, at a shift that grows
    once per full round, whose rack (then whose broker) holds no replica yet — until every
    rack (every broker) holds one. A broker without a rack counts as a rack of its own name "".
    """
    brokers = rack_alternated(racks)
    n, rack_count = len(brokers), len(set(racks.values()))
    if not 0 < replication_factor <= n:
        raise ValueError(f"replication factor {replication_factor} with {n} brokers")
    start = rng.randrange(n)
    shift = rng.randrange(n)
    out: list[list[int]] = []
    for p in range(start_partition, start_partition + partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [brokers[first]]
        used_racks = {racks[brokers[first]]}
        k = 0
        while len(replicas) < replication_factor:
            broker = brokers[(first + 1 + (shift * rack_count + k) % (n - 1)) % n]
            k += 1
            if racks[broker] in used_racks and len(used_racks) < rack_count:
                continue
            if broker in replicas:
                continue
            replicas.append(broker)
            used_racks.add(racks[broker])
        out.append(replicas)
    return out
