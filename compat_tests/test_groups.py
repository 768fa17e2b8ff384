"""Consumer groups with every client that has them: the classic protocol end to end.

Members run as processes (harness/groups.py) so they can leave gracefully or be
SIGKILLed. Each scenario checks what a user relies on: all records read, commits
honoured on resume (across broker restarts too), partitions split between members and
moved when one leaves (at once) or dies (after its session timeout), committed offsets
never going backwards, static members restarting without a rebalance, cooperative
rebalances revoking only what moves, and the admin APIs listing, describing and
deleting groups.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from .harness import settings
from .harness.broker import Broker
from .harness.drivers import ClientError, Driver
from .harness.groups import GroupMember, GroupOptions
from .harness.proxy import FaultProxy
from .harness.scenario import get_driver, unique_topic

#: Clients that consume through consumer groups (kcat with -G).
GROUP_CLIENTS = ("kafka-python", "aiokafka", "confluent-kafka", "kcat", "kafkajs", "java")
#: Clients that commit on their own schedule rather than after every batch.
AUTO_COMMITTING = frozenset({"kcat"})
STATIC_CLIENTS = ("kafka-python", "aiokafka", "confluent-kafka", "kcat", "java")  # kafkajs: none
COOPERATIVE_CLIENTS = ("confluent-kafka", "java")
SESSION_TIMEOUT_MS = 6000
NON_EMPTY_GROUP = 68
#: COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
RETRIABLE_COORDINATOR_ERRORS = frozenset({14, 15, 16})
#: Bounds for the waits below: generous for a loaded 2-core machine, still seconds.
SETTLE_S = 40.0
#: How long a member that has its partitions is left alone to rebalance on its own.
QUIET_S = 3.0
#: Longer than the harness members' poll timeout (200 ms).
SLOW_ANSWER_S = 0.5
METADATA, SYNC_GROUP = 3, 14

_groups = itertools.count()


def unique_group(prefix: str) -> str:
    return f"{unique_topic(prefix)}-g{next(_groups)}"


def produce(broker: Broker, topic: str, per_partition: dict[int, int]) -> None:
    """``per_partition[p]`` records to each partition, through kafka-python."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=False, acks="all",
                             linger_ms=5)
    try:
        for p, n in per_partition.items():
            for i in range(n):
                producer.send(topic, value=f"{topic}-{p}-{i}".encode(), partition=p)
        producer.flush(20)
    finally:
        producer.close(5)


def committed(broker: Broker, group: str, topic: str) -> dict[int, int]:
    """Committed offsets as kafka-python's admin client reads them (OffsetFetch), retrying
    while the coordinator is being found or is loading (after a restart)."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        try:
            return get_driver("kafka-python", broker).committed_offsets(group, topic)
        except ClientError as exc:
            if exc.code not in RETRIABLE_COORDINATOR_ERRORS or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def wait_for(check: Callable[[], bool], timeout_s: float, what: str, members: Sequence[GroupMember]) -> float:
    """Polls ``check``; returns the seconds it took, or fails with every member's story."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"{what}: not within {timeout_s} s\n" + "\n".join(m.describe() for m in members))
        time.sleep(0.05)
    return time.monotonic() - started


def split_evenly(members: Sequence[GroupMember], partitions: int) -> bool:
    parts = [m.assignment() for m in members]
    every = set().union(*parts)
    return (every == set(range(partitions)) and sum(len(p) for p in parts) == partitions
            and all(p for p in parts))


def consumed_all(members: Sequence[GroupMember], expected: set[tuple[int, int]]) -> bool:
    got: set[tuple[int, int]] = set()
    for m in members:
        got.update(m.consumed())
    return expected <= got


def records(per_partition: dict[int, int], start: dict[int, int] | None = None) -> set[tuple[int, int]]:
    start = start or {}
    return {(p, start.get(p, 0) + i) for p, n in per_partition.items() for i in range(n)}


