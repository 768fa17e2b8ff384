"""Kafka's reactions to bad produce data and misbehaving connections (reliability guide,
section b), against a real broker process. The broker keeps serving throughout."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator

import pytest

from tests.broker.broker_process import BrokerProcess
from tests.broker.raw_client import RawClient
from wire.batch_builder import build_batch, build_control_batch
from wire.errors import ErrorCode
from wire.generated.api_000_produce import (
    ProduceRequest,
    ProduceRequestPartitionProduceData,
    ProduceRequestTopicProduceData,
    ProduceResponse,
)
from wire.generated.api_001_fetch import (
    FetchRequest,
    FetchRequestFetchPartition,
    FetchRequestFetchTopic,
    FetchResponse,
)
from wire.generated.api_003_metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from wire.generated.api_018_api_versions import ApiVersionsRequest, ApiVersionsResponse
from wire.records import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    ControlRecordType,
    NewRecord,
    compute_crc,
    read_batch_header,
)

TOPIC = "bad-input"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path_factory.mktemp("bad") / "data",
        {"connections.max.idle.ms": "1500", "message.max.bytes": "10000",
         "log.message.timestamp.after.max.ms": "3600000"},
    ).start()
    client = RawClient(b.bootstrap)
    meta = client.call(MetadataRequest(topics=[MetadataRequestTopic(name=TOPIC)]), MetadataResponse, 9)
    assert isinstance(meta, MetadataResponse) and meta.topics[0].error_code == 0
    client.close()
    try:
        yield b
    finally:
        b.kill9()


def produce_raw(client: RawClient, records: bytes, acks: int = 1, version: int = 9,
                transactional_id: str | None = None, topic: str = TOPIC) -> ProduceResponse:
    req = ProduceRequest(transactional_id=transactional_id, acks=acks, timeout_ms=5000, topic_data=[
        ProduceRequestTopicProduceData(name=topic, partition_data=[ProduceRequestPartitionProduceData(index=0, records=records)])
    ])
    resp = client.call(req, ProduceResponse, version)
    assert isinstance(resp, ProduceResponse)
    return resp


def error_of(resp: ProduceResponse) -> int:
    return resp.responses[0].partition_responses[0].error_code


def with_fixed_crc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, CRC_OFFSET, compute_crc(batch, 0, read_batch_header(batch)))
    return bytes(batch)


def good_batch(value: bytes = b"v") -> bytes:
    return build_batch([NewRecord(key=b"k", value=value, timestamp=int(time.time() * 1000))])


def log_end(client: RawClient) -> int:
    req = FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, topics=[
        FetchRequestFetchTopic(topic=TOPIC, partitions=[FetchRequestFetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])
    ])
    resp = client.call(req, FetchResponse, 12)
    assert isinstance(resp, FetchResponse)
    return resp.responses[0].partitions[0].high_watermark


def test_bad_batches_get_kafkas_error_codes_and_append_nothing(broker: BrokerProcess) -> None:
    client = RawClient(broker.bootstrap)
    before = log_end(client)

    flipped = bytearray(good_batch())
    flipped[-1] ^= 0x01
    assert error_of(produce_raw(client, bytes(flipped))) == ErrorCode.CORRUPT_MESSAGE

    assert error_of(produce_raw(client, good_batch()[:-3])) == ErrorCode.CORRUPT_MESSAGE  # length mismatch

    two = good_batch() + good_batch()
    assert error_of(produce_raw(client, two)) == ErrorCode.INVALID_RECORD  # v3+: one batch only

    # A control batch is transactional: without a transactional id Kafka refuses the
    # request before looking at the batch (53); with one, the batch itself (87).
    control = build_control_batch(ControlRecordType.COMMIT, 5, 0, 0)
    assert error_of(produce_raw(client, control)) == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert error_of(produce_raw(client, control, transactional_id="t")) == ErrorCode.INVALID_RECORD

    append_time = bytearray(good_batch())
    attrs = struct.unpack_from(">h", append_time, ATTRIBUTES_OFFSET)[0]
    struct.pack_into(">h", append_time, ATTRIBUTES_OFFSET, attrs | 0x08)
    assert error_of(produce_raw(client, with_fixed_crc(append_time))) == ErrorCode.INVALID_TIMESTAMP

    future = build_batch([NewRecord(key=b"k", value=b"v", timestamp=int(time.time() * 1000) + 48 * 3600_000)])
    assert error_of(produce_raw(client, future)) == ErrorCode.INVALID_TIMESTAMP

    unknown_codec = bytearray(good_batch())
    struct.pack_into(">h", unknown_codec, ATTRIBUTES_OFFSET, 0x07)
    assert error_of(produce_raw(client, with_fixed_crc(unknown_codec))) in (
        ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, ErrorCode.CORRUPT_MESSAGE)

    assert error_of(produce_raw(client, good_batch(b"x" * 20_000))) == ErrorCode.MESSAGE_TOO_LARGE

    # Internal topics are written by their coordinators only (Kafka: InvalidTopicException).
    for internal in ("__consumer_offsets", "__transaction_state"):
        assert error_of(produce_raw(client, good_batch(), topic=internal)) == ErrorCode.INVALID_TOPIC_EXCEPTION

    bad_acks = produce_raw(client, good_batch(), acks=5)
    assert error_of(bad_acks) == ErrorCode.INVALID_REQUIRED_ACKS

    assert log_end(client) == before
    assert error_of(produce_raw(client, good_batch())) == ErrorCode.NONE
    assert log_end(client) == before + 1
    client.close()


def test_acks0_gets_no_response_and_an_error_closes(broker: BrokerProcess) -> None:
    client = RawClient(broker.bootstrap)
    req = ProduceRequest(acks=0, timeout_ms=5000, topic_data=[
        ProduceRequestTopicProduceData(name=TOPIC, partition_data=[ProduceRequestPartitionProduceData(index=0, records=good_batch())])
    ])
    client.send(req, 9)
    # The next answer on the connection is the ApiVersions one: nothing came for the produce.
    hello = ApiVersionsRequest(client_software_name="tests", client_software_version="1")
    resp = client.call(hello, ApiVersionsResponse, 3)
    assert isinstance(resp, ApiVersionsResponse) and resp.error_code == 0
    assert client.corr == 2
    flipped = bytearray(good_batch())
    flipped[-1] ^= 1
    bad = ProduceRequest(acks=0, timeout_ms=5000, topic_data=[
        ProduceRequestTopicProduceData(name=TOPIC, partition_data=[ProduceRequestPartitionProduceData(index=0, records=bytes(flipped))])
    ])
    client.send(bad, 9)
    client.sock.settimeout(10)
    try:
        assert client.sock.recv(10) == b""
    except ConnectionResetError:
        pass
    client.close()


def test_responses_leave_in_request_order(broker: BrokerProcess) -> None:
    client = RawClient(broker.bootstrap)
    end = log_end(client)
    # A long-polling fetch at the log end, then ApiVersions: the second finishes first
    # but must be answered second.
    slow = FetchRequest(max_wait_ms=700, min_bytes=1, max_bytes=1 << 20, topics=[
        FetchRequestFetchTopic(topic=TOPIC, partitions=[FetchRequestFetchPartition(partition=0, fetch_offset=end, partition_max_bytes=1 << 20)])
    ])
    started = time.monotonic()
    client.send(slow, 12)
    client.send(ApiVersionsRequest(), 0)
    first = client.receive(FetchResponse, 12)
    second = client.receive(ApiVersionsResponse, 0)
    assert isinstance(first, FetchResponse) and isinstance(second, ApiVersionsResponse)
    assert time.monotonic() - started >= 0.6
    client.close()


def test_fetch_long_poll_is_woken_by_an_append(broker: BrokerProcess) -> None:
    client = RawClient(broker.bootstrap)
    writer = RawClient(broker.bootstrap)
    end = log_end(client)
    wait = FetchRequest(max_wait_ms=10_000, min_bytes=1, max_bytes=1 << 20, topics=[
        FetchRequestFetchTopic(topic=TOPIC, partitions=[FetchRequestFetchPartition(partition=0, fetch_offset=end, partition_max_bytes=1 << 20)])
    ])
    client.send(wait, 12)
    time.sleep(0.3)
    started = time.monotonic()
    assert error_of(produce_raw(writer, good_batch(b"wake"))) == 0
    resp = client.receive(FetchResponse, 12)
    assert isinstance(resp, FetchResponse)
    assert time.monotonic() - started < 3.0
    assert resp.responses[0].partitions[0].records
    client.close()
    writer.close()


def test_half_a_frame_then_silence_closes_at_the_idle_timeout(broker: BrokerProcess) -> None:
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    sock.sendall(struct.pack(">i", 100) + b"\x00\x12")
    started = time.monotonic()
    try:
        assert sock.recv(10) == b""
    except ConnectionResetError:
        pass
    elapsed = time.monotonic() - started
    assert 1.0 <= elapsed < 8.0
    sock.close()


def test_thousands_of_concurrent_connections(broker: BrokerProcess) -> None:
    socks = []
    frame = struct.pack(">ihhih", 10, 18, 0, 1, -1)
    try:
        for _ in range(2000):
            s = socket.create_connection(("127.0.0.1", broker.port), timeout=30)
            socks.append(s)
        for s in socks:
            s.sendall(frame)
        for s in socks:
            size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
            body = s.recv(size, socket.MSG_WAITALL)
            assert len(body) == size and struct.unpack_from(">ih", body)[1] == 0
    finally:
        for s in socks:
            s.close()
    client = RawClient(broker.bootstrap)
    assert log_end(client) >= 0
    client.close()
