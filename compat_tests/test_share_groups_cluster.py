"""Share groups (KIP-932) in a 3-node ``cormorant cluster up`` cluster, with confluent-kafka's
``ShareConsumer`` and Java 4.3's ``KafkaShareConsumer``: Kafka's split of the work.

- Share-partitions live at each topic partition's leader: consumers of a topic whose partitions
  are led by three different brokers get every record once, each from the partition's leader.
- The leader persists each share-partition through the share coordinator (the leader of the
  ``__share_group_state`` partition of ``group:topicId:partition``); when the partition
  leader is killed (SIGKILL), the new leader reads the state back: no acknowledged record is
  delivered again, the unacknowledged ones are, and nothing is lost. The same when the share
  coordinator is killed (a node that is neither the group coordinator nor the leader).
- Java 4.3 ``KafkaShareConsumer``s over partitions led by three brokers get every record once.
- The group coordinator (the leader of the group's ``__consumer_offsets`` partition, which keeps
  its membership in Kafka's share-group records) is SIGKILLed while share consumers read: the
  next leader of that partition takes the group over with its members, which carry on; nothing
  acknowledged comes back, the unacknowledged records do.
- FindCoordinator key type SHARE answers the leader of the key's ``__share_group_state``
  partition at every node.
- Group configs are cluster metadata: set through one broker, every broker describes them, and
  a partition leader that does not coordinate the group applies them (its delivery count limit,
  its dead-letter topic led by a third broker).

Every test picks a group whose ``__consumer_offsets`` leader (its group coordinator, where
clients find it) is not the leader of its ``__share_group_state`` partition, so that the two
roles are on different nodes.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest

from broker.coordinator import partition_for
from broker.share.state_store import coordinator_key
from broker.tools.client import KafkaClient
from broker.tools.cluster import PID_FILE, read_pid
from compat_tests.harness import settings
from compat_tests.harness.cluster import GROUP_KEY, LocalCluster
from compat_tests.harness.scenario import unique_topic
from compat_tests.test_share_groups import java_records, java_share_consumer, share_queue_java  # noqa: F401
from wire.errors import ErrorCode
from wire.generated.api_003_metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from wire.generated.api_010_find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from wire.generated.api_019_create_topics import (
    CreateTopicsRequest,
    CreateTopicsRequestCreatableReplicaAssignment,
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
from wire.generated.api_077_share_group_describe import (
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
)
from wire.generated.api_090_describe_share_group_offsets import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
    DescribeShareGroupOffsetsRequestTopic,
    DescribeShareGroupOffsetsResponse,
)

pytestmark = pytest.mark.skipif(settings.target() != "cormorant", reason="Cormorant's own cluster mode")
confluent_kafka = pytest.importorskip("confluent_kafka")
if not hasattr(confluent_kafka, "ShareConsumer"):
    pytest.skip("confluent-kafka without ShareConsumer", allow_module_level=True)
from confluent_kafka import AcknowledgeType, ShareConsumer  # noqa: E402

STATE_TOPIC = "__share_group_state"
OFFSETS_TOPIC = "__consumer_offsets"
GROUP_RESOURCE = 32
#: Not __consumer_offsets' 6: with equal counts a group's two partitions have the same index,
#: and ``cluster up`` leads equal indexes of the two topics from different nodes.
STATE_PARTITIONS = 5
LOCK_MS = 20_000
TIMEOUT_S = 60.0
OVERRIDES = {
    "share.coordinator.state.topic.num.partitions": str(STATE_PARTITIONS),
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
    "group.share.record.lock.duration.ms": str(LOCK_MS),
    # A SIGKILLed node is fenced, and its partitions led elsewhere, within 3 s (Kafka: 9 s).
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
}


def _cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("share-cluster") / "nodes", overrides=OVERRIDES)
    c.up()
    try:
        yield c
    finally:
        c.down()


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A cluster for this test alone (it kills a node)."""
    yield from _cluster(tmp_path_factory)


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One cluster for the tests that kill no node (each has topics and groups of its own)."""
    yield from _cluster(tmp_path_factory)


def leaders(cluster: LocalCluster, topic: str, server: int = 0) -> dict[int, int]:
    with KafkaClient.connect(cluster.servers[server], timeout_s=5.0) as c:
        # No auto-creation: asked before the share coordinator creates __share_group_state, it
        # would be made with num.partitions (1) rather than its own partition count.
        r = c.send(MetadataRequest(topics=[MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False),
                   MetadataResponse, 12)
    t = r.topics[0]
    assert t.error_code == 0, t.error_code
    return {p.partition_index: p.leader_id for p in t.partitions}


def topic_id(cluster: LocalCluster, topic: str) -> uuid.UUID:
    with KafkaClient.connect(cluster.servers[0], timeout_s=5.0) as c:
        # No auto-creation: asked before the share coordinator creates __share_group_state, it
        # would be made with num.partitions (1) rather than its own partition count.
        r = c.send(MetadataRequest(topics=[MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False),
                   MetadataResponse, 12)
    return r.topics[0].topic_id


def start_offset(cluster: LocalCluster, node: int, group: str, topic: str) -> int:
    """The share-partition's start offset as DescribeShareGroupOffsets (at the group
    coordinator, from the share coordinator) reports it."""
    request = DescribeShareGroupOffsetsRequest(groups=[DescribeShareGroupOffsetsRequestGroup(
        group_id=group, topics=[DescribeShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[0])])])
    with KafkaClient.connect(cluster.server_of(node), timeout_s=30.0) as c:
        r = c.send(request, DescribeShareGroupOffsetsResponse, 1)
    p = r.groups[0].topics[0].partitions[0]
    assert r.groups[0].error_code == 0 and p.error_code == 0, r
    return p.start_offset


def create_topic(cluster: LocalCluster, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 3)], operation_timeout=20)[topic].result(30)

    def led() -> dict[int, int] | None:
        found = leaders(cluster, topic)
        return found if len(found) == partitions and all(v >= 0 for v in found.values()) else None

    result = cluster.wait_for(led, 30, f"leaders of {topic}")
    assert isinstance(result, dict)
    return result


def state_topic_ready(cluster: LocalCluster) -> dict[int, int]:
    """Creates ``__share_group_state`` (a share group's first heartbeat does) and waits for its leaders."""
    warm = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": "warm-up"})
    try:
        warm.subscribe([unique_topic("warm")])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            warm.poll(0.5)
            try:
                found = leaders(cluster, STATE_TOPIC)
            except AssertionError:
                continue
            if len(found) == STATE_PARTITIONS and all(v >= 0 for v in found.values()):
                return found
    finally:
        warm.close()
    raise AssertionError(f"__share_group_state has no leaders after 60 s\n{cluster.log_tail()}")


def offsets_leaders(cluster: LocalCluster) -> dict[int, int]:
    """The leaders of ``__consumer_offsets`` (created by a first FindCoordinator)."""
    cluster.coordinator("share-warm-up", GROUP_KEY)
    found = cluster.wait_for(lambda: (lambda ls: ls if all(v >= 0 for v in ls.values()) else None)(
        leaders(cluster, OFFSETS_TOPIC)), 30, "leaders of __consumer_offsets")
    assert isinstance(found, dict)
    return found


def split_group(cluster: LocalCluster, state_leaders: dict[int, int], tag: str,
                coordinator_not: set[int] | None = None) -> tuple[str, int, int]:
    """A group id whose group coordinator (``__consumer_offsets`` leader) is not the leader of
    its ``__share_group_state`` partition, nor in ``coordinator_not``: (group id, group
    coordinator, that ``__share_group_state`` leader)."""
    offsets = offsets_leaders(cluster)
    for i in range(200):
        group = f"{tag}-{i}"
        coordinator = offsets[partition_for(group, len(offsets))]
        state_leader = state_leaders[partition_for(group, STATE_PARTITIONS)]
        if coordinator != state_leader and coordinator not in (coordinator_not or set()):
            assert cluster.coordinator(group, GROUP_KEY) == coordinator
            return group, coordinator, state_leader
    raise AssertionError(f"no group with its coordinators apart among {offsets}, {state_leaders}")


def group_with_roles(cluster: LocalCluster, state_leaders: dict[int, int], tag: str, tid: uuid.UUID,
                     leader: int, apart: Callable[[int, int], bool]) -> tuple[str, int, int, int]:
    """A :func:`split_group` group whose coordinator is not the partition's ``leader`` and whose
    share coordinator for partition 0 of topic ``tid`` satisfies ``apart(share coordinator, group
    coordinator)``: (group id, group coordinator, ``__share_group_state`` leader, share coordinator)."""
    for i in range(200):
        group, coordinator, state_leader = split_group(cluster, state_leaders, f"{tag}-{i}", {leader})
        share_coordinator = state_leaders[partition_for(coordinator_key((group, tid, 0)), STATE_PARTITIONS)]
        if apart(share_coordinator, coordinator):
            return group, coordinator, state_leader, share_coordinator
    raise AssertionError(f"no group {tag}-* with its roles apart")


def find_coordinator(cluster: LocalCluster, group: str, via: int) -> int:
    """FindCoordinator (GROUP) asked of node ``via``."""
    with KafkaClient.connect(cluster.server_of(via), timeout_s=5.0) as c:
        r = c.send(FindCoordinatorRequest(key=group, key_type=GROUP_KEY), FindCoordinatorResponse, 3)
    assert r.error_code == ErrorCode.NONE, ErrorCode.for_code(r.error_code)
    return r.node_id


def describe_share_group(cluster: LocalCluster, node: int, group: str) -> Any:
    with KafkaClient.connect(cluster.server_of(node), timeout_s=10.0) as c:
        r = c.send(ShareGroupDescribeRequest(group_ids=[group]), ShareGroupDescribeResponse, 1)
    described = r.groups[0]
    assert described.error_code == ErrorCode.NONE, (described.error_code, described.error_message)
    return described


def set_earliest(cluster: LocalCluster, node: int, group: str) -> None:
    """``share.auto.offset.reset=earliest`` on the group (a group config: any node would do)."""
    request = IncrementalAlterConfigsRequest(resources=[IncrementalAlterConfigsRequestAlterConfigsResource(
        resource_type=GROUP_RESOURCE, resource_name=group, configs=[IncrementalAlterConfigsRequestAlterableConfig(
            name="share.auto.offset.reset", config_operation=0, value="earliest")])])
    with KafkaClient.connect(cluster.server_of(node), timeout_s=10.0) as c:
        r = c.send(request, IncrementalAlterConfigsResponse, 1)
    assert r.responses[0].error_code == 0, r.responses[0]


def produce(cluster: LocalCluster, topic: str, per_partition: dict[int, range]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for partition, values in per_partition.items():
        for i in values:
            p.produce(topic, value=f"{partition}-{i}".encode(), partition=partition)
    assert p.flush(30) == 0


def share_consumer(cluster: LocalCluster, group: str, topic: str, **extra: Any) -> Any:
    c = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, **extra})
    c.subscribe([topic])
    return c


