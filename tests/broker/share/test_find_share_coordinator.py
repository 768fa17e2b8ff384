"""FindCoordinator v6 with key type SHARE (2) against a broker process: the answer is the
leader of the ``__share_group_state`` partition the key hashes to (created on first use),
malformed keys and versions before 6 are INVALID_REQUEST, as in Kafka."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from broker.share.state_store import kafka_uuid
from broker.tools.client import KafkaClient
from tests.broker.broker_process import BrokerProcess
from wire.errors import ErrorCode
from wire.generated.api_003_metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from wire.generated.api_010_find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse

SHARE = 2
STATE_TOPIC = "__share_group_state"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("find-share") / "data", {
        "node.id": "7", "share.coordinator.state.topic.num.partitions": "3",
        "share.coordinator.state.topic.replication.factor": "1"}).start()
    try:
        yield b
    finally:
        assert b.stop() == 0


def find(c: KafkaClient, keys: list[str], version: int = 6) -> dict[str, tuple[int, int, int]]:
    r = c.send(FindCoordinatorRequest(key_type=SHARE, coordinator_keys=keys), FindCoordinatorResponse, version)
    return {x.key: (x.error_code, x.node_id, x.port) for x in r.coordinators}


def test_share_key_is_answered_with_the_state_partition_leader(broker: BrokerProcess) -> None:
    keys = [f"group-{i}:{kafka_uuid(uuid.uuid4())}:{i}" for i in range(4)]
    with KafkaClient.connect(broker.bootstrap) as c:
        assert find(c, keys) == {k: (ErrorCode.NONE, 7, broker.port) for k in keys}
        # The first lookup created the share coordinator's topic.
        r = c.send(MetadataRequest(topics=[MetadataRequestTopic(name=STATE_TOPIC)]), MetadataResponse, 12)
        assert r.topics[0].error_code == ErrorCode.NONE and len(r.topics[0].partitions) == 3


@pytest.mark.parametrize("key", [
    "", "group", "group:topic", ":AAAAAAAAAAAAAAAAAAAAAA:0", " :AAAAAAAAAAAAAAAAAAAAAA:0",
    "g:not-a-topic-id:0", "g:AAAAAAAAAAAAAAAAAAAAAA:-1", "g:AAAAAAAAAAAAAAAAAAAAAA:x",
    "g:AAAAAAAAAAAAAAAAAAAAAA:2147483648", "g:h:AAAAAAAAAAAAAAAAAAAAAA:0"])
def test_malformed_share_key_is_invalid_request(broker: BrokerProcess, key: str) -> None:
    with KafkaClient.connect(broker.bootstrap) as c:
        assert find(c, [key]) == {key: (ErrorCode.INVALID_REQUEST, -1, -1)}


def test_share_key_type_before_v6_is_invalid_request(broker: BrokerProcess) -> None:
    key = f"g:{kafka_uuid(uuid.uuid4())}:0"
    with KafkaClient.connect(broker.bootstrap) as c:
        assert find(c, [key], version=5) == {key: (ErrorCode.INVALID_REQUEST, -1, -1)}
        r = c.send(FindCoordinatorRequest(key_type=SHARE, key=key), FindCoordinatorResponse, 3)
        assert (r.error_code, r.node_id) == (ErrorCode.INVALID_REQUEST, -1)
