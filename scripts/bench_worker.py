"""The load benchmark's worker: one run of one case against one broker, in its own process
(confluent-kafka / librdkafka). It prints one ``BENCH-RESULT {json}`` line and exits."""

from __future__ import annotations

import json
import math
import os
import random
import string
import sys
import tempfile
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_brokers import cpu_seconds
from bench_cases import CHECKSUM_MOD, HEADER, MAX_BYTES_PER_RUN, QUEUE_KBYTES, QUEUE_MESSAGES

ADMIN_TIMEOUT_S = 20.0
TOPIC_READY_TIMEOUT_S = 15.0
FLUSH_TIMEOUT_S = 30.0
CONSUME_GRACE_S = 30.0
# The read-back of a throughput case only: librdkafka leaves a partition out of a Fetch while
# its (shared) queue holds queued.min.messages, so near the end of a read a Fetch can name only
# partitions already read to the end while another still has records; the broker then holds
# that Fetch for fetch.wait.max.ms (500 ms by default), as Kafka does, and the other partition
# waits. A short wait bounds that pause; the latency cases keep the default.
READ_BACK_FETCH_WAIT_MS = 20
RESULT_PREFIX = "BENCH-RESULT "


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


def producer_settings(
    bootstrap: str, acks: str, compression: str, share: int = 1
) -> dict[str, Any]:
    """librdkafka producer settings (both producers); ``share`` producers split one
    client-side queue budget."""
    return {
        **base_config(bootstrap),
        "enable.idempotence": False,
        "acks": acks,
        "compression.type": compression,
        "queue.buffering.max.kbytes": QUEUE_KBYTES // share,
        "queue.buffering.max.messages": QUEUE_MESSAGES // share,
        "delivery.report.only.error": True,
        "message.timeout.ms": 30_000,
        "request.timeout.ms": 15_000,
    }


def producer_config(
    bootstrap: str,
    acks: str,
    compression: str,
    on_error: Callable[[Any, Any], None],
    share: int = 1,
) -> dict[str, Any]:
    """The Python producer's configuration: the settings and its delivery callback."""
    return {**producer_settings(bootstrap, acks, compression, share), "on_delivery": on_error}


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


@dataclass
class ReadBack:
    """How a read-back went: its time, the reader's CPU and the broker's over it."""

    seconds: float
    reader_cpu_s: float | None
    broker_cpu_s: float | None
    warnings: list[str]


def consume_verify(spec: dict[str, Any], expected: Tally, timeout_s: float) -> ReadBack:
    """Read the topic from offset 0 of every partition until ``expected`` is matched, with
    the reader the spec names (``java``: scripts/bench_reader, ``python``: confluent-kafka),
    and verify the count and checksum of the values."""
    broker_pid: int | None = spec.get("broker_pid")
    broker_before = cpu_seconds(broker_pid) if broker_pid else None
    if spec.get("reader", "python") == "java":
        seconds, reader_cpu, got, errors = read_java(spec, expected, timeout_s)
    else:
        seconds, reader_cpu, got, errors = read_python(spec, expected, timeout_s)
    broker_after = cpu_seconds(broker_pid) if broker_pid else None
    verify(expected, got, timeout_s, errors)
    broker_cpu = (
        broker_after - broker_before
        if broker_before is not None and broker_after is not None
        else None
    )
    return ReadBack(seconds, reader_cpu, broker_cpu, [f"consumer error: {e}" for e in errors[:3]])


def read_java(
    spec: dict[str, Any], expected: Tally, timeout_s: float
) -> tuple[float, float | None, Tally, list[str]]:
    """The Java reader (bench_read_back.py): its JVM counts and checksums the values."""
    from bench_read_back import ReaderUnavailable, read_back

    try:
        done = read_back(
            spec["reader_command"],
            spec["bootstrap"],
            spec["topic"],
            spec["partitions"],
            expected.count,
            timeout_s,
            READ_BACK_FETCH_WAIT_MS,
        )
    except ReaderUnavailable as exc:
        raise CaseFailed(str(exc)) from exc
    got = Tally(count=done.count, nbytes=done.nbytes, checksum=done.checksum % CHECKSUM_MOD)
    return done.seconds, done.cpu_seconds, got, done.errors


