#!/usr/bin/env python3
"""Partition-scale benchmark (``scripts/bench scale``): many partitions on one broker.

Rows, for Cormorant and (where it applies) Tansu with memory storage, both started as
``scripts/bench`` starts them (bench_brokers.py), on 127.0.0.1:

- creation: TOPICS topics of PARTITIONS partitions through confluent-kafka's AdminClient,
  20 topics per CreateTopics request; partitions per second;
- Metadata of every partition (AdminClient list_topics), seconds;
- a record produced to every partition and every one read back, seconds;
- RSS and open descriptors of the broker with the partitions idle;
- Cormorant only: restart to serving after kill -9 with nothing flushed (every partition
  recovers from its recovery point, 0), after a clean shutdown, and after kill -9 once that
  clean shutdown moved every recovery point to the log end; seconds, with the CPU seconds
  each start used and its ``log_dir_loaded`` line; and how long the clean shutdown took.
  100,000 partitions: ``--topics 1000 --partitions 100 --nofile 20000`` (docs/performance.md).
- with ``--connections N`` (on a fresh broker of each, with no partitions but the internal
  ones): N client connections opened one after the other, each sending ApiVersions, all kept
  open; connections per second until every one was answered, the seconds until the client had
  opened them all and until every one was answered, the broker's RSS idle and with the N
  connections open (and per connection), and its descriptors then by kind (sockets, log
  files, others). Cormorant's ``open_file_limit`` line shows how it split its limit.

Cormorant runs under ``prlimit --nofile=LIMIT`` (default 4,096) to show the descriptor budget.
The machine's load average is printed with the results.

Usage: scripts/bench scale [--topics N] [--partitions N] [--nofile N] [--connections N] [--no-tansu]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_brokers import BrokerProcess, Cormorant, Tansu, tansu_binary
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

TOPICS_PER_REQUEST = 20
TOPICS_PER_PRODUCER = 50
#: ApiVersions v0 (correlation id 1, no client id), with its size prefix.
API_VERSIONS_V0 = struct.pack(">ihhih", 10, 18, 0, 1, -1)


class LimitedCormorant(Cormorant):
    #: Loading tens of thousands of partitions takes longer than the load benchmark's start.
    ready_timeout_s = 600.0

    def __init__(self, work_dir: Path, nofile: int) -> None:
        super().__init__(work_dir)
        self.nofile = nofile

    def command(self) -> list[str]:
        return ["prlimit", f"--nofile={self.nofile}:{self.nofile}", *super().command()]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def create(bootstrap: str, names: list[str], partitions: int) -> float:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    started = time.monotonic()
    for i in range(0, len(names), TOPICS_PER_REQUEST):
        futures = admin.create_topics(
            [NewTopic(n, partitions, 1) for n in names[i : i + TOPICS_PER_REQUEST]], request_timeout=120
        )
        for future in futures.values():
            future.result(timeout=120)
    return time.monotonic() - started


def metadata_s(bootstrap: str, expected: int) -> float:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.list_topics(timeout=30)  # connect first
    started = time.monotonic()
    md = admin.list_topics(timeout=60)
    elapsed = time.monotonic() - started
    count = sum(len(t.partitions) for name, t in md.topics.items() if name.startswith("scale-"))
    assert count == expected, f"metadata shows {count} partitions, expected {expected}"
    return elapsed


def produce_and_read(bootstrap: str, names: list[str], partitions: int) -> tuple[float, float]:
    started = time.monotonic()
    # One producer per TOPICS_PER_PRODUCER topics: a producer asks for the metadata of every
    # topic it knows each time it meets a new one, so one producer over a thousand topics asks
    # for 50 million partitions' metadata in all (of any broker).
    for i in range(0, len(names), TOPICS_PER_PRODUCER):
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                             "queue.buffering.max.messages": 2_000_000})
        for name in names[i : i + TOPICS_PER_PRODUCER]:
            for p in range(partitions):
                producer.produce(name, value=b"v", partition=p)
                producer.poll(0)
        assert producer.flush(300) == 0
    produce = time.monotonic() - started
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "scale-bench", "enable.auto.commit": False})
    consumer.assign([TopicPartition(n, p, 0) for n in names for p in range(partitions)])
    started = time.monotonic()
    got = 0
    expected = len(names) * partitions
    deadline = started + 300
    while got < expected and time.monotonic() < deadline:
        got += sum(1 for m in consumer.consume(10_000, timeout=1) if m.error() is None)
    consumer.close()
    assert got == expected, f"read {got} of {expected}"
    return produce, time.monotonic() - started


#: A clean shutdown of 100,000 partitions takes longer than bench_brokers' 15 s before SIGKILL.
CLEAN_STOP_TIMEOUT_S = 600.0
SETTLE_S = 5.0


def clean_stop_s(broker: BrokerProcess) -> float:
    """SIGTERM, and the seconds until the broker exited (it must exit 0: a clean shutdown)."""
    assert broker.proc is not None
    # The broker prints its ready line before it listens for SIGTERM (a SIGTERM at once kills
    # it uncleanly, exit -15): give it a moment.
    time.sleep(SETTLE_S)
    started = time.monotonic()
    broker.proc.send_signal(signal.SIGTERM)
    code = broker.proc.wait(CLEAN_STOP_TIMEOUT_S)
    assert code == 0, f"exit code {code} after SIGTERM"
    return time.monotonic() - started


def log_dir_loaded(broker: BrokerProcess) -> str:
    """The start's ``log_dir_loaded`` line (clean or not, partitions loaded from the summary)."""
    lines = [line for line in broker.stderr.read_text("utf-8", "replace").splitlines() if "log_dir_loaded" in line]
    return lines[-1].split("log_dir_loaded", 1)[1].strip() if lines else "<none>"


