#!/usr/bin/env python3
"""Metadata benchmark: how a cluster's nodes take in a large metadata change.

Starts ``cormorant cluster up --nodes 3 --controllers 1`` (node 1 combined broker and
controller, nodes 2 and 3 brokers only, following the metadata log with Fetch), then:

- create: TOPICS CreateTopics of PARTITIONS partitions each (at most 9,999: Kafka writes at most
  10,000 records per request), every replica on node 1
  (so nodes 2 and 3 only learn the metadata); seconds until node 3's Metadata shows them all,
  and the CPU seconds each node spent meanwhile;
- restart: ``cluster down`` then ``cluster up`` on the same directory (node 1 replays its
  metadata journal, the brokers fetch the log or a snapshot); seconds to serving and CPU
  seconds per node;
- slow loop steps: the ``slow_task_step`` lines (steps over ``event.loop.slow.step.ms``) each
  node logged during each phase: count, longest and total wall ms.

With ``--in-process``, no cluster: the metadata path alone, CPU seconds of (a) a voter
replaying its journal (one committed entry per CreateTopics, through the controller, the
broker's metadata view and a replica manager hosting none of the partitions) and (b) a
broker-only node's follower taking in the same records, one fetch per entry.

Usage: python scripts/bench_metadata.py [--topics N] [--partitions N] [--dir D] [--slow-step-ms N]
       [--in-process]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from broker.tools.client import KafkaClient  # noqa: E402
from wire.generated.api_003_metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse  # noqa: E402

NODES = 3
TIMEOUT_S = 600.0
_BOOTSTRAP = re.compile(r"^bootstrap\.servers=(\S+)$", re.MULTILINE)
_TICKS = os.sysconf("SC_CLK_TCK")


def cli(directory: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "broker", "cluster", *args, "--dir", str(directory)], cwd=ROOT,
                          capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise SystemExit(f"cluster {args[0]} failed: {done.stdout}\n{done.stderr}")
    return done.stdout


def cpu_s(directory: Path) -> dict[int, float]:
    """CPU seconds (user + system) each node's process has used."""
    out = {}
    for node in range(1, NODES + 1):
        pid = int((directory / f"node-{node}" / "cormorant.pid").read_text().strip())
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        out[node] = (int(fields[11]) + int(fields[12])) / _TICKS
    return out


def log_sizes(directory: Path) -> dict[int, int]:
    return {n: (directory / f"node-{n}" / "node.log").stat().st_size for n in range(1, NODES + 1)}


def slow_steps(directory: Path, since: dict[int, int]) -> dict[int, tuple[int, float, float]]:
    """Per node: (slow steps, longest wall ms, total wall ms) logged after ``since``."""
    out = {}
    for node in range(1, NODES + 1):
        with open(directory / f"node-{node}" / "node.log", "rb") as f:
            f.seek(since.get(node, 0))
            walls = []
            for line in f:
                if b"slow_task_step" not in line:
                    continue
                try:
                    walls.append(float(json.loads(line)["wall_ms"]))
                except (ValueError, KeyError):
                    found = re.search(rb"wall_ms=([0-9.]+)", line)
                    if found:
                        walls.append(float(found.group(1)))
        out[node] = (len(walls), max(walls, default=0.0), sum(walls))
    return out


def partitions_known(server: str, names: list[str]) -> int:
    with KafkaClient.connect(server, timeout_s=30.0) as client:
        reply = client.send(MetadataRequest(topics=[MetadataRequestTopic(name=n) for n in names]),
                            MetadataResponse, 9)
    return sum(len(t.partitions) for t in reply.topics if t.error_code == 0)


def create(bootstrap: str, names: list[str], partitions: int) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for name in names:  # one CreateTopics each: a request may write at most 10,000 records
        topic = NewTopic(name, partitions, replica_assignment=[[1]] * partitions)
        for future in admin.create_topics([topic], operation_timeout=300, request_timeout=310).values():
            try:
                future.result(TIMEOUT_S)
            except KafkaException as ex:  # a retried request finds the topic it created
                if ex.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise


def report(phase: str, seconds: float, before: dict[int, float], after: dict[int, float],
           steps: dict[int, tuple[int, float, float]]) -> None:
    print(f"{phase}: {seconds:.2f} s")
    for node in range(1, NODES + 1):
        count, longest, total = steps[node]
        role = "broker+controller" if node == 1 else "broker"
        print(f"  node {node} ({role}): cpu {after[node] - before.get(node, 0.0):.2f} s, "
              f"slow steps {count} (longest {longest:.0f} ms, total {total:.0f} ms)")


