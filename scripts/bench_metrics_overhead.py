#!/usr/bin/env python3
"""What metrics cost: the produce load of scripts/bench against two Cormorant brokers side
by side, one with metrics on (scraped every second) and one with ``metrics.enabled=false``.

Each case runs ``--rounds`` times on each broker, alternating which goes first; every run
is scripts/bench's own worker (confluent-kafka, verified read-back), on a fresh topic.
The broker is pinned to CPU 0 and the worker to the other CPUs when there are several,
so the two do not trade places between runs. Reported per case: median produce rate and broker
CPU per record on each broker, and the cost of metrics as the median over rounds of each
round's on/off ratio (throughput lost; CPU per record added).

``--hot-path`` instead times, in this process, the metric calls one Produce and one Fetch
request make (what dispatch and the handlers add per request), against the same code
with metrics disabled.

Usage: scripts/bench_metrics_overhead.py [--rounds N] [--seconds S] [--case SUBSTRING]
                                         [--scrape-interval S] [--json FILE] [--hot-path]
Exit status: 0 when every run verified, 1 otherwise, 2 when confluent-kafka is missing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "scripts" / "bench_load.py"
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
WORKER_TIMEOUT_S = 240.0
#: Scrapes of the metrics-on broker; Prometheus usually scrapes every 15-60 s.
SCRAPE_INTERVAL_S = 5.0
RESULT_PREFIX = "BENCH-RESULT "
DEFAULT_CASES = (
    "produce 100 B acks=1 none",
    "produce 1 KiB acks=1 none",
    "produce 1 KiB acks=all none",
    "produce 1 KiB acks=1 lz4",
)
READY = re.compile(r"^cormorant ready .*PLAINTEXT://127\.0\.0\.1:(\d+)(?:.* metrics=(\S+))?", re.MULTILINE)


def load_bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_load", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_load"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def cpu_sets() -> tuple[set[int] | None, set[int] | None]:
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cpus) < 2:
        return None, None
    return {cpus[0]}, set(cpus[1:])


def pin(cpus: set[int] | None) -> Any:
    return (lambda: os.sched_setaffinity(0, cpus)) if cpus else None


def cpu_seconds(pid: int) -> float:
    """CPU time of every thread of ``pid``, in nanosecond resolution (schedstat), falling back
    to clock ticks (10 ms: too coarse for a short run of a compressed case)."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            total += int((task / "schedstat").read_text().split()[0])
        return total / 1e9
    except (OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def hot_path(iterations: int = 200_000) -> int:
    """Per-request cost of the metric calls on the produce and fetch paths."""
    sys.path.insert(0, str(ROOT))
    from broker.observability.metrics import BrokerMetrics, DisabledMetrics
    from broker.server.response_errors import error_code_counts
    from wire.batch_builder import build_batch
    from wire.generated.api_000_produce import (
        ProduceResponse,
        ProduceResponsePartitionProduceResponse,
        ProduceResponseTopicProduceResponse,
    )
    from wire.generated.api_001_fetch import (
        FetchResponse,
        FetchResponseFetchableTopicResponse,
        FetchResponsePartitionData,
    )
    from wire.records import NewRecord, iter_batch_headers

    batch = build_batch([NewRecord(key=None, value=b"x" * 100)] * 10)
    batches = list(iter_batch_headers(batch))
    produce = ProduceResponse(responses=[ProduceResponseTopicProduceResponse(
        name="t", partition_responses=[ProduceResponsePartitionProduceResponse(index=0)])])
    fetch = FetchResponse(responses=[FetchResponseFetchableTopicResponse(
        topic="t", partitions=[FetchResponsePartitionData(partition_index=i) for i in range(4)])])

    def run(metrics: BrokerMetrics, response: object, is_produce: bool) -> float:
        started = time.perf_counter()
        for _ in range(iterations):
            # dispatch.handle
            metrics.request_received(1200)
            metrics.request_started()
            if is_produce:  # h00_produce, one partition
                metrics.record_produce(10, len(batch))
                metrics.record_batches(batches)
            else:  # h01_fetch
                metrics.fetch_waiting(1)
                metrics.fetch_waiting(-1)
                metrics.record_fetch(4096)
            metrics.record_request(0, 0.0002)
            codes = error_code_counts(response)  # also done with metrics off: it feeds the error log
            if codes:
                metrics.record_errors(0, codes)
            metrics.response_sent(120)
        return (time.perf_counter() - started) / iterations * 1e6

    print("| request | metric calls, metrics on | metrics off | added per request |")
    print("|---|---:|---:|---:|")
    for label, response, is_produce in (("Produce, 1 partition", produce, True),
                                        ("Fetch, 4 partitions", fetch, False)):
        on = min(run(BrokerMetrics(), response, is_produce) for _ in range(3))
        off = min(run(DisabledMetrics(), response, is_produce) for _ in range(3))
        print(f"| {label} | {on:.2f} µs | {off:.2f} µs | {on - off:.2f} µs |")
    return 0


class Broker:
    def __init__(self, name: str, work: Path, metrics: bool, cpus: set[int] | None, scrape_s: float) -> None:
        self.name = name
        self.scrape_s = scrape_s
        self.work = work
        self.metrics = metrics
        self.cpus = cpus
        self.port = 0
        self.metrics_url = ""
        self.proc: subprocess.Popen[bytes] | None = None
        self.scrapes = 0
        self._stop = threading.Event()
        self._scraper: threading.Thread | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        overrides = {
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "log.dirs": str(self.work / "data"),
            "metrics.enabled": "true" if self.metrics else "false",
            "metrics.listener": "127.0.0.1:0",
        }
        cmd = [sys.executable, "-m", "broker", "serve"]
        for key, value in overrides.items():
            cmd += ["--override", f"{key}={value}"]
        out_path = self.work / "stdout.log"
        with out_path.open("wb") as out, (self.work / "stderr.log").open("wb") as err:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=str(ROOT),
                                         preexec_fn=pin(self.cpus))
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            match = READY.search(out_path.read_text("utf-8", "replace"))
            if match:
                self.port = int(match.group(1))
                self.metrics_url = match.group(2) or ""
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {(self.work / 'stderr.log').read_text()[-2000:]}")
            time.sleep(0.05)
        else:
            self.stop()
            raise RuntimeError(f"{self.name} printed no ready line in {READY_TIMEOUT_S:.0f} s")
        if self.metrics:
            if not self.metrics_url:
                raise RuntimeError(f"{self.name} has metrics on but no metrics endpoint")
            self._scraper = threading.Thread(target=self._scrape_loop, name="scraper", daemon=True)
            self._scraper.start()

    def _scrape_loop(self) -> None:
        # Metrics on means collected too: a Prometheus-like scrape, more often than usual.
        while not self._stop.wait(self.scrape_s):
            try:
                with urllib.request.urlopen(self.metrics_url, timeout=5) as response:
                    response.read()
                self.scrapes += 1
            except OSError:
                pass

    def cpu(self) -> float:
        assert self.proc is not None
        return cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        self._stop.set()
        if self._scraper is not None:
            self._scraper.join(10)
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_TIMEOUT_S)