def poll_until(consumers: list[Any], want: int, timeout_s: float = TIMEOUT_S, accept: bool = False
               ) -> list[list[Any]]:
    got: list[list[Any]] = [[] for _ in consumers]
    deadline = time.monotonic() + timeout_s
    while sum(map(len, got)) < want and time.monotonic() < deadline:
        for i, c in enumerate(consumers):
            for m in c.poll(0.2) or []:
                if m.error() is None:
                    got[i].append(m)
                    if accept:
                        c.acknowledge(m, AcknowledgeType.ACCEPT)
            if accept:
                c.commit_sync()
    return got


def kill9(cluster: LocalCluster, node: int) -> None:
    pid = read_pid(cluster.dir / f"node-{node}" / PID_FILE)
    assert pid is not None, f"node {node} is not running"
    os.kill(pid, signal.SIGKILL)


def test_consumers_over_partitions_led_by_three_brokers_get_distinct_records(shared_cluster: LocalCluster) -> None:
    cluster = shared_cluster
    state_leaders = state_topic_ready(cluster)
    topic = unique_topic("share-split")
    led = create_topic(cluster, topic, 3)
    group, _, state_leader = split_group(cluster, state_leaders, "split")
    set_earliest(cluster, state_leader, group)
    produce(cluster, topic, {p: range(20) for p in range(3)})
    consumers = [share_consumer(cluster, group, topic, **{"share.acknowledgement.mode": "explicit"})
                 for _ in range(3)]
    try:
        got = poll_until(consumers, 60, accept=True)
        values = sorted(m.value() for ms in got for m in ms)
        assert len(values) == 60, (len(values), led, cluster.log_tail())
        assert values == sorted(f"{p}-{i}".encode() for p in range(3) for i in range(20))
        assert poll_until(consumers, 1, timeout_s=3) == [[], [], []]
    finally:
        for c in consumers:
            c.close()
    assert len(set(led.values())) >= 2, f"partition leaders {led}: expected them spread over the brokers"


