"""Kafka 4 cluster features and transactions v2 (KIP-584, KIP-1022, KIP-890 part 2).

- ApiVersions lists the supported and finalized features (metadata.version,
  group.version, transaction.version, share.version) from the metadata log; UpdateFeatures
  changes them, all or nothing, with Kafka's errors.
- A Java 4.3 transactional producer sees transaction.version 2 and uses transactions v2:
  no AddPartitionsToTxn (Produce v12 adds the partitions), EndTxn v5 bumps the producer
  epoch on every commit and abort; read_committed consumers of other clients see exactly the
  committed records. With transaction.version downgraded to 1 it falls back to v1 (no bump),
  as a Java 3.9 producer always does.
- group.version 0 turns the consumer rebalance protocol off (UNSUPPORTED_VERSION), as Kafka.
- A Java 4.3 producer and consumer-protocol group member speak Kafka 4.3's newest versions
  (Produce 13, Fetch 18, ListOffsets 11, Metadata 13, OffsetCommit/OffsetFetch 10: topics
  by id; its classic consumer stays on OffsetCommit/OffsetFetch 9) and read back exactly
  what was written.
- Java's Admin.describeFeatures/updateFeatures (3.9 and 4.3) see and change the levels; the
  ``cormorant features`` command run as a user runs it describes them as kafka-features.sh.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest

from broker.tools.client import KafkaClient
from compat_tests.harness import settings
from compat_tests.harness.broker import Broker
from compat_tests.harness.drivers import Record
from compat_tests.harness.drivers.jsonproc import JsonProcessDriver
from compat_tests.harness.groups import GroupOptions
from compat_tests.harness.proxy import FaultProxy
from compat_tests.harness.scenario import BASE_TIMESTAMP_MS, get_driver, unique_topic
from compat_tests.harness.transactions import TxnSpec, consume_isolated, produce_transactions
from wire.errors import ErrorCode
from wire.generated.api_010_find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from wire.generated.api_018_api_versions import ApiVersionsRequest, ApiVersionsResponse
from wire.generated.api_057_update_features import (
    UpdateFeaturesRequest,
    UpdateFeaturesRequestFeatureUpdateKey,
    UpdateFeaturesResponse,
)
from wire.generated.api_065_describe_transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
)
from wire.generated.api_068_consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)

PARTITIONS = 2
_ids = itertools.count()


def _txn_id(tag: str) -> str:
    return f"k4-{tag}-{int(time.time() * 1000) % 10**8}-{next(_ids)}"


def _records(tag: str, count: int) -> list[Record]:
    return [Record(key=f"{tag}-k{i}".encode(), value=f"{tag}-{i}".encode(), headers=(),
                   timestamp_ms=BASE_TIMESTAMP_MS + i, partition=i % PARTITIONS) for i in range(count)]


def _finalized(broker: Broker) -> tuple[int, dict[str, int], dict[str, tuple[int, int]]]:
    with KafkaClient.connect(broker.bootstrap) as client:
        r = client.send(ApiVersionsRequest(client_software_name="compat", client_software_version="1"),
                        ApiVersionsResponse, 3)
    return (r.finalized_features_epoch, {f.name: f.max_version_level for f in r.finalized_features},
            {f.name: (f.min_version, f.max_version) for f in r.supported_features})


def _update(broker: Broker, feature: str, level: int, upgrade_type: int, version: int = 1) -> UpdateFeaturesResponse:
    with KafkaClient.connect(broker.bootstrap) as client:
        return client.send(UpdateFeaturesRequest(feature_updates=[UpdateFeaturesRequestFeatureUpdateKey(
            feature=feature, max_version_level=level, upgrade_type=upgrade_type)]), UpdateFeaturesResponse, version)


def _epoch_of(broker: Broker, transactional_id: str) -> int:
    with KafkaClient.connect(broker.bootstrap) as client:
        r = client.send(DescribeTransactionsRequest(transactional_ids=[transactional_id]),
                        DescribeTransactionsResponse)
    (state,) = r.transaction_states
    assert state.error_code == ErrorCode.NONE
    return state.producer_epoch


def _run_transactions(broker: Broker, producer: str) -> tuple[str, int]:
    topic = unique_topic(f"tv-{producer}")
    broker.create_topic(topic, PARTITIONS)
    txn = _txn_id(producer)
    specs = [TxnSpec(_records("a", 4), commit=True), TxnSpec(_records("b", 3), commit=False),
             TxnSpec(_records("c", 2), commit=True)]
    outcomes = produce_transactions(get_driver(producer, broker), topic, txn, specs)
    assert [o.committed for o in outcomes] == [True, False, True]
    committed = {(d.partition, d.offset): r.value for o, s in zip(outcomes, specs, strict=True) if o.committed
                 for r, d in zip(s.records, o.deliveries, strict=True)}
    consumed = consume_isolated(get_driver("confluent-kafka", broker), topic, range(PARTITIONS),
                                count=len(committed), isolation="read_committed")
    assert {(c.partition, c.offset): c.value for c in consumed} == committed
    return txn, _epoch_of(broker, txn)


def test_api_versions_lists_the_features_of_a_new_cluster(broker: Broker) -> None:
    epoch, finalized, supported = _finalized(broker)
    assert epoch >= 0
    # A new Kafka 4.3 cluster: metadata.version 4.3-IV0 (30), each other feature at its 4.3 default.
    assert finalized == {"metadata.version": 30, "group.version": 1, "transaction.version": 2, "share.version": 1}
    assert supported["metadata.version"] == (7, 30)
    assert supported["transaction.version"] == (0, 2)
    assert supported["kraft.version"] == (0, 0)


def test_java4_producer_uses_transactions_v2_and_falls_back_when_downgraded(broker: Broker) -> None:
    # Transactions v2: the epoch is bumped by each of the three EndTxn (two commits, one abort).
    _, epoch = _run_transactions(broker, "java4")
    assert epoch == 3
    # A 3.9 client never bumps it.
    _, epoch = _run_transactions(broker, "java")
    assert epoch == 0
    # An upgrade request that lowers the level is refused, a downgrade accepted.
    refused = _update(broker, "transaction.version", 1, upgrade_type=1)
    assert refused.error_code == ErrorCode.INVALID_UPDATE_VERSION
    assert [r.error_code for r in refused.results] == [ErrorCode.INVALID_UPDATE_VERSION]
    assert _update(broker, "transaction.version", 1, upgrade_type=2, version=2).error_code == ErrorCode.NONE
    before, finalized, _ = _finalized(broker)
    assert finalized["transaction.version"] == 1
    # The Java 4.3 client notices the finalized level and speaks transactions v1.
    _, epoch = _run_transactions(broker, "java4")
    assert epoch == 0
    assert _update(broker, "transaction.version", 2, upgrade_type=1).error_code == ErrorCode.NONE
    after, finalized, _ = _finalized(broker)
    assert finalized["transaction.version"] == 2 and after > before


def test_update_features_errors(broker: Broker) -> None:
    unknown = _update(broker, "no.such.feature", 1, upgrade_type=1)
    assert unknown.error_code == ErrorCode.INVALID_UPDATE_VERSION
    too_high = _update(broker, "transaction.version", 3, upgrade_type=1)
    assert too_high.error_code == ErrorCode.INVALID_UPDATE_VERSION
    mv_down = _update(broker, "metadata.version", 21, upgrade_type=3)
    assert mv_down.error_code == ErrorCode.INVALID_UPDATE_VERSION
    assert _finalized(broker)[1]["metadata.version"] == 30
    # Kafka 4.4's first level is not offered.
    assert _update(broker, "metadata.version", 31, upgrade_type=1).error_code == ErrorCode.INVALID_UPDATE_VERSION


def test_group_version_zero_turns_the_consumer_protocol_off(broker: Broker) -> None:
    heartbeat = ConsumerGroupHeartbeatRequest(group_id=f"gv-{next(_ids)}", member_id=str(uuid.uuid4()), member_epoch=0, rebalance_timeout_ms=5000,
                                              subscribed_topic_names=["t"], topic_partitions=[])
    assert _update(broker, "group.version", 0, upgrade_type=2).error_code == ErrorCode.NONE
    try:
        with KafkaClient.connect(broker.bootstrap) as client:
            r = client.send(heartbeat, ConsumerGroupHeartbeatResponse)
        assert r.error_code == ErrorCode.UNSUPPORTED_VERSION
        assert "group.version" not in _finalized(broker)[1]
    finally:
        assert _update(broker, "group.version", 1, upgrade_type=1).error_code == ErrorCode.NONE
    # Served again (the group coordinator may still be loading its partition: bounded retry).
    deadline = time.monotonic() + 15
    with KafkaClient.connect(broker.bootstrap) as client:
        while True:
            client.send(FindCoordinatorRequest(key_type=0, coordinator_keys=[heartbeat.group_id]),
                        FindCoordinatorResponse)  # as a client does first: creates __consumer_offsets
            r = client.send(heartbeat, ConsumerGroupHeartbeatResponse)
            if r.error_code == ErrorCode.NONE or time.monotonic() > deadline:
                break
            assert r.error_code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
            time.sleep(0.2)
    assert r.error_code == ErrorCode.NONE


@pytest.mark.parametrize("client", ["java", "java4"])
def test_java_admin_describes_and_updates_features(broker: Broker, client: str) -> None:
    driver = get_driver(client, broker)
    assert isinstance(driver, JsonProcessDriver)
    epoch, finalized, supported = _finalized(broker)
    described = driver.call("describe_features")
    assert described["finalized"] == finalized
    assert described["finalized"]["metadata.version"] == 30 and described["supported"]["metadata.version"] == [7, 30]
    assert {k: tuple(v) for k, v in described["supported"].items()} == supported
    assert described["epoch"] >= epoch
    # A dry run changes nothing; a refused downgrade says why; a safe one is seen by Admin.
    assert driver.call("update_feature", feature="share.version", level=0, upgrade_type="safe_downgrade",
                       validate_only=True)["error"] is None
    assert _finalized(broker)[1]["share.version"] == 1
    refused = driver.call("update_feature", feature="metadata.version", level=21, upgrade_type="unsafe_downgrade")
    assert refused["error"] == "InvalidUpdateVersionException"
    try:
        assert driver.call("update_feature", feature="share.version", level=0,
                           upgrade_type="safe_downgrade")["error"] is None
        assert "share.version" not in driver.call("describe_features")["finalized"]
    finally:
        assert _update(broker, "share.version", 1, upgrade_type=1).error_code == ErrorCode.NONE
    assert driver.call("describe_features")["finalized"]["share.version"] == 1


def test_features_command_describes_and_changes_levels(broker: Broker) -> None:
    def features(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "broker", "features", "--bootstrap-server", broker.bootstrap,
                               *args], capture_output=True, text=True, timeout=60, check=False)

    described = features("describe")
    assert described.returncode == 0, described.stderr
    epoch = _finalized(broker)[0]
    assert (f"Feature: metadata.version\tSupportedMinVersion: 3.3-IV3\tSupportedMaxVersion: 4.3-IV0\t"
            f"FinalizedVersionLevel: 4.3-IV0\tEpoch: {epoch}") in described.stdout.splitlines()
    downgraded = features("downgrade", "--feature", "group.version=0")
    assert (downgraded.returncode, downgraded.stdout) == (0, "group.version was disabled.\n")
    try:
        assert "group.version" not in _finalized(broker)[1]
    finally:
        upgraded = features("upgrade", "--feature", "group.version=1")
        assert (upgraded.returncode, upgraded.stdout) == (0, "group.version was upgraded to 1.\n")
    assert _finalized(broker)[1]["group.version"] == 1


def test_java4_clients_speak_kafka_4_3_versions(broker_factory: Any) -> None:
    proxy = FaultProxy()  # records the version of every request on its way
    try:
        broker = broker_factory({"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"})
        proxy.upstream_port = broker.port
        driver = get_driver("java4", broker)
        driver.bootstrap = proxy.bootstrap
        topic = unique_topic("v43-java4")
        broker.create_topic(topic, PARTITIONS)
        records = _records("v43", 6)
        deliveries = driver.produce(topic, records, acks=-1)
        # The consumer rebalance protocol's consumer (KIP-848) commits and fetches offsets by topic id.
        consumed = driver.group_consume(topic, f"v43-group-{next(_ids)}", count=len(records),
                                        options=GroupOptions(group_protocol="consumer"))
        assert sorted(consumed) == sorted((d.partition, d.offset) for d in deliveries)
        used = proxy.requests
        for api_key, version in ((0, 13), (1, 18), (2, 11), (3, 13), (8, 10), (9, 10), (68, 1)):
            assert (api_key, version) in used, (api_key, version, sorted(used))
    finally:
        proxy.close()


@pytest.mark.skipif(settings.target() != "cormorant", reason="writes Cormorant's metadata journal")
@pytest.mark.parametrize("client", ["java4"])
def test_java_admin_upgrades_a_4_0_cluster_to_4_3_online(broker_factory: Any, client: str) -> None:
    """A data dir finalized at 4.0-IV3 (25), as this software wrote them before 4.1-4.3's levels:
    it starts at 25, and Java 4.3's Admin.updateFeatures raises metadata.version to 4.3-IV0
    (30) without a restart, as on a Kafka 4.3 cluster upgraded from 4.0."""
    import trio

    from broker.cluster.cluster_mode import METADATA_DIR
    from controller.quorum import LocalQuorum
    from wire.generated.metadata.rec_012_feature_level_record import FeatureLevelRecord

    broker = broker_factory()
    broker.stop()

    async def finalize_4_0() -> None:
        quorum = LocalQuorum(1, broker.data_dir / METADATA_DIR)
        try:
            await quorum.append([FeatureLevelRecord(name="metadata.version", feature_level=25)])
        finally:
            quorum.close()

    trio.run(finalize_4_0)
    broker.start()
    driver = get_driver(client, broker)
    assert isinstance(driver, JsonProcessDriver)
    described = driver.call("describe_features")
    assert described["finalized"]["metadata.version"] == 25 and described["supported"]["metadata.version"] == [7, 30]
    # Kafka 4.4's first level is refused; 4.3-IV0 is taken.
    refused = driver.call("update_feature", feature="metadata.version", level=31, upgrade_type="upgrade")
    assert refused["error"] == "InvalidUpdateVersionException"
    assert driver.call("update_feature", feature="metadata.version", level=30, upgrade_type="upgrade")["error"] is None
    assert driver.call("describe_features")["finalized"]["metadata.version"] == 30
