"""Every produced batch is validated as Kafka's LogValidator does, whatever its codec:
a payload that is not its codec, truncated or over-long, a good stream of bad records and
a decompression bomb are each refused with Kafka's error code; nothing is appended, the
high watermark stays, and the broker serves on. Raw Produce requests against a real broker."""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator

import pytest

from tests.broker.broker_process import BrokerProcess
from tests.broker.raw_client import RawClient
from wire.batch_builder import build_batch
from wire.compression import Compression, compress
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
from wire.generated.api_019_create_topics import (
    CreateTopicsRequest,
    CreateTopicsRequestCreatableTopic,
    CreateTopicsRequestCreatableTopicConfig,
    CreateTopicsResponse,
)
from wire.records import (
    CRC_OFFSET,
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    RECORDS_COUNT_OFFSET,
    RECORDS_OFFSET,
    NewRecord,
    compute_crc,
    iter_records,
    read_batch_header,
)
from wire.regions import FileRegion

TOPIC = "validated"
COMPACTED = "validated-compacted"
RECOMPRESSED = "validated-zstd"
CODECS = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("validation") / "data",
                      {"log.message.timestamp.after.max.ms": "3600000"}).start()
    client = RawClient(b.bootstrap)
    topics = [
        (TOPIC, {}),
        (COMPACTED, {"cleanup.policy": "compact"}),
        (RECOMPRESSED, {"compression.type": "zstd"}),
    ]
    resp = client.call(CreateTopicsRequest(timeout_ms=10_000, topics=[
        CreateTopicsRequestCreatableTopic(
            name=name, num_partitions=2, replication_factor=1,
            configs=[CreateTopicsRequestCreatableTopicConfig(name=k, value=v) for k, v in configs.items()])
        for name, configs in topics
    ]), CreateTopicsResponse, 5)
    assert isinstance(resp, CreateTopicsResponse)
    assert [t.error_code for t in resp.topics] == [0, 0, 0]
    client.close()
    try:
        yield b
    finally:
        b.kill9()


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[RawClient]:
    c = RawClient(broker.bootstrap)
    try:
        yield c
    finally:
        c.close()


def now_ms() -> int:
    return int(time.time() * 1000)


def records(n: int = 3, key: bytes | None = b"k") -> list[NewRecord]:
    ts = now_ms()
    return [NewRecord(key=key, value=b"value-%d" % i, timestamp=ts) for i in range(n)]


def with_payload(batch: bytes, payload: bytes, count: int | None = None) -> bytes:
    """``batch`` with its records replaced by ``payload`` (and ``count``), length and CRC fixed."""
    out = bytearray(batch[:RECORDS_OFFSET] + payload)
    struct.pack_into(">i", out, LENGTH_OFFSET, len(out) - LOG_OVERHEAD)
    if count is not None:
        struct.pack_into(">i", out, RECORDS_COUNT_OFFSET, count)
        struct.pack_into(">i", out, LAST_OFFSET_DELTA_OFFSET, count - 1)
    struct.pack_into(">I", out, CRC_OFFSET, compute_crc(out, 0, len(out)))
    return bytes(out)


def raw_records(batch: bytes) -> bytes:
    """The record bytes of an uncompressed batch."""
    return batch[RECORDS_OFFSET:]


def produce(client: RawClient, data: dict[tuple[str, int], bytes], version: int = 9) -> dict[tuple[str, int], int]:
    by_topic: dict[str, list[ProduceRequestPartitionProduceData]] = {}
    for (topic, partition), batch in data.items():
        by_topic.setdefault(topic, []).append(ProduceRequestPartitionProduceData(index=partition, records=batch))
    req = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[
        ProduceRequestTopicProduceData(name=t, partition_data=p) for t, p in by_topic.items()])
    resp = client.call(req, ProduceResponse, version)
    assert isinstance(resp, ProduceResponse)
    return {(t.name, p.index): p.error_code for t in resp.responses for p in t.partition_responses}


