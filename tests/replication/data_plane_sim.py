"""Seeded in-process simulation of the data plane of one partition.

Three brokers, each with its real :class:`LogManager` (on disk, in a temporary
directory) and :class:`ReplicaManager`, replicate one partition: producers append to
whoever believes it leads (``acks=1`` and ``acks=all``), followers fetch through the
leader's real :meth:`ReplicaManager.fetch_records` and append, truncate on divergence or
out-of-range answers as the replica fetcher does, and leaders ask for ISR changes with
the ISR manager's own rule (:func:`broker.replication.isr.wanted_isr`). A small
controller applies those changes (AlterPartition's epoch checks), fences crashed brokers,
elects leaders from the ISR and publishes images that reach each broker after its own
delay, so brokers act on stale metadata. Brokers crash and restart (their logs are
closed and recovered from disk).

Named invariants, checked after every step:

- ``one_leader_per_epoch``: one broker only ever appends as leader in a leader epoch;
- ``high_watermark_monotonic``: the high watermark a leader serves never goes backwards
  while it leads (a follower's, and a new leader's, may start lower, as in Kafka);
- ``committed_never_changes``: a record below a leader's high watermark never changes;
- ``acknowledged_writes_committed``: an acks=all write acknowledged at an offset is
  the committed record there;
- ``committed_identical_on_isr``: every live in-sync replica holds the committed
  records, identical to the committed log.

Every run is replayable from its seed: ``python -m tests.replication.data_plane_sim
--seed N`` (or ``--seeds 500`` to soak).
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import structlog
import trio
import trio.testing

from broker.eventloop.pacing import Pacer
from broker.log.config import LogConfig
from broker.log.manager import LogManager
from broker.log.producer_state import AppendOrigin
from broker.replication.fetch import FetchParams, FetchSlot
from broker.replication.fetcher import divergence_truncation_offset
from broker.replication.isr import wanted_isr
from broker.replication.partition import AppendRefusedError, Partition
from broker.replication.replica_manager import ReplicaManager
from controller.image import MetadataImage, PartitionImage, TopicImage
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.generated.api_001_fetch import FetchRequestFetchPartition, FetchResponsePartitionData
from wire.records import NewRecord, iter_batch_headers, iter_records

TOPIC = "sim"
TOPIC_ID = uuid.UUID(int=0x51)
BROKERS = (1, 2, 3)
LAG_MAX_MS = 1_000
MIN_INSYNC_REPLICAS = 2


class InvariantViolation(AssertionError):
    def __init__(self, name: str, seed: int, step: int, detail: str) -> None:
        super().__init__(f"invariant {name} violated (seed {seed}, step {step}): {detail}")
        self.name = name


@dataclass(frozen=True, slots=True)
class SimulationConfig:
    steps: int = 300
    #: Each step's action is drawn with these weights.
    produce: int = 30
    fetch: int = 45
    alter_isr: int = 8
    elect: int = 2
    crash: int = 2
    restart: int = 10
    #: Largest delay, in steps, before a broker sees a new image.
    max_image_delay: int = 6


@dataclass(slots=True)
class SimulationReport:
    seed: int
    steps: int = 0
    appended: int = 0
    acknowledged: int = 0
    committed: int = 0
    leader_changes: int = 0
    crashes: int = 0
    truncations: int = 0
    isr_changes: int = 0


@dataclass(slots=True)
class _Broker:
    node_id: int
    directory: Path
    logs: LogManager | None = None
    rm: ReplicaManager | None = None
    #: Images not yet seen by this broker: (step it arrives at, image).
    inbox: list[tuple[int, MetadataImage]] = field(default_factory=list)
    #: While it leads: (its leader epoch, the high watermark it last served).
    last_high_watermark: tuple[int, int] = (-1, 0)
    #: The records of its log read so far, and what they were read from (log, truncations).
    records: dict[int, bytes] = field(default_factory=dict)
    records_end: int = 0
    records_of: tuple[int, int] = (0, -1)

    def records_below(self, p: Partition, end: int) -> dict[int, bytes]:
        """Offset -> value of its log's records below ``end`` (read once, kept until a truncation)."""
        source = (id(p.log), p.log.truncation_count)
        if source != self.records_of:
            self.records, self.records_end, self.records_of = {}, 0, source
        if end > self.records_end:
            self.records.update(_records(p, self.records_end, end))
            self.records_end = end
        return {offset: value for offset, value in self.records.items() if offset < end}

    @property
    def alive(self) -> bool:
        return self.rm is not None

    def partition(self) -> Partition | None:
        return self.rm.get(TOPIC, 0) if self.rm is not None else None