def restart_s(broker: BrokerProcess, row: Row, kill: bool) -> float:
    assert broker.proc is not None
    if kill:
        broker.proc.kill()
        broker.proc.wait(30)
    else:
        row["clean shutdown s"] = clean_stop_s(broker)
    started = time.monotonic()
    broker.start()
    elapsed = time.monotonic() - started
    # On a shared machine the wall time is mostly waiting for a core: the CPU is comparable.
    print(f"    start used {broker.cpu() or float('nan'):.1f} s of CPU; log_dir_loaded {log_dir_loaded(broker)}",
          flush=True)
    return elapsed


def run(broker: BrokerProcess, topics: int, partitions: int, restarts: bool) -> dict[str, float]:
    names = [f"scale-{i}" for i in range(topics)]
    total = topics * partitions
    broker.start()
    row = Row(broker.name)
    try:
        assert broker.proc is not None
        created = create(broker.bootstrap, names, partitions)
        row["create partitions/s"] = total / created
        row["metadata s"] = metadata_s(broker.bootstrap, total)
        row["produce one each s"], row["read all s"] = produce_and_read(broker.bootstrap, names, partitions)
        time.sleep(2)
        row["RSS MB"] = rss_mb(broker.proc.pid)
        row["open fds"] = fds(broker.proc.pid)
        if restarts:
            # Nothing was flushed yet (flush.ms is unset, as Kafka's): every partition recovers.
            row["restart kill -9 unflushed s"] = restart_s(broker, row, kill=True)
            row["restart clean s"] = restart_s(broker, row, kill=False)
            # The clean shutdown moved every recovery point to the log end.
            row["restart kill -9 s"] = restart_s(broker, row, kill=True)
            row["metadata after restart s"] = metadata_s(broker.bootstrap, total)
        return row
    except BaseException:
        if isinstance(broker, Cormorant) and not broker.alive():
            print(broker.exit_report(), flush=True)
        raise
    finally:
        broker.stop()


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    data = sock.recv(n, socket.MSG_WAITALL)
    if len(data) != n:
        raise ConnectionError(f"connection closed after {len(data)} of {n} bytes")
    return data


def descriptor_kinds(pid: int) -> tuple[int, int, int]:
    """(sockets, log files, other descriptors) the process holds open."""
    sockets = logs = other = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:"):
            sockets += 1
        elif target.endswith((".log", ".index", ".timeindex")):
            logs += 1
        else:
            other += 1
    return sockets, logs, other


