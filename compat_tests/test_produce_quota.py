"""A producer_byte_rate quota slows a Java producer down without errors: the broker answers
each produce with Kafka's throttle_time_ms and the Java client (KIP-219) waits it out (the broker
also mutes the connection as long; test_quota_rates.py holds librdkafka to a quota too).

Short windows (``quota.window.num=2``, ``quota.window.size.seconds=1``) keep the run short:
600 kB at 100 kB/s take at least 5 s once the first second's allowance is spent."""

from __future__ import annotations

import time

import pytest

from broker.tools.client import KafkaClient
from compat_tests.conftest import BrokerFactory
from compat_tests.harness import settings
from compat_tests.harness.drivers import Record
from compat_tests.harness.scenario import get_driver, unique_topic
from wire.generated.api_049_alter_client_quotas import (
    AlterClientQuotasRequest,
    AlterClientQuotasRequestEntityData,
    AlterClientQuotasRequestEntryData,
    AlterClientQuotasRequestOpData,
    AlterClientQuotasResponse,
)

pytestmark = pytest.mark.skipif(settings.target() != "cormorant", reason="Cormorant's quota settings")

QUOTA = 100_000  # bytes per second


@pytest.mark.parametrize("client", ["java", "java4"])
def test_java_producer_is_slowed_to_the_quota(broker_factory: BrokerFactory, client: str) -> None:
    broker = broker_factory({"quota.window.num": "2", "quota.window.size.seconds": "1"})
    driver = get_driver(client, broker)
    topic = unique_topic(f"quota-{client}")
    broker.create_topic(topic, 1)
    records = [Record(key=b"k", value=bytes(10_000)) for _ in range(60)]
    started = time.monotonic()
    assert len(driver.produce(topic, records, acks=1)) == 60
    free = time.monotonic() - started
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        reply = c.send(AlterClientQuotasRequest(entries=[AlterClientQuotasRequestEntryData(
            entity=[AlterClientQuotasRequestEntityData(entity_type="user", entity_name=None)],
            ops=[AlterClientQuotasRequestOpData(key="producer_byte_rate", value=float(QUOTA))])]),
            AlterClientQuotasResponse)
        assert reply.entries[0].error_code == 0
    started = time.monotonic()
    assert len(driver.produce(topic, records, acks=1)) == 60  # no error: only slower
    held = time.monotonic() - started
    print(f"{client}: 600 kB without a quota in {free:.1f} s, at {QUOTA} B/s in {held:.1f} s")
    assert held - free >= 3.0, (free, held)
