"""Metadata: every client lists the topics, their partition counts and the one broker."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from compat_tests.harness.broker import Broker
from compat_tests.harness.drivers import DRIVER_NAMES, Driver
from compat_tests.harness.scenario import unique_topic

PARTITIONS = (1, 3, 7)


@pytest.fixture(scope="module")
def topics(broker: Broker) -> dict[str, int]:
    created = {unique_topic(f"meta-{n}p"): n for n in PARTITIONS}
    for name, partitions in created.items():
        broker.create_topic(name, partitions)
    return created


@pytest.mark.parametrize("client", DRIVER_NAMES)
def test_metadata_lists_topics_partitions_and_broker(
    client: str, broker: Broker, topics: dict[str, int], driver_for: Callable[[str], Driver]
) -> None:
    metadata = driver_for(client).metadata()

    assert len(metadata.brokers) == 1, f"expected one broker, got {sorted(metadata.brokers)}"
    (_node_id, host, port) = next(iter(metadata.brokers))
    assert (host, port) == (broker.host, broker.port), (
        f"broker advertised as {host}:{port}, clients connect to {broker.bootstrap}"
    )
    for name, partitions in topics.items():
        assert name in metadata.topics, f"{name} missing from {sorted(metadata.topics)}"
        assert metadata.topics[name] == partitions, (
            f"{name}: {metadata.topics[name]} partitions, created with {partitions}"
        )
