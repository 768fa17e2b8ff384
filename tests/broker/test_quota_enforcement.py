"""Client quotas enforced by a real broker process: the throttled connection is muted (KIP-219)
while the others are served, consumer_byte_rate empties throttled fetches, controller_mutation_rate
refuses (strict versions) or only throttles (permissive ones), request_percentage throttles a busy
client and not an idle one.

Short windows (``quota.window.num=2``, one-second windows) keep each test within seconds."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from broker.tools.client import KafkaClient, parse_bootstrap
from tests.broker.broker_process import BrokerProcess
from tests.broker.test_client_quotas import alter, entry
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.frame import encode_request
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
from wire.generated.api_003_metadata import MetadataRequest, MetadataResponse
from wire.generated.api_018_api_versions import ApiVersionsRequest, ApiVersionsResponse
from wire.generated.api_019_create_topics import (
    CreateTopicsRequest,
    CreateTopicsRequestCreatableTopic,
    CreateTopicsResponse,
)
from wire.generated.api_020_delete_topics import DeleteTopicsRequest, DeleteTopicsResponse
from wire.records import NewRecord


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("quota-enforcement") / "data", {
        "quota.window.num": "2", "quota.window.size.seconds": "1",
        "controller.quota.window.num": "2", "controller.quota.window.size.seconds": "1",
    }).start()
    try:
        yield b
    finally:
        assert b.stop() == 0, b.logs()[-3000:]


def client(broker: BrokerProcess, client_id: str) -> KafkaClient:
    host, port = parse_bootstrap(broker.bootstrap)
    return KafkaClient(host, port, timeout_s=20, client_id=client_id)


def create(c: KafkaClient, topics: dict[str, int], version: int = 7) -> CreateTopicsResponse:
    return c.send(CreateTopicsRequest(timeout_ms=10_000, topics=[
        CreateTopicsRequestCreatableTopic(name=name, num_partitions=partitions, replication_factor=1)
        for name, partitions in topics.items()]), CreateTopicsResponse, version)


def delete(c: KafkaClient, names: list[str], version: int) -> DeleteTopicsResponse:
    return c.send(DeleteTopicsRequest(topic_names=names, timeout_ms=10_000), DeleteTopicsResponse, version)


def produce(c: KafkaClient, topic: str, batches: int, size: int = 10_000) -> ProduceResponse:
    # One batch of ``batches`` records (a produce carries one batch per partition).
    data = build_batch([NewRecord(key=b"k", value=bytes(size), timestamp=None) for _ in range(batches)])
    return c.send(ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequestTopicProduceData(
        name=topic, partition_data=[ProduceRequestPartitionProduceData(index=0, records=data)])]),
        ProduceResponse, 9)


def fetch(c: KafkaClient, topic: str, offset: int) -> FetchResponse:
    return c.send(FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=10 << 20, topics=[FetchRequestFetchTopic(
        topic=topic, partitions=[FetchRequestFetchPartition(partition=0, fetch_offset=offset,
                                                            partition_max_bytes=10 << 20)])]),
        FetchResponse, 12)


def test_throttled_connection_is_muted_and_others_are_served(broker: BrokerProcess) -> None:
    with client(broker, "admin") as admin:
        assert create(admin, {"muted": 1}).topics[0].error_code == 0
        assert alter(admin, entry({"client-id": "muted-producer"}, producer_byte_rate=50_000.0)) == [0]
    with client(broker, "muted-producer") as slow, client(broker, "other") as other:
        # 100 kB in the first window at 50 kB/s: twice the bound, so (2 - 1) x the 1 s window.
        reply = produce(slow, "muted", 10)
        assert reply.responses[0].partition_responses[0].error_code == 0
        assert 1000 <= reply.throttle_time_ms <= 1050
        muted_for: list[float] = []

        def next_request() -> None:
            started = time.monotonic()
            slow.send(ApiVersionsRequest(), ApiVersionsResponse, 0)
            muted_for.append(time.monotonic() - started)

        waiter = threading.Thread(target=next_request)
        waiter.start()
        started = time.monotonic()
        other.send(ApiVersionsRequest(), ApiVersionsResponse, 0)
        served_in = time.monotonic() - started
        waiter.join(timeout=10)
        assert muted_for, "the muted connection never answered"
        # Not read for the throttle time (less what passed since the response), yet answered after it.
        assert 0.7 <= muted_for[0] < 5.0, muted_for
        assert served_in < 0.5, served_in


def test_consumer_byte_rate_empties_throttled_fetches(broker: BrokerProcess) -> None:
    with client(broker, "admin") as admin:
        assert create(admin, {"consumed": 1}).topics[0].error_code == 0
        for _ in range(20):
            produce(admin, "consumed", 1)
        assert alter(admin, entry({"client-id": "reader"}, consumer_byte_rate=50_000.0)) == [0]
    with client(broker, "reader") as reader:
        first = fetch(reader, "consumed", 0)
        records = first.responses[0].partitions[0].records
        assert first.throttle_time_ms == 0 and records is not None
        # No fetch returns more than one window's allowance (the bound times num - 1 windows).
        assert 0 < len(records) <= 50_000 + 10_200
        offset = len(records) // 10_070
        throttled = fetch(reader, "consumed", offset)
        while throttled.throttle_time_ms == 0:  # bounded: the log holds 200 kB, four windows' worth
            offset += 1
            throttled = fetch(reader, "consumed", offset)
        assert throttled.responses == [] and throttled.error_code == 0
        assert 0 < throttled.throttle_time_ms <= 2000


def test_controller_mutation_rate_strict_and_permissive(broker: BrokerProcess) -> None:
    with client(broker, "admin") as admin:
        assert alter(admin, entry({"client-id": "creator"}, controller_mutation_rate=2.0)) == [0]
    with client(broker, "creator") as creator:
        # The bucket holds 2 partitions (num - 1 windows of 2/s). The first topic overdraws it to -3
        # and is created; the next one finds the quota exceeded.
        strict = create(creator, {"mutation-a": 5, "mutation-b": 1})
        assert [(t.name, t.error_code) for t in strict.topics] == [
            ("mutation-a", 0), ("mutation-b", ErrorCode.THROTTLING_QUOTA_EXCEEDED)]
        assert strict.topics[1].error_message == "The throttling quota has been exceeded."
        assert strict.throttle_time_ms == 1500
        # The connection was muted 1.5 s, which refilled the bucket to 0. CreateTopics v5 predates
        # KIP-599's strict mode: both topics are created, the response only throttled (6 over: 3 s).
        permissive = create(creator, {"mutation-c": 5, "mutation-d": 1}, version=5)
        assert [t.error_code for t in permissive.topics] == [0, 0]
        assert 2900 <= permissive.throttle_time_ms <= 3000
        # DeleteTopics is strict from v5, permissive before.
        deleted = delete(creator, ["mutation-a", "mutation-c"], 5)
        assert {r.name: r.error_code for r in deleted.responses} == {
            "mutation-a": 0, "mutation-c": ErrorCode.THROTTLING_QUOTA_EXCEEDED}
        assert delete(creator, ["mutation-c", "mutation-d"], 4).responses[0].error_code == 0
    with client(broker, "admin") as admin:  # no quota for this client id
        assert create(admin, {"mutation-e": 50}).throttle_time_ms == 0


def test_request_percentage_throttles_a_busy_client_only(broker: BrokerProcess) -> None:
    with client(broker, "admin") as admin:
        assert alter(admin, entry({"client-id": "busy"}, request_percentage=1.0)) == [0]
    with client(broker, "busy") as busy, client(broker, "idle") as idle:
        deadline = time.monotonic() + 20
        throttle = 0
        while throttle == 0 and time.monotonic() < deadline:
            # 1 % of the event loop is 10 ms a second: a few hundred Metadata requests exceed it.
            throttle = busy.send(MetadataRequest(topics=None), MetadataResponse, 9).throttle_time_ms
        assert 0 < throttle <= 1000
        assert idle.send(MetadataRequest(topics=None), MetadataResponse, 9).throttle_time_ms == 0


def test_producer_byte_rate_counts_the_whole_request(broker: BrokerProcess) -> None:
    # Kafka records request.sizeInBytes: the header, topic names and partition fields count too.
    data = build_batch([NewRecord(key=None, value=b"v", timestamp=None)])
    request = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequestTopicProduceData(
        name="whole-request", partition_data=[ProduceRequestPartitionProduceData(index=0, records=data)])])
    size = len(encode_request(request, 9, 1, "whole-request-producer")) - 4
    bound = float(len(data) + 10)  # the records alone stay under it, the request does not
    assert size > bound
    with client(broker, "admin") as admin:
        assert create(admin, {"whole-request": 1}).topics[0].error_code == 0
        assert alter(admin, entry({"client-id": "whole-request-producer"}, producer_byte_rate=bound)) == [0]
    with client(broker, "whole-request-producer") as producer:
        reply = producer.send(request, ProduceResponse, 9)
    assert reply.responses[0].partition_responses[0].error_code == 0
    # One request in the first of two 1 s windows: (size - bound) / bound x 1 s.
    expected = (size - bound) / bound * 1000
    assert abs(reply.throttle_time_ms - expected) <= expected * 0.05 + 5, (reply.throttle_time_ms, expected)


def test_consumer_byte_rate_counts_the_whole_response(broker: BrokerProcess) -> None:
    # Kafka records the response's size: a fetch of empty partitions counts too.
    with client(broker, "admin") as admin:
        assert create(admin, {"empty-fetched": 8}).topics[0].error_code == 0
        assert alter(admin, entry({"client-id": "empty-reader"}, consumer_byte_rate=100.0)) == [0]
    with client(broker, "empty-reader") as reader:
        reply = reader.send(FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, topics=[
            FetchRequestFetchTopic(topic="empty-fetched", partitions=[
                FetchRequestFetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1 << 20)
                for p in range(8)])]), FetchResponse, 12)
    # 15 + 2 + 13 + 5 + 8 x 43 = 379 bytes against 100 bytes/s: (379 - 100) / 100 x 1 s.
    assert reply.error_code == 0 and reply.responses == []
    assert 2500 <= reply.throttle_time_ms <= 3000, reply.throttle_time_ms


def test_pre_kip_219_response_is_delayed_by_the_throttle(broker: BrokerProcess) -> None:
    # Produce v5 predates KIP-219: the broker holds the response for the throttle time (Kafka's
    # shouldClientThrottle), where v9's comes at once; other connections are served meanwhile.
    with client(broker, "admin") as admin:
        assert create(admin, {"old-produce": 1}).topics[0].error_code == 0
        assert alter(admin, entry({"client-id": "old-producer"}, producer_byte_rate=50_000.0)) == [0]
    data = build_batch([NewRecord(key=b"k", value=bytes(10_000), timestamp=None) for _ in range(10)])
    request = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequestTopicProduceData(
        name="old-produce", partition_data=[ProduceRequestPartitionProduceData(index=0, records=data)])])
    with client(broker, "old-producer") as old, client(broker, "other") as other:
        answered_in: list[float] = []

        def send_old() -> None:
            started = time.monotonic()
            reply = old.send(request, ProduceResponse, 5)
            answered_in.append(time.monotonic() - started)
            assert reply.responses[0].partition_responses[0].error_code == 0
            answered_in.append(reply.throttle_time_ms / 1000)

        sender = threading.Thread(target=send_old)
        sender.start()
        time.sleep(0.2)
        started = time.monotonic()
        other.send(ApiVersionsRequest(), ApiVersionsResponse, 0)
        served_in = time.monotonic() - started
        sender.join(timeout=10)
        assert len(answered_in) == 2, "the old-version produce never answered"
        took, throttle = answered_in
        # About 100 kB at 50 kB/s: a throttle of about 1 s, which the response waited out.
        assert 0.9 <= throttle <= 1.1 and throttle - 0.05 <= took < throttle + 3.0, answered_in
        assert served_in < 0.5, served_in
        # The same for v9 comes at once: the client waits by itself.
        started = time.monotonic()
        reply = old.send(request, ProduceResponse, 9)
        assert reply.throttle_time_ms > 0 and time.monotonic() - started < 0.5, reply.throttle_time_ms
