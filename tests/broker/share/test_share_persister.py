"""The share coordinator's inter-broker APIs (83-87) and the persister that partition leaders
use, against a broker process: this test plays a partition leader on another broker, reaching
the share coordinator through the inter-broker channel as a broker does."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator

import pytest
import trio

from broker.cluster.peers import PeerBrokers
from broker.share.partition import RecordState
from broker.share.partition import StateBatch as B
from broker.share.persister import SharePersister
from broker.share.state_service import ShareStateService
from broker.tools.client import KafkaClient
from controller.image import BrokerImage, Endpoint, MetadataImage, PartitionImage, TopicImage
from tests.broker.broker_process import BrokerProcess
from tests.broker.share.test_share_group_apis import OVERRIDES, heartbeat
from tests.broker.test_group_apis import create_topic
from wire.errors import ErrorCode
from wire.generated.api_003_metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from wire.generated.api_084_read_share_group_state import (
    ReadShareGroupStateRequest,
    ReadShareGroupStateRequestPartitionData,
    ReadShareGroupStateRequestReadStateData,
    ReadShareGroupStateResponse,
)

A, ACK, ARC = RecordState.AVAILABLE, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED
STATE_TOPIC = "__share_group_state"
#: The id this test's persister claims: not the broker's, so every call crosses the network.
OTHER_BROKER = 99


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("share-persister") / "data", OVERRIDES).start()
    try:
        with KafkaClient.connect(b.bootstrap, timeout_s=20) as c:
            create_topic(c, "st", 1)
            # a share group's first heartbeat creates __share_group_state
            assert heartbeat(c, "g-create", "m", 0, ["st"]).error_code == ErrorCode.NONE
        yield b
    finally:
        assert b.stop() == 0


def image_of(broker: BrokerProcess) -> MetadataImage:
    """The cluster as a broker's metadata image would show it, from a Metadata answer."""
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        r = c.send(MetadataRequest(topics=[MetadataRequestTopic(name=STATE_TOPIC)]), MetadataResponse, 12)
    brokers = {b.node_id: BrokerImage(b.node_id, 1, uuid.UUID(int=b.node_id), (Endpoint("PLAINTEXT", b.host, b.port),),
                                      None, False) for b in r.brokers}
    t = r.topics[0]
    assert t.error_code == ErrorCode.NONE
    partitions = {p.partition_index: PartitionImage(t.topic_id, p.partition_index, tuple(p.replica_nodes),
                                                    tuple(p.isr_nodes), p.leader_id, p.leader_epoch, 0)
                  for p in t.partitions}
    return MetadataImage(topics_by_id={t.topic_id: TopicImage(STATE_TOPIC, t.topic_id, partitions)},
                         topic_ids={STATE_TOPIC: t.topic_id}, brokers=brokers)


def persister_for(image: MetadataImage, calls: list[int] | None = None, stale: int = 0) -> SharePersister:
    """A persister on broker 99; the first ``stale`` image lookups know no coordinator yet."""
    peers = PeerBrokers(OTHER_BROKER, lambda: image, "PLAINTEXT")
    seen = calls if calls is not None else []
    topic = image.topics_by_id[image.topic_ids[STATE_TOPIC]]
    leaderless = dataclasses.replace(image, topics_by_id={topic.topic_id: dataclasses.replace(
        topic, partitions={i: dataclasses.replace(p, leader=-1) for i, p in topic.partitions.items()})})

    def current() -> MetadataImage:
        seen.append(1)
        return leaderless if len(seen) <= stale else image

    async def no_create() -> None:
        raise AssertionError("the state topic exists")

    return SharePersister(node_id=OTHER_BROKER, image=current, state_topic=STATE_TOPIC,
                          local=ShareStateService(lambda key: (ErrorCode.NOT_COORDINATOR, None)),
                          peers=lambda: peers, ensure_topic=no_create, timeout_s=10)