def start(driver: Driver, topic: str, group: str, members: list[GroupMember], **options: object) -> GroupMember:
    settings: dict[str, object] = {"session_timeout_ms": SESSION_TIMEOUT_MS, "client_id": f"compat-{driver.name}",
                                   **options}
    opts = GroupOptions(**settings)  # type: ignore[arg-type]
    member = driver.start_member(topic, group, opts)
    members.append(member)
    return member


# ---------------------------------------------------------------------------------- sharing


@pytest.mark.parametrize("client", GROUP_CLIENTS)
def test_members_split_partitions_and_take_over_from_leavers_and_the_dead(
    broker: Broker, client: str, members: list[GroupMember]
) -> None:
    driver = get_driver(client, broker)
    topic, group, n = unique_topic(f"grp-{client}"), unique_group(client), 6
    broker.create_topic(topic, n)
    first = {p: 5 for p in range(n)}
    produce(broker, topic, first)
    expected = records(first)
    snapshots: list[dict[int, int]] = []

    a = start(driver, topic, group, members)
    b = start(driver, topic, group, members)
    wait_for(lambda: split_evenly([a, b], n), SETTLE_S, "two members split the partitions", members)
    c = start(driver, topic, group, members)
    wait_for(lambda: split_evenly([a, b, c], n), SETTLE_S, "three members split the partitions", members)
    wait_for(lambda: consumed_all([a, b, c], expected), SETTLE_S, "every record read", members)
    if client not in AUTO_COMMITTING:
        # Commits were synchronous after every batch: nothing was delivered twice.
        counts = Counter(r for m in (a, b, c) for r in m.consumed())
        assert not [r for r, k in counts.items() if k > 1], "re-delivered after a graceful handover"
    snapshots.append(committed(broker, group, topic))

    # A graceful leave moves its partitions at once, not after a session timeout.
    c.stop()
    took = wait_for(lambda: split_evenly([a, b], n), SETTLE_S, "partitions of the leaver moved", members)
    assert took < SESSION_TIMEOUT_MS / 1000, f"the leaver's partitions took {took:.1f} s to move"
    second = {p: 3 for p in range(n)}
    produce(broker, topic, second)
    expected |= records(second, first)
    wait_for(lambda: consumed_all([a, b, c], expected), SETTLE_S, "records after the leave read", members)
    snapshots.append(committed(broker, group, topic))

    # A killed member sends nothing: its partitions move when its session expires.
    b.kill()
    wait_for(lambda: a.assignment() == frozenset(range(n)), SETTLE_S,
             "the survivor took the dead member's partitions", members)
    third = {p: 2 for p in range(n)}
    produce(broker, topic, third)
    expected |= records(third, {p: first[p] + second[p] for p in range(n)})
    wait_for(lambda: consumed_all([a, b, c], expected), SETTLE_S, "records after the kill read", members)
    end = {p: first[p] + second[p] + third[p] for p in range(n)}
    if client in AUTO_COMMITTING:
        wait_for(lambda: committed(broker, group, topic) == end, SETTLE_S, "final commits", members)
    snapshots.append(committed(broker, group, topic))
    a.stop()
    snapshots.append(committed(broker, group, topic))

    assert snapshots[-1] == end
    for before, after in itertools.pairwise(snapshots):
        assert all(after.get(p, 0) >= o for p, o in before.items()), f"committed offsets went back: {snapshots}"


