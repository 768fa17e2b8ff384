"""ListOffsets: earliest, latest and by timestamp, through every client.

One topic, written once by kafka-python with explicit CreateTime timestamps: partition 0
holds five records at T, T+1s, ..., T+4s (one batch), partition 1 stays empty. A lookup by
timestamp answers the first offset whose timestamp is >= the target, or -1 when there is
none (kafkajs turns that -1 into the latest offset itself).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from compat_tests.harness.broker import Broker
from compat_tests.harness.drivers import DRIVER_NAMES, Driver, Record
from compat_tests.harness.quirks import LIST_OFFSETS_WRONG, tansu_quirk
from compat_tests.harness.scenario import BASE_TIMESTAMP_MS, get_driver, unique_topic

RECORDS = 5
STEP_MS = 1000


@pytest.fixture(scope="module")
def topic(broker: Broker) -> str:
    name = unique_topic("offsets")
    broker.create_topic(name, 2)
    records = [
        Record(
            key=f"k{i}".encode(),
            value=f"v{i}".encode(),
            timestamp_ms=BASE_TIMESTAMP_MS + i * STEP_MS,
            partition=0,
        )
        for i in range(RECORDS)
    ]
    deliveries = get_driver("kafka-python", broker).produce(name, records, acks=-1)
    assert [d.offset for d in deliveries] == list(range(RECORDS))
    return name


@pytest.mark.parametrize("client", DRIVER_NAMES)
def test_earliest(topic: str, driver_for: Callable[[str], Driver], client: str) -> None:
    driver = driver_for(client)
    assert driver.list_offsets(topic, 0, "earliest") == 0
    assert driver.list_offsets(topic, 1, "earliest") == 0


@pytest.mark.parametrize("client", DRIVER_NAMES)
@tansu_quirk(LIST_OFFSETS_WRONG)
def test_latest(topic: str, driver_for: Callable[[str], Driver], client: str) -> None:
    driver = driver_for(client)
    assert driver.list_offsets(topic, 0, "latest") == RECORDS
    assert driver.list_offsets(topic, 1, "latest") == 0


@pytest.mark.parametrize("client", DRIVER_NAMES)
@tansu_quirk(LIST_OFFSETS_WRONG)
def test_by_timestamp(topic: str, driver_for: Callable[[str], Driver], client: str) -> None:
    driver = driver_for(client)
    miss = RECORDS if driver.capabilities.timestamp_miss_is_latest else -1
    cases = {
        BASE_TIMESTAMP_MS - 60_000: 0,  # before everything: the first record
        BASE_TIMESTAMP_MS: 0,  # exact match
        BASE_TIMESTAMP_MS + 1: 1,  # between records: the next one
        BASE_TIMESTAMP_MS + 2 * STEP_MS: 2,
        BASE_TIMESTAMP_MS + (RECORDS - 1) * STEP_MS: RECORDS - 1,  # the last record
        BASE_TIMESTAMP_MS + RECORDS * STEP_MS: miss,  # after everything: none
    }
    got = {ts: driver.list_offsets(topic, 0, ts) for ts in cases}
    assert got == cases
    empty_miss = 0 if driver.capabilities.timestamp_miss_is_latest else -1
    assert driver.list_offsets(topic, 1, BASE_TIMESTAMP_MS) == empty_miss
