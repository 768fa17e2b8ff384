"""Spark's Kafka connector (spark-sql-kafka-0-10 4.0.0, kafka-clients 3.9.0) unchanged.

Batch writes (key, value, headers, partition column) and batch reads (earliest to latest,
JSON offsets, start/end timestamps), ``readStream`` with ``availableNow`` and a checkpoint,
rate limits per trigger, a streaming write from the rate source, and reads with
``kafka.group.id``. Every row is compared exactly: partition, offset, key, value, headers
(order included), timestamp and timestampType. Data written by Spark is cross-checked with
kafka-python; data read by Spark was written by kafka-python with explicit CreateTimes.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from compat_tests.harness.broker import Broker
from compat_tests.harness.drivers import Record
from compat_tests.harness.quirks import LIST_OFFSETS_WRONG, tansu_quirk
from compat_tests.harness.scenario import get_driver, unique_topic

from . import sparkenv

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

MATRIX_CLIENT = "spark"
CREATE_TIME = 0
PARTITIONS = 3
PER_PARTITION = 10
QUERY_TIMEOUT_S = 120
CLOCK_SKEW_MS = 5000
#: Explicit CreateTimes an hour back: the broker's retention (7 days, checked every 500 ms
#: here) would delete segments stamped with the suite's usual 2023 timestamps.
BASE_TIMESTAMP_MS = (int(time.time()) - 3600) * 1000

#: One read-back row: (partition, offset, key, value, timestamp ms, timestampType, headers).
Row = tuple[int, int, bytes | None, bytes | None, int, int, tuple[tuple[str, bytes | None], ...]]

COLUMNS = (
    "partition",
    "offset",
    "key",
    "value",
    "unix_millis(timestamp) AS ts",
    "timestampType",
    "headers",
)


def _bytes(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def to_rows(df: DataFrame) -> list[Row]:
    rows = []
    for r in df.selectExpr(*COLUMNS).collect():
        headers = tuple((h["key"], _bytes(h["value"])) for h in (r["headers"] or ()))
        rows.append(
            (r["partition"], r["offset"], _bytes(r["key"]), _bytes(r["value"]), r["ts"],
             r["timestampType"], headers)
        )
    return sorted(rows, key=lambda row: (row[0], row[1]))


def timestamp_of(partition: int, index: int) -> int:
    """Record ``index`` of ``partition``: one second apart, partitions 1 ms apart."""
    return BASE_TIMESTAMP_MS + index * 1000 + partition


def seeded_records(tag: str) -> list[Record]:
    records = []
    for p in range(PARTITIONS):
        for i in range(PER_PARTITION):
            headers: tuple[tuple[str, bytes], ...] = (("n", str(i).encode()), ("bin", b"\x00\xff"))
            if i % 3 == 0:
                headers = (("dup", b"a"), ("dup", b"b"), ("empty", b""))
            records.append(
                Record(
                    key=None if i == 4 else f"{tag}-k{p}-{i}".encode(),
                    value=None if i == 7 else bytes([p, i]) * (i + 1),
                    headers=headers,
                    timestamp_ms=timestamp_of(p, i),
                    partition=p,
                )
            )
    return records


def expected_rows(records: Sequence[Record], offsets: dict[int, range] | None = None) -> list[Row]:
    """Rows for ``records`` as laid out by seeded_records, limited to ``offsets`` ranges."""
    rows: list[Row] = []
    next_offset: dict[int, int] = {}
    for r in records:
        assert r.partition is not None and r.timestamp_ms is not None
        offset = next_offset.get(r.partition, 0)
        next_offset[r.partition] = offset + 1
        if offsets is not None and offset not in offsets.get(r.partition, range(0)):
            continue
        rows.append((r.partition, offset, r.key, r.value, r.timestamp_ms, CREATE_TIME, r.headers))
    return sorted(rows, key=lambda row: (row[0], row[1]))


@pytest.fixture(scope="module")
def seeded(broker: Broker) -> tuple[str, list[Record]]:
    """A 3-partition topic, 10 records per partition, written by kafka-python."""
    topic = unique_topic("spark-seeded")
    broker.create_topic(topic, PARTITIONS)
    records = seeded_records(topic)
    deliveries = get_driver("kafka-python", broker).produce(topic, records, acks=-1)
    assert len(deliveries) == len(records)
    return topic, records


def batch_read(spark: SparkSession, broker: Broker, topic: str, **options: str) -> list[Row]:
    reader = spark.read.format("kafka").options(**sparkenv.read_options(broker.bootstrap))
    return to_rows(reader.option("subscribe", topic).options(**options).load())


# -- batch ---------------------------------------------------------------------------------


@tansu_quirk(LIST_OFFSETS_WRONG)
def test_batch_write_then_read(spark: SparkSession, broker: Broker) -> None:
    topic = unique_topic("spark-write")
    broker.create_topic(topic, PARTITIONS)
    data: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]] | None, int]] = [
        (b"k0", b"v0", [("h", b"1")], 0),
        (None, b"null key", [], 1),
        (b"tombstone", None, None, 2),
        (b"\x00\xffbin", bytes(range(256)), [("dup", b"a"), ("dup", b"b")], 0),
        (b"k4", b"", [("empty", b""), ("null", None)], 1),
        (b"k5", "ünïcødé ✓".encode() * 50, [("trace", b"\x00\x01")], 2),
        (b"k6", b"abcdefgh" * 4096, [], 0),
    ]
    schema = "key binary, value binary, headers array<struct<key:string,value:binary>>, partition int"
    df = spark.createDataFrame(data, schema).coalesce(1)
    started = int(time.time() * 1000)
    df.write.format("kafka").options(
        **sparkenv.write_options(broker.bootstrap)
    ).option("topic", topic).save()
    finished = int(time.time() * 1000)

    rows = batch_read(spark, broker, topic, startingOffsets="earliest", endingOffsets="latest")
    next_offset = [0] * PARTITIONS
    expected = []
    for key, value, headers, partition in data:
        expected.append((partition, next_offset[partition], key, value, tuple(headers or ())))
        next_offset[partition] += 1
    assert [(r[0], r[1], r[2], r[3], r[6]) for r in rows] == sorted(expected, key=lambda e: (e[0], e[1]))
    for row in rows:
        assert row[5] == CREATE_TIME
        assert started - CLOCK_SKEW_MS <= row[4] <= finished + CLOCK_SKEW_MS, row

    # An independent client reads the same bytes.
    consumed = get_driver("kafka-python", broker).consume(topic, range(PARTITIONS), count=len(data))
    assert sorted((c.partition, c.offset, c.key, c.value, c.headers) for c in consumed) == sorted(
        (r[0], r[1], r[2], r[3], r[6]) for r in rows
    )


@tansu_quirk(LIST_OFFSETS_WRONG)
def test_batch_read_earliest_to_latest(
    spark: SparkSession, broker: Broker, seeded: tuple[str, list[Record]]
) -> None:
    topic, records = seeded
    rows = batch_read(spark, broker, topic, startingOffsets="earliest", endingOffsets="latest")
    assert rows == expected_rows(records)


@tansu_quirk(LIST_OFFSETS_WRONG)
def test_batch_read_json_offsets(
    spark: SparkSession, broker: Broker, seeded: tuple[str, list[Record]]
) -> None:
    topic, records = seeded
    starting = json.dumps({topic: {"0": 2, "1": -2, "2": 0}})
    ending = json.dumps({topic: {"0": 5, "1": -1, "2": 7}})
    rows = batch_read(spark, broker, topic, startingOffsets=starting, endingOffsets=ending)
    assert rows == expected_rows(records, {0: range(2, 5), 1: range(0, 10), 2: range(0, 7)})


@tansu_quirk(LIST_OFFSETS_WRONG)
def test_batch_read_by_timestamps(
    spark: SparkSession, broker: Broker, seeded: tuple[str, list[Record]]
) -> None:
    topic, records = seeded
    # First offset whose timestamp is >= the target, inside a batch: p0 skips BASE+3000.
    rows = batch_read(
        spark,
        broker,
        topic,
        startingTimestamp=str(BASE_TIMESTAMP_MS + 3001),
        endingTimestamp=str(BASE_TIMESTAMP_MS + 7001),
    )
    assert rows == expected_rows(records, {0: range(4, 8), 1: range(3, 7), 2: range(3, 7)})

    by_partition_start = {topic: {"0": timestamp_of(0, 5), "1": BASE_TIMESTAMP_MS, "2": timestamp_of(2, 9)}}
    by_partition_end = {topic: {"0": timestamp_of(0, 8), "1": timestamp_of(1, 2), "2": BASE_TIMESTAMP_MS + 10**9}}
    rows = batch_read(
        spark,
        broker,
        topic,
        startingOffsetsByTimestamp=json.dumps(by_partition_start),
        endingOffsetsByTimestamp=json.dumps(by_partition_end),
    )
    assert rows == expected_rows(records, {0: range(5, 8), 1: range(0, 2), 2: range(9, 10)})

    # Past the last record: no offset (-1); the "latest" strategy turns that into an empty read.
    rows = batch_read(
        spark,
        broker,
        topic,
        startingTimestamp=str(BASE_TIMESTAMP_MS + 10**9),
        startingOffsetsByTimestampStrategy="latest",
    )
    assert rows == []


@tansu_quirk(LIST_OFFSETS_WRONG)
def test_batch_read_with_group_id(
    spark: SparkSession, broker: Broker, seeded: tuple[str, list[Record]]
) -> None:
    topic, records = seeded
    rows = batch_read(
        spark,
        broker,
        topic,
        startingOffsets="earliest",
        endingOffsets="latest",
        **{"kafka.group.id": f"spark-batch-{topic}"},
    )
    assert rows == expected_rows(records)


# -- streaming -----------------------------------------------------------------------------


class BatchCollector:
    """A foreachBatch sink keeping every micro-batch's rows, by batch id."""

    def __init__(self) -> None:
        self.batches: dict[int, list[Row]] = {}
        self._lock = threading.Lock()

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        rows = to_rows(df)
        with self._lock:
            self.batches[batch_id] = rows

    def rows(self) -> list[Row]:
        with self._lock:
            return sorted((r for b in self.batches.values() for r in b), key=lambda r: (r[0], r[1]))

    def sizes(self) -> list[int]:
        with self._lock:
            return [len(self.batches[b]) for b in sorted(self.batches)]


