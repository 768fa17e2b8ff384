"""Fetch sessions (KIP-227) with the clients that open them: kafka-python keeps an
incremental session open while it consumes, the Java client opens one and closes it
when it stops. Records produced in rounds across many partitions all arrive, in order,
and the broker's own metric shows the session kafka-python holds.

librdkafka, aiokafka and kafkajs send sessionless fetches (epoch -1); every other
compat test covers them.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from compat_tests.harness.broker import Broker
from compat_tests.harness.drivers import Record
from compat_tests.harness.quirks import tansu_quirk
from compat_tests.harness.scenario import get_driver, unique_topic

PARTITIONS = 8
ROUNDS = 3
PER_ROUND = 40

pytestmark = tansu_quirk("no fetch sessions metric")

METRICS_URL = re.compile(r"metrics_listening .*url=(\S+)")


@pytest.fixture
def metered_broker(broker_factory: Any) -> Iterator[Broker]:
    broker = broker_factory({"metrics.listener": "127.0.0.1:0"})
    try:
        yield broker
    finally:
        broker.close()


def _sessions(broker: Broker) -> float:
    found = METRICS_URL.search(broker.log_tail())
    assert found, "the broker did not log its metrics URL"
    with urllib.request.urlopen(found.group(1), timeout=10) as response:
        text = response.read().decode()
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith("cormorant_fetch_sessions ")]
    assert len(values) == 1, "cormorant_fetch_sessions is not served"
    return values[0]


@pytest.mark.parametrize("client", ["kafka-python", "java"])
def test_session_consumers_read_every_round(metered_broker: Broker, client: str) -> None:
    topic = unique_topic(f"sessions-{client}")
    metered_broker.create_topic(topic, PARTITIONS, {})
    producer = get_driver("kafka-python", metered_broker)
    consumer = get_driver(client, metered_broker)
    sent: list[Record] = []
    for round_ in range(ROUNDS):
        # Each round lands on a few partitions only: the others have nothing new.
        records = [Record(key=None, value=f"{round_}-{i}".encode(), partition=(round_ + i % 3) % PARTITIONS)
                   for i in range(PER_ROUND)]
        producer.produce(topic, records)
        sent.extend(records)
        got = consumer.consume(topic, list(range(PARTITIONS)), count=len(sent), timeout_s=30)
        by_partition: dict[int, list[bytes]] = {}
        for r in got:
            by_partition.setdefault(r.partition, []).append(r.value)
        expected: dict[int, list[bytes]] = {}
        for r in sent:
            assert r.partition is not None and r.value is not None
            expected.setdefault(r.partition, []).append(r.value)
        assert by_partition == expected
    if client == "kafka-python":
        assert _sessions(metered_broker) >= 1