def accept_six_of_ten_then(cluster: LocalCluster, state_leader: int, group: str, topic: str,
                           fault: Callable[[], None]) -> None:
    """Offsets 0-9 produced and acquired by one consumer, 0-5 accepted and committed, then
    ``fault`` while 6-9 are still acquired (``state_leader``: the leader of the group id's
    ``__share_group_state`` partition, through which the group config is set)."""
    set_earliest(cluster, state_leader, group)
    produce(cluster, topic, {0: range(10)})
    c = share_consumer(cluster, group, topic, **{"share.acknowledgement.mode": "explicit"})
    try:
        first = poll_until([c], 10)[0]
        assert sorted(m.offset() for m in first) == list(range(10))
        for m in first[:6]:
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        c.commit_sync()
        fault()
    finally:
        c.close()


def expect_six_to_fourteen(cluster: LocalCluster, group: str, topic: str) -> None:
    """After 10-14 are produced, a new consumer gets 6-14 exactly: nothing accepted comes back."""
    produce(cluster, topic, {0: range(10, 15)})
    c = share_consumer(cluster, group, topic, **{"share.acknowledgement.mode": "explicit"})
    try:
        again = poll_until([c], 9, accept=True)[0]
        offsets = sorted(m.offset() for m in again)
        assert offsets == [6, 7, 8, 9, 10, 11, 12, 13, 14], (offsets, cluster.log_tail())
        assert poll_until([c], 1, timeout_s=3) == [[]]
    finally:
        c.close()


