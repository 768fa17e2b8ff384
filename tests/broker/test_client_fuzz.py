"""Stateful fuzz: real clients (confluent-kafka producers — idempotent, transactional, zstd —
classic, KIP-848 and share consumers, an admin) talk to a real broker through a proxy that
changes a tenth of their requests (tests/broker/fuzzing.py) on the way. Unlike
tests/broker/test_request_fuzz.py, the changed requests carry live member ids, epochs,
producer ids and sequences, so they reach the coordinators' and the log's state.

The broker answers or closes, and nothing more: no handler fails, no traceback, no metadata
it cannot apply, no step computing past 100 ms; and it serves a client afterwards."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat_tests.harness.proxy import FaultProxy
from tests.broker.broker_process import BrokerProcess
from tests.broker.fuzzing import UNENCODABLE, Mutator, assert_unharmed
from tests.shared import ROOT
from wire.exceptions import DecodeError
from wire.frame import decode_request, encode_request

pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.timeout(300)

SEED = 7
#: The share of requests the proxy changes.
MUTATED_SHARE = 0.1
#: How long the clients run.
RUN_S = 40.0


class RequestMutator:
    """The proxy's ``rewrite``: changes MUTATED_SHARE of the request frames (decoded, fields
    mutated, encoded with the same version and correlation id); called from its threads."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.mutator = Mutator(self.rng)
        self.lock = threading.Lock()
        self.requests = 0
        self.mutated = 0

    def __call__(self, frame: bytes) -> bytes:
        with self.lock:
            self.requests += 1
            if self.rng.random() >= MUTATED_SHARE:
                return frame
            try:
                request = decode_request(frame[4:])
                changed = self.mutator.message(request.body)
                out = encode_request(changed, request.api_version, request.correlation_id, request.header.client_id)
            except (DecodeError, *UNENCODABLE):
                return frame
            self.mutated += 1
            return out


@pytest.fixture()
def proxied(tmp_path: Path) -> Iterator[tuple[BrokerProcess, FaultProxy, RequestMutator]]:
    mutate = RequestMutator(SEED)
    proxy = FaultProxy(rewrite=mutate)
    broker = BrokerProcess(tmp_path / "data", {
        # Clients learn the proxy's address from Metadata, so every connection goes through it.
        "advertised.listeners": f"PLAINTEXT://{proxy.bootstrap}",
        "auto.create.topics.enable": "true",
        "group.initial.rebalance.delay.ms": "0",
    })
    try:
        broker.start()
        proxy.upstream_port = broker.port
        yield broker, proxy, mutate
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


def test_real_clients_through_a_mutating_proxy(proxied: tuple[BrokerProcess, FaultProxy, RequestMutator]) -> None:
    broker, proxy, mutate = proxied
    run_clients(proxy.bootstrap, RUN_S)
    assert mutate.requests >= 2_000 and mutate.mutated >= 100, (mutate.requests, mutate.mutated)
    assert_unharmed(broker, "after-fuzz")
