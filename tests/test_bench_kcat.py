"""The load benchmark's native producer (scripts/bench_kcat.py): kcat on the confluent-kafka
wheel's librdkafka produces to a real Cormorant broker, and what it acknowledged is read back
and must match the tally; a producer whose records are not delivered fails the run."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
sys.path.insert(0, str(SCRIPTS))

import bench_kcat  # noqa: E402
import bench_worker  # noqa: E402
from bench_brokers import Cormorant  # noqa: E402


@pytest.fixture(scope="module")
def kcat(tmp_path_factory: pytest.TempPathFactory) -> bench_kcat.Kcat:
    try:
        return bench_kcat.find_kcat(tmp_path_factory.mktemp("kcat"))
    except bench_kcat.KcatUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cormorant]:
    process = Cormorant(tmp_path_factory.mktemp("broker"))
    process.start()
    try:
        yield process
    finally:
        process.stop()


def test_text_values_are_lines_of_the_record_size() -> None:
    values = bench_kcat.TextValues(100, bench_worker.payload_pool())
    chunk = values.chunk(0)
    lines = chunk.data.split(b"\n")
    assert lines[-1] == b"" and len(lines) - 1 == chunk.count
    assert all(len(line) == 100 for line in lines[:-1])
    tally = bench_worker.Tally()
    for line in lines[:-1]:
        tally.add(line)
    assert (tally.count, tally.nbytes, tally.checksum) == (
        chunk.count,
        chunk.nbytes,
        chunk.checksum,
    )
    # Chunks differ from one another, then repeat.
    assert values.chunk(1).data != chunk.data and values.chunk(bench_kcat.DISTINCT_CHUNKS) is chunk


@pytest.mark.parametrize("compression", ["none", "lz4"])
def test_kcat_records_are_read_back_as_tallied(
    kcat: bench_kcat.Kcat, broker: Cormorant, compression: str
) -> None:
    topic = f"kcat-{compression}"
    bench_worker.Admin(broker.bootstrap).create_topic(topic, 2)
    spec = {"bootstrap": broker.bootstrap, "topic": topic, "partitions": 2, "reader": "python"}
    settings = bench_worker.producer_settings(broker.bootstrap, "all", compression)
    tally = bench_worker.Tally()
    values = bench_kcat.TextValues(1024, bench_worker.payload_pool())
    done = bench_kcat.produce_kcat(kcat, spec, settings, values, tally, 0.3)
    assert done.count > 0 and done.seconds > 0
    # The timed records and the one sent before the clock started.
    assert tally.count == done.count + 1
    bench_worker.consume_verify(spec, tally, 30.0)


def test_records_the_broker_refuses_fail_the_run(kcat: bench_kcat.Kcat, broker: Cormorant) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    small = NewTopic("kcat-small", 1, 1, config={"max.message.bytes": "512"})
    admin.create_topics([small])["kcat-small"].result(30)
    spec = {"bootstrap": broker.bootstrap, "topic": "kcat-small"}
    settings = bench_worker.producer_settings(broker.bootstrap, "1", "none")
    values = bench_kcat.TextValues(1024, bench_worker.payload_pool())
    # Each 1 KiB record makes a batch over the topic's limit: MESSAGE_TOO_LARGE, not retried.
    with pytest.raises(RuntimeError, match="Delivery failed"):
        bench_kcat.produce_kcat(kcat, spec, settings, values, bench_worker.Tally(), 0.1)


def test_a_broker_out_of_reach_fails_the_run(kcat: bench_kcat.Kcat) -> None:
    spec = {"bootstrap": "127.0.0.1:1", "topic": "nowhere"}
    settings = bench_worker.producer_settings("127.0.0.1:1", "1", "none")
    values = bench_kcat.TextValues(100, bench_worker.payload_pool())
    with pytest.raises(RuntimeError, match="kcat exited with 1"):
        bench_kcat.produce_kcat(kcat, spec, settings, values, bench_worker.Tally(), 0.1)
