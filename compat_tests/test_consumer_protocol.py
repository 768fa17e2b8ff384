"""Consumer groups on the consumer rebalance protocol (KIP-848, ``group.protocol=consumer``).

The clients that speak it: confluent-kafka (librdkafka) and the Java 4 client. Members
run as processes (harness/groups.py), as in test_groups.py, against a broker whose
consumer-group session timeout is short (``group.consumer.session.timeout.ms``: the
broker, not the client, owns it in this protocol). Each scenario checks what a user
relies on: partitions split and handed over incrementally (a partition is revoked
before another member gets it), a leaver's partitions move at once and a dead
member's after the session timeout, a static member that leaves and comes back gets
its partitions back without the others noticing, commits are honoured on resume, a
broker restart keeps the group, and the admin APIs list the group with its type.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from .conftest import BrokerFactory
from .harness.broker import Broker
from .harness.groups import GroupMember
from .harness.scenario import get_driver, unique_topic
from .test_groups import (
    SETTLE_S,
    committed,
    consumed_all,
    produce,
    records,
    split_evenly,
    start,
    unique_group,
    wait_for,
)

CLIENTS = ("confluent-kafka", "java4")
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 500
OVERRIDES = {
    "group.consumer.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "group.consumer.min.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "group.consumer.heartbeat.interval.ms": str(HEARTBEAT_INTERVAL_MS),
    "group.consumer.min.heartbeat.interval.ms": str(HEARTBEAT_INTERVAL_MS),
}
CONSUMER = {"group_protocol": "consumer"}


@pytest.fixture(scope="module")
def broker(broker_factory: BrokerFactory) -> Iterator[Broker]:
    """One broker for the module, with a short consumer-group session timeout."""
    b = broker_factory(OVERRIDES)
    try:
        yield b
    finally:
        b.close()


def no_partition_twice(group: list[GroupMember]) -> bool:
    owned = [p for m in group for p in m.assignment()]
    return len(owned) == len(set(owned))


@pytest.mark.parametrize("client", CLIENTS)
def test_members_split_partitions_and_take_over_from_leavers_and_the_dead(
    broker: Broker, client: str, members: list[GroupMember]
) -> None:
    driver = get_driver(client, broker)
    topic, group, n = unique_topic(f"cg-{client}"), unique_group(f"cg-{client}"), 6
    broker.create_topic(topic, n)
    first = {p: 5 for p in range(n)}
    produce(broker, topic, first)
    expected = records(first)
    snapshots: list[dict[int, int]] = []

    a = start(driver, topic, group, members, **CONSUMER)
    wait_for(lambda: a.assignment() == frozenset(range(n)), SETTLE_S, "the first member owns everything", members)
    b = start(driver, topic, group, members, **CONSUMER)
    wait_for(lambda: split_evenly([a, b], n), SETTLE_S, "two members split the partitions", members)
    c = start(driver, topic, group, members, **CONSUMER)
    wait_for(lambda: split_evenly([a, b, c], n), SETTLE_S, "three members split the partitions", members)
    wait_for(lambda: consumed_all([a, b, c], expected), SETTLE_S, "every record read", members)
    # Incremental: a member only ever gave up partitions; nothing was read twice.
    counts = Counter(r for m in (a, b, c) for r in m.consumed())
    assert not [r for r, k in counts.items() if k > 1], "re-delivered after a handover"
    assert no_partition_twice([a, b, c])
    snapshots.append(committed(broker, group, topic))

    c.stop()
    took = wait_for(lambda: split_evenly([a, b], n), SETTLE_S, "partitions of the leaver moved", members)
    assert took < SESSION_TIMEOUT_MS / 1000, f"the leaver's partitions took {took:.1f} s to move"
    second = {p: 3 for p in range(n)}
    produce(broker, topic, second)
    expected |= records(second, first)
    wait_for(lambda: consumed_all([a, b, c], expected), SETTLE_S, "records after the leave read", members)
    snapshots.append(committed(broker, group, topic))

    b.kill()
    took = wait_for(lambda: a.assignment() == frozenset(range(n)), SETTLE_S,
                    "the survivor took the dead member's partitions", members)
    third = {p: 2 for p in range(n)}
    produce(broker, topic, third)
    expected |= records(third, {p: first[p] + second[p] for p in range(n)})
    wait_for(lambda: consumed_all([a, b, c], expected), SETTLE_S, "records after the kill read", members)
    end = {p: first[p] + second[p] + third[p] for p in range(n)}
    snapshots.append(committed(broker, group, topic))
    a.stop()
    snapshots.append(committed(broker, group, topic))
    assert snapshots[-1] == end
    for before, after in itertools.pairwise(snapshots):
        assert all(after.get(p, 0) >= o for p, o in before.items()), f"committed offsets went back: {snapshots}"


@pytest.mark.parametrize("client", CLIENTS)
def test_static_member_returns_with_its_partitions(broker: Broker, client: str, members: list[GroupMember]) -> None:
    driver = get_driver(client, broker)
    topic, group, n = unique_topic(f"cgs-{client}"), unique_group(f"cgs-{client}"), 4
    broker.create_topic(topic, n)
    a = start(driver, topic, group, members, instance_id="instance-a", **CONSUMER)
    b = start(driver, topic, group, members, instance_id="instance-b", **CONSUMER)
    wait_for(lambda: split_evenly([a, b], n), SETTLE_S, "two static members split the partitions", members)
    owned_by_b = b.assignment()
    a_events = len(a.rebalance_events())

    # A static member that closes leaves with epoch -2: its partitions wait for it.
    b.stop()
    b2 = start(driver, topic, group, members, instance_id="instance-b", **CONSUMER)
    wait_for(lambda: b2.assignment() == owned_by_b, SETTLE_S, "the returning member got its partitions back",
             members)
    produce(broker, topic, {p: 2 for p in range(n)})
    wait_for(lambda: consumed_all([a, b2], records({p: 2 for p in range(n)})), SETTLE_S, "records read", members)
    assert a.rebalance_events()[a_events:] == [], "the other member saw a rebalance"
    assert a.assignment() | owned_by_b == frozenset(range(n))


@pytest.mark.parametrize("client", CLIENTS)
def test_a_member_resumes_from_committed_offsets(broker: Broker, client: str, members: list[GroupMember]) -> None:
    driver = get_driver(client, broker)
    topic, group, n = unique_topic(f"cgr-{client}"), unique_group(f"cgr-{client}"), 3
    broker.create_topic(topic, n)
    first = {0: 4, 1: 3, 2: 2}
    produce(broker, topic, first)
    a = start(driver, topic, group, members, **CONSUMER)
    wait_for(lambda: consumed_all([a], records(first)), SETTLE_S, "every record read", members)
    a.stop()
    assert committed(broker, group, topic) == first
    second = {0: 1, 1: 2, 2: 3}
    produce(broker, topic, second)
    b = start(driver, topic, group, members, **CONSUMER)
    wait_for(lambda: consumed_all([b], records(second, first)), SETTLE_S, "the new records read", members)
    assert set(b.consumed()) == records(second, first), "read again what was committed"
    b.stop()
    assert committed(broker, group, topic) == {p: first[p] + second[p] for p in range(n)}


def test_a_regex_subscription_picks_up_a_new_topic(broker: Broker, members: list[GroupMember]) -> None:
    """librdkafka sends a ``^``-pattern as the group's SubscribedTopicRegex; the broker
    resolves it (RE2), so a topic created later joins the subscription. (The Java client
    does this only through its SubscriptionPattern API, which the driver does not use.)"""
    driver = get_driver("confluent-kafka", broker)
    prefix = unique_topic("cgx")
    first, second = f"{prefix}-a", f"{prefix}-b"
    broker.create_topic(first, 2)
    produce(broker, first, {0: 3, 1: 3})
    a = start(driver, f"^{prefix}-.*", unique_group("cgx"), members, **CONSUMER)
    wait_for(lambda: len(a.consumed()) == 6, SETTLE_S, "the first topic read", members)
    broker.create_topic(second, 1)
    produce(broker, second, {0: 4})
    wait_for(lambda: len(a.consumed()) == 10, SETTLE_S, "the new topic read", members)


def test_transactions_commit_a_consumer_protocol_members_offsets(broker: Broker) -> None:
    """Consume-transform-produce with confluent-kafka: TxnOffsetCommit carries the member id
    and member epoch of a consumer-protocol member, which the coordinator checks."""
    from confluent_kafka import Consumer, Producer

    source, sink, group = unique_topic("cgt-src"), unique_topic("cgt-dst"), unique_group("cgt")
    broker.create_topic(source, 2)
    broker.create_topic(sink, 1)
    produce(broker, source, {0: 6, 1: 4})
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "group.protocol": "consumer",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"{group}-tx"})
    copied = 0
    try:
        consumer.subscribe([source])
        producer.init_transactions(20)
        deadline = time.monotonic() + SETTLE_S
        while copied < 10 and time.monotonic() < deadline:
            batch = [m for m in consumer.consume(50, 0.5) if m.error() is None]
            if not batch:
                continue
            producer.begin_transaction()
            for m in batch:
                producer.produce(sink, m.value())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 10)
            producer.commit_transaction(10)
            copied += len(batch)
    finally:
        consumer.close()
    assert copied == 10
    assert committed(broker, group, source) == {0: 6, 1: 4}


@pytest.mark.parametrize(("classic_client", "client"), [("confluent-kafka", "confluent-kafka"), ("java", "java4")])
def test_a_classic_group_upgrades_online(broker: Broker, classic_client: str, client: str,
                                         members: list[GroupMember]) -> None:
    """A rolling upgrade: members of a classic group restart one by one with
    group.protocol=consumer; the group turns into a consumer group when the first does,
    the remaining classic member goes on beside it, and no record is lost."""
    classic, upgraded = get_driver(classic_client, broker), get_driver(client, broker)
    topic, group, n = unique_topic(f"cgu-{client}"), unique_group(f"cgu-{client}"), 4
    broker.create_topic(topic, n)
    first = {p: 5 for p in range(n)}
    produce(broker, topic, first)
    a = start(classic, topic, group, members)
    b = start(classic, topic, group, members)
    wait_for(lambda: split_evenly([a, b], n), SETTLE_S, "two classic members split the partitions", members)
    wait_for(lambda: consumed_all([a, b], records(first)), SETTLE_S, "every record read", members)

    a.stop()
    a2 = start(upgraded, topic, group, members, **CONSUMER)
    wait_for(lambda: split_evenly([a2, b], n), SETTLE_S, "a consumer-protocol and a classic member split", members)
    # Listed (librdkafka names the consumer-protocol states Assigning/Reconciling "Unknown").
    assert group in upgraded.list_groups()
    b.stop()
    b2 = start(upgraded, topic, group, members, **CONSUMER)
    wait_for(lambda: split_evenly([a2, b2], n), SETTLE_S, "two consumer-protocol members split", members)
    second = {p: 3 for p in range(n)}
    produce(broker, topic, second)
    wait_for(lambda: consumed_all([a2, b2], records(second, first)), SETTLE_S, "records after the upgrade read",
             members)
    a2.stop()
    b2.stop()
    assert committed(broker, group, topic) == {p: first[p] + second[p] for p in range(n)}


@pytest.mark.parametrize(("classic_client", "client"), [("confluent-kafka", "confluent-kafka"), ("java", "java4")])
def test_a_group_downgrades_when_its_last_consumer_member_leaves(broker: Broker, classic_client: str, client: str,
                                                               members: list[GroupMember]) -> None:
    """The reverse of the upgrade: a classic member and a consumer-protocol member share a
    (converted) group; the consumer one leaves and the group turns classic again, the
    classic member taking every partition."""
    classic, upgraded = get_driver(classic_client, broker), get_driver(client, broker)
    topic, group, n = unique_topic(f"cgd-{client}"), unique_group(f"cgd-{client}"), 4
    broker.create_topic(topic, n)
    a = start(classic, topic, group, members)
    wait_for(lambda: a.assignment() == frozenset(range(n)), SETTLE_S, "the classic member owns everything", members)
    b = start(upgraded, topic, group, members, **CONSUMER)
    wait_for(lambda: split_evenly([a, b], n), SETTLE_S, "a classic and a consumer-protocol member split", members)
    b.stop()
    wait_for(lambda: a.assignment() == frozenset(range(n)), SETTLE_S,
             "the classic member took everything back", members)
    produce(broker, topic, {p: 2 for p in range(n)})
    wait_for(lambda: consumed_all([a], records({p: 2 for p in range(n)})), SETTLE_S, "records read", members)
    assert classic.list_groups().get(group) in (None, "Stable")
    a.stop()


@pytest.mark.parametrize("client", CLIENTS)
def test_admin_lists_the_group_as_a_consumer_group(broker: Broker, client: str,
                                                   members: list[GroupMember]) -> None:
    driver = get_driver(client, broker)
    driver.require_admin()
    topic, group = unique_topic(f"cga-{client}"), unique_group(f"cga-{client}")
    broker.create_topic(topic, 2)
    a = start(driver, topic, group, members, **CONSUMER)
    wait_for(lambda: a.assignment() == frozenset({0, 1}), SETTLE_S, "the member joined", members)
    listed = driver.list_groups()
    assert group in listed and listed[group] in (None, "Stable")
    described = driver.describe_group(group)
    assert described.state == "Stable"
    [m] = described.members
    assert m.client_id == f"compat-{client}"
    assert m.partitions == frozenset({(topic, 0), (topic, 1)})
    a.stop()


@pytest.mark.parametrize("client", CLIENTS)
def test_a_broker_restart_keeps_the_group(broker_factory: BrokerFactory, client: str,
                                          members: list[GroupMember]) -> None:
    """The coordinator's state is in __consumer_offsets: after a restart the members keep
    their epochs and partitions (nothing revoked), and go on reading."""
    broker = broker_factory(OVERRIDES)
    try:
        if not broker.persistent:
            pytest.skip("the target keeps no data across restarts")
        driver = get_driver(client, broker)
        topic, group, n = unique_topic(f"cgk-{client}"), unique_group(f"cgk-{client}"), 4
        broker.create_topic(topic, n)
        a = start(driver, topic, group, members, **CONSUMER)
        b = start(driver, topic, group, members, **CONSUMER)
        wait_for(lambda: split_evenly([a, b], n), SETTLE_S, "two members split the partitions", members)
        before = [len(m.rebalance_events()) for m in (a, b)]
        owned = [m.assignment() for m in (a, b)]
        broker.restart()
        produce(broker, topic, {p: 3 for p in range(n)})
        wait_for(lambda: consumed_all([a, b], records({p: 3 for p in range(n)})), SETTLE_S,
                 "records after the restart read", members)
        assert [m.assignment() for m in (a, b)] == owned
        assert [len(m.rebalance_events()) for m in (a, b)] == before, "a member lost partitions"
        # A member commits what it read after reporting it: once stopped, it has committed.
        for m in (a, b):
            m.stop()
        assert committed(broker, group, topic) == {p: 3 for p in range(n)}
    finally:
        broker.close()