@pytest.mark.skipif(settings.target() == "tansu", reason="Tansu cannot advertise the proxy's address")
@pytest.mark.parametrize("client", GROUP_CLIENTS)
def test_a_member_with_slow_metadata_and_sync_answers_keeps_its_partitions(
    broker_factory: Any, client: str, members: list[GroupMember]
) -> None:
    """Metadata and SyncGroup answers held back longer than a member's poll timeout (a loaded
    broker or network) still leave the member owning its partitions and reading from them.

    (kafka-python 3.0.12 drops a join whose poll() timed out during SyncGroup when the leader
    rejoined only because its topic metadata arrived after its first assignment: it never
    takes the partitions it assigned itself, stops heartbeating and is expired for good.
    The harness's members learn their topic after subscribing, so that rejoin never comes.)"""
    proxy = FaultProxy(delay=lambda api_key: SLOW_ANSWER_S if api_key in (METADATA, SYNC_GROUP) else 0.0)
    try:
        broker = broker_factory({"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"})
        proxy.upstream_port = broker.port
        driver = get_driver(client, broker)
        driver.bootstrap = proxy.bootstrap
        topic, group, n = unique_topic(f"slow-{client}"), unique_group(f"slow-{client}"), 3
        broker.create_topic(topic, n)
        a = start(driver, topic, group, members)
        wait_for(lambda: a.assignment() == frozenset(range(n)), SETTLE_S, "the member owns every partition", members)
        time.sleep(QUIET_S)  # a member that rejoins on its own does so within a metadata round trip
        wait_for(lambda: a.assignment() == frozenset(range(n)), SETTLE_S, "the member still owns them", members)
        produce(broker, topic, {p: 1 for p in range(n)})
        wait_for(lambda: consumed_all([a], records({p: 1 for p in range(n)})), SETTLE_S, "records read", members)
    finally:
        proxy.close()


# ---------------------------------------------------------------------------------- static


@pytest.mark.parametrize("client", STATIC_CLIENTS)
def test_static_member_restarts_without_a_rebalance(broker: Broker, client: str, members: list[GroupMember]) -> None:
    driver = get_driver(client, broker)
    topic, group, n = unique_topic(f"static-{client}"), unique_group(f"static-{client}"), 4
    broker.create_topic(topic, n)
    opts: dict[str, object] = {"session_timeout_ms": 15_000, "heartbeat_interval_ms": 1000}
    a = start(driver, topic, group, members, instance_id="instance-a", **opts)
    b = start(driver, topic, group, members, instance_id="instance-b", **opts)
    wait_for(lambda: split_evenly([a, b], n), SETTLE_S, "two static members split the partitions", members)
    owned_by_b = b.assignment()
    a_events = len(a.rebalance_events())

    # The same instance comes back (a crash and a restart, within the session timeout).
    b.kill()
    b2 = start(driver, topic, group, members, instance_id="instance-b", **opts)
    wait_for(lambda: b2.assignment() == owned_by_b, SETTLE_S, "the restarted member got its partitions back",
             members)
    produce(broker, topic, {p: 2 for p in range(n)})
    wait_for(lambda: consumed_all([a, b2], records({p: 2 for p in range(n)})), SETTLE_S, "records read", members)
    assert a.rebalance_events()[a_events:] == [], "the other member saw a rebalance"
    assert a.assignment() | owned_by_b == frozenset(range(n))


# ---------------------------------------------------------------------------------- cooperative


@pytest.mark.parametrize("client", COOPERATIVE_CLIENTS)
def test_cooperative_sticky_revokes_only_what_moves(broker: Broker, client: str, members: list[GroupMember]) -> None:
    driver = get_driver(client, broker)
    topic, group, n = unique_topic(f"coop-{client}"), unique_group(f"coop-{client}"), 6
    broker.create_topic(topic, n)
    a = start(driver, topic, group, members, assignor="cooperative-sticky")
    wait_for(lambda: a.assignment() == frozenset(range(n)), SETTLE_S, "the first member owns everything", members)
    before = len(a.events())
    b = start(driver, topic, group, members, assignor="cooperative-sticky")
    wait_for(lambda: split_evenly([a, b], n), SETTLE_S, "the partitions were split", members)
    revoked = {p for e in a.events()[before:] if e.kind == "revoked" for p in e.partitions}
    assert revoked == set(b.assignment()), f"{client} revoked {sorted(revoked)}, moved {sorted(b.assignment())}"
    assert not revoked & a.assignment(), "partitions that stayed were revoked"
    # Leaving hands over only the leaver's partitions too.
    before = len(a.events())
    b.stop()
    wait_for(lambda: a.assignment() == frozenset(range(n)), SETTLE_S, "the leaver's partitions moved", members)
    assert not [e for e in a.events()[before:] if e.kind == "revoked"], "the survivor lost partitions"


# ---------------------------------------------------------------------------------- admin