def test_a_killed_partition_leader_loses_no_acknowledgement(cluster: LocalCluster) -> None:
    state_leaders = state_topic_ready(cluster)
    topic = unique_topic("share-failover")
    leader = create_topic(cluster, topic, 1)[0]
    group, _, state_leader = split_group(cluster, state_leaders, "leader-kill", {leader})
    # 6-9 stay acquired, unacknowledged, when the leader dies
    accept_six_of_ten_then(cluster, state_leader, group, topic, lambda: kill9(cluster, leader))

    alive = next(n for n in (1, 2, 3) if n != leader)

    def moved() -> bool:  # asked of a node that is up (node 1 may be the one killed)
        return leaders(cluster, topic, server=alive - 1)[0] not in (leader, -1)

    cluster.wait_for(moved, 30, f"a new leader of {topic}")
    # the new leader read the state back: 0-5 are done, 6-9 are delivered again, 10-14 are new
    expect_six_to_fourteen(cluster, group, topic)


def test_java_consumers_over_partitions_led_by_three_brokers(shared_cluster: LocalCluster,
                                                             share_queue_java: list[str]) -> None:  # noqa: F811
    """Java 4.3 KafkaShareConsumers: every record once between them, fetched from three leaders."""
    cluster = shared_cluster
    state_leaders = state_topic_ready(cluster)
    topic = unique_topic("share-java-split")
    led = create_topic(cluster, topic, 3)
    group, _, state_leader = split_group(cluster, state_leaders, "java-split")
    set_earliest(cluster, state_leader, group)
    produce(cluster, topic, {p: range(10) for p in range(3)})
    procs = [java_share_consumer(share_queue_java, cluster, group, topic, 100, 25) for _ in range(3)]  # type: ignore[arg-type]
    seen = [r for p in procs for r in java_records(p, 25)]
    # offsets 0-9 of each of the three partitions, each delivered once
    assert sorted(r["offset"] for r in seen) == sorted(list(range(10)) * 3), (seen, led)
    assert {r["delivery_count"] for r in seen} == {1}


