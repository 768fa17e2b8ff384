"""Real clients against a single node and a 3-node ``cormorant cluster up`` cluster.

Both targets keep Kafka's ``group.initial.rebalance.delay.ms`` (3000 ms) and set ``node.id``
(as every node ``cluster up`` starts does).

- Consume-transform-produce loops (Java 3.9 and 4.3 ``sendOffsetsToTransaction``,
  confluent-kafka ``send_offsets_to_transaction``) whose group coordinator and transaction
  coordinator are different brokers: the group coordinator verifies the transaction with the
  remote transaction coordinator, every record is copied once and the group's offsets are
  committed with the transactions.
- Admin clients asking for authorized operations (describeCluster, describeTopics through
  Metadata or DescribeTopicPartitions, describeConsumerGroups) get every operation the
  resource type supports, as from Kafka without an authorizer.
- DescribeConfigs of every broker (all settings with synonyms, and ``broker.id``/``node.id``
  by name) answers on every node.
- Members started together (Java and confluent-kafka, eager ``range`` and
  ``cooperative-sticky``) join within the initial rebalance delay and share one first
  generation: each is assigned once and nothing is revoked.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

import pytest

from broker.tools.client import KafkaClient
from compat_tests.harness import settings
from compat_tests.harness.cluster import LocalCluster
from compat_tests.harness.drivers import Record, make_driver
from compat_tests.harness.drivers.base import DriverUnavailable
from compat_tests.harness.groups import GroupMember, GroupOptions
from compat_tests.harness.transactions import consume_isolated, read_committed_to_the_end
from wire.errors import ErrorCode
from wire.generated.api_032_describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsRequestDescribeConfigsResource,
    DescribeConfigsResponse,
)

pytestmark = pytest.mark.skipif(settings.target() != "cormorant", reason="Cormorant's own cluster mode")

PARTITIONS = 2
INPUTS = 30
CTP_TIMEOUT_S = 90
_serial = itertools.count()


class Target:
    """What a test needs of a single node or a cluster."""

    def __init__(self, name: str, bootstrap: str, node_ids: list[int], servers: list[str],
                 cluster: LocalCluster | None) -> None:
        self.name = name
        self.bootstrap = bootstrap
        self.node_ids = node_ids
        self.servers = servers
        self.cluster = cluster

    def driver(self, client: str) -> Any:
        try:
            return make_driver(client, self.bootstrap)
        except DriverUnavailable as exc:
            pytest.skip(f"{client} unavailable: {exc}")

    def create_topic(self, name: str, partitions: int) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics([NewTopic(name, partitions, -1)], operation_timeout=20, request_timeout=30)
        futures[name].result(30)
        # Every broker must know the topic's leaders before clients use it.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            described = admin.list_topics(name, timeout=10).topics.get(name)
            if described is not None and described.error is None and len(described.partitions) == partitions \
                    and all(p.leader >= 0 for p in described.partitions.values()):
                return
            time.sleep(0.2)
        raise AssertionError(f"topic {name} has no leaders after 20 s")

    def ids(self, tag: str) -> tuple[str, str]:
        """A group id and a transactional id; on a cluster, coordinated by different nodes."""
        unique = f"{tag}-{int(time.time() * 1000) % 10**8}-{next(_serial)}"
        if self.cluster is None:
            return f"{unique}-group", f"{unique}-txn"
        group_id, txn_id, group_node, txn_node = self.cluster.separated_coordinators(unique)
        assert group_node != txn_node
        return group_id, txn_id


@pytest.fixture(scope="module", params=["single", "cluster"])
def target(request: pytest.FixtureRequest, broker_factory: Any,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    if request.param == "single":
        broker = broker_factory({"node.id": "1", "group.initial.rebalance.delay.ms": "3000"})
        try:
            yield Target("single", broker.bootstrap, [1], [broker.bootstrap], None)
        finally:
            broker.close()
        return
    cluster = LocalCluster(tmp_path_factory.mktemp("cluster") / "nodes")
    cluster.up()
    try:
        yield Target("cluster", cluster.bootstrap, [1, 2, 3], cluster.servers, cluster)
    finally:
        cluster.down()


# -- consume-transform-produce across coordinators ------------------------------------------------


def _inputs() -> list[Record]:
    return [Record(key=b"k%d" % i, value=b"in-%d" % i, partition=i % PARTITIONS) for i in range(INPUTS)]


def _confluent_ctp(bootstrap: str, source: str, target: str, group: str, txn_id: str, prefix: bytes,
                   count: int, abort_every: int) -> int:
    from confluent_kafka import Consumer, Producer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "session.timeout.ms": 6000})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 2})
    producer.init_transactions(20)
    consumer.subscribe([source])
    copied = batches = 0
    deadline = time.monotonic() + CTP_TIMEOUT_S
    try:
        while copied < count and time.monotonic() < deadline:
            messages = [m for m in consumer.consume(num_messages=7, timeout=0.5) if m.error() is None]
            if not messages:
                continue
            producer.begin_transaction()
            for m in messages:
                producer.produce(target, key=m.key(), value=prefix + (m.value() or b""), partition=m.partition() or 0)
            positions = consumer.position([TopicPartition(source, p) for p in range(PARTITIONS)])
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 20)
            if batches % abort_every == abort_every - 1:
                producer.abort_transaction(20)
                for tp in consumer.committed([TopicPartition(source, p) for p in range(PARTITIONS)], 20):
                    consumer.seek(TopicPartition(source, tp.partition, max(tp.offset, 0)))
            else:
                producer.commit_transaction(20)
                copied += len(messages)
            batches += 1
    finally:
        consumer.close()
    return copied


def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    check = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        committed = check.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 20)
    finally:
        check.close()
    return {tp.partition: tp.offset for tp in committed}


@pytest.mark.parametrize("client", ["java", "java4", "confluent-kafka"])
def test_consume_transform_produce_with_the_coordinators_on_different_brokers(target: Target, client: str) -> None:
    driver = target.driver(client)
    source, output = f"ctp-in-{next(_serial)}-{client}", f"ctp-out-{next(_serial)}-{client}"
    target.create_topic(source, PARTITIONS)
    target.create_topic(output, PARTITIONS)
    inputs = _inputs()
    target.driver("confluent-kafka").produce(source, inputs)
    group, txn_id = target.ids(f"ctp-{client}")
    prefix = b"out:"
    if client == "confluent-kafka":
        copied = _confluent_ctp(target.bootstrap, source, output, group, txn_id, prefix, INPUTS, 3)
    else:
        result = driver.call("consume_transform_produce", timeout_s=CTP_TIMEOUT_S + 30, source=source,
                             target=output, group=group, transactional_id=txn_id, prefix=prefix.decode(),
                             count=INPUTS, abort_every=3, timeout_ms=CTP_TIMEOUT_S * 1000)
        copied = result["copied"]
        assert result["aborted"] >= 1, result
    assert copied == INPUTS
    expected = sorted(prefix + (r.value or b"") for r in inputs)
    out = consume_isolated(target.driver("java"), output, range(PARTITIONS), count=INPUTS,
                           isolation="read_committed")
    assert sorted(c.value or b"" for c in out) == expected
    # Every transaction ended before this read, so a duplicate would already be in the log.
    everything = read_committed_to_the_end(target.bootstrap, output, range(PARTITIONS))
    assert sorted(c.value or b"" for c in everything) == expected
    assert _committed(target.bootstrap, group, source) == {
        p: sum(1 for r in inputs if r.partition == p) for p in range(PARTITIONS)}


# -- DescribeConfigs of brokers -------------------------------------------------------------------------


def test_every_node_describes_its_broker_configs(target: Target) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": target.bootstrap})
    for node_id, server in zip(target.node_ids, target.servers, strict=True):
        resource = ConfigResource(ResourceType.BROKER, str(node_id))
        configs = admin.describe_configs([resource], request_timeout=20)[resource].result(30)
        for key in ("node.id", "broker.id"):
            entry = configs[key]
            assert entry.value == str(node_id), (node_id, key, entry.value)
            assert entry.source == ConfigSource.STATIC_BROKER_CONFIG.value, (key, entry.source)
            assert key in entry.synonyms, (key, entry.synonyms)
        # Named keys with synonyms, straight to the node (a broker answers only for itself).
        request = DescribeConfigsRequest(
            resources=[DescribeConfigsRequestDescribeConfigsResource(
                resource_type=ResourceType.BROKER.value, resource_name=str(node_id),
                configuration_keys=["broker.id", "node.id"])],
            include_synonyms=True)
        with KafkaClient.connect(server, timeout_s=10) as client:
            result = client.send(request, DescribeConfigsResponse).results[0]
        assert result.error_code == ErrorCode.NONE, result.error_message
        assert {c.name: c.value for c in result.configs} == {"broker.id": str(node_id), "node.id": str(node_id)}
        for entry in result.configs:
            assert (entry.synonyms[0].name, entry.synonyms[0].value) == (entry.name, str(node_id)), entry.synonyms


# -- authorized operations ------------------------------------------------------------------------------

#: Kafka 3.9's AclEntry.supportedOperations: what a broker without an authorizer reports.
TOPIC_OPERATIONS = sorted(["READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS",
                           "ALTER_CONFIGS"])
CLUSTER_OPERATIONS = sorted(["CREATE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS",
                             "IDEMPOTENT_WRITE"])
GROUP_OPERATIONS = sorted(["READ", "DELETE", "DESCRIBE"])


def _group_with_offsets(bootstrap: str, group: str, topic: str) -> None:
    """An Empty group that exists: committed offsets, no members."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        consumer.close()


