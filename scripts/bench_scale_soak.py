#!/usr/bin/env python3
"""Partition-scale soak (``scripts/bench scale-soak``): one producer writing round-robin to every
partition of TOPICS x PARTITIONS (default 200 x 100 = 20,000) on one broker and a consumer group of
MEMBERS confluent-kafka consumers reading all of them, for MINUTES (default 10).

The broker runs under ``prlimit --nofile=LIMIT`` (default 4,096: a log-file budget of 1,984, far
below the 20,000 active segments, so the log-file cache evicts all the time) with its metrics
endpoint on a free port. Every SAMPLE seconds the broker's open descriptors and RSS (``/proc``),
its event loop's living tasks (``cormorant.eventloop.tasks``) and the log-file cache (files open,
evictions) are sampled; the report compares the mean of the first fifth of the samples with the
mean of the last fifth, leaving out the first WARMUP seconds (flat: the last within TOLERANCE of the first). Every record carries a
sequence number: each one acknowledged must be consumed (duplicates, after a rebalance, are
counted, not failed). The consumer lag at the end is measured twice: when the producer stops
(acknowledged minus consumed) and from the group's committed offsets after the drain.

    scripts/bench scale-soak                          # 20,000 partitions, 10 minutes, nofile 4,096
    scripts/bench scale-soak --minutes 1 --topics 20  # a short check
    scripts/bench scale-soak --json scale-soak.json   # samples for scripts/plot_soak

Exits 1 if a record was lost or a resource was not flat.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_scale import LimitedCormorant, create
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from tests.replication.soak import scrape as scrape_samples

#: A scrape is never abandoned early: the broker would render it anyway, and the next one would pile up.
SCRAPE_TIMEOUT_S = 120.0
METRICS_URL = re.compile(r"^cormorant ready .* metrics=(http://\S+/metrics)", re.MULTILINE)
GROUP = "scale-soak"
#: Longest wait, after the producer stopped, for the group to read the last records.
DRAIN_TIMEOUT_S = 180.0
#: Longest wait for the group to be assigned every partition before the producer starts.
ASSIGN_TIMEOUT_S = 300.0


class MetricsCormorant(LimitedCormorant):
    """A broker under ``prlimit`` whose metrics endpoint listens on a free port of 127.0.0.1."""

    def command(self) -> list[str]:
        return [*super().command(), "--override", "metrics.enabled=true",
                "--override", "metrics.listener=127.0.0.1:0"]  # fmt: skip

    def metrics_url(self) -> str:
        match = METRICS_URL.search(self.stdout.read_text("utf-8", "replace"))
        if match is None:
            raise RuntimeError(f"no metrics URL in the ready line ({self.stdout})")
        return match.group(1)


def scrape(url: str) -> dict[str, float]:
    """The broker's samples by Prometheus name (no labels are needed here); empty if it failed.
    A scrape of 120,000 series may take long on a busy machine: hence the long timeout."""
    return scrape_samples(url, SCRAPE_TIMEOUT_S)


@dataclass(frozen=True, slots=True)
class Sample:
    at: float  #: seconds since the producer started
    node: int
    pid: int
    rss_mb: float
    open_files: int  #: every descriptor of the process (log files, sockets, the rest)
    threads: int
    tasks: int | None  #: ``cormorant.eventloop.tasks``; None if the scrape failed
    log_files_open: int | None
    log_file_evictions: int | None
    produced: int
    consumed: int


def read_proc(pid: int) -> tuple[float, int, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return (int(fields["VmRSS"].split()[0]) / 1024, len(os.listdir(f"/proc/{pid}/fd")),
            int(fields["Threads"].strip()))


class Ledger:
    """Which sequence numbers were acknowledged and which were consumed (one byte each)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked = bytearray()
        self.seen = bytearray()
        self.acked_count = 0
        self.consumed_count = 0  #: distinct sequence numbers consumed
        self.duplicates = 0
        self.errors: list[str] = []

    def ack(self, seq: int) -> None:
        with self.lock:
            if seq >= len(self.acked):
                self.acked.extend(bytes(seq + 1_000_000 - len(self.acked)))
            if not self.acked[seq]:
                self.acked[seq] = 1
                self.acked_count += 1

    def consume(self, seq: int) -> None:
        with self.lock:
            if seq >= len(self.seen):
                self.seen.extend(bytes(seq + 1_000_000 - len(self.seen)))
            if self.seen[seq]:
                self.duplicates += 1
            else:
                self.seen[seq] = 1
                self.consumed_count += 1

    def lost(self) -> int:
        """Acknowledged sequence numbers never consumed."""
        with self.lock:
            seen = self.seen.ljust(len(self.acked), b"\0")
            return sum(1 for i, a in enumerate(self.acked) if a and not seen[i])