def test_a_killed_share_coordinator_loses_no_acknowledgement(cluster: LocalCluster) -> None:
    """The share coordinator of the share-partition (leader of its ``__share_group_state``
    partition) is neither the group coordinator nor the partition leader, and is SIGKILLed."""
    state_leaders = state_topic_ready(cluster)
    topic = unique_topic("share-coordinator")
    leader = create_topic(cluster, topic, 1)[0]
    tid = topic_id(cluster, topic)
    group, node, state_leader, share_coordinator = group_with_roles(
        cluster, state_leaders, "sc-kill", tid, leader, lambda share, group_node: share not in (leader, group_node))
    # 6-9 are released as the consumer closes: written to the new share coordinator once elected
    accept_six_of_ten_then(cluster, state_leader, group, topic, lambda: kill9(cluster, share_coordinator))
    expect_six_to_fourteen(cluster, group, topic)
    # the new share coordinator has every acknowledgement: all 15 records are done
    cluster.wait_for(lambda: start_offset(cluster, node, group, topic) == 15, 30, "start offset 15")


def test_a_killed_group_coordinator_hands_its_share_group_over(cluster: LocalCluster) -> None:
    """The group coordinator (``__consumer_offsets`` leader) of a share group is neither the
    partition leader, nor the share coordinator, nor the leader of the group id's
    ``__share_group_state`` partition, and is SIGKILLed while three confluent-kafka share consumers are members."""
    state_leaders = state_topic_ready(cluster)
    topic = unique_topic("share-group-coordinator")
    leader = create_topic(cluster, topic, 1)[0]
    tid = topic_id(cluster, topic)
    group, coordinator, state_leader, _ = group_with_roles(
        cluster, state_leaders, "gc-kill", tid, leader, lambda share, group_node: share != group_node)
    set_earliest(cluster, state_leader, group)
    produce(cluster, topic, {0: range(10)})
    explicit = {"share.acknowledgement.mode": "explicit"}
    holder = share_consumer(cluster, group, topic, **explicit, **{"client.id": "holder"})
    readers: list[Any] = []
    closed = False
    try:
        first = poll_until([holder], 10)[0]
        assert sorted(m.offset() for m in first) == list(range(10)), cluster.log_tail()
        for m in first[:6]:
            holder.acknowledge(m, AcknowledgeType.ACCEPT)
        holder.commit_sync()
        # the readers join (nothing for them yet: 6-9 are the holder's)
        readers = [share_consumer(cluster, group, topic, **explicit, **{"client.id": f"reader-{n}"}) for n in (1, 2)]
        assert poll_until(readers, 1, timeout_s=5) == [[], []]
        everyone = {"holder", "reader-1", "reader-2"}
        cluster.wait_for(lambda: members_at(cluster, coordinator, group) == everyone, 30, "three members")
        epoch_before = describe_share_group(cluster, coordinator, group).group_epoch
        kill9(cluster, coordinator)
        alive = next(n for n in (1, 2, 3) if n != coordinator)

        def moved() -> int | None:
            found = find_coordinator(cluster, group, alive)
            return found if found != coordinator else None

        successor = cluster.wait_for(moved, 30, f"a new coordinator of {group}")
        assert isinstance(successor, int)
        # the new coordinator replayed the group: the same members, before anyone heartbeats again
        cluster.wait_for(lambda: members_at(cluster, successor, group) == everyone, 30,
                         "the members at the new coordinator")
        # the holder leaves without acknowledging 6-9: they are released for the readers
        holder.close()
        closed = True
        produce(cluster, topic, {0: range(10, 15)})
        got = poll_until(readers, 9, accept=True)
        offsets = sorted(m.offset() for ms in got for m in ms)
        assert offsets == list(range(6, 15)), (offsets, cluster.log_tail())
        assert poll_until(readers, 1, timeout_s=3) == [[], []]

        def readers_caught_up() -> Any:
            described = describe_share_group(cluster, successor, group)
            ok = ({m.client_id for m in described.members} == {"reader-1", "reader-2"}
                  and all(m.member_epoch == described.group_epoch for m in described.members))
            return described if ok else None

        after: Any = cluster.wait_for(readers_caught_up, 60, "the readers, and only them, at the new coordinator")
        # the readers carried on as the members they were (no rejoin): only the holder's leave
        # moved the group epoch
        assert after.group_epoch == epoch_before + 1, (epoch_before, after)
    finally:
        for c in readers if closed else [holder, *readers]:
            c.close()
    # every record is done at the share coordinator
    cluster.wait_for(lambda: start_offset(cluster, successor, group, topic) == 15, 30, "start offset 15")


