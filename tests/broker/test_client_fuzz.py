"""Stateful fuzz: real clients (confluent-kafka producers — idempotent, transactional, zstd —
classic, KIP-848 and share consumers, an admin) talk to a real broker through a proxy that
changes a tenth of their requests (tests/broker/request_mutator.py) on the way. Unlike
tests/broker/test_request_fuzz.py, the changed requests carry live member ids, epochs,
producer ids and sequences, so they reach the coordinators' and the log's state.

The broker answers or closes, and nothing more: no handler fails, no traceback, no metadata
it cannot apply, no step computing past 100 ms; and it serves a client afterwards."""

from __future__ import annotations

import random
import re
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker.broker_process import BrokerProcess
from tests.broker.raw_client import RawClient
from tests.broker.request_mutator import UNENCODABLE, Mutator
from tests.shared import ROOT
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.exceptions import DecodeError
from wire.frame import decode_request, encode_request
from wire.generated.api_000_produce import (
    ProduceRequest,
    ProduceRequestPartitionProduceData,
    ProduceRequestTopicProduceData,
    ProduceResponse,
)
from wire.generated.api_019_create_topics import (
    CreateTopicsRequest,
    CreateTopicsRequestCreatableTopic,
    CreateTopicsResponse,
)
from wire.records import NewRecord

pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.timeout(300)

SEED = 7
#: The share of requests the proxy changes.
MUTATED_SHARE = 0.1
#: How long the clients run.
RUN_S = 40.0
SLOW_STEP = re.compile(r"slow_task_step\s.*?cpu_ms=([\d.]+)")
#: A step computing this long is a handler doing work it should slice; one that only waited
#: (a busy machine) is not counted.
HEAVY_STEP_CPU_MS = 100.0
#: Frames larger than this are passed on as they are (the clients' are far smaller).
MAX_FRAME = 64 * 1024 * 1024


class MutatingProxy:
    """Forwards client connections to the broker, changing MUTATED_SHARE of the requests
    (decoded, fields mutated, encoded with the same version and correlation id)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.mutator = Mutator(self.rng)
        self.lock = threading.Lock()
        self.requests = 0
        self.mutated = 0
        self.target_port = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.closed = False

    def start(self, target_port: int) -> None:
        self.target_port = target_port
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.closed = True
        self.listener.close()
        with self.lock:
            sockets, self.sockets = self.sockets, []
        for sock in sockets:
            _shut(sock)
            sock.close()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                broker = socket.create_connection(("127.0.0.1", self.target_port), timeout=10)
                broker.settimeout(None)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.sockets += [client, broker]
            threading.Thread(target=self._requests, args=(client, broker), daemon=True).start()
            threading.Thread(target=self._responses, args=(broker, client), daemon=True).start()

    def _requests(self, client: socket.socket, broker: socket.socket) -> None:
        try:
            while True:
                (size,) = struct.unpack(">i", _read(client, 4))
                if not 0 <= size <= MAX_FRAME:
                    return
                body = _read(client, size)
                broker.sendall(self._maybe_mutate(body) or struct.pack(">i", size) + body)
        except (OSError, EOFError):
            pass
        finally:
            _shut(client)
            _shut(broker)

    def _maybe_mutate(self, body: bytes) -> bytes | None:
        with self.lock:
            self.requests += 1
            if self.rng.random() >= MUTATED_SHARE:
                return None
            try:
                request = decode_request(body)
                changed = self.mutator.message(request.body)
                frame = encode_request(changed, request.api_version, request.correlation_id, request.header.client_id)
            except (DecodeError, *UNENCODABLE):
                return None
            self.mutated += 1
            return frame

    def _responses(self, broker: socket.socket, client: socket.socket) -> None:
        try:
            while chunk := broker.recv(65536):
                client.sendall(chunk)
        except OSError:
            pass
        finally:
            _shut(client)
            _shut(broker)


def _read(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return bytes(out)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


@pytest.fixture()
def proxied(tmp_path: Path) -> Iterator[tuple[BrokerProcess, MutatingProxy]]:
    proxy = MutatingProxy(SEED)
    broker = BrokerProcess(tmp_path / "data", {
        # Clients learn the proxy's address from Metadata, so every connection goes through it.
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}",
        "auto.create.topics.enable": "true",
        "group.initial.rebalance.delay.ms": "0",
    })
    try:
        broker.start()
        proxy.start(broker.port)
        yield broker, proxy
    finally:
        proxy.close()
        if broker.proc is not None and broker.proc.poll() is None:
            broker.stop()


def run_clients(bootstrap: str, seconds: float) -> int:
    """Runs tests/broker/fuzz_clients.py for ``seconds``, starting it again whenever a client
    crashed its process; how many times it crashed."""
    crashes = 0
    ends = time.monotonic() + seconds
    while (left := ends - time.monotonic()) > 1:
        proc = subprocess.Popen([sys.executable, "-m", "tests.broker.fuzz_clients", bootstrap,
                                 str(SEED + crashes), str(left)],
                                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            code = proc.wait(timeout=left + 30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
            break
        if code != 0:
            crashes += 1
    return crashes


def test_real_clients_through_a_mutating_proxy(proxied: tuple[BrokerProcess, MutatingProxy]) -> None:
    broker, proxy = proxied
    run_clients(f"127.0.0.1:{proxy.port}", RUN_S)
    assert proxy.requests >= 2_000 and proxy.mutated >= 100, (proxy.requests, proxy.mutated)
    assert broker.proc is not None and broker.proc.poll() is None, broker.logs()[-5000:]
    logs = broker.logs()
    failures = [line for line in logs.splitlines()
                if "request_failed" in line or "Traceback" in line or "metadata_publish_failed" in line]
    assert not failures, "\n".join(failures[:20])
    heavy = [float(cpu) for cpu in SLOW_STEP.findall(logs) if float(cpu) >= HEAVY_STEP_CPU_MS]
    assert not heavy, heavy
    # It still serves, directly: a topic of its own, created and appended to with acks=all.
    client = RawClient(broker.bootstrap)
    try:
        created = client.call(CreateTopicsRequest(topics=[CreateTopicsRequestCreatableTopic(
            name="after-fuzz", num_partitions=1, replication_factor=1)], timeout_ms=10_000), CreateTopicsResponse, 5)
        assert isinstance(created, CreateTopicsResponse) and created.topics[0].error_code == ErrorCode.NONE
        request = ProduceRequest(acks=-1, timeout_ms=10_000, topic_data=[ProduceRequestTopicProduceData(
            name="after-fuzz", partition_data=[ProduceRequestPartitionProduceData(
                index=0, records=build_batch([NewRecord(b"k", b"still serving")]))])])
        deadline = time.monotonic() + 20
        while True:  # retried until its leader is in place
            answer = client.call(request, ProduceResponse, 9)
            assert isinstance(answer, ProduceResponse)
            code = answer.responses[0].partition_responses[0].error_code
            if code == ErrorCode.NONE or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert code == ErrorCode.NONE, ErrorCode(code).name
    finally:
        client.close()
