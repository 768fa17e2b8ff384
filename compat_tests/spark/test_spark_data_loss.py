"""``failOnDataLoss`` when records vanish under a running Spark query.

A one-partition topic holds 40 records in 8 batches. A streaming query reads 5 offsets per
trigger; its first micro-batch (offsets 0-4, planned but not yet read) is held in the
foreachBatch sink while the oldest records disappear, by DeleteRecords or by retention
deleting segments (the broker checks every 500 ms). (Holding a batch that has already read
would not do: the Java consumer prefetches the next offsets, and Spark keeps that consumer
for the next trigger.) Then:

* ``failOnDataLoss=true``: the query stops with Spark's data-loss error;
* ``failOnDataLoss=false``: it goes on, skips what was lost, and reads everything from the
  new log start offset on, including records appended afterwards, exactly once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient

from compat_tests.harness import settings
from compat_tests.harness.broker import Broker
from compat_tests.harness.drivers import Record
from compat_tests.harness.quirks import tansu_quirk
from compat_tests.harness.scenario import get_driver, unique_topic

from . import sparkenv

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

MATRIX_CLIENT = "spark"
BATCHES = 8
PER_BATCH = 5
GATE_TIMEOUT_S = 60.0
QUERY_TIMEOUT_S = 90
DATA_LOSS_MARKERS = ("data may have been lost", "KAFKA_DATA_LOSS")
TANSU_DELETE_RECORDS = "drops the connection on DeleteRecords (the admin client sees 'socket disconnected')"
TANSU_NO_RETENTION = "its memory engine never deletes segments (retention.ms=1 leaves the log start at 0)"


class GatedSink:
    """foreachBatch sink recording offsets; it holds the first micro-batch, already planned
    (offsets 0-4) but not yet read, until released."""

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.first_batch_planned = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        if not self.first_batch_planned.is_set():
            self.first_batch_planned.set()
            self.release.wait(GATE_TIMEOUT_S)
        offsets = [r["offset"] for r in df.select("offset").collect()]
        with self._lock:
            self.offsets.extend(offsets)

    def read(self) -> list[int]:
        with self._lock:
            return sorted(self.offsets)


def _admin(broker: Broker) -> KafkaAdminClient:
    return KafkaAdminClient(
        bootstrap_servers=broker.bootstrap,
        client_id="compat-spark-data-loss",
        request_timeout_ms=settings.REQUEST_TIMEOUT_MS,
    )


def _produce(broker: Broker, topic: str, first: int, count: int) -> None:
    records = [
        Record(key=f"k{i}".encode(), value=f"v{i}".encode(), partition=0)
        for i in range(first, first + count)
    ]
    get_driver("kafka-python", broker).produce(topic, records, acks=-1)


def _earliest(broker: Broker, topic: str) -> int:
    return get_driver("kafka-python", broker).list_offsets(topic, 0, "earliest")


def delete_records(broker: Broker, topic: str) -> None:
    admin = _admin(broker)
    try:
        admin.delete_records({TopicPartition(topic, 0): 4 * PER_BATCH})
    finally:
        admin.close()


def retention_deletes_segments(broker: Broker, topic: str) -> None:
    driver = get_driver("kafka-python", broker)
    driver.alter_topic_config(topic, "retention.ms", "1")
    sparkenv.wait_for(
        lambda: _earliest(broker, topic) >= 2 * PER_BATCH, 30, "retention to delete old segments"
    )
    driver.alter_topic_config(topic, "retention.ms", "-1")


def _run(
    spark: SparkSession,
    broker: Broker,
    tmp_path: Path,
    fail_on_data_loss: bool,
    lose: Callable[[Broker, str], None],
) -> None:
    topic = unique_topic(f"spark-loss-{lose.__name__}-{fail_on_data_loss}")
    # Small segments: every produced batch gets a segment of its own.
    broker.create_topic(topic, 1, {"segment.bytes": "200", "retention.ms": "-1"})
    for b in range(BATCHES):
        _produce(broker, topic, b * PER_BATCH, PER_BATCH)
    end = BATCHES * PER_BATCH

    sink = GatedSink()
    df = (
        spark.readStream.format("kafka")
        .options(**sparkenv.read_options(broker.bootstrap))
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(PER_BATCH))
        .option("failOnDataLoss", str(fail_on_data_loss).lower())
        .load()
    )
    query = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        assert sink.first_batch_planned.wait(GATE_TIMEOUT_S), "the query planned no batch"
        lose(broker, topic)
        log_start = _earliest(broker, topic)
        assert log_start >= 2 * PER_BATCH, f"log start offset {log_start}: nothing was lost"
        sink.release.set()

        if fail_on_data_loss:
            with pytest.raises(Exception) as failure:
                finished = query.awaitTermination(QUERY_TIMEOUT_S)
                pytest.fail(f"the query did not fail (terminated: {finished})")
            message = str(failure.value)
            assert any(m in message for m in DATA_LOSS_MARKERS), message[:2000]
            assert sink.read() == []
            return

        # It continues: what is left, then what is appended, each exactly once.
        _produce(broker, topic, end, PER_BATCH)
        expected = list(range(log_start, end + PER_BATCH))
        sparkenv.wait_for(
            lambda: sink.read()[-1:] == [end + PER_BATCH - 1] or query.exception() is not None,
            QUERY_TIMEOUT_S,
            "the query to read past the lost records",
        )
        assert query.exception() is None, query.exception()
        assert query.isActive
        assert sink.read() == expected
    finally:
        sink.release.set()
        query.stop()


@tansu_quirk(TANSU_DELETE_RECORDS)
@pytest.mark.parametrize("fail_on_data_loss", [True, False], ids=["fail", "skip"])
def test_fail_on_data_loss_after_delete_records(
    spark: SparkSession, broker: Broker, tmp_path: Path, fail_on_data_loss: bool
) -> None:
    _run(spark, broker, tmp_path, fail_on_data_loss, delete_records)


@tansu_quirk(TANSU_NO_RETENTION)
@pytest.mark.parametrize("fail_on_data_loss", [True, False], ids=["fail", "skip"])
def test_fail_on_data_loss_after_retention(
    spark: SparkSession, broker: Broker, tmp_path: Path, fail_on_data_loss: bool
) -> None:
    _run(spark, broker, tmp_path, fail_on_data_loss, retention_deletes_segments)