def members_at(cluster: LocalCluster, node: int, group: str) -> set[str]:
    return {m.client_id for m in describe_share_group(cluster, node, group).members}


def test_java_consumers_carry_on_after_the_group_coordinator_is_killed(
        cluster: LocalCluster, share_queue_java: list[str]) -> None:  # noqa: F811
    """Two Java 4.3 KafkaShareConsumers read half the records, their group coordinator is
    SIGKILLed, and they read the other half through its successor: every record once."""
    state_leaders = state_topic_ready(cluster)
    topic = unique_topic("share-java-gc")
    leader = create_topic(cluster, topic, 1)[0]
    tid = topic_id(cluster, topic)
    group, coordinator, state_leader, _ = group_with_roles(
        cluster, state_leaders, "java-gc-kill", tid, leader, lambda share, group_node: share != group_node)
    set_earliest(cluster, state_leader, group)
    produce(cluster, topic, {0: range(10)})
    procs = [java_share_consumer(share_queue_java, cluster, group, topic, 100, 40) for _ in range(2)]  # type: ignore[arg-type]
    try:
        # both members joined and the first half was read (accepted) before the kill
        cluster.wait_for(lambda: len(describe_share_group(cluster, coordinator, group).members) == 2, 30,
                         "two Java members")
        cluster.wait_for(lambda: start_offset(cluster, coordinator, group, topic) == 10, 30, "the first half read")
        kill9(cluster, coordinator)
        alive = next(n for n in (1, 2, 3) if n != coordinator)
        cluster.wait_for(lambda: find_coordinator(cluster, group, alive) != coordinator, 30, "a new coordinator")
        produce(cluster, topic, {0: range(10, 20)})
        seen = [r for p in procs for r in java_records(p, 40)]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert sorted(r["offset"] for r in seen) == list(range(20)), (seen, cluster.log_tail())
    assert {r["delivery_count"] for r in seen} == {1}


def test_find_coordinator_share_key_is_the_state_partition_leader(shared_cluster: LocalCluster) -> None:
    """FindCoordinator v6, key type SHARE (what a partition leader asks to reach the share
    coordinator): every node answers the leader of the key's ``__share_group_state`` partition."""
    cluster = shared_cluster
    state_leaders = state_topic_ready(cluster)
    keys = [coordinator_key((f"fc-{i}", uuid.uuid4(), i % 3)) for i in range(12)]
    expected = {k: state_leaders[partition_for(k, STATE_PARTITIONS)] for k in keys}
    assert len(set(expected.values())) >= 2, expected
    for server in cluster.servers:
        with KafkaClient.connect(server, timeout_s=10.0) as c:
            r = c.send(FindCoordinatorRequest(key_type=2, coordinator_keys=keys), FindCoordinatorResponse, 6)
        answered = {x.key: (x.error_code, x.node_id) for x in r.coordinators}
        assert answered == {k: (0, node) for k, node in expected.items()}, server
        ports = {x.node_id: x.port for x in r.coordinators}
        assert all(cluster.server_of(n).endswith(f":{p}") for n, p in ports.items())


