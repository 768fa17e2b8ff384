"""Requests that decode but mean nonsense, against a real broker: every API's requests (the
real clients' captured ones, and each API's defaults at each version) with fields mutated
by a seeded generator — extreme integers, illegal names, emptied and repeated lists,
damaged record batches — then encoded and sent.

A broker answers each with Kafka's error codes or closes the connection: it never fails a
handler (``request_failed``, UNKNOWN_SERVER_ERROR), never logs a traceback, never holds
the loop past the stall guard (which would stop it), and serves a real client afterwards."""

from __future__ import annotations

import dataclasses
import random
import socket
import struct
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.broker.broker_process import BrokerProcess
from tests.broker.raw_client import RawClient
from tests.shared import capture_files, read_capture
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.exceptions import DecodeError, UnsupportedVersionError
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
    CreateTopicsRequestCreatableTopicConfig,
    CreateTopicsResponse,
)
from wire.generated.registry import API_SPECS
from wire.primitives import Message
from wire.records import NewRecord

pytestmark = pytest.mark.timeout(600)

#: Requests sent per seed; each seed starts from the broker the earlier ones left.
REQUESTS_PER_SEED = 400
SEEDS = (1, 2, 3)
#: A request answered later than this (a Fetch told to wait, a join waiting for its group)
#: is left behind: the connection is closed and a new one opened.
ANSWER_TIMEOUT_S = 1.5

INTS = (-1, 0, 1, 2, 3, 7, 127, 128, 255, 32767, -32768, 65535, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63),
        1000, 10**6)
STRINGS = ("", "fuzz", "fuzz-compact", "nope", "x" * 300, "\x00", "a" * 40_000, "__consumer_offsets",
           "g", "*", "User:*", "..", "fuzz\n", "é", "fuzz/../..")
CLIENT_IDS = ("fuzz", None, "", "__admin_client", "é" * 100)


def base_requests() -> list[tuple[int, Message]]:
    """(version, body): what real clients sent, and every API's defaults at every version."""
    out: list[tuple[int, Message]] = []
    for path in capture_files():
        for frame in read_capture(path):
            if frame.direction == "C" and "api_key" in frame.meta:
                try:
                    request = decode_request(frame.frame[4:])
                except DecodeError:
                    continue
                out.append((request.api_version, request.body))
    for spec in API_SPECS.values():
        for version in range(spec.min_version, spec.max_version + 1):
            body = spec.request()
            try:
                encode_request(body, version, 1, "fuzz")
            except (UnsupportedVersionError, ValueError, TypeError, struct.error, OverflowError):
                continue
            out.append((version, body))
    return out


