"""Share groups' dead-letter topics (KIP-1191) are written only when the cluster's
share.version is 2 (raised by UpdateFeatures; a new cluster is at 1) and the dead-letter
topic opts in with ``errors.deadletterqueue.group.enable=true``; against a broker process."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from broker.share.partition import REJECT
from broker.tools.client import KafkaClient
from tests.broker.broker_process import BrokerProcess
from tests.broker.share.test_group_configs import SET
from tests.broker.share.test_share_fetch_v2 import ack, ack_error, fetch, queue
from tests.broker.share.test_share_group_apis import OVERRIDES, acquired
from tests.broker.share.test_share_version_gate import UPGRADE, set_share_version
from wire.errors import ErrorCode
from wire.generated.api_001_fetch import (
    FetchRequest,
    FetchRequestFetchPartition,
    FetchRequestFetchTopic,
    FetchResponse,
)
from wire.generated.api_019_create_topics import (
    CreateTopicsRequest,
    CreateTopicsRequestCreatableTopic,
    CreateTopicsRequestCreatableTopicConfig,
    CreateTopicsResponse,
)
from wire.generated.api_044_incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsRequestAlterableConfig,
    IncrementalAlterConfigsRequestAlterConfigsResource,
    IncrementalAlterConfigsResponse,
)
from wire.records import Record, iter_batch_headers, iter_records
from wire.regions import FileRegion


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("dead-letter-gate") / "data", OVERRIDES).start()
    try:
        yield b
    finally:
        assert b.stop() == 0


def dead_letter_topic(c: KafkaClient, name: str, enabled: bool | None) -> None:
    configs = [] if enabled is None else [CreateTopicsRequestCreatableTopicConfig(
        name="errors.deadletterqueue.group.enable", value=str(enabled).lower())]
    r = c.send(CreateTopicsRequest(timeout_ms=10_000, topics=[CreateTopicsRequestCreatableTopic(
        name=name, num_partitions=1, replication_factor=1, configs=configs)]), CreateTopicsResponse)
    assert r.topics[0].error_code == ErrorCode.NONE, r.topics[0]


def records(c: KafkaClient, topic: str) -> list[Record]:
    r = c.send(FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, topics=[FetchRequestFetchTopic(
        topic=topic, partitions=[FetchRequestFetchPartition(partition=0, fetch_offset=0,
                                                            partition_max_bytes=1 << 20)])]), FetchResponse, 12)
    part = r.responses[0].partitions[0]
    assert part.error_code == ErrorCode.NONE
    raw = part.records.read() if isinstance(part.records, FileRegion) else bytes(part.records or b"")
    return [rec for pos, _ in iter_batch_headers(raw) for rec in iter_records(raw, pos)]


def reject_one(c: KafkaClient, name: str, dlq: str) -> None:
    """A queue of one record whose group names ``dlq``; its consumer rejects the record."""
    tid = queue(c, name, ["m"], [1], **{"errors.deadletterqueue.topic.name": dlq})
    assert acquired(fetch(c, f"g-{name}", "m", 0, tid)) == [(0, 0, 1)]
    assert ack_error(ack(c, f"g-{name}", "m", 1, tid, [(0, 0, [REJECT])])) == ErrorCode.NONE


def test_dead_letters_need_share_version_2_and_the_topics_opt_in(broker: BrokerProcess) -> None:
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        for name, enabled in (("dlq.v1", True), ("dlq.off", False), ("dlq.unset", None), ("dlq.on", True)):
            dead_letter_topic(c, name, enabled)
        reject_one(c, "at-v1", "dlq.v1")  # share.version 1, what a new cluster has: no copy
        set_share_version(c, 2, UPGRADE)
        reject_one(c, "not-enabled", "dlq.off")
        reject_one(c, "unset", "dlq.unset")
        reject_one(c, "enabled", "dlq.on")
        deadline = time.monotonic() + 10
        while not (copies := records(c, "dlq.on")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(copies) == 1
        headers = dict(copies[0].headers)
        assert headers["__dlq.errors.group.id"] == b"g-enabled"
        assert headers["__dlq.errors.reason"] == b"rejected"
        assert [records(c, t) for t in ("dlq.v1", "dlq.off", "dlq.unset")] == [[], [], []]
        # the topic config is Kafka's: set and described like any other
        assert alter_topic(c, "dlq.off", "true") == ErrorCode.NONE
        reject_one(c, "enabled-later", "dlq.off")
        deadline = time.monotonic() + 10
        while not records(c, "dlq.off") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(records(c, "dlq.off")) == 1


TOPIC_RESOURCE = 2


def alter_topic(c: KafkaClient, topic: str, value: str) -> int:
    r = c.send(IncrementalAlterConfigsRequest(resources=[IncrementalAlterConfigsRequestAlterConfigsResource(
        resource_type=TOPIC_RESOURCE, resource_name=topic, configs=[IncrementalAlterConfigsRequestAlterableConfig(
            name="errors.deadletterqueue.group.enable", config_operation=SET, value=value)])]),
        IncrementalAlterConfigsResponse, 1)
    return r.responses[0].error_code