def in_process(topics: int, partitions: int) -> None:
    import random
    import uuid

    from broker.cluster.metadata_follower import MetadataView
    from broker.log.config import LogConfig
    from broker.log.manager import LogManager
    from broker.replication.replica_manager import ReplicaManager
    from controller.delta import MetadataDelta
    from controller.image import MetadataImage
    from controller.quorum import CommitListener
    from controller.service import Controller, ControllerSettings
    from wire.generated.metadata.rec_000_register_broker_record import RegisterBrokerRecord
    from wire.generated.metadata.rec_002_topic_record import TopicRecord
    from wire.generated.metadata.rec_003_partition_record import PartitionRecord
    from wire.primitives import Message

    class Journal:
        """A quorum that only replays: every entry is already committed."""

        leader_id, epoch, end_offset = 1, 1, 0
        listener: CommitListener

        def is_leader(self) -> bool:
            return True

        def add_listener(self, listener: CommitListener) -> None:
            self.listener = listener

        async def append(self, records: object) -> int:
            raise NotImplementedError

        def close(self) -> None:
            pass

    rng = random.Random(1)
    entries: list[list[Message]] = [[RegisterBrokerRecord(broker_id=b, broker_epoch=0, incarnation_id=uuid.UUID(int=b))
                                     for b in (1, 2, 3)]]
    for t in range(topics):
        topic_id = uuid.UUID(int=rng.getrandbits(128))
        entries.append([TopicRecord(name=f"t{t}", topic_id=topic_id), *(
            PartitionRecord(partition_id=p, topic_id=topic_id, replicas=[1], isr=[1], leader=1, leader_epoch=0,
                            partition_epoch=0) for p in range(partitions))])

    def broker_view(directory: str) -> MetadataView:
        view = MetadataView()
        view.mark_caught_up()
        replicas = ReplicaManager(3, LogManager([Path(directory)], LogConfig(), lambda: 0),
                                  lambda _image, _topic: LogConfig(), {})
        view.add_publisher(replicas.apply_delta)
        return view

    with tempfile.TemporaryDirectory() as directory:
        journal = Journal()
        controller = Controller(1, journal, ControllerSettings(), random.Random(0))
        controller.add_metadata_publisher(broker_view(directory).on_metadata_update)
        offset, started = 0, time.process_time()
        for entry in entries:
            journal.listener([(offset + i, record) for i, record in enumerate(entry)])
            offset += len(entry)
        replay_s = time.process_time() - started
    with tempfile.TemporaryDirectory() as directory:
        view = broker_view(directory)
        image, offset, started = MetadataImage(), 0, time.process_time()
        for entry in entries:
            delta = MetadataDelta(image)
            delta.replay_all(enumerate(entry, offset))
            image = delta.apply()
            view.on_metadata_update(delta, image)
            offset += len(entry)
        follow_s = time.process_time() - started
    print(f"{topics} x {partitions} partitions: journal replay through the controller {replay_s:.2f} s CPU, "
          f"a broker-only node's follower {follow_s:.2f} s CPU")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--topics", type=int, default=1)
    ap.add_argument("--partitions", type=int, default=9_999)
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--slow-step-ms", type=int, default=50)
    ap.add_argument("--in-process", action="store_true")
    args = ap.parse_args(argv)
    if args.in_process:
        in_process(args.topics, args.partitions)
        return 0
    directory = args.dir or Path(tempfile.mkdtemp(prefix="bench-metadata-")) / "nodes"
    overrides = {"event.loop.slow.step.ms": str(args.slow_step_ms), "offsets.topic.num.partitions": "6",
                 "transaction.state.log.num.partitions": "6", "max.partitions.per.request": "100000"}
    up_args = ["up", "--nodes", str(NODES), "--controllers", "1"]
    for key, value in overrides.items():
        up_args += ["--override", f"{key}={value}"]
    found = _BOOTSTRAP.search(cli(directory, *up_args))
    assert found is not None
    servers = found.group(1).split(",")
    names = [f"bench-{i}" for i in range(args.topics)]
    total = args.topics * args.partitions
    try:
        print(f"{total} partitions ({args.topics} x {args.partitions}), every replica on node 1; "
              f"load average {os.getloadavg()[0]:.2f}")
        marks, before = log_sizes(directory), cpu_s(directory)
        started = time.monotonic()
        create(servers[0], names, args.partitions)
        while partitions_known(servers[2], names) < total:
            if time.monotonic() - started > TIMEOUT_S:
                raise SystemExit("node 3 never learned every partition")
            time.sleep(0.05)
        elapsed = time.monotonic() - started
        time.sleep(1.0)  # the other nodes' last steps
        report("create (until node 3 knows every partition)", elapsed, before, cpu_s(directory),
               slow_steps(directory, marks))
        cli(directory, "down")
        marks = log_sizes(directory)
        started = time.monotonic()
        cli(directory, "up")
        while partitions_known(servers[2], names) < total:
            if time.monotonic() - started > TIMEOUT_S:
                raise SystemExit("node 3 never learned every partition after the restart")
            time.sleep(0.05)
        elapsed = time.monotonic() - started
        report("restart (until node 3 serves every partition)", elapsed, {}, cpu_s(directory),
               slow_steps(directory, marks))
    finally:
        cli(directory, "down")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