@pytest.mark.parametrize("client", ["java", "java4", "confluent-kafka"])
def test_admin_clients_get_every_supported_operation(target: Target, client: str) -> None:
    driver = target.driver(client)
    topic, group = f"ops-{next(_serial)}-{client}", f"ops-group-{next(_serial)}-{client}"
    target.create_topic(topic, PARTITIONS)
    _group_with_offsets(target.bootstrap, group, topic)
    if client == "confluent-kafka":
        from confluent_kafka import TopicCollection
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": target.bootstrap})
        cluster = admin.describe_cluster(include_authorized_operations=True, request_timeout=20).result(30)
        described = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True,
                                          request_timeout=20)[topic].result(30)
        groups = admin.describe_consumer_groups([group], include_authorized_operations=True,
                                                request_timeout=20)[group].result(30)
        got = {"cluster": sorted(op.name for op in cluster.authorized_operations or []),
               "topics": {topic: sorted(op.name for op in described.authorized_operations or [])},
               "groups": {group: sorted(op.name for op in groups.authorized_operations or [])}}
    else:
        got = driver.call("authorized_operations", topics=[topic], groups=[group])
    assert got["cluster"] == CLUSTER_OPERATIONS
    assert got["topics"] == {topic: TOPIC_OPERATIONS}
    assert got["groups"] == {group: GROUP_OPERATIONS}


