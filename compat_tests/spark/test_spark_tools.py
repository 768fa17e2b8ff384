"""The Spark tools, run as a user runs them: ``cormorant pipeline demo``, ``cormorant archive``
and ``cormorant replay``, each a child process with its own Spark, against the broker.

* The reference pipeline generates events, aggregates them in event-time windows with
  Spark Structured Streaming through ``format("kafka")``, and its checker must find the
  totals in the output topic and in Parquet exactly equal to what was generated.
  Run twice with the same work directory and prefix, the second run is as correct as the
  first (each run has its own topics and outputs).
* archive -> replay -> archive: the replayed topic holds the same records as the original,
  byte for byte (partition, offset, key, value, headers, timestamp), and the two archives
  are identical but for the topic name; a time range archives exactly the records in it.
* archive reads what a read_committed consumer sees: an aborted transaction next to a
  committed one on the same partition is neither archived nor replayed.
* replaying an archive of a range that matched nothing replays nothing and says so.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from compat_tests.harness import settings
from compat_tests.harness.broker import Broker
from compat_tests.harness.drivers import ConsumedRecord, Record
from compat_tests.harness.quirks import LIST_OFFSETS_WRONG, tansu_quirk
from compat_tests.harness.scenario import get_driver, unique_topic
from compat_tests.harness.transactions import TxnSpec, consume_isolated, produce_transactions

from . import sparkenv

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MATRIX_CLIENT = "spark"
TOOL_TIMEOUT_S = 400.0
PARTITIONS = 3
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


def run_cli(*args: str, jars: list[str], expect: int = 0) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env[sparkenv.JARS_ENV] = str(Path(jars[0]).parent)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    proc = subprocess.run(
        [sys.executable, "-m", "broker", *args],
        cwd=str(settings.PROJECT_ROOT),
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TOOL_TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == expect, (
        f"cormorant {' '.join(args)} exited {proc.returncode}\nstdout:\n{proc.stdout}\n"
        f"stderr tail:\n{proc.stderr[-3000:]}"
    )
    return proc


@tansu_quirk(LIST_OFFSETS_WRONG)
def test_pipeline_demo_twice_in_one_work_dir(broker: Broker, spark_jars: list[str], tmp_path: Path) -> None:
    prefix = unique_topic("demo")
    runs = []
    for _ in range(2):
        proc = run_cli(
            "pipeline", "demo",
            "--bootstrap-server", broker.bootstrap,
            "--work-dir", str(tmp_path / "work"),
            "--prefix", prefix,
            "--events", "400",
            "--timeout", "240",
            jars=spark_jars,
        )
        assert proc.stdout.count("totals match exactly") == 2, proc.stdout
        run = proc.stdout.split("run ", 1)[1].split(":", 1)[0]
        assert f"checker: topic {prefix}-{run}-totals:" in proc.stdout
        assert "generator: round 4 of 4" in proc.stdout
        runs.append(run)
    assert runs[0] != runs[1]


def _archive_records(tag: str) -> list[Record]:
    """Records over two UTC dates (yesterday and the day before), tricky bytes included."""
    day_start = int(time.time() * 1000) // DAY_MS * DAY_MS
    records = []
    for i in range(24):
        headers: tuple[tuple[str, bytes], ...] = ()
        if i % 3 == 1:
            headers = (("dup", b"a"), ("dup", b"b"), ("empty", b""), ("bin", b"\x00\xff"))
        elif i % 3 == 2:
            headers = (("trace", tag.encode()),)
        records.append(
            Record(
                key=None if i % 7 == 3 else f"{tag}-{i}".encode() + b"\x00\xfe",
                value=None if i % 11 == 5 else bytes(range(i, i + 40)) * (i + 1),
                headers=headers,
                timestamp_ms=day_start - 36 * HOUR_MS + i * 90 * 60_000 + i,
                partition=i % PARTITIONS,
            )
        )
    return records


def _key(c: ConsumedRecord) -> tuple[object, ...]:
    return (c.partition, c.offset, c.key, c.value, tuple(c.headers), c.timestamp_ms)


def _archive_rows(spark: SparkSession, path: Path) -> list[tuple[object, ...]]:
    rows = spark.read.parquet(str(path)).selectExpr(
        "partition", "offset", "unix_millis(timestamp) AS ts", "timestamp_type", "key", "value",
        "headers", "CAST(date AS STRING) AS date",
    ).collect()
    out = []
    for r in rows:
        headers = tuple((h["key"], None if h["value"] is None else bytes(h["value"])) for h in r["headers"] or ())
        out.append((
            r["partition"], r["offset"], r["ts"], r["timestamp_type"],
            None if r["key"] is None else bytes(r["key"]),
            None if r["value"] is None else bytes(r["value"]),
            headers, r["date"],
        ))
    return sorted(out, key=lambda row: (int(row[0]), int(row[1])))  # type: ignore[call-overload]


@tansu_quirk(LIST_OFFSETS_WRONG)
def test_archive_replay_round_trip(
    spark: SparkSession, broker: Broker, spark_jars: list[str], tmp_path: Path
) -> None:
    source = unique_topic("archive-src")
    copy = unique_topic("archive-copy")
    broker.create_topic(source, PARTITIONS)
    records = _archive_records(source)
    client = get_driver("kafka-python", broker)
    client.produce(source, records, acks=-1)

    first = tmp_path / "archive-1"
    run_cli("archive", source, "--to", str(first), "--bootstrap-server", broker.bootstrap, jars=spark_jars)
    dates = sorted(
        {datetime.fromtimestamp((r.timestamp_ms or 0) / 1000, UTC).date().isoformat() for r in records}
    )
    assert sorted(p.name for p in first.glob("date=*")) == [f"date={d}" for d in dates]

    run_cli("replay", str(first), "--to", copy, "--bootstrap-server", broker.bootstrap, jars=spark_jars)
    original = sorted(map(_key, client.consume(source, range(PARTITIONS), count=len(records))))
    replayed = sorted(map(_key, client.consume(copy, range(PARTITIONS), count=len(records))))
    assert len(original) == len(records)
    assert replayed == original

    second = tmp_path / "archive-2"
    run_cli("archive", copy, "--to", str(second), "--bootstrap-server", broker.bootstrap, jars=spark_jars)
    assert _archive_rows(spark, second) == _archive_rows(spark, first)

    # A time range: from <= timestamp < to, given as ISO-8601.
    low, high = records[5].timestamp_ms or 0, records[17].timestamp_ms or 0
    ranged = tmp_path / "archive-range"
    run_cli(
        "archive", source, "--to", str(ranged), "--bootstrap-server", broker.bootstrap,
        "--from-time", datetime.fromtimestamp(low / 1000, UTC).isoformat(),
        "--to-time", datetime.fromtimestamp(high / 1000, UTC).isoformat(),
        jars=spark_jars,
    )
    want = [row for row in _archive_rows(spark, first) if low <= row[2] < high]  # type: ignore[operator]
    assert _archive_rows(spark, ranged) == want
    assert len(want) == 12


@tansu_quirk(LIST_OFFSETS_WRONG)
def test_archive_keeps_only_committed_transactions(
    spark: SparkSession, broker: Broker, spark_jars: list[str], tmp_path: Path
) -> None:
    source = unique_topic("archive-txn")
    copy = unique_topic("archive-txn-copy")
    broker.create_topic(source, 1)

    def batch(tag: str) -> list[Record]:
        return [Record(key=f"{tag}-{i}".encode(), value=f"{tag}-v{i}".encode(), partition=0) for i in range(3)]

    specs = [TxnSpec(batch("aborted"), commit=False), TxnSpec(batch("committed"), commit=True)]
    producer = get_driver("kafka-python", broker)
    outcomes = produce_transactions(producer, source, unique_topic("txn"), specs)
    assert [o.committed for o in outcomes] == [False, True]
    # A read_uncommitted consumer sees all six: the aborted records are in the log.
    assert len(consume_isolated(producer, source, [0], count=6, isolation="read_uncommitted")) == 6

    archived = tmp_path / "archive-txn"
    proc = run_cli("archive", source, "--to", str(archived), "--bootstrap-server", broker.bootstrap,
                   jars=spark_jars)
    assert "3 records" in proc.stdout, proc.stdout
    rows = _archive_rows(spark, archived)
    committed_offsets = [d.offset for d in outcomes[1].deliveries]
    assert [row[1] for row in rows] == committed_offsets
    assert [row[5] for row in rows] == [r.value for r in specs[1].records]

    run_cli("replay", str(archived), "--to", copy, "--bootstrap-server", broker.bootstrap, jars=spark_jars)
    replayed = consume_isolated(producer, copy, [0], count=6, isolation="read_uncommitted", timeout_s=5.0)
    assert [c.value for c in replayed] == [r.value for r in specs[1].records]


@tansu_quirk(LIST_OFFSETS_WRONG)
def test_replaying_an_empty_archive_replays_nothing(
    broker: Broker, spark_jars: list[str], tmp_path: Path
) -> None:
    source = unique_topic("archive-empty")
    copy = unique_topic("archive-empty-copy")
    broker.create_topic(source, 1)
    get_driver("kafka-python", broker).produce(
        source, [Record(key=b"k", value=b"v", timestamp_ms=int(time.time() * 1000), partition=0)], acks=-1
    )
    empty = tmp_path / "archive-empty"
    # A range long before the one record: it matches nothing.
    proc = run_cli(
        "archive", source, "--to", str(empty), "--bootstrap-server", broker.bootstrap,
        "--from-time", "2001-01-01", "--to-time", "2001-01-02", jars=spark_jars,
    )
    assert "0 records" in proc.stdout, proc.stdout
    proc = run_cli("replay", str(empty), "--to", copy, "--bootstrap-server", broker.bootstrap, jars=spark_jars)
    assert proc.stdout.strip() == f"replayed nothing: {empty} holds no records"
    assert "Traceback" not in proc.stderr