def stream(spark: SparkSession, broker: Broker, topic: str, **options: str) -> DataFrame:
    reader = spark.readStream.format("kafka").options(**sparkenv.read_options(broker.bootstrap))
    return reader.option("subscribe", topic).options(**options).load()


def run_available_now(df: DataFrame, checkpoint: Path, sink: BatchCollector) -> None:
    query = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        finished = query.awaitTermination(QUERY_TIMEOUT_S)
        assert finished, f"availableNow query still running after {QUERY_TIMEOUT_S:.0f} s"
    finally:
        query.stop()
    assert query.exception() is None, query.exception()


def produce_seeded(broker: Broker, topic: str, first: int, count: int, partitions: int) -> list[Record]:
    records = [
        Record(
            key=f"k{i}".encode(),
            value=f"v{i}".encode(),
            headers=(("i", str(i).encode()),),
            timestamp_ms=BASE_TIMESTAMP_MS + i,
            partition=i % partitions,
        )
        for i in range(first, first + count)
    ]
    get_driver("kafka-python", broker).produce(topic, records, acks=-1)
    return records


def rows_by_value(rows: Sequence[Row]) -> list[bytes | None]:
    return sorted(r[3] for r in rows)  # type: ignore[type-var]


@tansu_quirk(LIST_OFFSETS_WRONG)
def test_available_now_twice_reads_only_new_rows(
    spark: SparkSession, broker: Broker, tmp_path: Path
) -> None:
    topic = unique_topic("spark-avail")
    broker.create_topic(topic, 2)
    checkpoint = tmp_path / "checkpoint"
    first = produce_seeded(broker, topic, 0, 8, 2)

    run1 = BatchCollector()
    run_available_now(stream(spark, broker, topic, startingOffsets="earliest"), checkpoint, run1)
    assert rows_by_value(run1.rows()) == sorted(r.value for r in first)  # type: ignore[type-var]
    assert sparkenv.checkpoint_offsets(checkpoint) == {topic: {0: 4, 1: 4}}

    second = produce_seeded(broker, topic, 8, 6, 2)
    run2 = BatchCollector()
    run_available_now(stream(spark, broker, topic, startingOffsets="earliest"), checkpoint, run2)
    rows = run2.rows()
    assert rows_by_value(rows) == sorted(r.value for r in second)  # type: ignore[type-var]
    assert sorted((r[0], r[1]) for r in rows) == sorted(
        [(0, o) for o in range(4, 7)] + [(1, o) for o in range(4, 7)]
    )
    for row in rows:
        assert row[3] is not None
        i = int(row[3][1:])
        assert row[2] == f"k{i}".encode() and row[4] == BASE_TIMESTAMP_MS + i
        assert row[6] == (("i", str(i).encode()),)
    assert sparkenv.checkpoint_offsets(checkpoint) == {topic: {0: 7, 1: 7}}