def produce_one(client: RawClient, batch: bytes, topic: str = TOPIC) -> int:
    return produce(client, {(topic, 0): batch})[(topic, 0)]


def fetch(client: RawClient, topic: str = TOPIC, partition: int = 0) -> tuple[int, bytes]:
    req = FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=8 << 20, topics=[
        FetchRequestFetchTopic(topic=topic, partitions=[
            FetchRequestFetchPartition(partition=partition, fetch_offset=0, partition_max_bytes=8 << 20)])])
    resp = client.call(req, FetchResponse, 12)
    assert isinstance(resp, FetchResponse)
    p = resp.responses[0].partitions[0]
    assert p.error_code == 0
    assert not isinstance(p.records, FileRegion)
    return p.high_watermark, bytes(p.records or b"")


def high_watermark(client: RawClient, topic: str = TOPIC, partition: int = 0) -> int:
    return fetch(client, topic, partition)[0]


def assert_refused(client: RawClient, batch: bytes, code: ErrorCode, topic: str = TOPIC) -> None:
    before = high_watermark(client, topic)
    assert produce_one(client, batch, topic) == code
    assert high_watermark(client, topic) == before
    # The broker serves on, and the partition stays readable.
    assert produce_one(client, build_batch(records(1)), topic) == ErrorCode.NONE
    hw, data = fetch(client, topic)
    assert hw == before + 1
    assert sum(1 for _ in iter_records(data, 0)) >= 0


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_a_payload_that_is_not_its_codec_is_corrupt(client: RawClient, codec: Compression) -> None:
    batch = build_batch(records(), compression=codec)
    garbage = with_payload(batch, b"this is not compressed data, not even close" * 3)
    assert_refused(client, garbage, ErrorCode.CORRUPT_MESSAGE)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_truncated_and_over_long_payloads_are_corrupt(client: RawClient, codec: Compression) -> None:
    values = [NewRecord(key=b"k", value=bytes(range(256)) * 8, timestamp=now_ms()) for _ in range(20)]
    batch = build_batch(values, compression=codec)
    payload = batch[RECORDS_OFFSET:]
    assert_refused(client, with_payload(batch, payload[: len(payload) // 2]), ErrorCode.CORRUPT_MESSAGE)
    assert_refused(client, with_payload(batch, payload + b"\x00\x01trailing junk"), ErrorCode.CORRUPT_MESSAGE)


@pytest.mark.parametrize("codec", [Compression.NONE, *CODECS], ids=lambda c: c.name.lower())
def test_a_good_stream_of_bad_records_is_an_invalid_record(client: RawClient, codec: Compression) -> None:
    template = build_batch(records(3), compression=codec)
    good = raw_records(build_batch(records(3)))
    bad_streams = {
        "truncated record": good[:-1],
        "bytes after the last record": good + b"\x02\x00",
        "count larger than the records": None,
        "wrong offset delta": None,
    }
    for name, stream in bad_streams.items():
        count = None
        if name == "count larger than the records":
            stream, count = good, 4
        elif name == "wrong offset delta":
            # Record 1 says it is record 5 (offset delta varint 2 -> 10).
            one = raw_records(build_batch(records(1)))
            shifted = bytearray(raw_records(build_batch([*records(1), NewRecord(b"k", b"v", timestamp=now_ms(),
                                                                                  offset_delta=5)])))
            assert shifted[: len(one)] == one
            stream, count = bytes(shifted), 2
        assert stream is not None
        payload = stream if codec is Compression.NONE else compress(codec, stream)
        bad = with_payload(template, payload, count)
        before = high_watermark(client)
        assert produce_one(client, bad) == ErrorCode.INVALID_RECORD, name
        assert high_watermark(client) == before, name


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.LZ4, Compression.ZSTD], ids=lambda c: c.name.lower())
def test_a_decompression_bomb_is_refused_without_inflating_it(client: RawClient, codec: Compression) -> None:
    # 80 MiB of zeros squeeze into a few KiB; the broker stops inflating at its bound.
    bomb = compress(codec, bytes(80 << 20))
    assert len(bomb) < 1 << 20
    assert_refused(client, with_payload(build_batch(records(1), compression=codec), bomb, 1),
                   ErrorCode.CORRUPT_MESSAGE)


def test_a_snappy_block_declaring_a_huge_length_is_refused(client: RawClient) -> None:
    # A raw snappy block is its length varint (here 1 GiB) and then its data.
    huge = bytes([0x80, 0x80, 0x80, 0x80, 0x04]) + b"\x00" * 32
    assert_refused(client, with_payload(build_batch(records(1), compression=Compression.SNAPPY), huge, 1),
                   ErrorCode.CORRUPT_MESSAGE)


def test_nothing_of_a_bad_partition_is_appended_and_good_partitions_are(client: RawClient) -> None:
    before = (high_watermark(client, TOPIC, 0), high_watermark(client, TOPIC, 1))
    bad = with_payload(build_batch(records(), compression=Compression.LZ4), b"garbage" * 10)
    errors = produce(client, {(TOPIC, 0): build_batch(records(2)), (TOPIC, 1): bad})
    assert errors == {(TOPIC, 0): ErrorCode.NONE, (TOPIC, 1): ErrorCode.CORRUPT_MESSAGE}
    assert high_watermark(client, TOPIC, 0) == before[0] + 2
    assert high_watermark(client, TOPIC, 1) == before[1]


def test_timestamps_of_every_record_are_checked(client: RawClient) -> None:
    # The default message.timestamp.after.max.ms is one hour; the second record is two ahead.
    ts = now_ms()
    values = [NewRecord(b"k", b"a", timestamp=ts), NewRecord(b"k", b"b", timestamp=ts + 2 * 3600_000),
              NewRecord(b"k", b"c", timestamp=ts)]
    for codec in (Compression.NONE, Compression.ZSTD):
        batch = bytearray(build_batch(values, compression=codec))
        # Even with a max timestamp in the header that looks fine, the record is found.
        struct.pack_into(">q", batch, 35, ts)
        struct.pack_into(">I", batch, CRC_OFFSET, compute_crc(batch, 0, len(batch)))
        before = high_watermark(client)
        req = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequestTopicProduceData(
            name=TOPIC, partition_data=[ProduceRequestPartitionProduceData(index=0, records=bytes(batch))])])
        resp = client.call(req, ProduceResponse, 9)
        assert isinstance(resp, ProduceResponse)
        p = resp.responses[0].partition_responses[0]
        assert p.error_code == ErrorCode.INVALID_TIMESTAMP
        assert [e.batch_index for e in p.record_errors] == [1]
        assert high_watermark(client) == before


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP], ids=lambda c: c.name.lower())
def test_compacted_topics_refuse_keyless_records_inside_compressed_batches(client: RawClient, codec: Compression) -> None:
    values = [*records(1), NewRecord(None, b"no key", timestamp=now_ms())]
    before = high_watermark(client, COMPACTED)
    req = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequestTopicProduceData(
        name=COMPACTED, partition_data=[ProduceRequestPartitionProduceData(
            index=0, records=build_batch(values, compression=codec))])])
    resp = client.call(req, ProduceResponse, 9)
    assert isinstance(resp, ProduceResponse)
    p = resp.responses[0].partition_responses[0]
    assert p.error_code == ErrorCode.INVALID_RECORD
    assert [e.batch_index for e in p.record_errors] == [1]
    assert high_watermark(client, COMPACTED) == before
    assert produce_one(client, build_batch(records(2), compression=codec), COMPACTED) == ErrorCode.NONE


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_compressed_batches_are_stored_as_they_came(client: RawClient, codec: Compression) -> None:
    batch = build_batch(records(5), compression=codec)
    topic_partition = (TOPIC, 1)
    before, _ = fetch(client, *topic_partition)
    assert produce(client, {topic_partition: batch}) == {topic_partition: ErrorCode.NONE}
    hw, data = fetch(client, *topic_partition)
    assert hw == before + 5
    # The stored batch is the producer's, byte for byte past the fields the broker owns.
    pos = 0
    while read_batch_header(data, pos).base_offset != before:
        pos += read_batch_header(data, pos).size_in_bytes
    stored = read_batch_header(data, pos)
    assert stored.compression is codec
    assert data[pos + CRC_OFFSET : pos + stored.size_in_bytes] == batch[CRC_OFFSET:]