def run_once(case: Any, broker: Broker, seconds: float, worker_cpus: set[int] | None) -> dict[str, Any]:
    slug = re.sub(r"[^a-z0-9]+", "-", case.name.lower()).strip("-")
    spec = {**asdict(case), "bootstrap": broker.bootstrap, "port": broker.port,
            "topic": f"overhead-{slug}-{uuid.uuid4().hex[:8]}", "seconds": seconds, "warmup": 0.5}
    cpu_before = broker.cpu()
    done = subprocess.run([sys.executable, str(BENCH), "--worker", json.dumps(spec)], cwd=str(ROOT),
                          capture_output=True, text=True, timeout=WORKER_TIMEOUT_S, preexec_fn=pin(worker_cpus))
    cpu = broker.cpu() - cpu_before
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            result: dict[str, Any] = json.loads(line[len(RESULT_PREFIX):])
            result["broker_cpu_s"] = cpu
            return result
    return {"ok": False, "error": f"worker exited {done.returncode}: {done.stderr[-800:]}"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=2.0, help="timed produce phase of each run")
    parser.add_argument("--case", action="append", default=None, metavar="SUBSTRING")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE")
    parser.add_argument("--scrape-interval", type=float, default=SCRAPE_INTERVAL_S, metavar="S")
    parser.add_argument("--hot-path", action="store_true", help="time the per-request metric calls only")
    args = parser.parse_args(argv)
    if args.hot_path:
        return hot_path()
    if importlib.util.find_spec("confluent_kafka") is None:
        print("bench_metrics_overhead: confluent-kafka is missing (pip install confluent-kafka)", file=sys.stderr)
        return 2
    bench = load_bench()
    wanted = args.case or list(DEFAULT_CASES)
    cases = [c for c in bench.all_cases() if c.kind == "throughput" and any(w in c.name for w in wanted)]
    if not cases:
        parser.error("no produce case matches")
    broker_cpus, worker_cpus = cpu_sets()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = Path(tempfile.mkdtemp(prefix="cormorant-overhead-"))
    brokers = {"on": Broker("metrics on", work / "on", True, broker_cpus, args.scrape_interval),
               "off": Broker("metrics off", work / "off", False, broker_cpus, args.scrape_interval)}
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {c.name: {"on": [], "off": []} for c in cases}
    failed = False
    try:
        for b in brokers.values():
            b.start()
        for case in cases:
            for rnd in range(args.rounds):
                for key in (("on", "off") if rnd % 2 == 0 else ("off", "on")):
                    result = run_once(case, brokers[key], args.seconds, worker_cpus)
                    runs[case.name][key].append(result)
                    if not result.get("ok"):
                        failed = True
                        print(f"{case.name} / metrics {key}: FAILED {result.get('error')}", file=sys.stderr)
                    else:
                        m = result["metrics"]
                        print(f"{case.name} / metrics {key} round {rnd + 1}: {m['produce_msg_s']:,.0f} msg/s",
                              file=sys.stderr, flush=True)
    finally:
        for b in brokers.values():
            b.stop()
    rows = []
    for case in cases:
        row: dict[str, Any] = {"case": case.name}
        for key in ("on", "off"):
            ok = [r for r in runs[case.name][key] if r.get("ok")]
            if not ok:
                row[key] = None
                continue
            rate = statistics.median(r["metrics"]["produce_msg_s"] for r in ok)
            cpu_us = statistics.median(r["broker_cpu_s"] / r["info"]["records"] * 1e6 for r in ok)
            row[key] = {"produce_msg_s": rate, "broker_cpu_us_per_record": cpu_us,
                        "runs": [r["metrics"]["produce_msg_s"] for r in ok]}
        if row["on"] and row["off"]:
            # Each round's two runs are neighbours in time and share the machine's background
            # load, so the median of the per-round ratios is steadier than a ratio of medians.
            pairs = [(on, off) for on, off in zip(runs[case.name]["on"], runs[case.name]["off"], strict=True)
                     if on.get("ok") and off.get("ok")]
            row["overhead_pct"] = statistics.median(
                (1 - on["metrics"]["produce_msg_s"] / off["metrics"]["produce_msg_s"]) * 100 for on, off in pairs)
            row["cpu_overhead_pct"] = statistics.median(
                (on["broker_cpu_s"] / on["info"]["records"] / (off["broker_cpu_s"] / off["info"]["records"]) - 1) * 100
                for on, off in pairs)
        rows.append(row)
    print(f"metrics overhead: {args.rounds} rounds x {args.seconds:g} s per case and broker, "
          f"scrape every {args.scrape_interval:g} s ({brokers['on'].scrapes} scrapes); "
          f"broker CPUs {sorted(broker_cpus) if broker_cpus else 'any'}, worker CPUs "
          f"{sorted(worker_cpus) if worker_cpus else 'any'}")
    print()
    print("| case | metrics on (median) | metrics off (median) | throughput cost (median of rounds) "
          "| broker CPU/record on | off | CPU cost (median of rounds) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        on, off = row["on"], row["off"]
        if not on or not off:
            print(f"| {row['case']} | FAILED | FAILED | — | — | — | — |")
            continue
        print(f"| {row['case']} | {on['produce_msg_s']:,.0f} msg/s | {off['produce_msg_s']:,.0f} msg/s | "
              f"{row['overhead_pct']:+.1f}% | {on['broker_cpu_us_per_record']:.1f} µs | "
              f"{off['broker_cpu_us_per_record']:.1f} µs | {row['cpu_overhead_pct']:+.1f}% |")
    if args.json is not None:
        args.json.write_text(json.dumps({"rounds": args.rounds, "seconds": args.seconds, "cases": rows}, indent=2))
    if failed:
        print(f"\nlogs kept in {work}", file=sys.stderr)
        return 1
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