def test_persister_round_trip_and_fencing(broker: BrokerProcess) -> None:
    image = image_of(broker)
    key = ("g-persist", uuid.uuid4(), 0)

    async def main() -> None:
        p = persister_for(image)
        fresh = await p.read(key, 3)
        assert (fresh.error, fresh.start_offset, fresh.batches) == (ErrorCode.NONE, -1, ())
        assert await p.initialize(key, 1, 10) is ErrorCode.NONE
        assert await p.initialize(key, 1, 10) is ErrorCode.FENCED_STATE_EPOCH
        assert await p.write(key, 1, 3, 10, [B(10, 14, ACK, 1), B(15, 19, A, 2)]) is ErrorCode.NONE
        assert await p.write(key, 1, 3, 15, [B(15, 15, ARC, 3)]) is ErrorCode.NONE
        got = await p.read(key, 4)  # a new leader epoch takes over
        assert got.error is ErrorCode.NONE and (got.state_epoch, got.start_offset) == (1, 15)
        assert got.batches == (B(15, 15, ARC, 3), B(16, 19, A, 2))
        assert await p.write(key, 1, 3, 16, []) is ErrorCode.FENCED_LEADER_EPOCH
        assert (await p.read(key, 3)).error is ErrorCode.FENCED_LEADER_EPOCH
        summary = await p.read_summary(key)
        assert (summary.error, summary.leader_epoch, summary.start_offset, summary.delivery_complete_count) == (
            ErrorCode.NONE, 4, 15, 1)
        assert await p.delete(key) is ErrorCode.NONE
        assert (await p.read(key, 5)).start_offset == -1

    trio.run(main)


def test_state_survives_a_restart(broker: BrokerProcess) -> None:
    key = ("g-durable", uuid.uuid4(), 0)

    async def write() -> None:
        assert await persister_for(image_of(broker)).write(key, 0, 7, 40, [B(40, 41, ACK, 1), B(42, 45, A, 1)]) \
            is ErrorCode.NONE

    trio.run(write)
    broker.restart()

    async def read() -> None:
        got = await persister_for(image_of(broker)).read(key, 8)  # retried while the state loads
        assert got.error is ErrorCode.NONE and got.start_offset == 40
        assert got.batches == (B(40, 41, ACK, 1), B(42, 45, A, 1))

    trio.run(read)


def test_persister_waits_for_a_coordinator(broker: BrokerProcess) -> None:
    calls: list[int] = []
    key = ("g-wait", uuid.uuid4(), 0)

    async def main() -> None:
        assert await persister_for(image_of(broker), calls, stale=3).initialize(key, 1, 0) is ErrorCode.NONE

    trio.run(main)
    assert len(calls) > 3


def test_wire_errors(broker: BrokerProcess) -> None:
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        r = c.send(ReadShareGroupStateRequest(group_id="", topics=[ReadShareGroupStateRequestReadStateData(
            topic_id=uuid.uuid4(), partitions=[ReadShareGroupStateRequestPartitionData(partition=0, leader_epoch=0)])]),
            ReadShareGroupStateResponse, 0)
        assert r.results[0].partitions[0].error_code == ErrorCode.INVALID_REQUEST


def test_state_apis_need_cluster_action(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Inter-broker APIs: a client without CLUSTER_ACTION on the cluster is refused per partition."""
    from tests.broker.test_acl_apis import AUTHORIZER

    b = BrokerProcess(tmp_path_factory.mktemp("share-state-acl") / "data",
                      {**OVERRIDES, "authorizer.class.name": AUTHORIZER["authorizer.class.name"]}).start()
    try:
        with KafkaClient.connect(b.bootstrap, timeout_s=20) as c:
            r = c.send(ReadShareGroupStateRequest(group_id="g", topics=[ReadShareGroupStateRequestReadStateData(
                topic_id=uuid.uuid4(), partitions=[ReadShareGroupStateRequestPartitionData(partition=0,
                                                                                         leader_epoch=0)])]),
                ReadShareGroupStateResponse, 0)
            assert r.results[0].partitions[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    finally:
        assert b.stop() == 0
