"""Group configs (resource type GROUP) against a broker process: written through the
controller and read from the metadata image — IncrementalAlterConfigs and AlterConfigs with
Kafka's errors, DescribeConfigs with the broker setting each overrides as synonym,
ListConfigResources, DeleteGroups removing a deleted group's configs — and the migration of
the JSON ``config`` record earlier versions kept in ``__share_group_state``."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.log import LogConfig, PartitionLog
from broker.log.shutdown_summary import remove_summary
from broker.tools.client import KafkaClient
from tests.broker.broker_process import BrokerProcess
from tests.broker.share.test_share_group_apis import (
    acquired,
    heartbeat,
    produce,
    share_fetch,
    topic_id,
)
from tests.broker.test_group_apis import create_topic
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.generated.api_032_describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsRequestDescribeConfigsResource,
    DescribeConfigsResponse,
    DescribeConfigsResponseDescribeConfigsResourceResult,
)
from wire.generated.api_033_alter_configs import (
    AlterConfigsRequest,
    AlterConfigsRequestAlterableConfig,
    AlterConfigsRequestAlterConfigsResource,
    AlterConfigsResponse,
)
from wire.generated.api_042_delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from wire.generated.api_044_incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsRequestAlterableConfig,
    IncrementalAlterConfigsRequestAlterConfigsResource,
    IncrementalAlterConfigsResponse,
)
from wire.generated.api_074_list_config_resources import (
    ListConfigResourcesRequest,
    ListConfigResourcesResponse,
)
from wire.records import NewRecord

GROUP = 32
SET, DELETE, APPEND = 0, 1, 2
GROUP_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 8, 4, 5
OVERRIDES = {"offsets.topic.num.partitions": "1", "share.coordinator.state.topic.num.partitions": "1",
             "share.coordinator.state.topic.replication.factor": "1",
             "group.share.delivery.count.limit": "4"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("group-configs") / "data", OVERRIDES).start()
    try:
        yield b
    finally:
        assert b.stop() == 0


def alter(c: KafkaClient, group: str, *ops: tuple[str, int, str | None], validate_only: bool = False
          ) -> tuple[int, str | None]:
    r = c.send(IncrementalAlterConfigsRequest(validate_only=validate_only, resources=[
        IncrementalAlterConfigsRequestAlterConfigsResource(resource_type=GROUP, resource_name=group, configs=[
            IncrementalAlterConfigsRequestAlterableConfig(name=n, config_operation=op, value=v) for n, op, v in ops])]),
        IncrementalAlterConfigsResponse, 1)
    return r.responses[0].error_code, r.responses[0].error_message


def describe(c: KafkaClient, group: str) -> dict[str, DescribeConfigsResponseDescribeConfigsResourceResult]:
    r = c.send(DescribeConfigsRequest(include_synonyms=True, resources=[
        DescribeConfigsRequestDescribeConfigsResource(resource_type=GROUP, resource_name=group,
                                                      configuration_keys=None)]), DescribeConfigsResponse, 4)
    assert r.results[0].error_code == ErrorCode.NONE, r.results[0]
    return {e.name: e for e in r.results[0].configs}


def listed(c: KafkaClient) -> list[str]:
    r = c.send(ListConfigResourcesRequest(resource_types=[GROUP]), ListConfigResourcesResponse, 1)
    return [x.resource_name for x in r.config_resources]


def test_set_described_listed_and_refused(broker: BrokerProcess) -> None:
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        # Unset: share.delivery.count.limit is the broker's (static here), reset its default.
        entries = describe(c, "gc-1")
        limit = entries["share.delivery.count.limit"]
        assert (limit.value, limit.config_source) == ("4", STATIC_BROKER_CONFIG)
        assert [(s.name, s.value, s.source) for s in limit.synonyms] == [
            ("group.share.delivery.count.limit", "4", STATIC_BROKER_CONFIG),
            ("group.share.delivery.count.limit", "5", DEFAULT_CONFIG)]
        reset = entries["share.auto.offset.reset"]
        assert (reset.value, reset.config_source, reset.synonyms) == ("latest", DEFAULT_CONFIG, [])
        assert list(entries) == [
            "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms", "share.session.timeout.ms",
            "share.heartbeat.interval.ms", "share.record.lock.duration.ms", "share.delivery.count.limit",
            "share.partition.max.record.locks", "share.auto.offset.reset", "share.isolation.level",
            "share.renew.acknowledge.enable", "errors.deadletterqueue.topic.name",
            "errors.deadletterqueue.copy.record.enable"]
        session = entries["share.session.timeout.ms"]
        assert (session.value, session.config_source) == ("45000", DEFAULT_CONFIG)
        assert [(s.name, s.value) for s in session.synonyms] == [("group.share.session.timeout.ms", "45000")]
        assert (entries["share.isolation.level"].value, entries["share.isolation.level"].config_source) == (
            "read_uncommitted", DEFAULT_CONFIG)
        assert entries["consumer.heartbeat.interval.ms"].value == "5000"
        assert entries["errors.deadletterqueue.topic.name"].value == ""
        assert entries["errors.deadletterqueue.copy.record.enable"].value == "false"
        assert entries["share.renew.acknowledge.enable"].value == "true"
        # A group need not exist to get configs; validate_only changes nothing.
        assert alter(c, "gc-1", ("share.delivery.count.limit", SET, "2"), validate_only=True) == (0, None)
        assert "gc-1" not in listed(c)
        assert alter(c, "gc-1", ("share.delivery.count.limit", SET, "2"),
                     ("errors.deadletterqueue.topic.name", SET, "dlq.gc")) == (0, None)
        limit = describe(c, "gc-1")["share.delivery.count.limit"]
        assert (limit.value, limit.config_source) == ("2", GROUP_CONFIG)
        assert [s.source for s in limit.synonyms] == [GROUP_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG]
        assert describe(c, "gc-1")["errors.deadletterqueue.topic.name"].value == "dlq.gc"
        assert "gc-1" in listed(c)
        # Kafka's errors: unknown name, bad value, list operation, empty group name.
        code, message = alter(c, "gc-1", ("no.such.config", SET, "1"))
        assert (code, message) == (ErrorCode.INVALID_CONFIG, "Unknown group config name: no.such.config")
        code, message = alter(c, "gc-1", ("share.delivery.count.limit", SET, "11"))
        assert (code, message) == (
            ErrorCode.INVALID_CONFIG,
            "share.delivery.count.limit must be less than or equal to group.share.max.delivery.count.limit")
        code, message = alter(c, "gc-1", ("share.auto.offset.reset", SET, "middle"))
        assert code == ErrorCode.INVALID_CONFIG and "'earliest', 'latest' or of the format" in (message or "")
        code, message = alter(c, "gc-1", ("share.session.timeout.ms", SET, "1000"))
        assert (code, message) == (
            ErrorCode.INVALID_CONFIG,
            "share.session.timeout.ms must be greater than or equal to group.share.min.session.timeout.ms")
        code, message = alter(c, "gc-1", ("share.isolation.level", SET, "serializable"))
        assert (code, message) == (
            ErrorCode.INVALID_CONFIG, "Invalid value serializable for configuration share.isolation.level: "
            "String must be one of: read_committed, read_uncommitted")
        assert alter(c, "gc-1", ("share.auto.offset.reset", APPEND, "x"))[0] == ErrorCode.INVALID_CONFIG
        assert alter(c, "", ("share.auto.offset.reset", SET, "earliest"))[0] == ErrorCode.INVALID_REQUEST
        # AlterConfigs replaces the whole set.
        r = c.send(AlterConfigsRequest(resources=[AlterConfigsRequestAlterConfigsResource(
            resource_type=GROUP, resource_name="gc-1", configs=[
                AlterConfigsRequestAlterableConfig(name="share.record.lock.duration.ms", value="15000")])]),
            AlterConfigsResponse, 2)
        assert r.responses[0].error_code == ErrorCode.NONE
        entries = describe(c, "gc-1")
        assert entries["share.record.lock.duration.ms"].value == "15000"
        assert entries["share.delivery.count.limit"].value == "4"
        # Deleting the last config forgets the group's resource.
        assert alter(c, "gc-1", ("share.record.lock.duration.ms", DELETE, None)) == (0, None)
        assert "gc-1" not in listed(c)


def test_delete_groups_removes_a_deleted_groups_configs(broker: BrokerProcess) -> None:
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        create_topic(c, "gc-topic", 1)
        assert alter(c, "gc-2", ("share.auto.offset.reset", SET, "earliest")) == (0, None)
        assert heartbeat(c, "gc-2", "m1", 0, ["gc-topic"]).error_code == ErrorCode.NONE
        assert heartbeat(c, "gc-2", "m1", -1).error_code == ErrorCode.NONE
        r = c.send(DeleteGroupsRequest(groups_names=["gc-2"]), DeleteGroupsResponse, 2)
        assert r.results[0].error_code == ErrorCode.NONE
        assert "gc-2" not in listed(c)
        assert describe(c, "gc-2")["share.auto.offset.reset"].config_source == DEFAULT_CONFIG


def test_a_changed_config_reaches_live_share_partitions(broker: BrokerProcess) -> None:
    RELEASE = 2
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        create_topic(c, "gc-live", 1)
        produce(c, "gc-live", 1)
        tid = topic_id(c, "gc-live")
        assert alter(c, "gc-3", ("share.auto.offset.reset", SET, "earliest")) == (0, None)
        assert heartbeat(c, "gc-3", "m", 0, ["gc-live"]).error_code == ErrorCode.NONE
        assert acquired(share_fetch(c, "gc-3", "m", 0, tid)) == [(0, 0, 1)]
        assert acquired(share_fetch(c, "gc-3", "m", 1, tid, acks=[(0, 0, [RELEASE])])) == [(0, 0, 2)]
        # The share-partition is live at its leader with the broker's limit (4); the group's
        # new limit applies to it from the next metadata image: the second release archives.
        assert alter(c, "gc-3", ("share.delivery.count.limit", SET, "2")) == (0, None)
        assert acquired(share_fetch(c, "gc-3", "m", 2, tid, acks=[(0, 0, [RELEASE])])) == []
        assert acquired(share_fetch(c, "gc-3", "m", 3, tid)) == []


def legacy_config_record(group: str, value: dict[str, object]) -> NewRecord:
    """What earlier versions wrote for a group's settings (broker/share/shard.py)."""
    key = json.dumps({"type": "config", "group": group}, sort_keys=True, separators=(",", ":")).encode()
    return NewRecord(key, json.dumps(value).encode())