def test_a_topic_with_its_own_compression_type_recompresses(client: RawClient) -> None:
    values = records(4)
    assert produce_one(client, build_batch(values, compression=Compression.GZIP), RECOMPRESSED) == ErrorCode.NONE
    hw, data = fetch(client, RECOMPRESSED)
    assert hw == 4
    header = read_batch_header(data, 0)
    assert header.compression is Compression.ZSTD
    got = [(r.offset, r.key, r.value, r.timestamp) for r in iter_records(data, 0)]
    assert got == [(i, v.key, v.value, v.timestamp) for i, v in enumerate(values)]


def test_legacy_message_sets_with_any_inner_offsets_are_numbered_afresh() -> None:
    from broker.log.config import LogConfig
    from broker.log.validation import TimestampPolicy, validate_produce
    from tests.wire.test_records import legacy

    plain = legacy(5, b"a") + legacy(5, b"b") + legacy(2, b"c")
    inner = legacy(0, b"x", magic=1) + legacy(2, b"y", magic=1) + legacy(7, b"z", magic=1)
    wrapped = legacy(7, compress(Compression.GZIP, inner), magic=1, attributes=int(Compression.GZIP))
    for message_set, expected in ((plain, [b"a", b"b", b"c"]), (wrapped, [b"x", b"y", b"z"])):
        validated = validate_produce(message_set, 2, LogConfig(), now_ms(), TimestampPolicy())
        assert validated.record_count == 3
        records = [r for pos, _ in validated.batches for r in iter_records(validated.data, pos)]
        assert [(r.offset, r.value) for r in records] == list(enumerate(expected))


