"""A topic with 100 partitions: each client writes one record to every partition and a
rotating other client reads all of them back."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from compat_tests.harness.broker import Broker
from compat_tests.harness.drivers import DRIVER_NAMES, Driver, Record
from compat_tests.harness.scenario import (
    BASE_TIMESTAMP_MS,
    assert_consumed_matches,
    produce_timed,
    rotation,
    unique_topic,
)

PARTITIONS = 100


@pytest.mark.parametrize("producer", DRIVER_NAMES)
def test_produce_to_each_of_100_partitions_and_read_back(
    broker: Broker, driver_for: Callable[[str], Driver], producer: str
) -> None:
    writer = driver_for(producer)
    reader = driver_for(rotation(producer, 1, broker))
    topic = unique_topic(f"p100-{producer}")
    broker.create_topic(topic, PARTITIONS)
    stamps = writer.capabilities.explicit_timestamps
    records = [
        Record(
            key=f"key-{p}".encode(),
            value=f"value for partition {p} of {topic}".encode(),
            headers=(("partition", str(p).encode()),),
            timestamp_ms=BASE_TIMESTAMP_MS + p if stamps else None,
            partition=p,
        )
        for p in range(PARTITIONS)
    ]

    run = produce_timed(writer, topic, records, acks=-1)

    consumed = reader.consume(topic, range(PARTITIONS), count=PARTITIONS, timeout_s=60)
    assert_consumed_matches(run, consumed, base_offsets=dict.fromkeys(range(PARTITIONS), 0))