def append_as_earlier_broker(data_dir: Path, records: list[NewRecord]) -> None:
    """Appends ``records`` to ``__share_group_state-0`` of a stopped broker's data dir as the
    its leader wrote them (clients cannot produce to an internal topic)."""
    (directory,) = data_dir.rglob("__share_group_state-0")
    log = PartitionLog.open(directory, LogConfig(), lambda: int(time.time() * 1000), had_clean_shutdown=True,
                            existing=True)
    try:
        log.append_as_leader(build_batch(records), log.latest_epoch or 0)
    finally:
        log.close()
    # The clean-shutdown summary speaks for the files as the broker left them.
    remove_summary(directory.parent)


def test_settings_of_an_earlier_data_dir_become_group_configs(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", OVERRIDES).start()
    try:
        with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
            assert alter(c, "warm", ("share.auto.offset.reset", SET, "earliest")) == (0, None)
            create_topic(c, "legacy-topic", 1)
            assert heartbeat(c, "warm", "m", 0, ["legacy-topic"]).error_code == ErrorCode.NONE  # creates the topic
    finally:
        assert broker.stop() == 0
    append_as_earlier_broker(tmp_path / "data", [
        legacy_config_record("old-1", {"auto_offset_reset": "earliest", "record_lock_duration_ms": None,
                                       "delivery_count_limit": 3, "dead_letter_topic": "dlq.old"}),
        legacy_config_record("old-2", {"auto_offset_reset": "latest", "record_lock_duration_ms": 20000,
                                       "delivery_count_limit": None, "dead_letter_topic": None}),
        # already has group configs: they stay as they are
        legacy_config_record("warm", {"auto_offset_reset": "latest", "record_lock_duration_ms": None,
                                      "delivery_count_limit": 9, "dead_letter_topic": None})])
    broker = BrokerProcess(tmp_path / "data", OVERRIDES).start()
    try:
        with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
            deadline = time.monotonic() + 20
            while sorted(listed(c)) != ["old-1", "old-2", "warm"] and time.monotonic() < deadline:
                time.sleep(0.1)
            assert sorted(listed(c)) == ["old-1", "old-2", "warm"]
            old = {k: e.value for k, e in describe(c, "old-1").items() if e.config_source == GROUP_CONFIG}
            assert old == {"share.auto.offset.reset": "earliest", "share.delivery.count.limit": "3",
                           "errors.deadletterqueue.topic.name": "dlq.old"}
            old = {k: e.value for k, e in describe(c, "old-2").items() if e.config_source == GROUP_CONFIG}
            assert old == {"share.record.lock.duration.ms": "20000"}
            warm = {k: e.value for k, e in describe(c, "warm").items() if e.config_source == GROUP_CONFIG}
            assert warm == {"share.auto.offset.reset": "earliest"}
            # Migrated once: removed by the user, the settings do not come back at the next start.
            assert alter(c, "old-2", ("share.record.lock.duration.ms", DELETE, None)) == (0, None)
    finally:
        assert broker.stop() == 0
    broker = BrokerProcess(tmp_path / "data", OVERRIDES).start()
    try:
        with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
            # Once the group's partition is loaded (a heartbeat is served), a migration would be quick.
            assert heartbeat(c, "warm", "m2", 0, ["legacy-topic"]).error_code == ErrorCode.NONE
            time.sleep(2)
            assert sorted(listed(c)) == ["old-1", "warm"]
    finally:
        assert broker.stop() == 0
