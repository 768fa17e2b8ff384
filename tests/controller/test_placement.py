"""Replica placement: Kafka's rack-aware assignment (properties over random clusters)."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.placement import assign_rack_aware, rack_alternated
from controller.service import TopicRequest
from tests.controller.test_cluster_control import registration, run, setup
from wire.errors import ErrorCode


def test_rack_alternated_takes_each_rack_in_turn() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "c", 5: "a", 6: "b"}
    assert rack_alternated(racks) == [1, 3, 4, 2, 6, 5]


@st.composite
def clusters(draw: st.DrawFn) -> tuple[dict[int, str], int, int, int]:
    n = draw(st.integers(1, 9))
    racks = {b: draw(st.sampled_from("abcd")) for b in range(1, n + 1)}
    rf = draw(st.integers(1, n))
    partitions = draw(st.integers(1, 40))
    seed = draw(st.integers(0, 2**32))
    return racks, rf, partitions, seed


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_every_partition_spreads_over_racks_then_brokers(cluster: tuple[dict[int, str], int, int, int]) -> None:
    racks, rf, partitions, seed = cluster
    out = assign_rack_aware(racks, partitions, rf, 0, random.Random(seed))
    assert len(out) == partitions
    rack_count = len(set(racks.values()))
    for replicas in out:
        assert len(replicas) == rf and len(set(replicas)) == rf
        assert set(replicas) <= set(racks)
        # As many racks as the replication factor allows.
        assert len({racks[b] for b in replicas}) == min(rf, rack_count)
    # Leaders go round the brokers: no broker leads two more than another.
    leaders = Counter(r[0] for r in out)
    counts = [leaders.get(b, 0) for b in racks]
    assert max(counts) - min(counts) <= 1


def test_three_racks_rf3_puts_one_replica_in_each() -> None:
    racks = {1: "r1", 2: "r1", 3: "r2", 4: "r2", 5: "r3", 6: "r3"}
    for replicas in assign_rack_aware(racks, 12, 3, 0, random.Random(1)):
        assert sorted(racks[b] for b in replicas) == ["r1", "r2", "r3"]


def test_the_controller_places_replicas_across_registered_racks(tmp_path: Path) -> None:
    async def main() -> None:
        control, controller, quorum, _ = setup(tmp_path)
        racks = {1: "east", 2: "east", 3: "west", 4: "west"}
        for broker_id, rack in racks.items():
            reg = replace(registration(broker_id), rack=rack)
            code, epoch = await control.register(reg)
            assert code == ErrorCode.NONE
            await control.heartbeat(broker_id, epoch, controller.image.offset, False, False)
        results = await controller.create_topics([TopicRequest("spread", num_partitions=8, replication_factor=2)])
        assert [r.error for r in results] == [ErrorCode.NONE]
        topic = controller.image.topic("spread")
        assert topic is not None
        for part in topic.partitions.values():
            assert {racks[b] for b in part.replicas} == {"east", "west"}, part.replicas
        assert sorted(Counter(p.leader for p in topic.partitions.values()).values()) == [2, 2, 2, 2]
        quorum.close()

    run(main)