def live_member(broker: Broker, topic: str, group: str, members: list[GroupMember]) -> GroupMember:
    """One kafka-python member holding both partitions of ``topic``."""
    member = start(get_driver("kafka-python", broker), topic, group, members)
    wait_for(lambda: member.assignment() == frozenset({0, 1}), SETTLE_S, "the member joined", members)
    return member


@pytest.mark.parametrize("client", GROUP_CLIENTS)
def test_admin_lists_and_describes_groups(broker: Broker, client: str, members: list[GroupMember]) -> None:
    driver = get_driver(client, broker)
    driver.require_admin()
    topic, group = unique_topic(f"adm-{client}"), unique_group(f"adm-{client}")
    broker.create_topic(topic, 2)
    member = live_member(broker, topic, group, members)

    listed = driver.list_groups()
    assert group in listed and listed[group] in (None, "Stable")
    described = driver.describe_group(group)
    assert described.state == "Stable"
    [m] = described.members
    assert (m.client_id, m.host) == ("compat-kafka-python", "/127.0.0.1")
    assert m.partitions == frozenset({(topic, 0), (topic, 1)})

    member.stop()
    empty = driver.describe_group(group)
    assert (empty.state, empty.members) == ("Empty", ())


@pytest.mark.parametrize("client", GROUP_CLIENTS)
def test_admin_deletes_only_empty_groups(broker: Broker, client: str, members: list[GroupMember]) -> None:
    driver = get_driver(client, broker)
    driver.require_admin()
    topic, group = unique_topic(f"del-{client}"), unique_group(f"del-{client}")
    broker.create_topic(topic, 2)
    member = live_member(broker, topic, group, members)
    produce(broker, topic, {0: 1, 1: 1})
    wait_for(lambda: len(member.consumed()) == 2, SETTLE_S, "records read", members)

    with pytest.raises(ClientError) as refused:
        driver.delete_group(group)
    assert refused.value.code == NON_EMPTY_GROUP, refused.value
    member.stop()
    driver.delete_group(group)
    assert group not in driver.list_groups()
    assert committed(broker, group, topic) == {}


# ---------------------------------------------------------------------------------- restarts


def test_committed_offsets_survive_graceful_and_sigkill_restarts(own_broker: Broker) -> None:
    """Each client reads everything with one member and commits; the broker restarts
    (SIGTERM, then SIGKILL right after it is back); every offset is still committed and
    each client resumes, reading only what came after."""
    broker = own_broker
    if not broker.persistent:
        pytest.skip("the target keeps no data across restarts")
    n = 3
    drivers: dict[str, Driver] = {}
    for client in GROUP_CLIENTS:
        try:
            drivers[client] = get_driver(client, broker)
        except pytest.skip.Exception:
            continue
    topics = {client: unique_topic(f"rs-{client}") for client in drivers}
    groups = {client: unique_group(f"rs-{client}") for client in drivers}
    written = {client: {p: 0 for p in range(n)} for client in drivers}

    def round_trip(per_partition: dict[int, int]) -> None:
        for client, driver in drivers.items():
            produce(broker, topics[client], per_partition)
            expected = records(per_partition, written[client])
            total = sum(per_partition.values())
            opts = GroupOptions(session_timeout_ms=SESSION_TIMEOUT_MS, client_id=f"compat-{client}")
            got = driver.group_consume(topics[client], groups[client], total, opts)
            assert set(got) == expected and len(got) == total, (
                f"{client} read {sorted(set(got) - expected)} it should not have, "
                f"missed {sorted(expected - set(got))}")
            for p, k in per_partition.items():
                written[client][p] += k
            assert committed(broker, groups[client], topics[client]) == written[client], client

    for client in drivers:
        broker.create_topic(topics[client], n)
    round_trip({0: 4, 1: 3, 2: 2})
    broker.restart()
    for client in drivers:
        assert committed(broker, groups[client], topics[client]) == written[client], client
    broker.kill9()
    broker.start()
    for client in drivers:
        assert committed(broker, groups[client], topics[client]) == written[client], client
    round_trip({0: 1, 1: 2, 2: 3})
