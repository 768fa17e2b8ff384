"""The parts of the Spark tools that need no Spark: time parsing, the demo's generator and
checker, and the ordered record writer used by ``cormorant replay`` (against a real broker).
The Spark jobs themselves are tested in compat_tests/spark/."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.tools.archive import ArchiveError, parse_time_ms
from broker.tools.pipeline import WINDOW_MS, compare, expected_totals, generate_events
from broker.tools.producer import ProduceError, RecordWriter, ensure_topic
from broker.tools.spark_session import JARS_ENV
from tests.broker.broker_process import BrokerProcess

# kafka-python 3.0.12 loads its schemas with importlib.resources' legacy functions.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_parse_time_ms() -> None:
    assert parse_time_ms("1700000000123") == 1_700_000_000_123
    assert parse_time_ms("2026-05-01") == 1_777_593_600_000
    assert parse_time_ms("2026-05-01T00:00:00Z") == 1_777_593_600_000
    assert parse_time_ms("2026-05-01T02:00:00+02:00") == 1_777_593_600_000
    assert parse_time_ms("2026-05-01T00:00:00.250") == 1_777_593_600_250
    with pytest.raises(ArchiveError):
        parse_time_ms("yesterday")


def test_generator_is_seeded_and_totals_add_up() -> None:
    events = generate_events(500, 4, seed=3, start_ms=1_700_000_040_000)
    assert events == generate_events(500, 4, seed=3, start_ms=1_700_000_040_000)
    totals = expected_totals(events)
    assert sum(n for n, _ in totals.values()) == 500
    assert sum(a for _, a in totals.values()) == sum(e.amount for e in events)
    assert all(window % WINDOW_MS == 0 for _, window in totals)


def test_checker_finds_every_difference() -> None:
    expected = {("a", 0): (2, 10), ("b", 60_000): (1, 5)}
    assert compare(expected, [("a", 0, 2, 10), ("b", 60_000, 1, 5)]) == []
    problems = compare(expected, [("a", 0, 2, 10), ("a", 0, 2, 10), ("c", 0, 1, 1)])
    assert any("twice" in p for p in problems)
    assert any(p.startswith("b @ 60000") for p in problems)
    assert any(p.startswith("c @ 0") for p in problems)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module: its tests use topics of their own."""
    b = BrokerProcess(tmp_path_factory.mktemp("pipeline") / "data").start()
    try:
        yield b
    finally:
        b.stop()


def test_record_writer_keeps_order_timestamps_and_headers(broker: BrokerProcess) -> None:
    from kafka import KafkaConsumer, TopicPartition

    assert ensure_topic(broker.bootstrap, "replayed", 2) == 2
    assert ensure_topic(broker.bootstrap, "replayed", 5) == 2  # exists: left alone
    sent = []
    with RecordWriter(broker.bootstrap, "replayed") as writer:
        for i in range(2500):  # more than one batch per partition
            headers = (("dup", b"a"), ("dup", b"b"), ("nul", None)) if i % 2 else ()
            key = None if i % 7 == 0 else f"k{i}".encode()
            value = None if i % 11 == 0 else bytes([i % 256]) * (i % 50)
            timestamp = 1_700_000_000_000 + (i * 7919) % 100_000  # not in order
            writer.send(i % 2, key, value, headers, timestamp)
            sent.append((i % 2, key, value, headers, timestamp))
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000
    )
    try:
        partitions = [TopicPartition("replayed", p) for p in range(2)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        got = []
        for message in consumer:
            got.append(message)
            if len(got) == len(sent):
                break
    finally:
        consumer.close()
    for p in range(2):
        mine = [s for s in sent if s[0] == p]
        theirs = sorted((m for m in got if m.partition == p), key=lambda m: m.offset)
        assert [m.offset for m in theirs] == list(range(len(mine)))
        assert [(m.key, m.value, tuple(m.headers), m.timestamp, m.timestamp_type) for m in theirs] == [
            (k, v, h, ts, 0) for _, k, v, h, ts in mine
        ]


def test_record_writer_refuses_a_missing_topic(broker: BrokerProcess) -> None:
    with pytest.raises(ProduceError, match="does not exist"):
        RecordWriter(broker.bootstrap, "nope")


@pytest.mark.parametrize("tool", [["archive", "t", "--to", "x"], ["replay", "x", "--to", "t"],
                                  ["pipeline", "demo"]])
def test_spark_tools_without_connector_jars_say_so_in_one_line(tool: list[str], tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != JARS_ENV}
    proc = subprocess.run(
        [sys.executable, "-m", "broker", *tool, "--bootstrap-server", "127.0.0.1:1"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"cormorant {tool[0]}: ")
    assert JARS_ENV in lines[0] and "scripts/get_spark_jars.sh" in lines[0]


def test_get_spark_jars_needs_only_the_repository_and_says_what_it_lacks(tmp_path: Path) -> None:
    """From a plain clone (no folder beside it): the script names the one thing it needs."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "get_spark_jars.sh"
    not_a_mirror = tmp_path / "not-a-mirror"
    not_a_mirror.mkdir()
    proc = subprocess.run(
        ["bash", str(script), str(not_a_mirror), str(tmp_path / "jars")],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 1
    assert f"{not_a_mirror} is not a git directory" in proc.stderr
    assert "git clone of https://github.com/Nike-Inc/spark-expectations" in proc.stderr
    assert "CLONE_DIR" in proc.stderr
