"""A Metadata request that auto-creates an internal topic creates it as its coordinator
would (Kafka's AutoTopicCreationManager): with the topic's own partition count, not the
broker's ``num.partitions``."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.broker.broker_process import BrokerProcess
from tests.broker.raw_client import RawClient
from wire.errors import ErrorCode
from wire.generated.api_003_metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse

#: Each internal topic and the setting that sizes it, set below to distinct counts.
SIZED_BY = {
    "__consumer_offsets": ("offsets.topic.num.partitions", 3),
    "__transaction_state": ("transaction.state.log.num.partitions", 4),
    "__share_group_state": ("share.coordinator.state.topic.num.partitions", 5),
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {"num.partitions": "2", "auto.create.topics.enable": "true"}
    overrides.update({setting: str(count) for setting, count in SIZED_BY.values()})
    b = BrokerProcess(tmp_path_factory.mktemp("internal-auto") / "data", overrides).start()
    try:
        yield b
    finally:
        b.stop()


def partitions_of(client: RawClient, topic: str) -> tuple[int, int]:
    """(error code, partition count) of ``topic`` in a Metadata v12 answer that may create it."""
    resp = client.call(MetadataRequest(topics=[MetadataRequestTopic(name=topic)], allow_auto_topic_creation=True),
                       MetadataResponse, 12)
    assert isinstance(resp, MetadataResponse)
    (answer,) = resp.topics
    return answer.error_code, len(answer.partitions)


@pytest.mark.parametrize("topic", sorted(SIZED_BY))
def test_an_internal_topic_made_by_metadata_has_its_own_partition_count(broker: BrokerProcess, topic: str) -> None:
    client = RawClient(broker.bootstrap)
    try:
        want = SIZED_BY[topic][1]
        deadline = time.monotonic() + 30
        code, count = partitions_of(client, topic)
        while (code != ErrorCode.NONE or count == 0) and time.monotonic() < deadline:
            time.sleep(0.2)
            code, count = partitions_of(client, topic)
        assert (code, count) == (ErrorCode.NONE, want)
        # An ordinary topic still gets num.partitions.
        code, count = partitions_of(client, f"ordinary-{topic.strip('_')}")
        assert count == 2, (code, count)
    finally:
        client.close()



def test_an_illegal_name_is_not_auto_created(broker: BrokerProcess) -> None:
    """A name legal but for a final newline (which a regex's "$" lets through) is refused
    with INVALID_TOPIC_EXCEPTION and never created: the broker could not checkpoint it."""
    client = RawClient(broker.bootstrap)
    try:
        assert partitions_of(client, "auto-newline\n") == (ErrorCode.INVALID_TOPIC_EXCEPTION, 0)
        every = client.call(MetadataRequest(topics=None), MetadataResponse, 12)
        assert isinstance(every, MetadataResponse)
        assert "auto-newline\n" not in {t.name for t in every.topics}
        assert partitions_of(client, "auto-legal")[0] in (ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE)
    finally:
        client.close()
