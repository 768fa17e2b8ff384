"""Kafka's internal topics (``Topic.INTERNAL_TOPICS``: ``__consumer_offsets``,
``__transaction_state``, ``__share_group_state``) against a broker process: Metadata,
DescribeTopicPartitions and ``cormorant topics`` show them internal, and a client's Produce
to one is refused with INVALID_TOPIC_EXCEPTION — unless it comes with the client id of
Kafka's own admin tools (``__admin_client``), as Kafka's ReplicaManager allows."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from broker.cli import main
from broker.tools.client import KafkaClient, parse_bootstrap
from tests.broker.broker_process import BrokerProcess
from tests.broker.test_group_apis import create_topic
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.generated.api_000_produce import (
    ProduceRequest,
    ProduceRequestPartitionProduceData,
    ProduceRequestTopicProduceData,
    ProduceResponse,
)
from wire.generated.api_003_metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from wire.generated.api_075_describe_topic_partitions import (
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsRequestTopicRequest,
    DescribeTopicPartitionsResponse,
)
from wire.records import NewRecord

INTERNAL = ("__consumer_offsets", "__share_group_state", "__transaction_state")
PLAIN = "plain-topic"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {"offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1",
                 "share.coordinator.state.topic.num.partitions": "1", "auto.create.topics.enable": "true"}
    b = BrokerProcess(tmp_path_factory.mktemp("internal-topics") / "data", overrides).start()
    try:
        with KafkaClient.connect(b.bootstrap, timeout_s=20) as c:
            create_topic(c, PLAIN, 1)
            # A Metadata request naming an internal topic creates it as its coordinator would.
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not all(internal_flags(c).get(t) is not None for t in INTERNAL):
                time.sleep(0.2)
        yield b
    finally:
        assert b.stop() == 0


def internal_flags(c: KafkaClient) -> dict[str, bool | None]:
    """is_internal of each topic in a Metadata v12 answer (None: not there yet)."""
    r = c.send(MetadataRequest(topics=[MetadataRequestTopic(name=t) for t in (*INTERNAL, PLAIN)],
                               allow_auto_topic_creation=True), MetadataResponse, 12)
    return {t.name or "": t.is_internal if t.error_code == ErrorCode.NONE and t.partitions else None
            for t in r.topics}


def produce(c: KafkaClient, topic: str) -> tuple[int, str | None]:
    batch = build_batch([NewRecord(b"k", b"v", timestamp=int(time.time() * 1000))])
    r = c.send(ProduceRequest(acks=-1, timeout_ms=10_000, topic_data=[ProduceRequestTopicProduceData(
        name=topic, partition_data=[ProduceRequestPartitionProduceData(index=0, records=batch)])]),
        ProduceResponse, 9)
    p = r.responses[0].partition_responses[0]
    return p.error_code, p.error_message


def test_metadata_and_describe_topic_partitions_show_the_internal_topics(broker: BrokerProcess) -> None:
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        assert internal_flags(c) == {**dict.fromkeys(INTERNAL, True), PLAIN: False}
        listed = c.send(MetadataRequest(topics=None), MetadataResponse, 12)
        assert {t.name: t.is_internal for t in listed.topics} == {**dict.fromkeys(INTERNAL, True), PLAIN: False}
        r = c.send(DescribeTopicPartitionsRequest(
            topics=[DescribeTopicPartitionsRequestTopicRequest(name=t) for t in (*INTERNAL, PLAIN)],
            response_partition_limit=100), DescribeTopicPartitionsResponse, 0)
        assert {t.name: (t.error_code, t.is_internal) for t in r.topics} == {
            **dict.fromkeys(INTERNAL, (ErrorCode.NONE, True)), PLAIN: (ErrorCode.NONE, False)}


def test_clients_cannot_produce_to_internal_topics(broker: BrokerProcess) -> None:
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        for topic in INTERNAL:
            assert produce(c, topic) == (ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot append to internal topic {topic}")
        assert produce(c, PLAIN)[0] == ErrorCode.NONE
    # Kafka's own admin tools (client id __admin_client) may append.
    host, port = parse_bootstrap(broker.bootstrap)
    with KafkaClient(host, port, timeout_s=20, client_id="__admin_client") as admin:
        assert produce(admin, "__transaction_state")[0] == ErrorCode.NONE


def test_cormorant_topics_lists_internal_topics_unless_excluded(broker: BrokerProcess,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["topics", "--bootstrap-server", broker.bootstrap, "list"]) == 0
    assert capsys.readouterr().out.split() == sorted([*INTERNAL, PLAIN])
    assert main(["topics", "--bootstrap-server", broker.bootstrap, "list", "--exclude-internal"]) == 0
    assert capsys.readouterr().out.split() == [PLAIN]
    assert main(["topics", "--bootstrap-server", broker.bootstrap, "describe", "--exclude-internal"]) == 0
    described = [line.split("\t")[0] for line in capsys.readouterr().out.splitlines() if line.startswith("Topic:")]
    assert described == [f"Topic: {PLAIN}"]