@tansu_quirk(LIST_OFFSETS_WRONG)
def test_max_offsets_per_trigger(spark: SparkSession, broker: Broker, tmp_path: Path) -> None:
    topic = unique_topic("spark-maxoffsets")
    broker.create_topic(topic, 2)
    records = produce_seeded(broker, topic, 0, 20, 2)
    sink = BatchCollector()
    df = stream(spark, broker, topic, startingOffsets="earliest", maxOffsetsPerTrigger="6")
    run_available_now(df, tmp_path / "checkpoint", sink)
    sizes = [s for s in sink.sizes() if s]
    assert sum(sizes) == 20 and max(sizes) <= 6 and len(sizes) >= 4, sizes
    assert rows_by_value(sink.rows()) == sorted(r.value for r in records)  # type: ignore[type-var]


@tansu_quirk(LIST_OFFSETS_WRONG)
def test_min_offsets_per_trigger(spark: SparkSession, broker: Broker, tmp_path: Path) -> None:
    """A trigger waits for minOffsetsPerTrigger new offsets, or for maxTriggerDelay."""
    topic = unique_topic("spark-minoffsets")
    broker.create_topic(topic, 2)
    sink = BatchCollector()
    df = stream(
        spark, broker, topic, startingOffsets="earliest", minOffsetsPerTrigger="10",
        maxTriggerDelay="8s",
    )
    checkpoint = tmp_path / "checkpoint"
    query = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="250 milliseconds")
        .start()
    )
    try:
        # The query has fixed its starting offsets (on the empty topic) before data arrives.
        sparkenv.wait_for(
            lambda: (checkpoint / "sources" / "0" / "0").is_file() or query.exception(),
            60,
            "the query to record its initial offsets",
        )
        produce_seeded(broker, topic, 0, 4, 2)
        time.sleep(3.0)  # observing that nothing happens needs a wait
        assert sum(sink.sizes()) == 0, f"a batch ran below minOffsetsPerTrigger: {sink.sizes()}"
        produce_seeded(broker, topic, 4, 6, 2)
        sparkenv.wait_for(lambda: sum(sink.sizes()) >= 10, 30, "the 10 offsets to be read")
        assert [s for s in sink.sizes() if s] == [10]
        # Below the minimum, maxTriggerDelay still lets a batch run.
        produce_seeded(broker, topic, 10, 2, 2)
        sparkenv.wait_for(lambda: sum(sink.sizes()) >= 12, 40, "maxTriggerDelay to release 2 offsets")
        assert [s for s in sink.sizes() if s] == [10, 2]
        assert query.exception() is None
    finally:
        query.stop()


