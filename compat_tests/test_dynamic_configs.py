"""Dynamic broker settings that topics default from (Kafka's dynamic log configs), changed
with real admin clients as `kafka-configs --entity-type brokers` would, apply to running
topics at once: the cluster default (`--entity-default`, through the Java client's
IncrementalAlterConfigs as kafka-configs does; librdkafka, kafka-python and kafkajs refuse
to name the "" resource), one broker's own setting over it (librdkafka's
IncrementalAlterConfigs),
then removing both. A record over the dynamic message.max.bytes is refused with
MESSAGE_TOO_LARGE, and DescribeConfigs names the setting's source."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

from compat_tests.harness.broker import Broker
from compat_tests.harness.quirks import tansu_quirk
from compat_tests.harness.scenario import get_driver, unique_topic

TIMEOUT_S = 30.0
VALUE_BYTES = 2_000
KAFKA_DEFAULT = "1048588"

pytestmark = tansu_quirk("no dynamic broker configs")


def _alter_own(admin: AdminClient, broker_id: str, op: AlterConfigOpType, key: str, value: str | None) -> None:
    entry = ConfigEntry(key, value, incremental_operation=op)
    resource = ConfigResource(ResourceType.BROKER, broker_id, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource], request_timeout=TIMEOUT_S).values():
        future.result(timeout=TIMEOUT_S)


def _max_message_bytes(admin: AdminClient, topic: str) -> tuple[str, Any]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = next(iter(admin.describe_configs([resource], request_timeout=TIMEOUT_S).values()))
    entry = configs.result(timeout=TIMEOUT_S)["max.message.bytes"]
    return entry.value, ConfigSource(entry.source)


def _produce(bootstrap: str, topic: str) -> KafkaError | None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "enable.idempotence": False,
                         "retries": 0, "linger.ms": 0, "message.timeout.ms": int(TIMEOUT_S * 1000)})
    outcome: list[KafkaError | None] = []
    producer.produce(topic, value=b"v" * VALUE_BYTES, on_delivery=lambda err, _msg: outcome.append(err))
    assert producer.flush(TIMEOUT_S) == 0, "the record was not answered in time"
    assert len(outcome) == 1
    return outcome[0]


def _own_id(admin: AdminClient) -> str:
    broker_ids = list(admin.list_topics(timeout=TIMEOUT_S).brokers)
    assert len(broker_ids) == 1
    return str(broker_ids[0])


def test_dynamic_message_max_bytes_applies_at_once(own_broker: Broker) -> None:
    operator = get_driver("java", own_broker)
    admin = AdminClient({"bootstrap.servers": own_broker.bootstrap})
    topic = unique_topic("dyn-max-bytes")
    own_broker.create_topic(topic, 1, {})
    own = _own_id(admin)

    assert _produce(own_broker.bootstrap, topic) is None
    assert _max_message_bytes(admin, topic) == (KAFKA_DEFAULT, ConfigSource.DEFAULT_CONFIG)

    operator.alter_broker_config("", "message.max.bytes", "1000")
    assert _max_message_bytes(admin, topic) == ("1000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    error = _produce(own_broker.bootstrap, topic)
    assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE, error

    _alter_own(admin, own, AlterConfigOpType.SET, "message.max.bytes", "100000")
    assert _max_message_bytes(admin, topic) == ("100000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert _produce(own_broker.bootstrap, topic) is None

    _alter_own(admin, own, AlterConfigOpType.DELETE, "message.max.bytes", None)
    error = _produce(own_broker.bootstrap, topic)
    assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE, error

    operator.alter_broker_config("", "message.max.bytes", None)
    assert _max_message_bytes(admin, topic) == (KAFKA_DEFAULT, ConfigSource.DEFAULT_CONFIG)
    assert _produce(own_broker.bootstrap, topic) is None


@pytest.mark.parametrize("value", ["-5", "many"])
def test_invalid_dynamic_value_is_refused(own_broker: Broker, value: str) -> None:
    admin = AdminClient({"bootstrap.servers": own_broker.bootstrap})
    with pytest.raises(KafkaException) as caught:
        _alter_own(admin, _own_id(admin), AlterConfigOpType.SET, "log.segment.bytes", value)
    error = caught.value.args[0]
    assert error.code() == KafkaError.INVALID_REQUEST, error