class Mutator:
    """Changes one to three fields of a request, at any depth; never changes the original
    (each level it goes through is copied)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def message(self, obj: Any) -> Any:
        fields = dataclasses.fields(obj)
        if not fields:
            return obj
        obj = dataclasses.replace(obj)
        for _ in range(self.rng.randint(1, 3)):
            field = self.rng.choice(fields)
            setattr(obj, field.name, self.value(getattr(obj, field.name)))
        return obj

    def value(self, v: Any) -> Any:
        rng = self.rng
        if isinstance(v, bool):
            return not v
        if isinstance(v, int):
            return rng.choice(INTS) if rng.random() < 0.8 else v + rng.randint(-3, 3)
        if isinstance(v, str):
            return rng.choice(STRINGS)
        if isinstance(v, (bytes, bytearray, memoryview)):
            return self.data(bytearray(v))
        if isinstance(v, uuid.UUID):
            return rng.choice([uuid.UUID(int=0), uuid.UUID(int=1), uuid.UUID(int=rng.getrandbits(128))])
        if isinstance(v, list):
            roll = rng.random()
            if roll < 0.2:
                return []
            if roll < 0.4 and v:
                return v + [v[rng.randrange(len(v))]] * rng.randint(1, 3)
            out = list(v)
            if out:
                i = rng.randrange(len(out))
                out[i] = self.message(out[i]) if dataclasses.is_dataclass(out[i]) else self.value(out[i])
            return out
        if dataclasses.is_dataclass(v):
            return self.message(v)
        return v

    def data(self, b: bytearray) -> bytes:
        rng = self.rng
        roll = rng.random()
        if roll < 0.3 and b:
            for _ in range(rng.randint(1, 4)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            return bytes(b)
        if roll < 0.5:
            return bytes(b[: rng.randrange(len(b) + 1)])
        if roll < 0.6:
            return b""
        return rng.randbytes(rng.randint(0, 80))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("fuzz") / "data", {"auto.create.topics.enable": "true"}).start()
    try:
        client = RawClient(b.bootstrap)
        compact = [CreateTopicsRequestCreatableTopicConfig(name="cleanup.policy", value="compact")]
        topics = [CreateTopicsRequestCreatableTopic(name="fuzz", num_partitions=3, replication_factor=1),
                  CreateTopicsRequestCreatableTopic(name="fuzz-compact", num_partitions=1, replication_factor=1,
                                                    configs=compact)]
        created = client.call(CreateTopicsRequest(topics=topics, timeout_ms=10_000), CreateTopicsResponse, 5)
        assert isinstance(created, CreateTopicsResponse)
        assert [t.error_code for t in created.topics] == [0, 0]
        client.close()
        yield b
    finally:
        b.stop()


def send_all(broker: BrokerProcess, seed: int) -> dict[str, int]:
    """Sends REQUESTS_PER_SEED mutated requests; how many were answered, closed, left."""
    rng = random.Random(seed)
    mutate = Mutator(rng)
    bases = base_requests()
    counts = {"answered": 0, "closed": 0, "left": 0, "unencodable": 0}
    sock: socket.socket | None = None
    try:
        for correlation_id in range(1, REQUESTS_PER_SEED + 1):
            version, body = rng.choice(bases)
            request = mutate.message(body)
            if rng.random() < 0.3:
                request = mutate.message(request)
            try:
                frame = encode_request(request, version, correlation_id, rng.choice(CLIENT_IDS))
            except (UnsupportedVersionError, ValueError, TypeError, struct.error, OverflowError, UnicodeError):
                # A value the version cannot carry, or outside its field's range: not a request.
                counts["unencodable"] += 1
                continue
            assert broker.proc is not None and broker.proc.poll() is None, (
                f"the broker stopped before request {correlation_id} of seed {seed}")
            if sock is None:
                sock = socket.create_connection(("127.0.0.1", broker.port), timeout=ANSWER_TIMEOUT_S)
            try:
                sock.sendall(frame)
                if read_frame(sock):
                    counts["answered"] += 1
                    continue
                counts["closed"] += 1
            except TimeoutError:
                counts["left"] += 1
            except OSError:
                counts["closed"] += 1
            sock.close()
            sock = None
    finally:
        if sock is not None:
            sock.close()
    return counts


def read_frame(sock: socket.socket) -> bool:
    """Reads one response; False if the broker closed the connection instead."""
    head = sock.recv(4, socket.MSG_WAITALL)
    if len(head) < 4:
        return False
    (size,) = struct.unpack(">i", head)
    while size > 0:
        chunk = sock.recv(min(size, 1 << 20))
        if not chunk:
            return False
        size -= len(chunk)
    return True


@pytest.mark.parametrize("seed", SEEDS)
def test_mutated_requests_get_answers_or_a_close_never_a_failure(broker: BrokerProcess, seed: int) -> None:
    counts = send_all(broker, seed)
    assert counts["answered"] > REQUESTS_PER_SEED // 4, counts
    assert broker.proc is not None and broker.proc.poll() is None, broker.logs()[-5000:]
    failures = [line for line in broker.logs().splitlines()
                if "request_failed" in line or "Traceback" in line or "slow_task_step" in line]
    assert not failures, "\n".join(failures[:20])
    # And it still serves: a produce a real client would send is appended.
    client = RawClient(broker.bootstrap)
    try:
        batch = build_batch([NewRecord(b"k", b"still serving")])
        request = ProduceRequest(acks=-1, timeout_ms=10_000, topic_data=[ProduceRequestTopicProduceData(
            name="fuzz", partition_data=[ProduceRequestPartitionProduceData(index=0, records=batch)])])
        answer = client.call(request, ProduceResponse, 9)
        assert isinstance(answer, ProduceResponse)
        assert answer.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    finally:
        client.close()