@tansu_quirk(LIST_OFFSETS_WRONG)
def test_available_now_with_group_id(spark: SparkSession, broker: Broker, tmp_path: Path) -> None:
    topic = unique_topic("spark-stream-group")
    broker.create_topic(topic, 2)
    records = produce_seeded(broker, topic, 0, 10, 2)
    sink = BatchCollector()
    df = stream(spark, broker, topic, startingOffsets="earliest", **{"kafka.group.id": f"g-{topic}"})
    run_available_now(df, tmp_path / "checkpoint", sink)
    assert rows_by_value(sink.rows()) == sorted(r.value for r in records)  # type: ignore[type-var]


@tansu_quirk(LIST_OFFSETS_WRONG)
def test_streaming_write_from_rate_source(
    spark: SparkSession, broker: Broker, tmp_path: Path
) -> None:
    """rate-micro-batch writes 10 rows per batch (values 0, 1, ...) into a topic.

    After stopping: every committed batch's rows are there exactly once, and nothing but
    (part of) the one batch that may have been running when the query stopped.
    """
    topic = unique_topic("spark-rate")
    broker.create_topic(topic, 2)
    per_batch = 10
    checkpoint = tmp_path / "checkpoint"
    source = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", per_batch)
        .option("numPartitions", 2)
        .load()
        .selectExpr("CAST(value AS STRING) AS key", "CAST(value AS STRING) AS value")
    )
    query = (
        source.writeStream.format("kafka")
        .options(**sparkenv.write_options(broker.bootstrap))
        .option("topic", topic)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    client = get_driver("kafka-python", broker)

    def written() -> int:
        return sum(client.list_offsets(topic, p, "latest") for p in range(2))

    try:
        sparkenv.wait_for(lambda: written() >= 50, 60, "50 records from the rate source")
        assert query.exception() is None
    finally:
        query.stop()
    committed = len([p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()])
    assert committed >= 1
    total = written()
    consumed = client.consume(topic, range(2), count=total, timeout_s=30)
    values = [int(c.value or b"-1") for c in consumed]
    assert all(c.key == c.value for c in consumed)
    assert len(values) == len(set(values)), "duplicates from the rate source"
    done = set(range(committed * per_batch))
    assert done <= set(values), f"missing rows of committed batches: {sorted(done - set(values))[:10]}"
    extra = set(values) - done
    assert extra <= set(range(committed * per_batch, (committed + 1) * per_batch)), sorted(extra)
