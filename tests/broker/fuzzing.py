"""For the fuzz tests of the broker's handlers: requests that decode but mean nonsense (a
seeded generator that changes fields of decoded requests at any depth — extreme integers,
illegal names, emptied and repeated lists, damaged record batches), and the verdict on the
broker afterwards (:func:`assert_unharmed`)."""

from __future__ import annotations

import dataclasses
import random
import struct
import time
import uuid
from typing import Any

from tests.broker.broker_process import SLOW_STEP, BrokerProcess
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
    CreateTopicsResponse,
)
from wire.generated.registry import API_SPECS
from wire.primitives import Message
from wire.records import NewRecord

#: What encoding a mutated request may raise: a value its version cannot carry, or one outside
#: its field's range. Such a request is not sent.
UNENCODABLE = (UnsupportedVersionError, ValueError, TypeError, struct.error, OverflowError, UnicodeError)

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
            except UNENCODABLE:
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


#: A step computing this long is a handler doing work it should slice (the stall guard stops the
#: broker at 500 ms); a step that only waited (a busy machine) is not counted.
HEAVY_STEP_CPU_MS = 100.0
#: Log events that are never an answer to bad input: a handler that raised, a traceback,
#: committed metadata the broker could not apply.
FAILURE_EVENTS = ("request_failed", "Traceback", "metadata_publish_failed")


def assert_unharmed(broker: BrokerProcess, topic: str) -> None:
    """The broker is up, logged no failure and no step computing past HEAVY_STEP_CPU_MS, and
    serves: ``topic`` (new) is created and appended to with acks=all."""
    assert broker.proc is not None and broker.proc.poll() is None, broker.logs()[-5000:]
    logs = broker.logs()
    failures = [line for line in logs.splitlines() if any(event in line for event in FAILURE_EVENTS)]
    assert not failures, "\n".join(failures[:20])
    heavy = [float(cpu) for cpu in SLOW_STEP.findall(logs) if float(cpu) >= HEAVY_STEP_CPU_MS]
    assert not heavy, heavy
    client = RawClient(broker.bootstrap)
    try:
        created = client.call(CreateTopicsRequest(topics=[CreateTopicsRequestCreatableTopic(
            name=topic, num_partitions=1, replication_factor=1)], timeout_ms=10_000), CreateTopicsResponse, 5)
        assert isinstance(created, CreateTopicsResponse) and created.topics[0].error_code == ErrorCode.NONE
        request = ProduceRequest(acks=-1, timeout_ms=10_000, topic_data=[ProduceRequestTopicProduceData(
            name=topic, partition_data=[ProduceRequestPartitionProduceData(
                index=0, records=build_batch([NewRecord(b"k", b"still serving")]))])])
        deadline = time.monotonic() + 20
        while True:  # retried until the new partition's leader is in place
            answer = client.call(request, ProduceResponse, 9)
            assert isinstance(answer, ProduceResponse)
            code = answer.responses[0].partition_responses[0].error_code
            if code == ErrorCode.NONE or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert code == ErrorCode.NONE, ErrorCode(code).name
    finally:
        client.close()