def open_file_limit_line(broker: BrokerProcess) -> str:
    """The broker's ``open_file_limit`` log line: how it split its descriptor limit."""
    for path in (broker.stderr, broker.stdout):
        for line in path.read_text("utf-8", "replace").splitlines():
            if "open_file_limit" in line:
                return line.split("open_file_limit", 1)[1].strip()
    return "<none>"


def connections(broker: BrokerProcess, count: int) -> dict[str, float]:
    """``count`` connections opened one after the other, each sending an ApiVersions, all kept
    open; then every answer read. The broker accepts and answers while the client still opens."""
    broker.start()
    row = Row(broker.name)
    socks: list[socket.socket] = []
    try:
        assert broker.proc is not None
        if isinstance(broker, Cormorant):
            print(f"    descriptor limit split: {open_file_limit_line(broker)}", flush=True)
        time.sleep(1)
        idle = rss_mb(broker.proc.pid)
        row["RSS MB idle"] = idle
        started = time.monotonic()
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", broker.port), timeout=60)
            socks.append(sock)
            sock.sendall(API_VERSIONS_V0)
        opened = time.monotonic() - started
        for sock in socks:
            (size,) = struct.unpack(">i", _read_exactly(sock, 4))
            _read_exactly(sock, size)
        answered = time.monotonic() - started
        # The kernel completes a connect() from its backlog before the broker accepts it: the
        # rate that counts is until every connection was answered.
        row[f"{count} connections/s"] = count / answered
        row[f"{count} opened by the client s"] = opened
        row[f"{count} all answered s"] = answered
        time.sleep(1)
        rss = rss_mb(broker.proc.pid)
        row[f"RSS MB, {count} open"] = rss
        row["RSS KB per connection"] = (rss - idle) * 1024 / count
        sockets, logs, other = descriptor_kinds(broker.proc.pid)
        row[f"sockets, {count} open"] = sockets
        row[f"log files, {count} open"] = logs
        row[f"other fds, {count} open"] = other
        return row
    finally:
        for sock in socks:
            sock.close()
        broker.stop()


class Row(dict[str, float]):
    """One broker's results, each printed as it is measured (a later failure keeps them)."""

    def __init__(self, broker: str) -> None:
        super().__init__()
        self.broker = broker

    def __setitem__(self, key: str, value: float) -> None:
        print(f"  {self.broker}: {key} = {value:.3f}", flush=True)
        super().__setitem__(key, value)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--nofile", type=int, default=4096)
    parser.add_argument("--connections", type=int, default=0,
                        help="also open this many client connections to a fresh broker of each (e.g. 5000)")
    parser.add_argument("--no-tansu", action="store_true")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="cormorant-bench-scale-"))
    try:
        print(f"load average before: {os.getloadavg()}, cpus {os.cpu_count()}", flush=True)
        print(f"{args.topics} topics x {args.partitions} partitions, Cormorant under nofile={args.nofile}")
        results = {"cormorant": run(LimitedCormorant(work / "cormorant", args.nofile), args.topics,
                                    args.partitions, restarts=True)}
        exe = tansu_binary()
        if exe is not None and not args.no_tansu:
            results["tansu"] = run(Tansu(work / "tansu", exe), args.topics, args.partitions, restarts=False)
        if args.connections > 0:
            # Each connection is a descriptor: the limit leaves room for them besides the log budget.
            nofile = max(args.nofile, args.connections + 1024)
            print(f"{args.connections} connections, Cormorant under nofile={nofile}")
            results["cormorant"].update(connections(LimitedCormorant(work / "cormorant-conn", nofile),
                                                    args.connections))
            if "tansu" in results and exe is not None:
                results["tansu"].update(connections(Tansu(work / "tansu-conn", exe), args.connections))
        print(f"load average after: {os.getloadavg()}")
        rows = sorted({k for r in results.values() for k in r}, key=list(results["cormorant"]).index)
        print(f"{'row':<28}" + "".join(f"{b:>14}" for b in results))
        for key in rows:
            print(f"{key:<28}" + "".join(f"{r.get(key, float('nan')):>14.3f}" for r in results.values()))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
