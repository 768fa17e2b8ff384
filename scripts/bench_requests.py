#!/usr/bin/env python3
"""Broker CPU per small request: the cost of the connection and dispatch path.

Starts ``cormorant serve`` (a child process on 127.0.0.1) and sends pre-encoded small
requests from client threads over raw sockets, each connection keeping ``--depth``
requests in flight (librdkafka keeps up to 5 with linger.ms=0). For each case, over one
and over ``--connections`` connections, it reports requests per second and the broker's
CPU time per request (user + system, all threads, from /proc/PID/stat):

- ApiVersions v3;
- Metadata v12 of one topic;
- Produce v9 of one 100-byte record, acks=1;
- Produce v9 of one 100-byte record, acks=all, idempotent (a producer id per connection,
  consecutive sequences);
- Fetch v12 of 16 partitions by a consumer that has read them all (``max_wait_ms=0``, so each
  is answered at once): what a Fetch costs for every partition it names, as librdkafka's
  consumers name every assigned partition in every Fetch;
- Produce v9 of one zstd batch of 15 records of 64 KiB (the load benchmark's values and
  librdkafka's batch), acks=1: what inflating and walking a compressed batch costs.

Usage: python scripts/bench_requests.py [--seconds S] [--connections N] [--depth D]
       [--case TEXT] [--profile FILE]  (py-spy record of the broker during the run)
"""

from __future__ import annotations

import argparse
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_brokers import Cormorant, cpu_seconds  # noqa: E402
from bench_kcat import TextValues  # noqa: E402
from bench_worker import payload_pool  # noqa: E402

from wire.batch_builder import build_batch  # noqa: E402
from wire.compression import Compression  # noqa: E402
from wire.frame import decode_response, encode_request  # noqa: E402
from wire.generated.api_000_produce import (  # noqa: E402
    ProduceRequest,
    ProduceRequestPartitionProduceData,
    ProduceRequestTopicProduceData,
    ProduceResponse,
)
from wire.generated.api_001_fetch import (  # noqa: E402
    FetchRequest,
    FetchRequestFetchPartition,
    FetchRequestFetchTopic,
)
from wire.generated.api_003_metadata import MetadataRequest, MetadataRequestTopic  # noqa: E402
from wire.generated.api_018_api_versions import ApiVersionsRequest  # noqa: E402
from wire.generated.api_019_create_topics import (  # noqa: E402
    CreateTopicsRequest,
    CreateTopicsRequestCreatableTopic,
)
from wire.generated.api_022_init_producer_id import (  # noqa: E402
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from wire.records import NewRecord  # noqa: E402

TOPIC = "reqcost"
#: Empty, so offset 0 is every partition's end: the Fetch case reads nothing.
FETCH_TOPIC = "reqcost-fetch"
PARTITIONS = 16
VALUE = b"v" * 100
_SIZE = struct.Struct(">i")

#: A request frame (size prefix included) for correlation id ``n`` of connection ``conn``.
FrameMaker = Callable[[int, int], bytes]


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        got = sock.recv(n - len(chunks))
        if not got:
            raise ConnectionError("broker closed the connection")
        chunks += got
    return bytes(chunks)


def _roundtrip(sock: socket.socket, frame: bytes) -> bytes:
    sock.sendall(frame)
    (size,) = _SIZE.unpack(_recv_exactly(sock, 4))
    return _recv_exactly(sock, size)


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def api_versions(conn: int, n: int) -> bytes:
    return encode_request(ApiVersionsRequest("bench", "1"), 3, n, "bench")


def metadata(conn: int, n: int) -> bytes:
    body = MetadataRequest(topics=[MetadataRequestTopic(name=TOPIC)], allow_auto_topic_creation=False)
    return encode_request(body, 12, n, "bench")


def _produce(partition: int, acks: int, batch: bytes) -> ProduceRequest:
    return ProduceRequest(None, acks, 30_000, [ProduceRequestTopicProduceData(
        TOPIC, partition_data=[ProduceRequestPartitionProduceData(partition, batch)])])


def produce_acks1(conn: int, n: int) -> bytes:
    batch = build_batch([NewRecord(None, VALUE)])
    return encode_request(_produce(conn % PARTITIONS, 1, batch), 9, n, "bench")


class ZstdBatches:
    """A few distinct zstd batches of 15 records of 64 KiB, sent in turn (the frames are large,
    so the clients cycle through these instead of one frame per request)."""

    distinct = 8

    def __init__(self) -> None:
        values = TextValues(64 * 1024, payload_pool())
        self.batches = [build_batch([NewRecord(None, values.value(b * 15 + i)) for i in range(15)],
                                    compression=Compression.ZSTD) for b in range(self.distinct)]

    def __call__(self, conn: int, n: int) -> bytes:
        return encode_request(_produce(conn % PARTITIONS, 1, self.batches[n % self.distinct]), 9, n, "bench")


def fetch_caught_up(conn: int, n: int) -> bytes:
    body = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=50 << 20, isolation_level=1,
                        topics=[FetchRequestFetchTopic(topic=FETCH_TOPIC, partitions=[
                            FetchRequestFetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1 << 20)
                            for p in range(PARTITIONS)])])
    return encode_request(body, 12, n, "bench")


