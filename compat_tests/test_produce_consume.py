"""Produce with every client, consume with every other, and compare byte for byte.

A cross matrix kept tractable:
* each producer x acks (0, 1, all), consumed by a rotating other client;
* each producer x codec (gzip, snappy, lz4, zstd where the client has it), acks=all,
  consumed by a rotating other client (over acks and codecs every producer meets every
  consumer);
* one common topic written by every producer (each with a different codec) and read whole
  by every consumer.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from compat_tests.harness.broker import Broker
from compat_tests.harness.drivers import DRIVER_NAMES, Driver, Record
from compat_tests.harness.quirks import ANSWERS_ACKS0, tansu_quirk
from compat_tests.harness.scenario import (
    ProduceRun,
    assert_consumed_matches,
    get_driver,
    produce_timed,
    rotation,
    sample_records,
    skip_unless_can_consume,
    unique_topic,
)

ACKS = (0, 1, -1)
CODECS = ("gzip", "snappy", "lz4", "zstd")
PARTITIONS = 2
CONSUME_TIMEOUT_S = 30.0


def _round_trip(
    broker: Broker,
    driver_for: Callable[[str], Driver],
    producer_name: str,
    consumer_name: str,
    *,
    acks: int,
    codec: str,
) -> None:
    producer = driver_for(producer_name)
    consumer = driver_for(consumer_name)
    if not producer.supports_codec(codec):
        pytest.skip(f"{producer_name} has no {codec} codec")
    topic = unique_topic(f"pc-{producer_name}-{codec}-acks{acks}")
    broker.create_topic(topic, PARTITIONS)
    records = sample_records(
        topic, [producer.capabilities, consumer.capabilities], partitions=PARTITIONS
    )

    run = produce_timed(producer, topic, records, acks=acks, compression=codec)

    consumed = consumer.consume(
        topic, range(PARTITIONS), count=len(records), timeout_s=CONSUME_TIMEOUT_S
    )
    assert_consumed_matches(run, consumed, base_offsets={p: 0 for p in range(PARTITIONS)})


def _acks_cases() -> list[object]:
    cases = []
    for producer in DRIVER_NAMES:
        for acks in ACKS:
            marks = []
            if acks == 0:
                # Whether a client survives the stray response depends on timing (seen:
                # aiokafka, confluent-kafka, Java), so every acks=0 case carries the mark.
                marks.append(tansu_quirk(ANSWERS_ACKS0))
            label = "all" if acks == -1 else acks
            cases.append(pytest.param(producer, acks, marks=marks, id=f"{producer}-acks{label}"))
    return cases


@pytest.mark.parametrize(("producer", "acks"), _acks_cases())
def test_acks(
    broker: Broker, driver_for: Callable[[str], Driver], producer: str, acks: int
) -> None:
    consumer = rotation(producer, ACKS.index(acks), broker)
    _round_trip(broker, driver_for, producer, consumer, acks=acks, codec="none")


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("producer", DRIVER_NAMES)
def test_codec(
    broker: Broker, driver_for: Callable[[str], Driver], producer: str, codec: str
) -> None:
    consumer = rotation(producer, len(ACKS) + CODECS.index(codec), broker)
    _round_trip(broker, driver_for, producer, consumer, acks=-1, codec=codec)


COMMON_PARTITIONS = 3


@pytest.fixture(scope="module")
def common_topic(
    broker: Broker,
) -> tuple[str, list[ProduceRun], dict[str, str]]:
    """Every available producer writes the portable record set (valid for every consumer)."""
    topic = unique_topic("pc-common")
    broker.create_topic(topic, COMMON_PARTITIONS)
    drivers: list[Driver] = []
    for name in DRIVER_NAMES:
        try:
            drivers.append(get_driver(name, broker))
        except pytest.skip.Exception:
            continue
    all_caps = [d.capabilities for d in drivers]
    runs = []
    codecs_used = {}
    codecs = ("none", *CODECS)
    for index, driver in enumerate(drivers):
        codec = next(c for c in codecs[index % len(codecs) :] + codecs if driver.supports_codec(c))
        codecs_used[driver.name] = codec
        records = sample_records(
            f"{topic}-{driver.name}",
            [driver.capabilities, *all_caps],
            partitions=COMMON_PARTITIONS,
        )
        runs.append(produce_timed(driver, topic, records, acks=-1, compression=codec))
    return topic, runs, codecs_used


@pytest.mark.parametrize("consumer", DRIVER_NAMES)
def test_every_consumer_reads_common_topic(
    broker: Broker,
    driver_for: Callable[[str], Driver],
    common_topic: tuple[str, list[ProduceRun], dict[str, str]],
    consumer: str,
) -> None:
    topic, runs, _codecs = common_topic
    skip_unless_can_consume(consumer, broker)
    driver = driver_for(consumer)
    total = sum(len(r.records) for r in runs)

    consumed = driver.consume(
        topic, range(COMMON_PARTITIONS), count=total, timeout_s=CONSUME_TIMEOUT_S
    )

    # Producers ran one after the other, so each run owns a contiguous offset range per
    # partition; split what was read back along the delivery reports.
    assert len(consumed) == total, f"read {len(consumed)} of {total} records"
    by_position = {(c.partition, c.offset): c for c in consumed}
    assert len(by_position) == total, "a (partition, offset) was read twice"
    for partition in range(COMMON_PARTITIONS):
        offsets = sorted(o for p, o in by_position if p == partition)
        assert offsets == list(range(len(offsets))), (
            f"partition {partition}: offsets {offsets} are not gap-free from 0"
        )
    next_offset = dict.fromkeys(range(COMMON_PARTITIONS), 0)
    for run in runs:
        mine = []
        for record in run.records:
            assert isinstance(record, Record) and record.partition is not None
            mine.append(by_position[(record.partition, next_offset[record.partition])])
            next_offset[record.partition] += 1
        assert_consumed_matches(run, mine)
