"""Seeded simulation of the data plane (see :mod:`tests.replication.data_plane_sim`).

Three brokers with real logs and replica managers replicate one partition under
leader changes, crashes and restarts, ISR shrinks and expansions through a small
controller, and metadata that reaches each broker late. Asserted after every step:
one leader per epoch, a leader's high watermark never goes backwards, committed records
never change, acknowledged acks=all writes are committed, and every live in-sync replica
holds the committed records.

A failure names its seed; ``CORMORANT_DATA_PLANE_SEED=N pytest
tests/replication/test_data_plane_simulation.py`` replays it alone (``python -m
tests.replication.data_plane_sim --seed N --trace`` prints every step), and
``CORMORANT_DATA_PLANE_SEEDS=2000`` runs more.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.replication.partition import Partition
from tests.replication.data_plane_sim import InvariantViolation, SimulationReport, run_simulation

REPLAY = os.environ.get("CORMORANT_DATA_PLANE_SEED")
SEEDS = [int(REPLAY)] if REPLAY else list(range(1, int(os.environ.get("CORMORANT_DATA_PLANE_SEEDS", "200")) + 1))


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A directory in memory when the machine has one: the logs fsync, and hundreds of runs add up."""
    shm = Path("/dev/shm")
    directory = Path(tempfile.mkdtemp(prefix="data-plane-sim-", dir=shm)) if shm.is_dir() else tmp_path
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def run_seeds(scratch: Path, seeds: list[int]) -> list[SimulationReport]:
    reports = []
    for seed in seeds:
        directory = scratch / f"seed-{seed}"
        reports.append(run_simulation(seed, directory))
        shutil.rmtree(directory, ignore_errors=True)
    return reports


def test_the_data_plane_keeps_its_invariants(scratch: Path) -> None:
    reports = run_seeds(scratch, SEEDS)
    if REPLAY:
        return
    # The runs did what they are meant to: leaders moved, logs diverged and were cut,
    # brokers crashed, the ISR changed, and acks=all writes were acknowledged.
    assert sum(r.leader_changes for r in reports) > len(reports)
    assert sum(r.truncations for r in reports) > 0
    assert sum(r.crashes for r in reports) > len(reports) / 2
    assert sum(r.isr_changes for r in reports) > len(reports)
    assert sum(r.acknowledged for r in reports) > 10 * len(reports)


def test_a_high_watermark_that_ignores_a_pending_isr_expansion_is_caught(
        scratch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The invariants can fail: a leader that counts only the committed ISR for its high
    watermark (not the replica it asked to add, which the controller may already have
    added and may elect) commits records that an in-sync replica does not have."""
    monkeypatch.setattr(Partition, "maximal_isr", property(lambda p: p.isr))
    with pytest.raises(InvariantViolation) as caught:
        run_seeds(scratch, list(range(1, 31)))
    assert caught.value.name == "committed_identical_on_isr"
