"""A seeded, deterministic simulation of the metadata quorum.

Real pysyncobj voters (:class:`controller.raft.RaftCore`, with the durable
journal, snapshots and the compare-and-set batches) run in one thread on a fake
clock, over :class:`controller.sim.network.SimNetwork`. One ``random.Random``
seeded from the run's seed drives everything — network faults, crashes, the
workload, and pysyncobj's election timeouts — so a seed replays a run exactly.

Crashes are graceful (pysyncobj stops, the journal syncs) or hard: the journal
loses what was not fsynced, and part of the lost tail survives torn or with
flipped bits, as after a power cut.

Invariants, checked as the run goes (:class:`InvariantViolation` names the
seed):

- SingleLeader: no term ever has two leaders.
- ConsistentCommittedData: every record applied at an offset, by any node at
  any time (also after restarts), is the same record; acknowledged writes are
  in the log at the offsets they were acknowledged at; writes prepared against
  a stale end offset are never applied.
- ReplayMatches: after a restart a node's replayed image equals the image the
  cluster had at that offset, and after a graceful stop it equals the node's
  image before the stop; snapshots installed from a leader match too.
- Convergence: after a fault-free tail (no loss, in-order links, no crashes
  or partitions) every node holds the same image. Safety is asserted under
  any reordering; liveness only where pysyncobj can expect TCP's ordering.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from controller.image import MetadataImage
from controller.raft import (
    LEADER,
    STALE,
    Committed,
    RaftCore,
    RaftEvent,
    RaftSettings,
    Reset,
    StatusChanged,
    encode_batch,
    simulated_time,
)
from controller.records import encode_record
from controller.sim.network import NetworkFaults, SimNetwork, SimTransport
from controller.sim.workload import random_change
from controller.state import apply
from wire.primitives import Message

SIM_RAFT = RaftSettings(
    snapshot_min_entries=40,
    snapshot_min_interval_s=5.0,
    snapshot_chunk_bytes=512,
    retained_records=100,
)


#: Events shown when an invariant fails.
TRACE_SHOWN = 60
#: How far the simulated clock moves each time it is read.
CLOCK_READ_S = 1e-6
#: The end of the fault-free tail without writes.
QUIET_S = 3.0


class InvariantViolation(AssertionError):
    pass


@dataclass(frozen=True, slots=True)
class SimulationConfig:
    voters: int = 3
    duration_s: float = 20.0
    #: Fault-free time at the end, after which every node must hold the same image.
    heal_s: float = 10.0
    step_s: float = 0.01
    crashes_per_s: float = 0.25
    hard_crash_ratio: float = 0.7
    restart_delay_s: tuple[float, float] = (0.2, 3.0)
    partitions_per_s: float = 0.1
    partition_s: tuple[float, float] = (0.3, 3.0)
    writes_per_s: float = 25.0
    stale_write_ratio: float = 0.05
    network: NetworkFaults = field(default_factory=NetworkFaults)
    raft: RaftSettings = SIM_RAFT


@dataclass(slots=True)
class SimulationReport:
    seed: int
    leaders: dict[int, int] = field(default_factory=dict)
    committed_records: int = 0
    writes_acknowledged: int = 0
    writes_stale: int = 0
    writes_failed: int = 0
    crashes: int = 0
    hard_crashes: int = 0
    restarts: int = 0
    partitions: int = 0
    snapshots_loaded: int = 0
    messages_delivered: int = 0
    messages_dropped: int = 0


@dataclass(slots=True)
class _Node:
    node_id: int
    directory: Path
    core: RaftCore | None = None
    end_offset: int = 0
    restart_at: float = 0.0
    isolated_until: float = 0.0


class _Unsynced:
    """fsync that does nothing: the simulation tracks durability itself."""

    def __call__(self, fd: int) -> None:
        pass


class Simulation:
    def __init__(self, seed: int, directory: Path, config: SimulationConfig | None = None) -> None:
        self.seed = seed
        self.config = config or SimulationConfig()
        self.directory = directory
        self.rng = random.Random(seed)
        # pysyncobj draws election timeouts from its own stream, so workload changes do
        # not shift them (and vice versa) for a given seed.
        self.raft_rng = random.Random(self.rng.getrandbits(64))
        self.now = 1000.0
        self.network = SimNetwork(self.rng, self.clock, self.config.network)
        self.nodes = {i: _Node(i, directory / f"node-{i}") for i in range(1, self.config.voters + 1)}
        self.voters = {i: f"sim-{i}" for i in self.nodes}
        self.report = SimulationReport(seed)
        #: The committed log as first applied anywhere: offset -> encoded record.
        self.committed: list[bytes] = []
        self.images: list[MetadataImage] = []
        #: (end offset, image) of nodes stopped gracefully, checked when they restart.
        self._graceful_before: dict[int, tuple[int, MetadataImage]] = {}
        self.trace: list[str] = []

    def clock(self) -> float:
        # Time passes a little with every reading, as it does while a real tick runs;
        # pysyncobj's loops that stop on a time budget rely on that.
        self.now += CLOCK_READ_S
        return self.now

    def fail(self, invariant: str, detail: str) -> None:
        recent = "\n  ".join(self.trace[-TRACE_SHOWN:])
        raise InvariantViolation(f"{invariant} violated (seed={self.seed}, t={self.now - 1000:.2f}s): {detail}"
                                 f"\nlast events:\n  {recent}")

    def note(self, text: str) -> None:
        self.trace.append(f"{self.now - 1000:8.3f} {text}")
        if len(self.trace) > 4 * TRACE_SHOWN:
            del self.trace[:-TRACE_SHOWN]

    # ------------------------------------------------------------ the run

    def run(self) -> SimulationReport:
        with simulated_time(self.clock, self.raft_rng):
            try:
                for node in self.nodes.values():
                    self._start(node)
                end = self.now + self.config.duration_s
                while self.now < end:
                    self._step(faults=True)
                heal_end = self.now + self.config.heal_s
                for node in self.nodes.values():
                    node.isolated_until = 0.0
                    node.restart_at = 0.0
                self.network.isolated.clear()
                # Liveness is only expected of a network that behaves like TCP: no loss,
                # and messages on a link in order (a fixed latency keeps them so).
                latency = self.config.network.latency_max_s
                self.network.faults = replace(self.config.network, drop=0.0, reset=0.0,
                                              latency_min_s=latency, latency_max_s=latency)
                while self.now < heal_end:
                    # Writes stop a few seconds before the end so the last ones can spread.
                    self._step(faults=False, writes=self.now < heal_end - QUIET_S)
                self._check_convergence()
            finally:
                for node in self.nodes.values():
                    if node.core is not None:
                        node.core.destroy()
                        node.core = None
        self.report.committed_records = len(self.committed)
        self.report.messages_delivered = self.network.delivered
        self.report.messages_dropped = self.network.dropped
        return self.report

    def _step(self, faults: bool, writes: bool = True) -> None:
        self.now += self.config.step_s
        if faults:
            self._inject_faults()
        else:
            for node in self.nodes.values():
                if node.core is None:
                    self._restart(node)
        self.network.step()
        for node_id in sorted(self.nodes):
            node = self.nodes[node_id]
            if node.core is not None:
                node.core.tick()
                self._check_leader(node)
        if writes and self.rng.random() < self.config.writes_per_s * self.config.step_s:
            self._write(stale_allowed=faults)

    def _inject_faults(self) -> None:
        cfg = self.config
        self.network.reset_random_links()
        for node in self.nodes.values():
            if node.core is None and self.now >= node.restart_at:
                self._restart(node)
            if node.node_id in self.network.isolated and self.now >= node.isolated_until:
                self.network.isolated.discard(node.node_id)
        live = [n for n in self.nodes.values() if n.core is not None]
        if live and self.rng.random() < cfg.crashes_per_s * cfg.step_s:
            self._crash(self.rng.choice(live), hard=self.rng.random() < cfg.hard_crash_ratio)
        if live and self.rng.random() < cfg.partitions_per_s * cfg.step_s:
            victim = self.rng.choice(live)
            victim.isolated_until = self.now + self.rng.uniform(*cfg.partition_s)
            self.note(f"node {victim.node_id} isolated")
            self.network.isolated.add(victim.node_id)
            self.report.partitions += 1

    # ------------------------------------------------------------ nodes

    def _start(self, node: _Node) -> None:
        node.directory.mkdir(parents=True, exist_ok=True)
        node.end_offset = 0
        network = self.network
        node_id = node.node_id

        made: list[SimTransport] = []

        def transport(syncobj: Any, self_node: Any, other_nodes: Any) -> SimTransport:
            made.append(SimTransport(network, node_id, self_node, other_nodes))
            return made[-1]

        node.core = RaftCore(
            node_id, self.voters, node.directory, self.config.raft,
            on_event=lambda event: self._on_event(node, event),
            auto_tick=False, transport_class=transport, fsync=_Unsynced(),
        )
        made[0].guard = node.core.guard

    def _crash(self, node: _Node, hard: bool) -> None:
        core = node.core
        assert core is not None
        self.report.crashes += 1
        self.note(f"node {node.node_id} {'hard ' if hard else ''}crash at end {core.end_offset} "
                  f"applied {core.syncobj.raftLastApplied} log {core.journal[-1][1:]} synced "
                  f"{core.journal.synced_size}/{core.journal.size}")
        node.core = None
        node.restart_at = self.now + self.rng.uniform(*self.config.restart_delay_s)
        if not hard:
            self._graceful_before[node.node_id] = (core.end_offset, core.image)
            core.destroy()
            return
        self.report.hard_crashes += 1
        journal = core.journal
        synced, size = journal.synced_size, journal.size
        core.crash()
        self.network.detach(node.node_id)
        self._tear(journal.path, synced, size)
        self._graceful_before.pop(node.node_id, None)

    def _tear(self, path: Path, synced: int, size: int) -> None:
        """Loses unsynced journal bytes; some of them survive, possibly corrupted."""
        keep = synced + (self.rng.randint(0, size - synced) if size > synced else 0)
        with open(path, "r+b") as f:
            f.truncate(keep)
            if keep > synced and self.rng.random() < 0.5:
                at = self.rng.randrange(synced, keep)
                f.seek(at)
                byte = f.read(1)
                f.seek(at)
                f.write(bytes([byte[0] ^ (1 << self.rng.randrange(8))]))

    def _restart(self, node: _Node) -> None:
        self.report.restarts += 1
        self._start(node)
        core = node.core
        assert core is not None
        # The first tick loads the snapshot and replays what the journal knows was committed.
        core.tick()
        self.note(f"node {node.node_id} restarted: end {core.end_offset} applied {core.syncobj.raftLastApplied} "
                  f"log {core.journal[0][1:]}..{core.journal[-1][1:]} term {core.journal.getCurrentTerm()}")
        self._check_replay(node)

    # ------------------------------------------------------------ events and invariants

    def _on_event(self, node: _Node, event: RaftEvent) -> None:
        if isinstance(event, Committed):
            if event.base_offset != node.end_offset:
                self.fail("ConsistentCommittedData",
                          f"node {node.node_id} applied offset {event.base_offset} after {node.end_offset}")
            self.note(f"node {node.node_id} applied {event.base_offset}+{len(event.records)} "
                      f"raft index {event.raft_index}")
            for i, record in enumerate(event.records):
                self._observe(node, event.base_offset + i, record)
            node.end_offset = event.base_offset + len(event.records)
        elif isinstance(event, Reset):
            self.report.snapshots_loaded += 1
            self.note(f"node {node.node_id} loaded snapshot end {event.image.offset + 1}")
            node.end_offset = event.image.offset + 1
            if event.image != self.image_at(event.image.offset + 1):
                self.fail("ReplayMatches", f"node {node.node_id} loaded a snapshot at offset "
                          f"{event.image.offset + 1} that differs from the committed log")
        elif isinstance(event, StatusChanged):
            self.note(f"node {node.node_id} {event.status.role} term {event.status.term} "
                      f"leader {event.status.leader_id}")
            if event.status.role == LEADER:
                self._record_leader(event.status.term, node.node_id)

    def _observe(self, node: _Node, offset: int, record: Message) -> None:
        raw = encode_record(record)
        if offset < len(self.committed):
            if self.committed[offset] != raw:
                self.fail("ConsistentCommittedData", f"node {node.node_id} applied a different record at {offset}")
        elif offset == len(self.committed):
            self.committed.append(raw)
            previous = self.images[-1] if self.images else MetadataImage()
            self.images.append(apply(previous, record, offset))
        else:
            self.fail("ConsistentCommittedData", f"node {node.node_id} applied offset {offset} past the log's end "
                      f"{len(self.committed)}")

    def image_at(self, end_offset: int) -> MetadataImage:
        if end_offset == 0:
            return MetadataImage()
        if end_offset > len(self.images):
            self.fail("ConsistentCommittedData", f"image at {end_offset} asked, log ends at {len(self.images)}")
        return self.images[end_offset - 1]

    def _record_leader(self, term: int, node_id: int) -> None:
        known = self.report.leaders.setdefault(term, node_id)
        if known != node_id:
            self.fail("SingleLeader", f"term {term} has leaders {known} and {node_id}")

    def _check_leader(self, node: _Node) -> None:
        assert node.core is not None
        status = node.core.status
        if status.role == LEADER:
            self._record_leader(status.term, node.node_id)

    def _check_replay(self, node: _Node) -> None:
        core = node.core
        assert core is not None
        if core.image != self.image_at(core.end_offset):
            self.fail("ReplayMatches", f"node {node.node_id} replayed to offset {core.end_offset} "
                      "an image that differs from the committed log's")
        before = self._graceful_before.pop(node.node_id, None)
        if before is not None:
            end_before, image_before = before
            if core.end_offset < end_before:
                self.fail("ReplayMatches", f"node {node.node_id} replayed to {core.end_offset} after a graceful "
                          f"stop at {end_before}")
            if core.end_offset == end_before and core.image != image_before:
                self.fail("ReplayMatches", f"node {node.node_id} replayed a different image after a graceful stop")

    def _check_convergence(self) -> None:
        ends = {n.node_id: n.core.end_offset for n in self.nodes.values() if n.core is not None}
        if len(set(ends.values())) != 1 or next(iter(ends.values())) != len(self.committed):
            self.fail("Convergence", f"after {self.config.heal_s}s without faults, end offsets {ends}, "
                      f"committed {len(self.committed)}")
        expected = self.image_at(len(self.committed))
        for node in self.nodes.values():
            assert node.core is not None
            if node.core.image != expected:
                self.fail("Convergence", f"node {node.node_id} holds a different image")

    # ------------------------------------------------------------ workload

    def _write(self, stale_allowed: bool) -> None:
        live = [n for n in self.nodes.values() if n.core is not None]
        if not live:
            return
        leaders = [n for n in live if n.core is not None and n.core.status.role == LEADER]
        node = self.rng.choice(leaders) if leaders and self.rng.random() < 0.9 else self.rng.choice(live)
        core = node.core
        assert core is not None
        records = random_change(core.image, self.rng)
        if not records:
            return
        expected = core.end_offset
        stale = stale_allowed and expected > 0 and self.rng.random() < self.config.stale_write_ratio
        if stale:
            expected -= self.rng.randint(1, min(3, expected))
        encoded = [encode_record(r) for r in records]

        def done(result: Any, error: int) -> None:
            if error != 0:
                self.report.writes_failed += 1
                return
            if result == STALE:
                self.report.writes_stale += 1
                return
            if stale:
                self.fail("ConsistentCommittedData", f"a write prepared at a stale offset was applied at {result}")
            if not isinstance(result, tuple):
                self.fail("ConsistentCommittedData", f"a valid write was refused: {result}")
            base, end = result
            if self.committed[base:end] != encoded:
                self.fail("ConsistentCommittedData", f"acknowledged write at {base} is not in the log")
            self.report.writes_acknowledged += 1

        core.submit(encode_batch(records, expected), done)


def run_simulation(seed: int, directory: Path, config: SimulationConfig | None = None) -> SimulationReport:
    """Runs one seed in a fresh directory (removed afterwards unless the run fails)."""
    run_dir = directory / f"seed-{seed}"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    report = Simulation(seed, run_dir, config).run()
    shutil.rmtree(run_dir, ignore_errors=True)
    return report


def main() -> int:
    """``python -m controller.sim.cluster [--seed N] [--seeds K] [--duration S]``: a longer soak."""
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description="Seeded simulation of the metadata quorum.")
    parser.add_argument("--seed", type=int, default=None, help="replay one seed")
    parser.add_argument("--seeds", type=int, default=20, help="how many seeds to run from --first")
    parser.add_argument("--first", type=int, default=1)
    parser.add_argument("--duration", type=float, default=60.0, help="simulated seconds per seed")
    args = parser.parse_args()
    import logging

    import structlog

    # The simulation's own report is the output; the voters' logs would drown it.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    logging.getLogger("pysyncobj").setLevel(logging.CRITICAL + 1)
    seeds = [args.seed] if args.seed is not None else list(range(args.first, args.first + args.seeds))
    config = replace(SimulationConfig(), duration_s=args.duration)
    with tempfile.TemporaryDirectory(prefix="cormorant-sim-") as tmp:
        for seed in seeds:
            try:
                report = run_simulation(seed, Path(tmp), config)
            except InvariantViolation as ex:
                print(f"FAIL {ex}", flush=True)
                return 1
            print(f"ok seed={seed} terms={len(report.leaders)} records={report.committed_records} "
                  f"acked={report.writes_acknowledged} crashes={report.crashes} "
                  f"snapshots={report.snapshots_loaded}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
