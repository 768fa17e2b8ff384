"""Limits on what one request may create (max.partitions.per.request) and one broker may
host (max.partitions.per.broker), through each client's admin API: Kafka's codes
(INVALID_PARTITIONS, POLICY_VIOLATION) with a message naming the limit, and nothing
created by a refused request."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from compat_tests.conftest import BrokerFactory
from compat_tests.harness import settings
from compat_tests.harness.broker import Broker
from compat_tests.harness.drivers import DRIVER_NAMES, ClientError
from compat_tests.harness.scenario import get_driver, unique_topic

pytestmark = pytest.mark.skipif(settings.target() == "tansu", reason="Cormorant's partition limits")

ADMIN_CLIENTS = tuple(n for n in DRIVER_NAMES if n != "kcat")
INVALID_PARTITIONS = 37
POLICY_VIOLATION = 44
PER_REQUEST = 100
PER_BROKER = 120
#: kafkajs reports its own description of an error code, not the broker's message.
MESSAGE_HIDDEN = ("kafkajs",)


@pytest.fixture
def limited_broker(broker_factory: BrokerFactory) -> Iterator[Broker]:
    broker = broker_factory({"max.partitions.per.request": str(PER_REQUEST),
                             "max.partitions.per.broker": str(PER_BROKER)})
    try:
        yield broker
    finally:
        broker.close()


@pytest.mark.parametrize("client", ADMIN_CLIENTS)
def test_partition_limits_are_refused_with_kafkas_codes(limited_broker: Broker, client: str) -> None:
    admin = get_driver(client, limited_broker)
    too_many, fits, over_broker = (unique_topic(f"limit-{n}-{client}") for n in ("many", "fits", "broker"))

    with pytest.raises(ClientError) as caught:
        admin.create_topic(too_many, PER_REQUEST + 50)
    assert caught.value.code == INVALID_PARTITIONS, str(caught.value)
    assert client in MESSAGE_HIDDEN or "max.partitions.per.request" in str(caught.value)

    admin.create_topic(fits, PER_REQUEST)

    with pytest.raises(ClientError) as caught:
        admin.create_topic(over_broker, PER_BROKER - PER_REQUEST + 1)
    assert caught.value.code == POLICY_VIOLATION, str(caught.value)
    assert client in MESSAGE_HIDDEN or "max.partitions.per.broker" in str(caught.value)

    topics = admin.metadata().topics
    assert topics.get(fits) == PER_REQUEST
    assert too_many not in topics and over_broker not in topics