class RoundRobinProducer(threading.Thread):
    """One confluent-kafka producer writing ``rate`` records a second to every partition in turn."""

    def __init__(self, bootstrap: str, partitions: list[tuple[str, int]], rate: float, ledger: Ledger) -> None:
        super().__init__(name="round-robin-producer", daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all",
                                  "enable.idempotence": True, "message.timeout.ms": 120_000})
        self.partitions = partitions
        self.rate = rate
        self.ledger = ledger
        self.sent = 0
        self.stop_event = threading.Event()

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            self.ledger.ack(int(msg.value()))
        else:
            with self.ledger.lock:
                if len(self.ledger.errors) < 20:
                    self.ledger.errors.append(f"delivery: {err}")

    def run(self) -> None:
        started = time.monotonic()
        while not self.stop_event.is_set():
            due = int((time.monotonic() - started) * self.rate)
            while self.sent < due and not self.stop_event.is_set():
                topic, partition = self.partitions[self.sent % len(self.partitions)]
                try:
                    self.producer.produce(topic, value=str(self.sent).encode(), partition=partition,
                                          on_delivery=self._delivered)
                except BufferError:
                    self.producer.poll(0.1)
                    continue
                self.sent += 1
            self.producer.poll(0.05)
        self.producer.flush(120)


class GroupMember(threading.Thread):
    def __init__(self, bootstrap: str, topics: list[str], ledger: Ledger, index: int) -> None:
        super().__init__(name=f"group-member-{index}", daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                                  "auto.offset.reset": "earliest", "enable.auto.commit": True,
                                  "auto.commit.interval.ms": 5000, "session.timeout.ms": 45_000})
        self.topics = topics
        self.ledger = ledger
        self.assigned = 0
        self.stop_event = threading.Event()

    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self.assigned = len(partitions)

    def run(self) -> None:
        self.consumer.subscribe(self.topics, on_assign=self._on_assign)
        while not self.stop_event.is_set():
            for msg in self.consumer.consume(1000, timeout=0.5):
                value = msg.value()
                if msg.error() is None and value is not None:
                    self.ledger.consume(int(value))
        try:
            self.consumer.commit(asynchronous=False)
        except KafkaException:
            pass  # nothing consumed since the last auto-commit (_NO_OFFSET)
        self.consumer.close()