def test_writable_record_data_is_stamped_in_place_and_read_only_data_is_copied() -> None:
    """A Produce request's records are a view of its own frame: validated and stamped there
    (LogAppendTime here) and appended from there, not copied; bytes are copied, left as given."""
    from broker.log.config import LogConfig
    from broker.log.validation import TimestampPolicy, validate_produce

    stamped = LogConfig(message_timestamp_type="LogAppendTime")
    now = now_ms()
    batch = build_batch([NewRecord(key=b"k", value=b"v" * 100, timestamp=now - 1000) for _ in range(3)])
    frame = bytearray(b"header" + batch)
    view = memoryview(frame)[6:]
    validated = validate_produce(view, 9, stamped, now, TimestampPolicy())
    assert isinstance(validated.data, memoryview) and validated.data.obj is frame
    assert read_batch_header(frame, 6).max_timestamp == now  # stamped in the frame itself
    assert [r.value for r in iter_records(frame, 6)] == [b"v" * 100] * 3  # CRC redone: still valid

    copied = validate_produce(batch, 9, stamped, now, TimestampPolicy())
    assert isinstance(copied.data, bytearray)
    assert read_batch_header(copied.data, 0).max_timestamp == now
    assert read_batch_header(batch, 0).max_timestamp == now - 1000  # the caller's bytes untouched
    readonly = memoryview(bytes(batch))
    assert isinstance(validate_produce(readonly, 9, stamped, now, TimestampPolicy()).data, bytearray)
