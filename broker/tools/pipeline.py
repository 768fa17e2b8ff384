"""``cormorant pipeline demo``: a reference Spark Structured Streaming pipeline, checked.

Three parts, run one after the other against a broker:

1. **Generator**: ``--events`` JSON events ``{"key", "event_time", "amount"}`` (seeded, so
   every run with the same seed sends the same events), keyed by ``key``, written to
   ``<prefix>-<run>-events`` in a few rounds while the query runs. Event times go forward with
   up to ``JITTER_MS`` of disorder, less than the watermark delay, so no event is late.
   A last marker event (key ``__end__``) far ahead in event time moves the watermark past
   every window; its own window never closes and is never emitted.
2. **Streaming job** (PySpark, ``readStream.format("kafka")``): parse, watermark, count and
   sum per key in tumbling one-minute event-time windows (append mode: a window is emitted
   once, when the watermark passes it). Each micro-batch goes to the topic
   ``<prefix>-<run>-totals`` (``write.format("kafka")``, JSON values) and to Parquet under
   ``WORK_DIR/<run>/totals``.
3. **Checker**: reads the totals back from the topic (``read.format("kafka")``) and from
   Parquet and compares them, window by window, with what the generator sent: the same
   windows, each once, with exactly the same counts and sums.

Every run is self-contained: ``<run>`` is a new run id (UTC time and a random suffix), so a
second run, in the same work directory or not, never sees the first run's events, totals or
checkpoint. The topics stay for inspection (``cormorant topics delete`` removes them).

Exit status 0 when both outputs match, 1 when they do not, 2 when the pipeline could not
run (no pyspark, no connector jars, no broker).
"""

from __future__ import annotations

