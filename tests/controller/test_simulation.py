"""Seeded simulation of the metadata quorum (see :mod:`controller.sim.cluster`).

Real pysyncobj voters with the durable journal and snapshots, on a fake clock,
with message loss and reordering, link resets, partitions and crashes (some
losing unsynced journal bytes, tearing the tail). Asserted: one leader per
term, committed records never change, acknowledged writes stay at their
offsets, stale writes are never applied, replay after a restart gives the
committed image, and all nodes converge once faults stop.

A failure names its seed; ``CORMORANT_SIM_SEED=N pytest tests/controller/test_simulation.py``
replays that seed alone, and ``python -m controller.sim.cluster --seeds 200`` soaks.
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path

import pytest

from controller.image import MetadataImage
from controller.raft import RaftCore, simulated_time
from controller.sim.cluster import Simulation, SimulationConfig, run_simulation
from controller.sim.network import NetworkFaults

REPLAY = os.environ.get("CORMORANT_SIM_SEED")
SEEDS = [int(REPLAY)] if REPLAY else list(range(1, 11))
FIVE_VOTER_SEEDS = [int(REPLAY)] if REPLAY else [101, 102]


@pytest.fixture(autouse=True)
def quiet_pysyncobj() -> None:
    # pysyncobj logs every truncation it attempts; the journal keeps what it must.
    logging.getLogger("pysyncobj").setLevel(logging.CRITICAL + 1)


@pytest.mark.parametrize("seed", SEEDS)
def test_three_voters_under_faults(tmp_path: Path, seed: int) -> None:
    report = run_simulation(seed, tmp_path, SimulationConfig(duration_s=20.0))
    # The run did what it is meant to: elections, writes, crashes and snapshots happened.
    assert report.committed_records > 100
    assert report.writes_acknowledged > 50
    assert report.crashes > 0 and report.restarts >= report.crashes


@pytest.mark.parametrize("seed", FIVE_VOTER_SEEDS)
def test_five_voters_under_faults(tmp_path: Path, seed: int) -> None:
    report = run_simulation(seed, tmp_path, SimulationConfig(voters=5, duration_s=20.0))
    assert report.committed_records > 100


def test_heavy_loss_and_long_partitions(tmp_path: Path) -> None:
    faults = NetworkFaults(drop=0.1, reset=0.005, latency_max_s=0.08)
    config = SimulationConfig(duration_s=20.0, partitions_per_s=0.4, network=faults)
    report = run_simulation(int(REPLAY or 7), tmp_path, config)
    assert report.messages_dropped > 0 and report.partitions > 0


def test_a_quiet_cluster_restarts_to_the_same_images(tmp_path: Path) -> None:
    config = SimulationConfig(duration_s=8.0, crashes_per_s=0.0, partitions_per_s=0.0,
                              network=replace(NetworkFaults(), drop=0.0, reset=0.0))
    sim = Simulation(int(REPLAY or 11), tmp_path, config)
    report = sim.run()  # ends with every voter stopped gracefully, all holding the same image
    assert report.committed_records > 50
    expected = sim.images[-1]
    with simulated_time(sim.clock, sim.raft_rng):
        for node in sim.nodes.values():
            core = RaftCore(node.node_id, sim.voters, node.directory, config.raft, on_event=lambda e: None,
                            auto_tick=False, transport_class=_NoNetwork)
            core.tick()
            assert core.image == expected, f"node {node.node_id} replayed to {core.end_offset}"
            assert core.end_offset == len(sim.committed)
            core.destroy()
    assert expected != MetadataImage()


class _NoNetwork:
    """A transport that never connects: replay uses only what is on disk."""

    ready = True

    def __init__(self, syncobj: object, self_node: object, others: object) -> None:
        pass

    def __getattr__(self, name: str) -> object:
        return lambda *args, **kwargs: False
