"""Share groups' dead-letter topics (KIP-1191, Kafka 4.4) are written only when the cluster's
share.version is 2 (raised by UpdateFeatures; a new cluster is at 1), the dead-letter topic
opts in with ``errors.deadletterqueue.group.enable=true`` and its name has the broker's
``errors.deadletterqueue.topic.name.prefix``; records carry Kafka 4.4's ``__dlq.errors.*``
headers, and key and value only with ``errors.deadletterqueue.copy.record.enable``; a group's
``share.renew.acknowledge.enable=false`` refuses RENEW. Against broker processes."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from broker.share.partition import ACCEPT, REJECT, RENEW
from broker.tools.client import KafkaClient
from tests.broker.broker_process import BrokerProcess
from tests.broker.share.test_group_configs import SET, alter
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
from wire.generated.api_003_metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
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


def records(c: KafkaClient, topic: str, missing_ok: bool = False) -> list[Record]:
    r = c.send(FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, topics=[FetchRequestFetchTopic(
        topic=topic, partitions=[FetchRequestFetchPartition(partition=0, fetch_offset=0,
                                                            partition_max_bytes=1 << 20)])]), FetchResponse, 12)
    part = r.responses[0].partitions[0]
    if missing_ok and part.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        return []
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
        # Kafka 4.4's context headers; by default no key and no value (copy.record.enable=false)
        assert dict(copies[0].headers) == {
            "__dlq.errors.topic": b"enabled", "__dlq.errors.partition": b"0", "__dlq.errors.offset": b"0",
            "__dlq.errors.group": b"g-enabled", "__dlq.errors.delivery.count": b"1",
            "__dlq.errors.message": b"Offset rejected by client."}
        assert (copies[0].key, copies[0].value) == (None, None)
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



def wait_for_records(c: KafkaClient, topic: str) -> list[Record]:
    deadline = time.monotonic() + 10
    while not (found := records(c, topic, missing_ok=True)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def test_copy_record_prefix_and_internal_names(broker: BrokerProcess) -> None:
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        set_share_version(c, 2, UPGRADE)
        for name in ("dlq.copy", "orders.dead"):
            dead_letter_topic(c, name, True)
        # opted in but without the broker's prefix (dlq.): archived, never written
        reject_one(c, "no-prefix", "orders.dead")
        tid = queue(c, "copied", ["m"], [1], **{"errors.deadletterqueue.topic.name": "dlq.copy",
                                                 "errors.deadletterqueue.copy.record.enable": "true"})
        assert acquired(fetch(c, "g-copied", "m", 0, tid)) == [(0, 0, 1)]
        assert ack_error(ack(c, "g-copied", "m", 1, tid, [(0, 0, [REJECT])])) == ErrorCode.NONE
        copies = wait_for_records(c, "dlq.copy")
        assert [(r.key, r.value) for r in copies] == [(None, b"v0")]
        assert dict(copies[0].headers)["__dlq.errors.group"] == b"g-copied"
        assert records(c, "orders.dead") == []
        # a name of Kafka's internal topics is refused when set, as Kafka 4.4's GroupConfig does
        assert alter(c, "g-internal", ("errors.deadletterqueue.topic.name", SET, "__consumer_offsets")) == (
            ErrorCode.INVALID_CONFIG, "errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'")


def test_renew_refused_when_the_group_disables_it(broker: BrokerProcess) -> None:
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        tid = queue(c, "no-renew", ["m"], [2], **{"share.renew.acknowledge.enable": "false"})
        assert acquired(fetch(c, "g-no-renew", "m", 0, tid)) == [(0, 1, 1)]
        assert ack_error(ack(c, "g-no-renew", "m", 1, tid, [(0, 0, [RENEW])], renew=True)) == \
            ErrorCode.INVALID_RECORD_STATE
        renewing = fetch(c, "g-no-renew", "m", 2, tid, acks=[(1, 1, [RENEW])], renew=True, max_records=0,
                         max_bytes=0, min_bytes=0)
        assert renewing.responses[0].partitions[0].acknowledge_error_code == ErrorCode.INVALID_RECORD_STATE
        # the records are still held by the member, which may accept them
        assert ack_error(ack(c, "g-no-renew", "m", 3, tid, [(0, 1, [ACCEPT])])) == ErrorCode.NONE
        tid = queue(c, "renew", ["m"], [1])  # the default: true
        assert acquired(fetch(c, "g-renew", "m", 0, tid)) == [(0, 0, 1)]
        assert ack_error(ack(c, "g-renew", "m", 1, tid, [(0, 0, [RENEW])], renew=True)) == ErrorCode.NONE


def test_auto_created_topic_with_the_brokers_prefix(tmp_path_factory: pytest.TempPathFactory) -> None:
    overrides = {**OVERRIDES, "errors.deadletterqueue.auto.create.topics.enable": "true",
                 "errors.deadletterqueue.topic.name.prefix": "dead."}
    b = BrokerProcess(tmp_path_factory.mktemp("dead-letter-create") / "data", overrides).start()
    try:
        with KafkaClient.connect(b.bootstrap, timeout_s=20) as c:
            set_share_version(c, 2, UPGRADE)
            reject_one(c, "default-prefix", "dlq.missing")  # not the prefix: never created
            reject_one(c, "created", "dead.created")
            copies = wait_for_records(c, "dead.created")
            assert [dict(r.headers)["__dlq.errors.group"] for r in copies] == [b"g-created"]
            # the prefix is a dynamic cluster-wide setting: emptied, any opted-in name will do
            dead_letter_topic(c, "orders.dead", True)
            assert alter_broker_default(c, "errors.deadletterqueue.topic.name.prefix", "") == ErrorCode.NONE
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not records(c, "orders.dead"):
                reject_one(c, f"unprefixed-{int(time.monotonic() * 1000)}", "orders.dead")
                time.sleep(0.2)
            written = records(c, "orders.dead")
            assert written and dict(written[0].headers)["__dlq.errors.topic"].startswith(b"unprefixed-")
            meta = c.send(MetadataRequest(topics=[MetadataRequestTopic(name="dlq.missing")],
                                          allow_auto_topic_creation=False), MetadataResponse, 12)
            assert meta.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        assert b.stop() == 0


BROKER_RESOURCE = 4


def alter_broker_default(c: KafkaClient, name: str, value: str) -> int:
    r = c.send(IncrementalAlterConfigsRequest(resources=[IncrementalAlterConfigsRequestAlterConfigsResource(
        resource_type=BROKER_RESOURCE, resource_name="", configs=[IncrementalAlterConfigsRequestAlterableConfig(
            name=name, config_operation=SET, value=value)])]), IncrementalAlterConfigsResponse, 1)
    return r.responses[0].error_code
