"""Client quotas with real admin clients: Java 3.9 and 4.3 (the Python clients and kafkajs have no
client-quota API) set, describe and remove quotas through AlterClientQuotas and
DescribeClientQuotas. Throttling by producer_byte_rate: test_produce_quota.py."""

from __future__ import annotations

import pytest

from compat_tests.harness import settings
from compat_tests.harness.broker import Broker
from compat_tests.harness.drivers.jsonproc import JsonProcessDriver
from compat_tests.harness.scenario import get_driver, unique_topic

pytestmark = pytest.mark.skipif(settings.target() != "cormorant", reason="Cormorant's quota APIs")


@pytest.mark.parametrize("client", ["java", "java4"])
def test_set_describe_remove_quotas(broker: Broker, client: str) -> None:
    driver = get_driver(client, broker)
    assert isinstance(driver, JsonProcessDriver)
    user = unique_topic(f"quota-{client}")
    result = driver.call("quota_cycle", user=user)
    assert result["described"] == sorted([f"client-id=app,user={user} consumer_byte_rate 2048.0",
                                          f"user={user} producer_byte_rate 1048576.0"])
    assert result["after"] == [f"client-id=app,user={user} consumer_byte_rate 2048.0"]
