"""The load benchmark's read-back: the Java reader (scripts/bench_reader) and the Python one
read the same records from a real Cormorant broker and must agree with what was produced."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
sys.path.insert(0, str(SCRIPTS))

import bench_read_back  # noqa: E402
import bench_worker  # noqa: E402
from bench_brokers import Cormorant  # noqa: E402

PARTITIONS = 3
RECORDS = 3000


@pytest.fixture(scope="module")
def reader_command(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    try:
        return bench_read_back.compile_reader(tmp_path_factory.mktemp("reader"))
    except bench_read_back.ReaderUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def filled_topic(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, bench_worker.Tally]]:
    """A broker subprocess with a topic of RECORDS records of 100 B; the producer's tally."""
    from confluent_kafka import Producer

    broker = Cormorant(tmp_path_factory.mktemp("broker"))
    broker.start()
    try:
        bench_worker.Admin(broker.bootstrap).create_topic("read-back", PARTITIONS)
        errors = bench_worker.DeliveryErrors()
        producer = Producer(
            bench_worker.producer_config(broker.bootstrap, "1", "none", errors.on_delivery)
        )
        values = bench_worker.Values(100)
        tally = bench_worker.Tally()
        for seq in range(RECORDS):
            value = values.make(seq)
            producer.produce("read-back", value, partition=seq % PARTITIONS)
            tally.add(value)
        bench_worker.check_delivery(errors, tally, producer.flush(30))
        yield broker.bootstrap, tally
    finally:
        broker.stop()


def spec(bootstrap: str, reader: str, command: list[str] | None) -> dict[str, object]:
    return {
        "bootstrap": bootstrap,
        "topic": "read-back",
        "partitions": PARTITIONS,
        "reader": reader,
        "reader_command": command,
    }


@pytest.mark.skipif(shutil.which("java") is None, reason="no JDK")
def test_java_and_python_readers_agree_with_the_producer(
    reader_command: list[str], filled_topic: tuple[str, bench_worker.Tally]
) -> None:
    bootstrap, produced = filled_topic
    done = bench_read_back.read_back(
        reader_command, bootstrap, "read-back", PARTITIONS, produced.count, 30.0, 20
    )
    assert done.errors == []
    assert (done.count, done.nbytes, done.checksum) == (
        produced.count,
        produced.nbytes,
        produced.checksum,
    )
    assert done.cpu_seconds is not None and done.cpu_seconds > 0
    # The benchmark's path, for each reader, verifies against the same tally.
    for reader in ("java", "python"):
        read = bench_worker.consume_verify(spec(bootstrap, reader, reader_command), produced, 30.0)
        assert read.seconds > 0 and read.reader_cpu_s is not None


@pytest.mark.skipif(shutil.which("java") is None, reason="no JDK")
def test_java_reader_reports_records_missing_and_a_wrong_checksum(
    reader_command: list[str], filled_topic: tuple[str, bench_worker.Tally]
) -> None:
    bootstrap, produced = filled_topic
    more = bench_worker.Tally(produced.count + 1, produced.nbytes, produced.checksum)
    with pytest.raises(bench_worker.CaseFailed, match=f"read back {produced.count} of"):
        bench_worker.consume_verify(spec(bootstrap, "java", reader_command), more, 3.0)
    other = bench_worker.Tally(produced.count, produced.nbytes, produced.checksum + 1)
    with pytest.raises(bench_worker.CaseFailed, match="checksum differs"):
        bench_worker.consume_verify(spec(bootstrap, "java", reader_command), other, 30.0)
