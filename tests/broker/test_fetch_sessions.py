"""Fetch sessions (KIP-227): the cache's rules, and incremental fetches against a real broker."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.server.fetch_sessions import (
    MAX_EPOCH,
    CachedPartition,
    FetchSession,
    FetchSessionCache,
    next_epoch,
)
from broker.tools.client import KafkaClient
from tests.broker.broker_process import BrokerProcess
from wire.batch_builder import build_batch
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
    FetchRequestForgottenTopic,
    FetchResponse,
    FetchResponsePartitionData,
)
from wire.generated.api_003_metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from wire.generated.api_019_create_topics import (
    CreateTopicsRequest,
    CreateTopicsRequestCreatableTopic,
    CreateTopicsResponse,
)
from wire.records import NewRecord, iter_records

# ------------------------------------------------------------ the cache


def test_cache_capacity_and_eviction_of_idle_sessions() -> None:
    now = [0]
    cache = FetchSessionCache(2, lambda: now[0], random.Random(7), eviction_idle_ms=1000)
    first = cache.create(False, {})
    second = cache.create(False, {})
    assert first is not None and second is not None and first.id != second.id
    now[0] = 999
    assert cache.get(second.id) is second  # used: the first is now the least recently used
    assert cache.create(False, {}) is None  # the first has been idle only 999 ms
    now[0] = 1000
    third = cache.create(False, {})
    assert third is not None and cache.get(first.id) is None and len(cache) == 2
    cache.remove(third.id)
    assert cache.get(third.id) is None and len(cache) == 1
    assert FetchSessionCache(0, lambda: 0, random.Random(1)).create(False, {}) is None


def test_epochs_wrap_to_one() -> None:
    assert next_epoch(1) == 2 and next_epoch(MAX_EPOCH) == 1


def test_a_partition_is_reported_when_something_changed() -> None:
    cached = CachedPartition("t", uuid.UUID(int=0), FetchRequestFetchPartition(partition=0))

    def data(hw: int, records: bytes = b"", error: int = 0) -> FetchResponsePartitionData:
        return FetchResponsePartitionData(high_watermark=hw, last_stable_offset=hw, log_start_offset=0,
                                          records=records, error_code=error)

    assert cached.note_response(data(5))  # first report
    assert not cached.note_response(data(5))
    assert cached.note_response(data(6))  # the high watermark moved
    assert cached.note_response(data(6, b"x"))  # records
    assert cached.note_response(data(6, error=ErrorCode.NOT_LEADER_OR_FOLLOWER))
    diverging = data(6)
    diverging.diverging_epoch.epoch = 3
    assert cached.note_response(diverging)
    assert not cached.note_response(data(6))


def test_session_update_adds_moves_and_forgets() -> None:
    session = FetchSession(1, by_id=False)
    fp = [FetchRequestFetchPartition(partition=i, fetch_offset=0) for i in range(3)]
    session.update([FetchRequestFetchTopic(topic="a", partitions=fp)], [])
    moved = FetchRequestFetchPartition(partition=1, fetch_offset=9)
    session.update([FetchRequestFetchTopic(topic="a", partitions=[moved])],
                   [FetchRequestForgottenTopic(topic="a", partitions=[0])])
    assert list(session.partitions) == [("a", 1), ("a", 2)]
    assert session.partitions[("a", 1)].request.fetch_offset == 9
    session.move_to_end(("a", 1))
    assert list(session.partitions) == [("a", 2), ("a", 1)]


# ------------------------------------------------------------ against a broker


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(Path(tmp_path_factory.mktemp("fetch-sessions")) / "data").start()
    try:
        yield process
    finally:
        assert process.stop() == 0


@pytest.fixture(scope="module")
def client(broker: BrokerProcess) -> Iterator[KafkaClient]:
    with KafkaClient.connect(broker.bootstrap, timeout_s=30) as c:
        yield c


def create(client: KafkaClient, name: str, partitions: int) -> uuid.UUID:
    request = CreateTopicsRequest(timeout_ms=10_000, topics=[CreateTopicsRequestCreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1)])
    assert client.send(request, CreateTopicsResponse).topics[0].error_code == ErrorCode.NONE
    md = client.send(MetadataRequest(topics=[MetadataRequestTopic(name=name)]), MetadataResponse, 12)
    return md.topics[0].topic_id


def produce(client: KafkaClient, topic: str, partition: int, value: bytes) -> None:
    batch = build_batch([NewRecord(key=None, value=value, timestamp=1_700_000_000_000)])
    request = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[ProduceRequestTopicProduceData(
        name=topic, partition_data=[ProduceRequestPartitionProduceData(index=partition, records=batch)])])
    response = client.send(request, ProduceResponse, 9)
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.NONE


def fetch(client: KafkaClient, version: int, session_id: int, epoch: int,
          wanted: dict[int, int], topic: str, topic_id: uuid.UUID, forget: list[int] | None = None,
          max_wait_ms: int = 0) -> FetchResponse:
    by_id = version >= 13
    request = FetchRequest(
        max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, session_id=session_id, session_epoch=epoch,
        topics=[FetchRequestFetchTopic(
            topic="" if by_id else topic, topic_id=topic_id if by_id else uuid.UUID(int=0),
            partitions=[FetchRequestFetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20)
                        for p, o in wanted.items()])] if wanted else [],
        forgotten_topics_data=[FetchRequestForgottenTopic(
            topic="" if by_id else topic, topic_id=topic_id if by_id else uuid.UUID(int=0), partitions=forget)]
        if forget else [],
    )
    return client.send(request, FetchResponse, version)


def reported(response: FetchResponse) -> dict[int, list[bytes | None]]:
    """Partition -> the values it carried, for every partition in the response."""
    out: dict[int, list[bytes | None]] = {}
    for t in response.responses:
        for p in t.partitions:
            assert p.error_code == ErrorCode.NONE, p
            data = p.records.read() if hasattr(p.records, "read") else bytes(p.records or b"")  # type: ignore[union-attr]
            out[p.partition_index] = [r.value for r in iter_records(data)] if data else []
    return out


@pytest.mark.parametrize("version", [12, 13, 17])
def test_incremental_fetches_report_only_what_changed(client: KafkaClient, version: int) -> None:
    topic = f"sessions-v{version}"
    topic_id = create(client, topic, 3)
    produce(client, topic, 0, b"a")

    full = fetch(client, version, 0, 0, {0: 0, 1: 0, 2: 0}, topic, topic_id)
    assert full.error_code == ErrorCode.NONE and full.session_id != 0
    assert reported(full) == {0: [b"a"], 1: [], 2: []}
    session = full.session_id

    # The fetcher moved past "a": it names partition 0 again; nothing is new anywhere.
    nothing = fetch(client, version, session, 1, {0: 1}, topic, topic_id)
    assert (nothing.error_code, nothing.session_id, nothing.responses) == (ErrorCode.NONE, session, [])

    # Data on a partition the request does not name still comes back.
    produce(client, topic, 2, b"c")
    news = fetch(client, version, session, 2, {}, topic, topic_id)
    assert reported(news) == {2: [b"c"]}
    assert news.responses[0].partitions[0].high_watermark == 1

    # A wrong epoch and an unknown session are refused.
    assert fetch(client, version, session, 7, {}, topic, topic_id).error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert fetch(client, version, session + 1 if session < MAX_EPOCH else 1, 1, {}, topic,
                 topic_id).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND

    # Forgotten partitions are not read any more; the others are.
    forget = fetch(client, version, session, 3, {2: 1}, topic, topic_id, forget=[2])
    assert forget.responses == []
    produce(client, topic, 2, b"d")
    produce(client, topic, 1, b"b")
    assert reported(fetch(client, version, session, 4, {}, topic, topic_id)) == {1: [b"b"]}

    # Epoch -1 closes the session and fetches in full without one.
    closed = fetch(client, version, session, -1, {0: 1, 1: 1, 2: 1}, topic, topic_id)
    assert closed.session_id == 0 and reported(closed) == {0: [], 1: [], 2: [b"d"]}
    assert fetch(client, version, session, 5, {}, topic, topic_id).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_an_incremental_fetch_waits_for_any_partition_of_its_session(
    client: KafkaClient, broker: BrokerProcess
) -> None:
    topic = "sessions-wait"
    topic_id = create(client, topic, 2)
    full = fetch(client, 12, 0, 0, {0: 0, 1: 0}, topic, topic_id)
    session = full.session_id
    assert session != 0

    def later() -> None:
        time.sleep(0.5)
        with KafkaClient.connect(broker.bootstrap, timeout_s=20) as other:
            produce(other, topic, 1, b"late")

    writer = threading.Thread(target=later)
    writer.start()
    started = time.monotonic()
    response = fetch(client, 12, session, 1, {}, topic, topic_id, max_wait_ms=20_000)
    waited = time.monotonic() - started
    writer.join(timeout=30)
    assert reported(response) == {1: [b"late"]}
    assert waited < 15, f"the fetch was not woken by the append ({waited:.1f} s)"



# ------------------------------------------------------------ KIP-320 for consumers


def test_consumers_last_fetched_epoch_is_checked(client: KafkaClient) -> None:
    topic = "consumer-diverging"
    create(client, topic, 1)
    for value in (b"a", b"b", b"c"):
        produce(client, topic, 0, value)

    def consumer_fetch(offset: int, last_fetched_epoch: int) -> FetchResponsePartitionData:
        request = FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, topics=[FetchRequestFetchTopic(
            topic=topic, partitions=[FetchRequestFetchPartition(
                partition=0, fetch_offset=offset, last_fetched_epoch=last_fetched_epoch,
                partition_max_bytes=1 << 20)])])
        return client.send(request, FetchResponse, 12).responses[0].partitions[0]

    # Epoch 0 is the only epoch and holds offsets 0-2: a consumer at 2 that last saw epoch 0
    # is on the leader's log.
    ok = consumer_fetch(2, 0)
    assert ok.error_code == ErrorCode.NONE and ok.diverging_epoch.epoch == -1
    assert [r.value for r in iter_records(bytes(ok.records or b""))] == [b"c"]  # type: ignore[arg-type]
    # A consumer that last saw epoch 4, which this leader never had, cannot be placed on
    # this log: as Kafka (the epoch is above every known one), OFFSET_OUT_OF_RANGE, and the
    # consumer resets by its policy. Consumers used to be served as if they sent no epoch.
    lost = consumer_fetch(3, 4)
    assert lost.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and not lost.records
