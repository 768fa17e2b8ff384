"""ElectLeaders through a real client (confluent-kafka's AdminClient.elect_leaders)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.broker.broker_process import BrokerProcess

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import ElectionType, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

TIMEOUT_S = 20


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("elect") / "data").start()
    try:
        yield b
    finally:
        b.stop()


def elect(admin: AdminClient, election: ElectionType,
          partitions: list[TopicPartition] | None) -> dict[tuple[str, int], int]:
    """(topic, partition) -> Kafka error code (0 for an elected leader)."""
    result = admin.elect_leaders(election, partitions).result(timeout=TIMEOUT_S)
    out = {}
    for tp, error in result.items():
        out[(tp.topic, tp.partition)] = 0 if error is None else error.code()
    return out


def test_single_broker_needs_no_election_and_names_unknown_partitions(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("elect-me", 2, 1)])["elect-me"].result(timeout=TIMEOUT_S)
    asked = [TopicPartition("elect-me", 0), TopicPartition("elect-me", 1), TopicPartition("no-such-topic", 0)]
    preferred = elect(admin, ElectionType.PREFERRED, asked)
    assert preferred == {("elect-me", 0): 84, ("elect-me", 1): 84, ("no-such-topic", 0): 3}
    unclean = elect(admin, ElectionType.UNCLEAN, asked[:1])
    assert unclean == {("elect-me", 0): 84}
    # Every partition: none needs an election, so the answer is empty.
    assert elect(admin, ElectionType.PREFERRED, None) == {}