# -- the initial rebalance delay ------------------------------------------------------------------------

GROUP_PARTITIONS = 6
GROUP_MEMBERS = 3
SETTLE_S = 60.0


def _split_once(members: list[GroupMember]) -> bool:
    parts = [m.assignment() for m in members]
    return (set().union(*parts) == set(range(GROUP_PARTITIONS)) and sum(len(p) for p in parts) == GROUP_PARTITIONS
            and all(parts))


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
@pytest.mark.parametrize("client", ["java", "confluent-kafka"])
def test_members_started_together_share_one_first_generation(target: Target, client: str, assignor: str) -> None:
    """Members that join within group.initial.rebalance.delay.ms (3000 ms) are all in the first
    generation: each is assigned once, its share of the partitions, and nothing is revoked."""
    driver = target.driver(client)
    topic, group = f"delay-{next(_serial)}-{client}", f"delay-group-{next(_serial)}-{client}-{assignor}"
    target.create_topic(topic, GROUP_PARTITIONS)
    options = GroupOptions(session_timeout_ms=10_000, assignor=assignor, client_id=f"compat-{client}")
    members: list[GroupMember] = []
    try:
        for _ in range(GROUP_MEMBERS):
            members.append(driver.start_member(topic, group, options))
        deadline = time.monotonic() + SETTLE_S
        while not _split_once(members):
            assert time.monotonic() < deadline, "\n".join(m.describe() for m in members)
            time.sleep(0.1)
        time.sleep(2.0)  # a second generation would show up as more rebalance events
        for m in members:
            events = [(e.kind, e.partitions) for e in m.rebalance_events()]
            assert [kind for kind, _ in events] == ["assigned"], m.describe()
            assert len(events[0][1]) == GROUP_PARTITIONS // GROUP_MEMBERS, m.describe()
    finally:
        for m in members:
            m.kill()