class Simulation:
    def __init__(self, seed: int, directory: Path, config: SimulationConfig = SimulationConfig()) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.config = config
        self.report = SimulationReport(seed)
        self.now_ms = 1_000_000
        self.step = 0
        # The controller's view of the partition.
        self.leader = 1
        self.leader_epoch = 0
        self.partition_epoch = 0
        self.isr: tuple[int, ...] = BROKERS
        self.live: set[int] = set(BROKERS)
        self.brokers = {n: _Broker(n, directory / f"broker-{n}") for n in BROKERS}
        self.image = self._image()
        # What the invariants remember.
        self.leaders_by_epoch: dict[int, int] = {}
        self.committed: dict[int, bytes] = {}
        self.pending_acks: list[tuple[int, Partition, int, bytes]] = []  # (broker, partition, offset, value)
        self.next_value = 0
        #: Print every step (``--trace``).
        self.trace = False

    def clock_ms(self) -> int:
        return self.now_ms

    # ------------------------------------------------------------ the controller

    def _image(self) -> MetadataImage:
        part = PartitionImage(TOPIC_ID, 0, BROKERS, self.isr, self.leader, self.leader_epoch, self.partition_epoch)
        return MetadataImage(topics_by_id={TOPIC_ID: TopicImage(TOPIC, TOPIC_ID, {0: part})},
                             topic_ids={TOPIC: TOPIC_ID})

    def _publish(self) -> None:
        self.partition_epoch += 1
        self.image = self._image()
        for broker in self.brokers.values():
            # Late, but in order: a broker applies the metadata log in offset order.
            after = broker.inbox[-1][0] if broker.inbox else self.step
            arrives = max(after, self.step + self.rng.randint(0, self.config.max_image_delay))
            broker.inbox.append((arrives, self.image))

    def _elect(self) -> None:
        """A new leader from the live ISR (clean election only), or none."""
        candidates = [r for r in self.isr if r in self.live and r != self.leader]
        self.leader = self.rng.choice(candidates) if candidates else -1
        self.leader_epoch += 1
        self.report.leader_changes += 1

    def _alter_isr(self, broker: _Broker) -> None:
        """The leader asks for the ISR its rule wants (AlterPartition): accepted when its
        leader and partition epochs are current and every new member is live."""
        p = broker.partition()
        if p is None or not p.is_leader:
            return
        wanted = wanted_isr(p, broker.node_id, self.now_ms, LAG_MAX_MS, lambda r: r in self.live)
        if wanted is None or p.pending_isr is not None:
            return
        p.pending_isr = wanted  # as the ISR manager does until the outcome shows in the metadata
        if (p.leader_epoch != self.leader_epoch or p.partition_epoch != self.partition_epoch
                or any(r not in self.live for r in wanted if r not in self.isr)):
            p.pending_isr = None
            return  # INVALID_UPDATE_VERSION / FENCED_LEADER_EPOCH / INELIGIBLE_REPLICA
        self.isr = wanted
        self.report.isr_changes += 1
        self._publish()

    # ------------------------------------------------------------ brokers

    def _start(self, broker: _Broker) -> None:
        broker.logs = LogManager([broker.directory], LogConfig(segment_bytes=4096), self.clock_ms)
        broker.rm = ReplicaManager(broker.node_id, broker.logs, lambda _image, _topic: LogConfig(segment_bytes=4096),
                                   {}, clock_ms=self.clock_ms, min_insync_replicas=lambda _t: MIN_INSYNC_REPLICAS)
        broker.last_high_watermark = (-1, 0)
        broker.inbox = [(self.step, self.image)]

    def _crash(self, broker: _Broker) -> None:
        assert broker.logs is not None
        broker.logs.close()
        broker.logs = broker.rm = None
        broker.inbox = []
        self.live.discard(broker.node_id)
        self.report.crashes += 1
        # Fenced: out of the ISR unless it is the last member (Kafka keeps one).
        if broker.node_id in self.isr and len(self.isr) > 1:
            self.isr = tuple(r for r in self.isr if r != broker.node_id)
        if self.leader == broker.node_id:
            self._elect()
        self._publish()

    def _restart(self, broker: _Broker) -> None:
        self._start(broker)
        self.live.add(broker.node_id)
        if self.leader < 0:
            self._elect()
            self._publish()

    def _deliver(self, broker: _Broker) -> None:
        due = [img for at, img in broker.inbox if at <= self.step]
        if due and broker.rm is not None:
            broker.inbox = [(at, img) for at, img in broker.inbox if at > self.step]
            broker.rm.apply_image(due[-1])

    def _produce(self, broker: _Broker) -> None:
        p = broker.partition()
        if p is None or not p.is_leader:
            return
        acks = self.rng.choice((1, -1))
        values = [b"v%d" % (self.next_value + i) for i in range(self.rng.randint(1, 4))]
        self.next_value += len(values)
        batch = bytearray(build_batch([NewRecord(None, v, timestamp=self.now_ms) for v in values]))
        try:
            info = p.append_records_to_leader(batch, origin=AppendOrigin.CLIENT, required_acks=acks)
        except AppendRefusedError:
            return
        known = self.leaders_by_epoch.setdefault(p.leader_epoch, broker.node_id)
        if known != broker.node_id:
            self._violation("one_leader_per_epoch",
                            f"brokers {known} and {broker.node_id} both appended as leader of epoch {p.leader_epoch}")
        self.report.appended += len(values)
        if acks == -1:
            for i, value in enumerate(values):
                self.pending_acks.append((broker.node_id, p, info.first_offset + i, value))

    async def _fetch(self, follower: _Broker) -> None:
        p = follower.partition()
        if p is None or p.is_leader or p.leader < 0:
            return
        leader = self.brokers[p.leader]
        if leader.rm is None:
            return
        last_epoch = p.log.latest_epoch
        fetch_offset = p.log.log_end_offset
        request = FetchRequestFetchPartition(
            partition=0, current_leader_epoch=p.leader_epoch, fetch_offset=fetch_offset,
            last_fetched_epoch=-1 if last_epoch is None else last_epoch, log_start_offset=p.log.log_start_offset,
            partition_max_bytes=self.rng.choice((100, 400, 1 << 20)))
        answer = FetchResponsePartitionData(partition_index=0, high_watermark=-1, last_stable_offset=-1,
                                            log_start_offset=-1)
        slots, _ = await leader.rm.fetch_records([FetchSlot(TOPIC, request, answer)],
                                                 FetchParams(follower.node_id, 0, 0, 1 << 20, False), Pacer())
        pd = slots[0].response
        assert follower.logs is not None and follower.rm is not None
        if pd.error_code == ErrorCode.NONE:
            if pd.diverging_epoch.epoch >= 0 or pd.diverging_epoch.end_offset >= 0:
                target = divergence_truncation_offset(p, pd.diverging_epoch.epoch, pd.diverging_epoch.end_offset)
                self._truncate(follower, p, target)
                return
            records = pd.records
            if records is not None and len(records) > 0:
                data = records if isinstance(records, bytes) else records.read()  # type: ignore[union-attr]
                p.append_records_to_follower(data)
            follower.rm.set_follower_high_watermark(p, pd.high_watermark)
        elif pd.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            leader_p = leader.partition()
            if leader_p is not None and p.log.log_end_offset < leader_p.log_start_offset:
                follower.logs.truncate_fully_and_start_at(TOPIC, 0, leader_p.log_start_offset)
                follower.rm.after_truncation(p)
            elif p.log.log_end_offset > p.high_watermark:
                self._truncate(follower, p, p.high_watermark)

    def _truncate(self, broker: _Broker, p: Partition, offset: int) -> None:
        assert broker.logs is not None and broker.rm is not None
        if broker.logs.truncate_to(TOPIC, 0, offset):
            self.report.truncations += 1
        broker.rm.after_truncation(p)

    # ------------------------------------------------------------ invariants

    def _violation(self, name: str, detail: str) -> None:
        raise InvariantViolation(name, self.seed, self.step, detail)

    def _check(self) -> None:
        for broker in self.brokers.values():
            p = broker.partition()
            if p is None:
                continue
            if not p.is_leader:
                broker.last_high_watermark = (-1, 0)
            elif broker.last_high_watermark[0] != p.leader_epoch:
                broker.last_high_watermark = (p.leader_epoch, p.high_watermark)
            elif p.high_watermark < broker.last_high_watermark[1]:
                self._violation("high_watermark_monotonic",
                                f"leader {broker.node_id} (epoch {p.leader_epoch}): "
                                f"{broker.last_high_watermark[1]} -> {p.high_watermark}")
            else:
                broker.last_high_watermark = (p.leader_epoch, p.high_watermark)
            if p.is_leader and p.high_watermark > 0:
                records = broker.records_below(p, p.high_watermark)
                for offset, value in records.items():
                    if self.committed.setdefault(offset, value) != value:
                        self._violation("committed_never_changes",
                                        f"offset {offset} was {self.committed[offset]!r}, leader {broker.node_id} "
                                        f"(epoch {p.leader_epoch}) has {value!r}")
        still = []
        for node_id, p, offset, value in self.pending_acks:
            outcome = p.replication_outcome(offset + 1)
            if outcome is None:
                still.append((node_id, p, offset, value))
            elif outcome is ErrorCode.NONE:
                self.report.acknowledged += 1
                if self.committed.get(offset) != value:
                    self._violation("acknowledged_writes_committed",
                                    f"offset {offset} acknowledged as {value!r}, committed {self.committed.get(offset)!r}")
        self.pending_acks = still
        end = max(self.committed, default=-1) + 1
        for member in self.isr:
            broker = self.brokers[member]
            p = broker.partition()
            if p is None or member not in self.live:
                continue
            held = broker.records_below(p, min(end, p.log.log_end_offset))
            for offset, value in held.items():
                if self.committed.get(offset, value) != value:
                    self._violation("committed_identical_on_isr",
                                    f"ISR member {member} has {value!r} at committed offset {offset}, "
                                    f"committed {self.committed[offset]!r}")
            if p.log.log_end_offset < end:
                self._violation("committed_identical_on_isr",
                                f"ISR member {member} ends at {p.log.log_end_offset}, below committed end {end}")

    # ------------------------------------------------------------ running

    async def _step(self) -> None:
        c = self.config
        self.step += 1
        self.now_ms += self.rng.randint(0, 200)
        for each in self.brokers.values():
            self._deliver(each)
        self._check()  # what the new metadata did, before the step's action
        action = self.rng.choices(("produce", "fetch", "alter_isr", "elect", "crash", "restart"),
                                  (c.produce, c.fetch, c.alter_isr, c.elect, c.crash, c.restart))[0]
        broker = self.brokers[self.rng.choice(BROKERS)]
        if action == "produce" and broker.alive:
            self._produce(broker)
        elif action == "fetch" and broker.alive:
            await self._fetch(broker)
        elif action == "alter_isr" and broker.alive:
            self._alter_isr(broker)
        elif action == "elect" and len([r for r in self.isr if r in self.live]) > 1:
            self._elect()  # a preferred-leader election or a controlled shutdown moves leadership
            self._publish()
        elif action == "crash" and len(self.live) == len(BROKERS):  # one broker down at a time
            self._crash(broker)
        elif action == "restart" and not broker.alive:
            self._restart(broker)
        if self.trace:
            views = {n: (p.leader, p.leader_epoch, p.isr, p.log.log_end_offset, p.high_watermark)
                     for n, b in self.brokers.items() if (p := b.partition()) is not None}
            print(f"step {self.step} {action} broker {broker.node_id}: controller leader {self.leader} epoch "
                  f"{self.leader_epoch} isr {self.isr} live {sorted(self.live)}; brokers {views}")
        self._check()
        self.report.steps += 1

    async def _run(self) -> None:
        for broker in self.brokers.values():
            self._start(broker)
            self._deliver(broker)
        for _ in range(self.config.steps):
            await self._step()
        self.report.committed = len(self.committed)

    def run(self) -> SimulationReport:
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
        try:
            trio.run(self._run, clock=trio.testing.MockClock(autojump_threshold=0))
        finally:
            for broker in self.brokers.values():
                if broker.logs is not None:
                    broker.logs.close()
        return self.report


