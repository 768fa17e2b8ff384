"""controller_mutation_rate (KIP-599) with librdkafka's admin client.

librdkafka sends CreateTopics and DeleteTopics at versions older than KIP-599's strict mode, so
the quota is permissive for it: every topic is created or deleted, without an error, and the
response is throttled. librdkafka does not wait the throttle time itself; the broker holds it by
muting the connection, so its next admin request is answered only after the throttle."""

from __future__ import annotations

import time

import pytest

from broker.tools.client import KafkaClient
from compat_tests.conftest import BrokerFactory
from compat_tests.harness import settings
from compat_tests.harness.scenario import unique_topic
from wire.generated.api_049_alter_client_quotas import (
    AlterClientQuotasRequest,
    AlterClientQuotasRequestEntityData,
    AlterClientQuotasRequestEntryData,
    AlterClientQuotasRequestOpData,
    AlterClientQuotasResponse,
)

pytestmark = pytest.mark.skipif(settings.target() != "cormorant", reason="Cormorant's quota settings")
#: The client these tests drive, as the matrix names it.
MATRIX_CLIENT = "confluent-kafka"


def test_librdkafka_admin_is_throttled_not_refused(broker_factory: BrokerFactory) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    broker = broker_factory({"controller.quota.window.num": "2", "controller.quota.window.size.seconds": "1"})
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        reply = c.send(AlterClientQuotasRequest(entries=[AlterClientQuotasRequestEntryData(
            entity=[AlterClientQuotasRequestEntityData(entity_type="user", entity_name=None)],
            ops=[AlterClientQuotasRequestOpData(key="controller_mutation_rate", value=5.0)])]),
            AlterClientQuotasResponse)
        assert reply.entries[0].error_code == 0
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.list_topics(timeout=10)  # connected before timing
    # A bucket of 5 partitions at 5/s: 25 partitions overdraw it by 20, a throttle of 4 s.
    names = [unique_topic("mutation") for _ in range(5)]
    for future in admin.create_topics([NewTopic(n, 5, 1) for n in names], operation_timeout=30).values():
        assert future.result(timeout=30) is None  # created: permissive, no THROTTLING_QUOTA_EXCEEDED
    started = time.monotonic()
    extra = unique_topic("mutation-extra")
    admin.create_topics([NewTopic(extra, 1, 1)], operation_timeout=30)[extra].result(timeout=30)
    held = time.monotonic() - started
    assert held >= 3.0, held  # the muted connection read the next request only after the throttle
    assert set(names) | {extra} <= set(admin.list_topics(timeout=10).topics)
