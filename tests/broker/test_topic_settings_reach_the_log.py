"""A topic's settings reach its log as resolved: the log reads the topic configuration itself.

Kafka 3.9 accepts an empty ``cleanup.policy`` (neither delete nor compact); the log must take
it like any other accepted value, and keep serving the topic.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from broker.tools.client import KafkaClient
from tests.broker.broker_process import BrokerProcess
from tests.broker.test_admin_apis import created, describe_topic, list_offset, produce


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaClient]:
    broker = BrokerProcess(tmp_path_factory.mktemp("topic-settings") / "data").start()
    try:
        with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
            yield c
    finally:
        assert broker.stop() == 0, broker.logs()[-3000:]


def test_a_topic_without_cleanup_policy_is_served(client: KafkaClient) -> None:
    created(client, "no-cleanup", configs={"cleanup.policy": ""})
    assert produce(client, "no-cleanup", [1_700_000_000_000, 1_700_000_000_001]) == 0
    assert list_offset(client, "no-cleanup", -1).offset == 2
    [entry] = describe_topic(client, "no-cleanup", ["cleanup.policy"]).configs
    assert entry.value == ""
