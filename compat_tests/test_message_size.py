"""Records near the broker's message.max.bytes are accepted; larger ones are refused.

The broker default is message.max.bytes = 1048588 (1 MiB + 12), checked against the whole
record batch. A 1,000,000-byte value leaves room for the batch and record overhead; a
1,100,000-byte value does not. Values are incompressible and sent uncompressed, and every
client's own request limit is raised to 16 MiB, so the refusal can only come from the
broker: MESSAGE_TOO_LARGE (error 10), whatever name the client gives it.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from compat_tests.harness.broker import Broker
from compat_tests.harness.drivers import DRIVER_NAMES, ClientError, Driver, Record
from compat_tests.harness.drivers.base import MESSAGE_TOO_LARGE
from compat_tests.harness.quirks import NO_MESSAGE_MAX_BYTES, tansu_quirk
from compat_tests.harness.scenario import (
    assert_consumed_matches,
    produce_timed,
    rotation,
    unique_topic,
)

NEAR_LIMIT_VALUE_BYTES = 1_000_000
OVER_LIMIT_VALUE_BYTES = 1_100_000


def _payload(size: int, seed: str) -> bytes:
    return random.Random(seed).randbytes(size)


@pytest.mark.parametrize("client", DRIVER_NAMES)
def test_record_near_limit_is_accepted(
    broker: Broker, driver_for: Callable[[str], Driver], client: str
) -> None:
    producer = driver_for(client)
    consumer = driver_for(rotation(client, 0, broker))
    topic = unique_topic(f"size-ok-{client}")
    broker.create_topic(topic, 1)
    record = Record(
        key=b"big",
        value=_payload(NEAR_LIMIT_VALUE_BYTES, topic),
        headers=(("h", b"1"),),
        partition=0,
        timestamp_ms=1_700_000_000_000 if producer.capabilities.explicit_timestamps else None,
    )

    run = produce_timed(producer, topic, [record], acks=-1)

    consumed = consumer.consume(topic, [0], count=1, timeout_s=30)
    assert_consumed_matches(run, consumed, base_offsets={0: 0})


@tansu_quirk(NO_MESSAGE_MAX_BYTES)
@pytest.mark.parametrize("client", DRIVER_NAMES)
def test_record_over_limit_is_rejected_with_message_too_large(
    broker: Broker, driver_for: Callable[[str], Driver], client: str
) -> None:
    producer = driver_for(client)
    topic = unique_topic(f"size-big-{client}")
    broker.create_topic(topic, 1)
    record = Record(key=b"too-big", value=_payload(OVER_LIMIT_VALUE_BYTES, topic), partition=0)

    with pytest.raises(ClientError) as caught:
        producer.produce(topic, [record], acks=-1)

    assert caught.value.code == MESSAGE_TOO_LARGE, (
        f"expected MESSAGE_TOO_LARGE ({MESSAGE_TOO_LARGE}), got {caught.value}"
    )
    assert driver_for("kafka-python").list_offsets(topic, 0, "latest") == 0, (
        "the refused record was appended"
    )