import argparse
import json
import random
import secrets
import sys
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from broker.tools.client import ClientError
from broker.tools.common import add_bootstrap_argument
from broker.tools.producer import ProduceError, RecordWriter, ensure_topic
from broker.tools.spark_session import (
    SparkUnavailable,
    add_spark_arguments,
    build_session,
    check_spark,
    read_options,
    write_options,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

WINDOW_MS = 60_000
WATERMARK_DELAY = "30 seconds"
JITTER_MS = 10_000
EVENT_STEP_MS = 1_000
END_KEY = "__end__"
EVENT_PARTITIONS = 3
ROUNDS = 4
TRIGGER = "1 second"
PROGRESS_INTERVAL_S = 10.0

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_UNAVAILABLE = 2

#: (key, window start in ms since the epoch) -> (events, amount)
Totals = dict[tuple[str, int], tuple[int, int]]


@dataclass(frozen=True, slots=True)
class Event:
    key: str
    event_time_ms: int
    amount: int

    def to_json(self) -> bytes:
        body = {"key": self.key, "event_time": self.event_time_ms, "amount": self.amount}
        return json.dumps(body, separators=(",", ":")).encode()


def generate_events(count: int, keys: int, seed: int, start_ms: int) -> list[Event]:
    rng = random.Random(seed)
    events = []
    for i in range(count):
        jitter = rng.randint(-JITTER_MS, JITTER_MS)
        events.append(
            Event(
                key=f"user-{rng.randrange(keys)}",
                event_time_ms=start_ms + i * EVENT_STEP_MS + jitter,
                amount=rng.randint(1, 100),
            )
        )
    return events


def expected_totals(events: list[Event]) -> Totals:
    totals: Totals = {}
    for e in events:
        window = e.event_time_ms - e.event_time_ms % WINDOW_MS
        n, amount = totals.get((e.key, window), (0, 0))
        totals[(e.key, window)] = (n + 1, amount + e.amount)
    return totals


def partition_for(key: str, partitions: int) -> int:
    return zlib.crc32(key.encode()) % partitions


def write_events(bootstrap: str, topic: str, events: list[Event]) -> None:
    with RecordWriter(bootstrap, topic) as writer:
        for e in events:
            writer.send(
                partition_for(e.key, writer.partitions),
                e.key.encode(),
                e.to_json(),
                (("source", b"cormorant-pipeline-demo"),),
                e.event_time_ms,
            )


# -- the streaming job ---------------------------------------------------------------------


class TotalsSink:
    """foreachBatch: each micro-batch's closed windows to the totals topic and to Parquet."""

    def __init__(self, bootstrap: str, topic: str, parquet_dir: Path) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.parquet_dir = parquet_dir
        self.options = write_options(bootstrap)
        self.rows_written = 0
        self._lock = threading.Lock()

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        df = df.persist()
        try:
            rows = df.count()
            if rows == 0:
                return
            df.selectExpr(
                "CAST(key AS STRING) AS key",
                "to_json(named_struct('key', key, 'window_start', window_start, "
                "'window_end', window_end, 'events', events, 'amount', amount)) AS value",
            ).write.format("kafka").options(**self.options).option("topic", self.topic).save()
            df.write.mode("append").parquet(str(self.parquet_dir))
            with self._lock:
                self.rows_written += rows
        finally:
            df.unpersist()

    def written(self) -> int:
        with self._lock:
            return self.rows_written


def windowed_totals(spark: SparkSession, bootstrap: str, topic: str) -> DataFrame:
    from pyspark.sql import functions as F

    schema = "key STRING, event_time LONG, amount LONG"
    events = (
        spark.readStream.format("kafka")
        .options(**read_options(bootstrap))
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .select(F.from_json(F.col("value").cast("string"), schema).alias("e"))
        .select(
            "e.key",
            F.timestamp_millis("e.event_time").alias("event_time"),
            "e.amount",
        )
    )
    return (
        events.withWatermark("event_time", WATERMARK_DELAY)
        .groupBy(F.window("event_time", f"{WINDOW_MS // 1000} seconds"), "key")
        .agg(F.count(F.lit(1)).alias("events"), F.sum("amount").alias("amount"))
        .select(
            "key",
            F.unix_millis(F.col("window.start")).alias("window_start"),
            F.unix_millis(F.col("window.end")).alias("window_end"),
            "events",
            "amount",
        )
    )


# -- the checker ---------------------------------------------------------------------------


def totals_from_topic(spark: SparkSession, bootstrap: str, topic: str) -> list[tuple[str, int, int, int]]:
    rows = (
        spark.read.format("kafka")
        .options(**read_options(bootstrap))
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
        .selectExpr("CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v")
        .collect()
    )
    out = []
    for row in rows:
        value = json.loads(row["v"])
        assert row["k"] == value["key"], f"record key {row['k']!r} != {value['key']!r}"
        out.append((value["key"], int(value["window_start"]), int(value["events"]), int(value["amount"])))
    return out


def totals_from_parquet(spark: SparkSession, parquet_dir: Path) -> list[tuple[str, int, int, int]]:
    if not parquet_dir.exists():
        return []
    rows = spark.read.parquet(str(parquet_dir)).collect()
    return [(r["key"], int(r["window_start"]), int(r["events"]), int(r["amount"])) for r in rows]


def compare(expected: Totals, got: list[tuple[str, int, int, int]]) -> list[str]:
    """Differences between the generator's totals and an output, empty when they match."""
    problems = []
    seen: Totals = {}
    for key, window, events, amount in got:
        if (key, window) in seen:
            problems.append(f"window {key} @ {window} emitted twice")
        seen[(key, window)] = (events, amount)
    for where in sorted(set(expected) | set(seen)):
        want, have = expected.get(where), seen.get(where)
        if want != have:
            problems.append(f"{where[0]} @ {where[1]}: expected (events, amount) {want}, got {have}")
    return problems


# -- the command ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DemoConfig:
    bootstrap: str
    work_dir: Path
    prefix: str
    events: int
    keys: int
    seed: int
    timeout_s: float
    jars_dir: str | None
    run_id: str
    packages: bool = False


def new_run_id(now: datetime, token: str) -> str:
    return f"{now.strftime('%Y%m%d-%H%M%S')}-{token}"


def run_demo(config: DemoConfig, out: TextIO) -> int:
    events_topic = f"{config.prefix}-{config.run_id}-events"
    totals_topic = f"{config.prefix}-{config.run_id}-totals"
    run_dir = config.work_dir / config.run_id
    parquet_dir = run_dir / "totals"
    checkpoint = run_dir / "checkpoint"
    check_spark(config.jars_dir, config.packages)
    ensure_topic(config.bootstrap, events_topic, EVENT_PARTITIONS)
    ensure_topic(config.bootstrap, totals_topic, 1)
    print(
        f"run {config.run_id}: topics {events_topic}, {totals_topic}; checkpoint and Parquet "
        f"under {run_dir}",
        file=out,
        flush=True,
    )

    now_ms = int(time.time() * 1000)
    start_ms = now_ms - now_ms % WINDOW_MS - config.events * EVENT_STEP_MS
    events = generate_events(config.events, config.keys, config.seed, start_ms)
    expected = expected_totals(events)
    print(
        f"generator: {len(events)} events, {config.keys} keys, {len(expected)} windows "
        f"-> {events_topic}",
        file=out,
        flush=True,
    )

    print("starting Spark and the streaming job", file=out, flush=True)
    spark = build_session("cormorant-pipeline-demo", config.jars_dir, packages=config.packages)
    try:
        sink = TotalsSink(config.bootstrap, totals_topic, parquet_dir)
        query = (
            windowed_totals(spark, config.bootstrap, events_topic)
            .writeStream.outputMode("append")
            .foreachBatch(sink)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime=TRIGGER)
            .start()
        )
        try:
            per_round = -(-len(events) // ROUNDS)
            for r in range(ROUNDS):
                chunk = events[r * per_round:(r + 1) * per_round]
                write_events(config.bootstrap, events_topic, chunk)
                print(f"generator: round {r + 1} of {ROUNDS}: {len(chunk)} events sent", file=out, flush=True)
                time.sleep(1.0)
            end_marker = Event(END_KEY, events[-1].event_time_ms + 10 * WINDOW_MS, 0)
            write_events(config.bootstrap, events_topic, [end_marker])
            deadline = time.monotonic() + config.timeout_s
            next_report = time.monotonic()
            while sink.written() < len(expected):
                if time.monotonic() >= next_report:
                    left = deadline - time.monotonic()
                    print(
                        f"waiting for the streaming job: {sink.written()} of {len(expected)} window "
                        f"totals emitted (a window is emitted once the watermark passes its end; "
                        f"giving up in {left:.0f} s)",
                        file=out,
                        flush=True,
                    )
                    next_report = time.monotonic() + PROGRESS_INTERVAL_S
                if query.exception() is not None or not query.isActive:
                    print(f"streaming job failed: {query.exception()}", file=out)
                    return EXIT_MISMATCH
                if time.monotonic() > deadline:
                    print(
                        f"timed out after {config.timeout_s:.0f} s: {sink.written()} of "
                        f"{len(expected)} windows emitted",
                        file=out,
                    )
                    break
                time.sleep(0.5)
            # One more trigger: anything emitted beyond the expected windows shows up too.
            time.sleep(2.0)
        finally:
            query.stop()
        print(f"streaming job: {sink.written()} window totals -> {totals_topic}, {parquet_dir}", file=out)

        failed = False
        for name, got in (
            ("topic " + totals_topic, totals_from_topic(spark, config.bootstrap, totals_topic)),
            ("parquet", totals_from_parquet(spark, parquet_dir)),
        ):
            problems = compare(expected, got)
            if problems:
                failed = True
                print(f"checker: {name}: {len(problems)} differences", file=out)
                for line in problems[:10]:
                    print(f"  {line}", file=out)
            else:
                print(f"checker: {name}: {len(got)} windows, totals match exactly", file=out)
    finally:
        spark.stop()
    return EXIT_MISMATCH if failed else EXIT_OK


def run_pipeline(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    work_dir = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="cormorant-pipeline-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    run_id = new_run_id(datetime.now(UTC), secrets.token_hex(2))
    config = DemoConfig(
        bootstrap=args.bootstrap_server,
        work_dir=work_dir,
        prefix=args.prefix,
        events=args.events,
        keys=args.keys,
        seed=args.seed,
        timeout_s=args.timeout,
        jars_dir=args.jars,
        run_id=run_id,
        packages=args.packages,
    )
    try:
        return run_demo(config, out)
    except (SparkUnavailable, ClientError, ProduceError) as ex:
        print(f"cormorant pipeline: {ex}", file=err)
        return EXIT_UNAVAILABLE


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="pipeline", required=True)
    demo = sub.add_parser(
        "demo",
        help="generate events, aggregate them with Spark Structured Streaming, check the totals",
    )
    add_bootstrap_argument(demo)
    demo.add_argument(
        "--work-dir", metavar="DIR",
        help="each run's checkpoint and Parquet output go to DIR/RUN (default: a new temp dir)",
    )
    demo.add_argument(
        "--prefix", default="pipeline-demo",
        help="topic name prefix; each run writes PREFIX-RUN-events and PREFIX-RUN-totals",
    )
    demo.add_argument("--events", type=int, default=2000, help="how many events to generate")
    demo.add_argument("--keys", type=int, default=5, help="how many distinct keys")
    demo.add_argument("--seed", type=int, default=7, help="the generator's random seed")
    demo.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the totals")
    add_spark_arguments(demo)
