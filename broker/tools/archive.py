"""``cormorant archive`` and ``cormorant replay``: a topic to Parquet and back.

``archive TOPIC --to DIR [--from-time T] [--to-time T]`` is a PySpark batch job: it reads
the topic with Spark's Kafka connector (``startingTimestamp`` / ``endingTimestamp`` when a
time range is given: records with from <= timestamp < to) and writes Parquet partitioned by
the record's UTC date (``DIR/date=YYYY-MM-DD/``), one row per record with the columns
``topic, partition, offset, timestamp, timestamp_type, key, value, headers``. It reads as a
``read_committed`` consumer does: records of aborted transactions (and of transactions still
open) are not archived, so a replay never publishes them as committed records.

``replay DIR --to TOPIC`` reads such an archive (PySpark) and writes it back, partition by
partition in the original offset order, with the same keys, values, headers (order and
duplicates kept) and timestamps (as CreateTime). It creates the topic with as many
partitions as the archive needs when it does not exist. Spark's Kafka sink cannot set a
record's timestamp, so replay produces through :mod:`broker.tools.producer`.

Times are ISO-8601 (``2026-05-01``, ``2026-05-01T12:00:00Z``; UTC unless an offset is
given) or milliseconds since the epoch.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
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
    read_options,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_UNAVAILABLE = 2
PROGRESS_INTERVAL_S = 5.0

ARCHIVE_COLUMNS = (
    "topic",
    "partition",
    "offset",
    "timestamp",
    "timestamp_type",
    "key",
    "value",
    "headers",
)


class ArchiveError(Exception):
    """A failure to report on one line."""


def parse_time_ms(text: str) -> int:
    """Milliseconds since the epoch from an ISO-8601 time (UTC by default) or a number."""
    value = text.strip()
    if value.lstrip("-").isdigit():
        return int(value)
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as ex:
        raise ArchiveError(f"{text!r} is neither an ISO-8601 time nor milliseconds") from ex
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


# -- archive -------------------------------------------------------------------------------


def topic_range(
    spark: SparkSession, bootstrap: str, topic: str, from_ms: int | None, to_ms: int | None
) -> DataFrame:
    reader = (
        spark.read.format("kafka").options(**read_options(bootstrap)).option("subscribe", topic)
    )
    if from_ms is None:
        reader = reader.option("startingOffsets", "earliest")
    else:
        # A partition with nothing at or after from_ms contributes nothing.
        reader = reader.option("startingTimestamp", str(from_ms))
        reader = reader.option("startingOffsetsByTimestampStrategy", "latest")
    if to_ms is None:
        reader = reader.option("endingOffsets", "latest")
    else:
        reader = reader.option("endingTimestamp", str(to_ms))
    # What a read_committed consumer sees: "latest" is the last stable offset and records of
    # aborted transactions are skipped (their offsets, and the markers', leave gaps).
    return reader.option("kafka.isolation.level", "read_committed").load()


def archive(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    target: Path,
    from_ms: int | None = None,
    to_ms: int | None = None,
    overwrite: bool = False,
    progress: TextIO | None = None,
) -> dict[int, int]:
    """Write the range to ``target``; returns the number of records per partition."""
    from pyspark.sql import functions as F

    if from_ms is not None and to_ms is not None and to_ms <= from_ms:
        raise ArchiveError("--to-time must be later than --from-time")
    if target.exists() and any(target.iterdir()) and not overwrite:
        raise ArchiveError(f"{target} is not empty (--overwrite replaces it)")
    df = topic_range(spark, bootstrap, topic, from_ms, to_ms).select(
        "topic",
        "partition",
        "offset",
        "timestamp",
        F.col("timestampType").alias("timestamp_type"),
        "key",
        "value",
        "headers",
        F.to_date("timestamp").alias("date"),
    ).persist()
    try:
        _say(progress, f"archive: reading {topic} (read_committed) from {bootstrap}")
        counts = {r["partition"]: r["count"] for r in df.groupBy("partition").count().collect()}
        _say(progress, f"archive: {sum(counts.values())} records to write; writing Parquet to {target}")
        (
            df.write.mode("overwrite")
            .partitionBy("date")
            .parquet(str(target))
        )
    finally:
        df.unpersist()
    return counts


# -- replay --------------------------------------------------------------------------------


def replay(
    spark: SparkSession,
    source: Path,
    bootstrap: str,
    topic: str,
    progress: TextIO | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> dict[int, int]:
    """Produce the archive at ``source`` into ``topic``; returns records per partition."""
    from pyspark.sql import functions as F

    if not source.exists():
        raise ArchiveError(f"{source} does not exist")
    if not source.is_dir():
        raise ArchiveError(f"{source} is not a directory (an archive is one)")
    if not any(source.rglob("*.parquet")):
        # An archive of a range that matched nothing holds no data files, and Spark cannot
        # read a schema from none.
        return {}
    df = spark.read.parquet(str(source))
    missing = [c for c in ARCHIVE_COLUMNS if c not in df.columns]
    if missing:
        raise ArchiveError(f"{source} is not a cormorant archive (no column {', '.join(missing)})")
    topics = [r["topic"] for r in df.select("topic").distinct().collect()]
    if len(topics) > 1:
        raise ArchiveError(f"{source} holds several topics ({', '.join(sorted(topics))})")
    if not topics:
        return {}
    summary = df.agg(F.max("partition"), F.count(F.lit(1))).collect()[0]
    partitions, total = int(summary[0]) + 1, int(summary[1])
    have = ensure_topic(bootstrap, topic, partitions)
    if have < partitions:
        raise ArchiveError(f"{topic} has {have} partitions; the archive needs {partitions}")

    rows = (
        df.select(
            "partition",
            "offset",
            F.unix_millis("timestamp").alias("timestamp_ms"),
            "key",
            "value",
            "headers",
        )
        .orderBy("partition", "offset")
        .toLocalIterator(prefetchPartitions=True)
    )
    counts: dict[int, int] = {}
    _say(progress, f"replay: {total} records to send to {topic}")
    next_report = clock() + PROGRESS_INTERVAL_S
    with RecordWriter(bootstrap, topic) as writer:
        for row in rows:
            if clock() >= next_report:
                done = sum(counts.values())
                _say(progress, f"replay: {done} of {total} records sent, {total - done} left")
                next_report = clock() + PROGRESS_INTERVAL_S
            headers = tuple(
                (h["key"], None if h["value"] is None else bytes(h["value"]))
                for h in (row["headers"] or ())
            )
            writer.send(
                row["partition"],
                None if row["key"] is None else bytes(row["key"]),
                None if row["value"] is None else bytes(row["value"]),
                headers,
                row["timestamp_ms"],
            )
            counts[row["partition"]] = counts.get(row["partition"], 0) + 1
    return counts


# -- commands ------------------------------------------------------------------------------


def _say(progress: TextIO | None, line: str) -> None:
    if progress is not None:
        print(line, file=progress, flush=True)


def _summary(counts: dict[int, int]) -> str:
    parts = ", ".join(f"{p}: {n}" for p, n in sorted(counts.items())) or "none"
    return f"{sum(counts.values())} records (per partition {parts})"


def run_archive(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        from_ms = parse_time_ms(args.from_time) if args.from_time else None
        to_ms = parse_time_ms(args.to_time) if args.to_time else None
        spark = build_session("cormorant-archive", args.jars, packages=args.packages)
        try:
            counts = archive(
                spark, args.bootstrap_server, args.topic, Path(args.to), from_ms, to_ms,
                args.overwrite, progress=err,
            )
        finally:
            spark.stop()
    except (ArchiveError, SparkUnavailable, ClientError) as ex:
        print(f"cormorant archive: {ex}", file=err)
        return EXIT_UNAVAILABLE if isinstance(ex, SparkUnavailable) else EXIT_FAILURE
    print(f"archived {args.topic}: {_summary(counts)} -> {args.to}", file=out)
    return EXIT_OK


def run_replay(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        spark = build_session("cormorant-replay", args.jars, packages=args.packages)
        try:
            counts = replay(spark, Path(args.dir), args.bootstrap_server, args.to, progress=err)
        finally:
            spark.stop()
    except (ArchiveError, SparkUnavailable, ClientError, ProduceError) as ex:
        print(f"cormorant replay: {ex}", file=err)
        return EXIT_UNAVAILABLE if isinstance(ex, SparkUnavailable) else EXIT_FAILURE
    if not counts:
        print(f"replayed nothing: {args.dir} holds no records", file=out)
        return EXIT_OK
    print(f"replayed {args.dir}: {_summary(counts)} -> {args.to}", file=out)
    return EXIT_OK


ARCHIVE_DESCRIPTION = (
    "Export a topic, or a time range of it, to Parquet partitioned by UTC date (a PySpark batch "
    "job). Reads as a read_committed consumer: records of aborted or still open transactions "
    "are not archived. Times are ISO-8601 (UTC unless an offset is given) or epoch milliseconds."
)
REPLAY_DESCRIPTION = (
    "Write an archive back to a topic: per partition in the original offset order, with the "
    "same keys, values, headers and timestamps (CreateTime). Creates the topic if needed."
)


def add_archive_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("topic", help="the topic to archive")
    parser.add_argument("--to", required=True, metavar="DIR", help="output directory (Parquet, by date)")
    parser.add_argument("--from-time", metavar="TIME", help="first record time to keep (inclusive)")
    parser.add_argument("--to-time", metavar="TIME", help="end of the range (exclusive)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing archive")
    add_bootstrap_argument(parser)
    add_spark_arguments(parser)


def add_replay_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", help="an archive written by cormorant archive")
    parser.add_argument("--to", required=True, metavar="TOPIC", help="topic to write to")
    add_bootstrap_argument(parser)
    add_spark_arguments(parser)