def _records(p: Partition, start: int, end: int) -> dict[int, bytes]:
    """Offset -> value of the records of ``p``'s log in ``[start, end)``."""
    found: dict[int, bytes] = {}
    offset = start
    while offset < end:
        data = p.log.read(offset, 1 << 20, end, min_one_batch=True)
        region = data.region
        if region is None or len(region) == 0:
            break
        buf = region if isinstance(region, bytes) else region.read()
        for position, header in iter_batch_headers(buf):
            for record in iter_records(buf, position):
                if start <= record.offset < end:
                    found[record.offset] = record.value or b""
            offset = header.next_offset
    return found


def run_simulation(seed: int, directory: Path, config: SimulationConfig = SimulationConfig(),
                   *, trace: bool = False) -> SimulationReport:
    sim = Simulation(seed, directory, config)
    sim.trace = trace
    return sim.run()


def _seeds(args: argparse.Namespace) -> Iterator[int]:
    if args.seed is not None:
        yield args.seed
    else:
        yield from range(1, args.seeds + 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=None, help="replay one seed")
    parser.add_argument("--seeds", type=int, default=200, help="run seeds 1..N")
    parser.add_argument("--steps", type=int, default=SimulationConfig().steps)
    parser.add_argument("--trace", action="store_true", help="print every step")
    args = parser.parse_args()
    failed = 0
    for seed in _seeds(args):
        directory = Path(tempfile.mkdtemp(prefix="data-plane-sim-"))
        try:
            report = run_simulation(seed, directory, SimulationConfig(steps=args.steps), trace=args.trace)
            print(report)
        except InvariantViolation as ex:
            print(ex)
            failed += 1
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