class Idempotent:
    """Frames of an idempotent producer per connection: its own producer id, sequences from 0."""

    def __init__(self, port: int, connections: int) -> None:
        self.ids: list[tuple[int, int]] = []
        with _connect(port) as sock:
            for i in range(connections):
                raw = _roundtrip(sock, encode_request(InitProducerIdRequest(None, 60_000), 4, i, "bench"))
                _, response = decode_response(raw, InitProducerIdResponse, 4)
                assert isinstance(response, InitProducerIdResponse) and response.error_code == 0, response
                self.ids.append((response.producer_id, response.producer_epoch))

    def __call__(self, conn: int, n: int) -> bytes:
        pid, epoch = self.ids[conn]
        batch = build_batch([NewRecord(None, VALUE)], producer_id=pid, producer_epoch=epoch, base_sequence=n)
        return encode_request(_produce(conn % PARTITIONS, -1, batch), 9, n, "bench")


def create_topic(port: int) -> None:
    body = CreateTopicsRequest([CreateTopicsRequestCreatableTopic(name, PARTITIONS, 1)
                                for name in (TOPIC, FETCH_TOPIC)])
    with _connect(port) as sock:
        _roundtrip(sock, encode_request(body, 5, 1, "bench"))
    time.sleep(1.0)


def drive(port: int, make: FrameMaker, connections: int, depth: int, seconds: float,
          pid: int) -> tuple[int, float, float]:
    """Runs ``connections`` closed-loop clients for ``seconds``: (requests, wall s, broker CPU s)."""
    per_conn = getattr(make, "distinct", 200_000)
    frames = [[make(c, n) for n in range(min(per_conn, int(seconds * 40_000 / connections) + 1000))]
              for c in range(connections)]
    socks = [_connect(port) for _ in range(connections)]
    # Warm up each connection with one request.
    for sock in socks:
        _roundtrip(sock, api_versions(0, 0))
    counts = [0] * connections
    stop = threading.Event()
    start_barrier = threading.Barrier(connections + 1)

    def client(c: int) -> None:
        sock = socks[c]
        mine = frames[c]
        sent = 0
        answered = 0
        start_barrier.wait()
        # A maker with few distinct frames has them sent in turn (no correlation id is checked).
        limit = 1 << 62 if hasattr(make, "distinct") else len(mine)
        while sent < min(depth, limit):
            sock.sendall(mine[sent % len(mine)])
            sent += 1
        buf = bytearray()
        while answered < sent:
            got = sock.recv(65536)
            if not got:
                raise ConnectionError("broker closed the connection")
            buf += got
            while len(buf) >= 4:
                (size,) = _SIZE.unpack_from(buf)
                if len(buf) < 4 + size:
                    break
                if c == 0 and answered == 0 and make not in (api_versions, metadata, fetch_caught_up):
                    _, response = decode_response(bytes(buf[4:4 + size]), ProduceResponse, 9)
                    assert isinstance(response, ProduceResponse)
                    code = response.responses[0].partition_responses[0].error_code
                    assert code == 0, f"produce answered error {code}"
                del buf[:4 + size]
                answered += 1
                if not stop.is_set() and sent < limit:
                    sock.sendall(mine[sent % len(mine)])
                    sent += 1
        counts[c] = answered

    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(connections)]
    for t in threads:
        t.start()
    start_barrier.wait()
    cpu0 = cpu_seconds(pid) or 0.0
    t0 = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    wall = time.perf_counter() - t0
    cpu = (cpu_seconds(pid) or 0.0) - cpu0
    for sock in socks:
        sock.close()
    return sum(counts), wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--depth", type=int, default=5)
    parser.add_argument("--case", default="")
    parser.add_argument("--profile", help="write a py-spy profile (collapsed stacks) of the broker here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-requests-") as tmp:
        broker = Cormorant(Path(tmp))
        broker.start()
        assert broker.proc is not None
        pid = broker.proc.pid
        spy: subprocess.Popen[bytes] | None = None
        try:
            create_topic(broker.port)
            cases: list[tuple[str, FrameMaker]] = [
                ("ApiVersions", api_versions),
                ("Metadata 1 topic", metadata),
                ("Produce 1 record acks=1", produce_acks1),
                (f"Fetch {PARTITIONS} partitions, caught up", fetch_caught_up),
                ("Produce zstd 15 x 64 KiB acks=1", ZstdBatches()),
            ]
            load = os.getloadavg()[0]
            print(f"load average (1 min) before: {load:.2f}; depth {args.depth}")
            print(f"{'case':34} {'conns':>5} {'req/s':>9} {'CPU µs/req':>11}")
            if args.profile:
                spy = subprocess.Popen(["py-spy", "record", "-r", "500", "--format", "raw", "-o", args.profile,
                                        "--pid", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(1.0)
            for conns in (1, args.connections):
                idem = Idempotent(broker.port, conns)
                idempotent: list[tuple[str, FrameMaker]] = [("Produce 1 record acks=all idempotent", idem)]
                for name, make in [*cases, *idempotent]:
                    if args.case and args.case not in name:
                        continue
                    n, wall, cpu = drive(broker.port, make, conns, args.depth, args.seconds, pid)
                    print(f"{name:34} {conns:>5} {n / wall:>9,.0f} {cpu / max(n, 1) * 1e6:>11,.0f}", flush=True)
            print(f"load average (1 min) after: {os.getloadavg()[0]:.2f}")
        finally:
            if spy is not None:
                spy.send_signal(2)
                spy.wait(timeout=60)
            broker.stop()


if __name__ == "__main__":
    main()