def test_group_configs_hold_at_a_leader_that_does_not_coordinate_the_group(shared_cluster: LocalCluster) -> None:
    """Group configs are cluster metadata (ConfigRecords of type GROUP): set through one broker
    with confluent-kafka's admin client, every broker describes them, and the leader of a
    partition that is not the group's coordinator applies the group's delivery count limit and
    dead-letters the poison record after exactly that many deliveries (its own default is 5)."""
    cluster = shared_cluster
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    state_leaders = state_topic_ready(cluster)
    topic, dlq = unique_topic("share-cfg"), unique_topic("dlq.share-cfg")
    leader = create_topic(cluster, topic, 1)[0]
    group, node, _ = split_group(cluster, state_leaders, "cfg", {leader})
    assert node != leader
    # The dead-letter partition is led by a third broker: the copy crosses the inter-broker listener.
    (dlq_leader,) = {1, 2, 3} - {leader, node}
    with KafkaClient.connect(cluster.bootstrap, timeout_s=30.0) as c:
        created = c.send(CreateTopicsRequest(topics=[CreateTopicsRequestCreatableTopic(
            name=dlq, num_partitions=-1, replication_factor=-1, configs=[CreateTopicsRequestCreatableTopicConfig(
                name="errors.deadletterqueue.group.enable", value="true")], assignments=[
                CreateTopicsRequestCreatableReplicaAssignment(partition_index=0,
                                                              broker_ids=[dlq_leader, leader, node])])]),
            CreateTopicsResponse, 5)
    assert created.topics[0].error_code == 0, created
    cluster.wait_for(lambda: leaders(cluster, dlq).get(0) == dlq_leader, 30, f"leader of {dlq}")
    from broker.cli import main

    # dead-letter topics need share.version 2 (KIP-1191), raised as a user raises it
    assert main(["features", "--bootstrap-server", cluster.bootstrap, "upgrade", "--feature", "share.version=2"]) == 0
    wanted = {"share.delivery.count.limit": "2", "errors.deadletterqueue.topic.name": dlq,
              "errors.deadletterqueue.copy.record.enable": "true", "share.auto.offset.reset": "earliest"}
    admin = AdminClient({"bootstrap.servers": cluster.server_of(leader)})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in wanted.items()])
    admin.incremental_alter_configs([resource])[resource].result(30)

    def described(server: str) -> dict[str, str]:
        one = AdminClient({"bootstrap.servers": server})
        res = ConfigResource(ResourceType.GROUP, group)
        return {k: e.value for k, e in one.describe_configs([res])[res].result(30).items() if k in wanted}

    def shows_them(server: str) -> bool:
        return described(server) == wanted

    for server in cluster.servers:
        cluster.wait_for(partial(shows_them, server), 15, f"group configs at {server}")

    produce(cluster, topic, {0: range(1)})
    c = share_consumer(cluster, group, topic, **{"share.acknowledgement.mode": "explicit"})
    counts: list[int] = []
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            got = [m for m in c.poll(0.5) or [] if m.error() is None]
            for m in got:
                counts.append(m.delivery_count())
                c.acknowledge(m, AcknowledgeType.RELEASE)
            if got:
                c.commit_sync()
                if len(counts) >= 2:  # a third delivery, if any, comes within a few polls
                    deadline = min(deadline, time.monotonic() + 5)
    finally:
        c.close()
    assert counts == [1, 2], (counts, cluster.log_tail())

    from confluent_kafka import Consumer, TopicPartition

    reader = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"read-{dlq}",
                       "enable.auto.commit": False})
    reader.assign([TopicPartition(dlq, 0, 0)])
    copies: list[Any] = []
    try:
        deadline = time.monotonic() + 30
        while not copies and time.monotonic() < deadline:
            m = reader.poll(0.5)
            if m is not None and m.error() is None:
                copies.append(m)
    finally:
        reader.close()
    assert len(copies) == 1, cluster.log_tail()
    headers = dict(copies[0].headers() or [])
    assert copies[0].value() == b"0-0"
    assert headers["__dlq.errors.group"] == group.encode()
    assert headers["__dlq.errors.topic"] == topic.encode()
    assert headers["__dlq.errors.delivery.count"] == b"2"