def read_python(
    spec: dict[str, Any], expected: Tally, timeout_s: float
) -> tuple[float, float | None, Tally, list[str]]:
    """One confluent-kafka consumer; every value is counted in this process's Python loop."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    got = Tally()
    errors: list[str] = []
    consumer = Consumer(
        {**consumer_config(spec["bootstrap"]), "fetch.wait.max.ms": READ_BACK_FETCH_WAIT_MS}
    )
    try:
        # Timed from assign(): librdkafka prefetches in the background, so the time the first
        # record is handed over says little.
        start = time.perf_counter()
        cpu_start = time.process_time()
        consumer.assign([TopicPartition(spec["topic"], p, 0) for p in range(spec["partitions"])])
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
    return elapsed, cpu, got, errors


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
    if spec.get("producer") == "kcat":
        return run_throughput_kcat(spec)
    from confluent_kafka import Producer

    bootstrap, topic = spec["bootstrap"], spec["topic"]
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
    broker_pid: int | None = spec.get("broker_pid")
    broker_before = cpu_seconds(broker_pid) if broker_pid else None
    start = time.perf_counter()
    client_cpu = time.process_time()
    produce_timed(producers, topic, values, spec["seconds"], tally, seq)
    check_delivery(errors, tally, flush_all(producers, FLUSH_TIMEOUT_S))
    produce_s = time.perf_counter() - start
    # This process's CPU (the Python loop and librdkafka's threads) over the timed produce.
    info["produce_client_cpu_s"] = time.process_time() - client_cpu
    broker_after = cpu_seconds(broker_pid) if broker_pid else None
    producers.clear()
    timed_count, timed_bytes = tally.count - warm[0], tally.nbytes - warm[1]
    info["producer"] = "python"
    warnings = [f"client error: {e}" for e in errors.client_errors[:3]]
    connections = info.get("connections")
    if connections is not None and connections < count:
        warnings.append(f"only {connections} connections to the broker for {count} producers")
    produced = (broker_before, broker_after, timed_count, timed_bytes, produce_s)
    return throughput_result(spec, tally, produced, info, warnings)


def run_throughput_kcat(spec: dict[str, Any]) -> dict[str, Any]:
    """One kcat producer (bench_kcat), then the same read-back and figures."""
    from bench_kcat import KcatUnavailable, TextValues, find_kcat, produce_kcat

    broker_pid: int | None = spec.get("broker_pid")

    def broker_cpu() -> float | None:
        return cpu_seconds(broker_pid) if broker_pid else None

    settings = {
        **producer_settings(spec["bootstrap"], spec["acks"], spec["compression"]),
        "client.id": "bench-0",
    }
    tally = Tally()
    with tempfile.TemporaryDirectory() as work:
        try:
            kcat = find_kcat(Path(work))
            done = produce_kcat(
                kcat,
                spec,
                settings,
                TextValues(spec["size"], payload_pool()),
                tally,
                spec["seconds"],
                broker_cpu,
            )
        except (KcatUnavailable, RuntimeError) as exc:
            raise CaseFailed(str(exc)) from exc
    info: dict[str, Any] = {
        "producer": f"kcat (librdkafka {kcat.librdkafka})",
        "produce_client_cpu_s": done.client_cpu_s,
    }
    produced = (done.broker_cpu_before, broker_cpu(), done.count, done.nbytes, done.seconds)
    return throughput_result(spec, tally, produced, info, [])


def throughput_result(
    spec: dict[str, Any],
    tally: Tally,
    produced: tuple[float | None, float | None, int, int, float],
    info: dict[str, Any],
    warnings: list[str],
) -> dict[str, Any]:
    """Reads every record back, verifies it, and gives the case's figures. ``produced``:
    the broker's CPU clock before and after the timed produce, its records, bytes, seconds."""
    broker_before, broker_after, timed_count, timed_bytes, produce_s = produced
    read = consume_verify(spec, tally, CONSUME_GRACE_S + 3 * produce_s)
    consume_s = read.seconds
    warnings = read.warnings + warnings
    metrics = {
        "produce_msg_s": timed_count / produce_s,
        "produce_mb_s": timed_bytes / produce_s / 1e6,
        "consume_msg_s": tally.count / consume_s,
        "consume_mb_s": tally.nbytes / consume_s / 1e6,
    }
    # The broker's CPU over the timed produce alone, per record and per MB produced: unlike the
    # whole run's, not spread with topic creation and deletion over however many records a
    # case reached.
    if broker_before is not None and broker_after is not None and timed_count:
        produce_cpu = broker_after - broker_before
        metrics["produce_cpu_us_record"] = produce_cpu * 1e6 / timed_count
        metrics["produce_cpu_ms_mb"] = produce_cpu * 1e3 / (timed_bytes / 1e6)
    # CPU per record read back, the broker's and the reader's, over the same span: the reader
    # must need far less than the broker, or the consume figure is the reader's.
    if read.broker_cpu_s is not None:
        metrics["read_broker_cpu_us_record"] = read.broker_cpu_s * 1e6 / tally.count
    if read.reader_cpu_s is not None:
        metrics["read_reader_cpu_us_record"] = read.reader_cpu_s * 1e6 / tally.count
    info.update(
        records=tally.count,
        bytes=tally.nbytes,
        produce_s=produce_s,
        consume_s=consume_s,
        reader=spec.get("reader", "python"),
        # The reading client's own CPU over the read (the JVM, or librdkafka's threads and the
        # Python loop), and the broker's over the same span: when the reader's is near
        # consume_s, the consume figure measures the reader, not the broker.
        consume_client_cpu_s=read.reader_cpu_s,
        consume_broker_cpu_s=read.broker_cpu_s,
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
