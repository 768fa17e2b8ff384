"""A large Produce frame naming few partitions is decoded on the event loop (its record data
is not copied, so that costs microseconds, far less than a hand-off to a worker thread); one
naming more partitions than PRODUCE_ON_LOOP_ENTRIES, or a malformed one, is decoded off the
loop with the real limits, as before. Both paths give the same request, with the C codec and
with the pure-Python one, and a real broker answers both."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
import trio

from broker.eventloop.pacing import OFF_LOOP_FRAME_BYTES, PRODUCE_ON_LOOP_ENTRIES, Pacer
from broker.server.dispatch import Dispatcher
from tests.broker.broker_process import BrokerProcess
from tests.broker.raw_client import RawClient
from wire import accel
from wire.batch_builder import build_batch
from wire.compression import Compression
from wire.exceptions import DecodeError
from wire.frame import Request, decode_request, encode_request, peek_request
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
from wire.primitives import DEFAULT_LIMITS
from wire.records import NewRecord

TOPIC = "large-frames"
MANY = PRODUCE_ON_LOOP_ENTRIES + 1


def batch(size: int, codec: Compression = Compression.NONE) -> bytes:
    """One batch of 1 KiB records about ``size`` bytes long; their values do not compress, so a
    compressed batch is as large."""
    rng = random.Random(size)
    return build_batch([NewRecord(key=None, value=rng.randbytes(1024)) for _ in range(max(1, size // 1040))],
                       compression=codec)


def produce_request(partitions: int, total: int, codec: Compression = Compression.NONE) -> ProduceRequest:
    data = batch(total // partitions + 1, codec)
    return ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[ProduceRequestTopicProduceData(
        name=TOPIC,
        partition_data=[ProduceRequestPartitionProduceData(index=i, records=data) for i in range(partitions)])])


def body(request: ProduceRequest) -> memoryview:
    """The frame as the connection hands it over: no size prefix, writable."""
    return memoryview(bytearray(encode_request(request, 9, 7)))[4:]


def decode_in_dispatcher(frame: memoryview) -> tuple[Request, bool]:
    """The request as the dispatcher decodes it, and whether that went off the loop."""
    dispatcher = Dispatcher({}, DEFAULT_LIMITS)
    pacer = Pacer()

    async def run() -> Request:
        return await dispatcher._decode(frame, peek_request(frame), pacer)

    try:
        return trio.run(run), pacer.large
    finally:
        pacer.close()


@pytest.fixture(params=["c", "python"])
def codec_path(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "c" and not accel.available():
        pytest.skip("the C accelerator is not built")
    was = accel.enabled()
    if request.param == "python":
        accel.disable()
    else:
        accel.enable()
    try:
        yield request.param
    finally:
        if was:
            accel.enable()
        else:
            accel.disable()


def partitions_of(request: Request) -> list[tuple[str, int, int]]:
    body = request.body
    assert isinstance(body, ProduceRequest)
    return [(t.name, p.index, len(p.records or b"")) for t in body.topic_data for p in t.partition_data]


def test_a_large_frame_naming_few_partitions_is_decoded_on_the_loop(codec_path: str) -> None:
    frame = body(produce_request(4, 2 * OFF_LOOP_FRAME_BYTES))
    assert len(frame) >= OFF_LOOP_FRAME_BYTES
    request, off_loop = decode_in_dispatcher(frame)
    assert not off_loop
    assert partitions_of(request) == partitions_of(decode_request(frame))
    assert request.header.correlation_id == 7


def test_a_large_frame_naming_many_partitions_is_decoded_off_the_loop(codec_path: str) -> None:
    frame = body(produce_request(MANY, 2 * OFF_LOOP_FRAME_BYTES))
    request, off_loop = decode_in_dispatcher(frame)
    assert off_loop
    assert partitions_of(request) == partitions_of(decode_request(frame))
    assert len(partitions_of(request)) == MANY


def test_a_malformed_large_frame_is_still_refused(codec_path: str) -> None:
    frame = body(produce_request(4, 2 * OFF_LOOP_FRAME_BYTES))
    truncated = frame[: len(frame) - 100]
    with pytest.raises(DecodeError):
        decode_in_dispatcher(truncated)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RawClient]:
    broker = BrokerProcess(tmp_path_factory.mktemp("large-frames") / "data").start()
    c = RawClient(broker.bootstrap)
    try:
        resp = c.call(CreateTopicsRequest(timeout_ms=10_000, topics=[CreateTopicsRequestCreatableTopic(
            name=TOPIC, num_partitions=MANY, replication_factor=1)]), CreateTopicsResponse, 5)
        assert isinstance(resp, CreateTopicsResponse)
        assert [t.error_code for t in resp.topics] == [0]
        yield c
    finally:
        c.close()
        broker.kill9()


@pytest.mark.parametrize("partitions", [2, MANY])
@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4])
def test_a_broker_appends_large_frames_either_way(client: RawClient, partitions: int, codec: Compression) -> None:
    request = produce_request(partitions, 3 * OFF_LOOP_FRAME_BYTES, codec)
    assert len(body(request)) >= OFF_LOOP_FRAME_BYTES
    resp = client.call(request, ProduceResponse, 9)
    assert isinstance(resp, ProduceResponse)
    answers = [(p.index, p.error_code) for t in resp.responses for p in t.partition_responses]
    assert answers == [(i, 0) for i in range(partitions)]
    assert all(p.base_offset >= 0 for t in resp.responses for p in t.partition_responses)