def committed_lag(bootstrap: str, partitions: list[tuple[str, int]]) -> int:
    """Sum over every partition of log end offset minus the group's committed offset."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    committed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(GROUP)])[GROUP].result(60)
    offsets = {(tp.topic, tp.partition): max(tp.offset, 0) for tp in committed.topic_partitions}
    lag = 0
    for i in range(0, len(partitions), 5000):
        chunk = partitions[i : i + 5000]
        ends = admin.list_offsets({TopicPartition(t, p): OffsetSpec.latest()  # type: ignore[no-untyped-call]
                                  for t, p in chunk}, request_timeout=60)
        for tp, future in ends.items():
            lag += future.result(60).offset - offsets.get((tp.topic, tp.partition), 0)
    return lag


def fifths(samples: list[Sample], attr: str, warmup_s: float) -> tuple[float, float] | None:
    values = [getattr(s, attr) for s in samples if getattr(s, attr) is not None and s.at >= warmup_s]
    if len(values) < 5:
        return None
    n = max(1, len(values) // 5)
    return sum(values[:n]) / n, sum(values[-n:]) / n


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench scale-soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--nofile", type=int, default=4096)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=1000.0, help="records per second, round-robin")
    parser.add_argument("--members", type=int, default=3, help="consumers in the group")
    parser.add_argument("--sample", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--scrape-every", type=float, default=10.0,
                        help="seconds between scrapes of the metrics endpoint (tasks, log-file cache)")
    parser.add_argument("--tolerance", type=float, default=0.10,
                        help="flat: the last fifth's mean within this fraction of the first fifth's")
    parser.add_argument("--warmup", type=float,
                        help="seconds of samples left out of the fifths; by default one round-robin pass over "
                             "every partition plus 60 s (the first pass opens every segment and index)")
    parser.add_argument("--json", type=Path, help="write the samples here (for scripts/plot_soak)")
    args = parser.parse_args(argv)
    # A SIGTERM stops the broker and removes the data too (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.warmup is None:
        args.warmup = args.topics * args.partitions / args.rate + 60.0
    work = Path(tempfile.mkdtemp(prefix="cormorant-bench-scale-soak-"))
    broker = MetricsCormorant(work / "cormorant", args.nofile)
    names = [f"scale-{i}" for i in range(args.topics)]
    partitions = [(n, p) for p in range(args.partitions) for n in names]
    ledger = Ledger()
    members: list[GroupMember] = []
    producer: RoundRobinProducer | None = None
    samples: list[Sample] = []
    try:
        print(f"load average before: {os.getloadavg()}, cpus {os.cpu_count()}", flush=True)
        broker.start()
        assert broker.proc is not None
        pid = broker.proc.pid
        url = broker.metrics_url()
        budget = scrape(url).get("cormorant_log_open_files_budget")
        print(f"{args.topics} topics x {args.partitions} partitions = {len(partitions)}, nofile {args.nofile}, "
              f"log-file budget {budget}, {args.rate:.0f} records/s, {args.members} members, "
              f"{args.minutes} min", flush=True)
        created = create(broker.bootstrap, names, args.partitions)
        print(f"created in {created:.1f} s", flush=True)
        members = [GroupMember(broker.bootstrap, names, ledger, i) for i in range(args.members)]
        for member in members:
            member.start()
        deadline = time.monotonic() + ASSIGN_TIMEOUT_S
        while sum(m.assigned for m in members) < len(partitions) and time.monotonic() < deadline:
            time.sleep(1)
        print(f"group assigned {[m.assigned for m in members]}", flush=True)
        producer = RoundRobinProducer(broker.bootstrap, partitions, args.rate, ledger)
        started = time.monotonic()
        producer.start()
        end = started + args.minutes * 60
        last_scrape = started
        while True:
            now = time.monotonic()
            if not broker.alive():
                print(broker.exit_report(), flush=True)
                return 1
            rss, fds, threads = read_proc(pid)
            scraped = not samples or now - last_scrape >= args.scrape_every - 0.5
            metrics = scrape(url) if scraped else {}
            if scraped:
                last_scrape = now
            tasks = metrics.get("cormorant_eventloop_tasks")
            open_logs = metrics.get("cormorant_log_open_files")
            evictions = metrics.get("cormorant_log_open_files_evictions_total")
            sample = Sample(now - started, 1, pid, rss, fds, threads,
                            None if tasks is None else int(tasks), None if open_logs is None else int(open_logs),
                            None if evictions is None else int(evictions), ledger.acked_count,
                            ledger.consumed_count)
            samples.append(sample)
            print(f"  {sample.at:6.0f} s  rss {rss:7.1f} MB  fds {fds:5d}  tasks {sample.tasks}  "
                  f"log files {sample.log_files_open}  evictions {sample.log_file_evictions}  "
                  f"acked {sample.produced}  consumed {sample.consumed}  load {os.getloadavg()[0]:.1f}",
                  flush=True)
            if now >= end:
                break
            time.sleep(max(0.0, min(args.sample, end - time.monotonic())))
        producer.stop_event.set()
        producer.join(180)
        lag_at_stop = ledger.acked_count - ledger.consumed_count
        drain_deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while ledger.consumed_count < ledger.acked_count and time.monotonic() < drain_deadline:
            time.sleep(0.5)
        drained_s = DRAIN_TIMEOUT_S - (drain_deadline - time.monotonic())
        for member in members:
            member.stop_event.set()
        for member in members:
            member.join(60)
        lag_committed = committed_lag(broker.bootstrap, partitions)
        lost = ledger.lost()
        print(f"load average after: {os.getloadavg()}", flush=True)
        print(f"records sent {producer.sent}, acknowledged {ledger.acked_count}, consumed {ledger.consumed_count} "
              f"(+{ledger.duplicates} duplicates), lost {lost}; delivery errors {ledger.errors[:5]}")
        print(f"consumer lag when the producer stopped: {lag_at_stop} records; read within {drained_s:.1f} s; "
              f"committed-offset lag after the drain: {lag_committed}")
        ok = lost == 0 and ledger.acked_count == producer.sent
        print(f"samples after the first {args.warmup:.0f} s (warm-up), mean of the first and the last fifth:")
        print(f"{'resource':<22}{'first fifth':>14}{'last fifth':>14}{'change':>10}")
        for attr in ("open_files", "rss_mb", "tasks", "threads", "log_files_open"):
            pair = fifths(samples, attr, args.warmup)
            if pair is None:
                continue
            first, last = pair
            change = (last - first) / first if first else 0.0
            flat = change <= args.tolerance
            ok = ok and (flat or attr == "log_files_open")
            print(f"{attr:<22}{first:>14.1f}{last:>14.1f}{change:>+10.1%}{'' if flat else '  GROWS'}")
        if len(samples) >= 2 and samples[-1].log_file_evictions is not None:
            first_ev = samples[0].log_file_evictions or 0
            span = samples[-1].at - samples[0].at
            rate = (samples[-1].log_file_evictions - first_ev) / span if span else 0.0
            print(f"log-file evictions: {samples[-1].log_file_evictions} in all, {rate:.0f}/s during the run")
        if args.json:
            args.json.write_text(json.dumps({"minutes": args.minutes, "kills": 0, "partitions": len(partitions),
                                             "nofile": args.nofile, "samples": [asdict(s) for s in samples]}))
        print("OK" if ok else "FAILED", flush=True)
        return 0 if ok else 1
    finally:
        if producer is not None:
            producer.stop_event.set()
        for member in members:
            member.stop_event.set()
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
