"""Share groups (KIP-932, Kafka's queues) with confluent-kafka's ``ShareConsumer`` and Java 4's
``KafkaShareConsumer``.

Several consumers read one partition and each record goes to one of them; a
consumer acknowledges each record (ACCEPT, RELEASE, REJECT); an unacknowledged
record comes back when its acquisition lock expires, with a higher delivery
count; the delivery limit archives a poison record and, when the group names a
dead-letter topic (``errors.deadletterqueue.topic.name``, KIP-1191: with the cluster at
``share.version`` 2, the topic opted in and named with the broker's prefix ``dlq.``), writes
it there with Kafka 4.4's ``__dlq.errors.*`` headers, and its key and value only with
``errors.deadletterqueue.copy.record.enable``; a
broker restart loses no acknowledgement. Java 4.3's consumer asks for
``share.acquire.mode=record_limit`` (KIP-1206) and renews a slow record's lock with
``AcknowledgeType.RENEW`` (KIP-1222). Group configs are set as a user sets them:
IncrementalAlterConfigs on the GROUP resource (kafka-python's admin client).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import BrokerFactory
from .harness.broker import Broker
from .harness.scenario import unique_topic
from .test_groups import produce, unique_group

confluent_kafka = pytest.importorskip("confluent_kafka")
if not hasattr(confluent_kafka, "ShareConsumer"):
    pytest.skip("confluent-kafka without ShareConsumer", allow_module_level=True)
from confluent_kafka import AcknowledgeType, ShareConsumer  # noqa: E402

LOCK_MS = 2000
DELIVERY_LIMIT = 3
OVERRIDES = {
    "group.share.record.lock.duration.ms": str(LOCK_MS),
    "group.share.delivery.count.limit": str(DELIVERY_LIMIT),
    "share.coordinator.state.topic.replication.factor": "1",
    "offsets.topic.replication.factor": "1",
}
TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def broker(broker_factory: BrokerFactory) -> Iterator[Broker]:
    b = broker_factory(OVERRIDES)
    try:
        yield b
    finally:
        b.close()


def set_group_configs(broker: Broker, group: str, configs: dict[str, str]) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="share-test")
    try:
        result = admin.alter_configs([ConfigResource(ConfigResourceType.GROUP, group, configs)], incremental=True)
        assert result == {"group": {group: "OK"}}, result
    finally:
        admin.close()


def share_consumer(broker: Broker, group: str, topic: str, **extra: Any) -> Any:
    c = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group, **extra})
    c.subscribe([topic])
    return c


def poll_until(consumers: list[Any], want: int, timeout_s: float = TIMEOUT_S,
               on_message: Any = None) -> list[list[Any]]:
    """Polls every consumer in turn until ``want`` messages in all (or the timeout)."""
    got: list[list[Any]] = [[] for _ in consumers]
    deadline = time.monotonic() + timeout_s
    while sum(map(len, got)) < want and time.monotonic() < deadline:
        for i, c in enumerate(consumers):
            for m in c.poll(0.2) or []:
                if m.error() is None:
                    got[i].append(m)
                    if on_message is not None:
                        on_message(c, m)
    return got


def enable_dead_letter_queues(broker: Broker) -> None:
    """share.version 2 (Kafka 4.4's level for KIP-1191), raised as a user raises it."""
    from broker.cli import main

    assert main(["features", "--bootstrap-server", broker.bootstrap, "upgrade", "--feature", "share.version=2"]) == 0


def new_queue(broker: Broker, **configs: str) -> tuple[str, str]:
    topic, group = unique_topic("share"), unique_group("share")
    broker.create_topic(topic, 1)
    set_group_configs(broker, group, {"share.auto.offset.reset": "earliest", **configs})
    return topic, group


def test_three_consumers_on_one_partition_get_distinct_records(broker: Broker) -> None:
    topic, group = new_queue(broker)
    consumers = [share_consumer(broker, group, topic) for _ in range(3)]
    try:
        got: list[list[Any]] = [[] for _ in consumers]
        for _ in range(30):  # a little at a time, so every consumer finds some waiting
            produce(broker, topic, {0: 5})
            for i, part in enumerate(poll_until(consumers, 5, timeout_s=2)):
                got[i].extend(part)
        for i, part in enumerate(poll_until(consumers, 150 - sum(map(len, got)))):
            got[i].extend(part)
        offsets = [m.offset() for part in got for m in part]
        assert sorted(offsets) == list(range(150)), "every record exactly once"
        assert all(part for part in got), [len(p) for p in got]
    finally:
        for c in consumers:
            c.close()


def test_release_redelivers_and_reject_never_does(broker: Broker) -> None:
    topic, group = new_queue(broker)
    produce(broker, topic, {0: 4})
    c = share_consumer(broker, group, topic, **{"share.acknowledgement.mode": "explicit"})
    try:
        first = poll_until([c], 4)[0]
        assert [(m.offset(), m.delivery_count()) for m in first] == [(o, 1) for o in range(4)]
        c.acknowledge(first[0], AcknowledgeType.ACCEPT)
        c.acknowledge(first[1], AcknowledgeType.RELEASE)
        c.acknowledge(first[2], AcknowledgeType.REJECT)
        c.acknowledge(first[3], AcknowledgeType.ACCEPT)
        c.commit_sync()
        again = poll_until([c], 1)[0]
        assert [(m.offset(), m.delivery_count()) for m in again] == [(1, 2)]
        c.acknowledge(again[0], AcknowledgeType.ACCEPT)
        c.commit_sync()
        assert poll_until([c], 1, timeout_s=LOCK_MS / 1000 * 2)[0] == []  # the rejected one stays away
    finally:
        c.close()


def test_expired_lock_redelivers_and_the_limit_dead_letters_a_poison_record(broker: Broker) -> None:
    dlq = unique_topic("dlq.poison")  # the broker's errors.deadletterqueue.topic.name.prefix: dlq.
    broker.create_topic(dlq, 1, configs={"errors.deadletterqueue.group.enable": "true"})
    enable_dead_letter_queues(broker)
    topic, group = new_queue(broker, **{"errors.deadletterqueue.topic.name": dlq,
                                        "errors.deadletterqueue.copy.record.enable": "true"})
    produce(broker, topic, {0: 1})
    c = share_consumer(broker, group, topic)
    counts: list[int] = []
    try:
        # A consumer too slow for its lock: each time the lock expires before the next poll
        # (whose implicit ACCEPT comes too late), the record comes back, until the limit.
        deadline = time.monotonic() + TIMEOUT_S
        while len(counts) < DELIVERY_LIMIT and time.monotonic() < deadline:
            got = [m for m in c.poll(0.5) or [] if m.error() is None]
            counts.extend(m.delivery_count() for m in got)
            if got:
                time.sleep(LOCK_MS / 1000 * 1.5)
        assert counts == list(range(1, DELIVERY_LIMIT + 1))
        assert poll_until([c], 1, timeout_s=LOCK_MS / 1000 * 2)[0] == []  # archived
    finally:
        c.close()
    from kafka import KafkaConsumer

    reader = KafkaConsumer(dlq, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                           consumer_timeout_ms=int(LOCK_MS * 3))
    try:
        copies = list(reader)
    finally:
        reader.close()
    assert len(copies) == 1
    # Kafka 4.4's context headers, and (copy.record.enable) the record's value
    assert copies[0].value == f"{topic}-0-0".encode()
    assert dict(copies[0].headers) == {
        "__dlq.errors.topic": topic.encode(), "__dlq.errors.partition": b"0", "__dlq.errors.offset": b"0",
        "__dlq.errors.group": group.encode(), "__dlq.errors.delivery.count": str(DELIVERY_LIMIT).encode(),
        "__dlq.errors.message": b"Offset delivery count exceeded the threshold."}


def read_all(broker: Broker, topic: str, quiet_ms: int) -> list[Any]:
    """Every record of ``topic`` (kafka-python, from the earliest offset, until ``quiet_ms`` pass
    without one)."""
    from kafka import KafkaConsumer

    reader = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                           consumer_timeout_ms=quiet_ms)
    try:
        return list(reader)
    finally:
        reader.close()


def test_rejected_records_dead_lettered_as_kafka_4_4_names_and_copies_them(broker: Broker) -> None:
    """KIP-1191 as Kafka 4.4 ships it: by default the dead-letter record is its context headers
    (no key, no value); a topic without the broker's prefix (dlq.) gets nothing, even opted in;
    a name of the internal topics (__) is refused when set."""
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    enable_dead_letter_queues(broker)
    good, unprefixed = unique_topic("dlq.rejected"), unique_topic("orders-dead")
    for name in (good, unprefixed):
        broker.create_topic(name, 1, configs={"errors.deadletterqueue.group.enable": "true"})
    for dlq, offset in ((unprefixed, 0), (good, 1)):
        topic, group = new_queue(broker, **{"errors.deadletterqueue.topic.name": dlq})
        produce(broker, topic, {0: 2})
        c = share_consumer(broker, group, topic, **{"share.acknowledgement.mode": "explicit"})
        try:
            got = poll_until([c], 2)[0]
            assert [m.offset() for m in got] == [0, 1]
            for m in got:
                c.acknowledge(m, AcknowledgeType.REJECT if m.offset() == offset else AcknowledgeType.ACCEPT)
            c.commit_sync()
        finally:
            c.close()
    copies = read_all(broker, good, LOCK_MS * 3)
    assert [(r.key, r.value) for r in copies] == [(None, None)]
    assert dict(copies[0].headers) == {
        "__dlq.errors.topic": topic.encode(), "__dlq.errors.partition": b"0", "__dlq.errors.offset": b"1",
        "__dlq.errors.group": group.encode(), "__dlq.errors.delivery.count": b"1",
        "__dlq.errors.message": b"Offset rejected by client."}
    assert read_all(broker, unprefixed, LOCK_MS) == []
    internal = unique_group("share")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="share-test")
    try:
        result = admin.alter_configs([ConfigResource(ConfigResourceType.GROUP, internal, {
            "errors.deadletterqueue.topic.name": "__consumer_offsets"})], incremental=True)
    finally:
        admin.close()
    refusal = result["group"][internal]
    assert refusal.startswith("[Error 40] InvalidConfigurationError"), refusal
    assert "errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'" in refusal


def test_a_poison_record_goes_to_the_archive_alone(broker: Broker) -> None:
    """Kafka's delivery throttling: a consumer that fails a whole delivery when it meets a
    poison record gets the batch whole while it has been delivered less than the throttle
    count (limit 3: 2), then record by record, so only the poison record runs out of
    deliveries; the good ones of its batch are accepted."""
    topic, group = new_queue(broker)
    produce_one_batch(broker, topic, 4)
    poison = 1
    c = share_consumer(broker, group, topic, **{"share.acknowledgement.mode": "explicit"})
    deliveries: list[list[tuple[int, int]]] = []
    accepted: list[int] = []
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while len(accepted) < 3 and time.monotonic() < deadline:
            got = [m for m in c.poll(0.5) or [] if m.error() is None]
            if not got:
                continue
            deliveries.append([(m.offset(), m.delivery_count()) for m in got])
            failed = any(m.offset() == poison for m in got)
            for m in got:
                c.acknowledge(m, AcknowledgeType.RELEASE if failed else AcknowledgeType.ACCEPT)
            c.commit_sync()
            if not failed:
                accepted.extend(m.offset() for m in got)
        assert sorted(accepted) == [0, 2, 3], deliveries
        assert deliveries[:2] == [[(o, 1) for o in range(4)], [(o, 2) for o in range(4)]], deliveries
        # from the third delivery on, one record at a time; the poison one three times in all
        assert all(len(d) == 1 for d in deliveries[2:]), deliveries
        assert [n for d in deliveries for o, n in d if o == poison] == [1, 2, 3], deliveries
        assert poll_until([c], 1, timeout_s=LOCK_MS / 1000)[0] == []  # archived
    finally:
        c.close()


def test_a_broker_restart_loses_no_acknowledgement(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(OVERRIDES)
    topic, group = new_queue(broker)
    produce(broker, topic, {0: 10})
    c = share_consumer(broker, group, topic, **{"share.acknowledgement.mode": "explicit"})
    try:
        first = poll_until([c], 10)[0]
        assert len(first) == 10
        for m in first[:6]:
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        c.commit_sync()
    finally:
        c.close()  # acknowledges nothing more: 6-9 stay unacknowledged (released on close)
    broker.restart()
    c = share_consumer(broker, group, topic)
    try:
        again = poll_until([c], 4)[0]
        assert sorted(m.offset() for m in again) == [6, 7, 8, 9]
        assert poll_until([c], 1, timeout_s=3)[0] == []
    finally:
        c.close()


def share_groups_tool(broker: Broker, *argv: str) -> tuple[int, str, str]:
    import argparse
    import io

    from broker.tools.share_groups import add_parser, run_share_groups

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["share-groups", "--bootstrap-server", broker.bootstrap, *argv])
    out, err = io.StringIO(), io.StringIO()
    code = run_share_groups(args, out, err)
    return code, out.getvalue(), err.getvalue()


def test_share_groups_tool_lists_describes_resets_and_deletes(broker: Broker) -> None:
    topic, group = new_queue(broker)
    produce(broker, topic, {0: 5})
    c = share_consumer(broker, group, topic)
    try:
        assert len(poll_until([c], 5)[0]) == 5
        c.commit_sync()
        code, out, _ = share_groups_tool(broker, "list", "--state")
        assert code == 0 and any(line.split() == [group, "Stable"] for line in out.splitlines()), out
        code, out, _ = share_groups_tool(broker, "describe", group, "--members")
        assert code == 0 and f"{topic}:0" in out, out
        code, _, err = share_groups_tool(broker, "delete", group)
        assert code == 1 and "NON_EMPTY_GROUP" in err
    finally:
        c.close()
    code, out, _ = share_groups_tool(broker, "describe", group)
    assert code == 0 and [group, topic, "0", "5", "0"] in [line.split() for line in out.splitlines()], out
    code, out, _ = share_groups_tool(broker, "reset-offsets", "--group", group, "--topic", topic,
                                     "--to-offset", "2", "--execute")
    assert code == 0, out
    c = share_consumer(broker, group, topic)
    try:
        assert sorted(m.offset() for m in poll_until([c], 3)[0]) == [2, 3, 4]
    finally:
        c.close()
    code, out, _ = share_groups_tool(broker, "delete", group)
    assert code == 0, out
    code, out, _ = share_groups_tool(broker, "list")
    assert group not in out.split()


# ---------------------------------------------------------------- Java 4.x KafkaShareConsumer

JAVA_SOURCE = Path(__file__).parent / "java" / "share" / "ShareQueue.java"


@pytest.fixture(scope="module")
def share_queue_java(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """``java`` command line of compat_tests/java/share/ShareQueue.java, compiled against kafka-clients 4."""
    from .harness.drivers.java import compile_java4_programs

    cmd = compile_java4_programs(tmp_path_factory.mktemp("share-java"), [JAVA_SOURCE])
    if cmd is None:
        pytest.skip("javac or kafka-clients 4.x not installed")
    return [*cmd, "ShareQueue"]


def java_share_consumer(cmd: list[str], broker: Broker, group: str, topic: str, want: int, timeout_s: float,
                        release: str = "-", reject: str = "-", props: dict[str, str] | None = None,
                        renew: str = "-") -> Any:
    """ShareQueue.java; ``props`` are extra consumer configs, ``renew`` is "offsets:holdMs"."""
    import subprocess

    extra = ",".join(f"{k}={v}" for k, v in (props or {}).items()) or "-"
    return subprocess.Popen([*cmd, broker.bootstrap, group, topic, str(want), str(int(timeout_s * 1000)),
                             release, reject, extra, renew], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)


def java_records(proc: Any, timeout_s: float) -> list[dict[str, Any]]:
    import json

    out, _ = proc.communicate(timeout=timeout_s + 30)
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_java_share_consumers_on_one_partition_release_and_reject(broker: Broker,
                                                                  share_queue_java: list[str]) -> None:
    """Two Java consumers on one partition: every record delivered once between them, but
    the released one (twice) — never to both at a time — and the rejected one only once."""
    topic, group = new_queue(broker)
    produce(broker, topic, {0: 40})
    # offset 0 is released once (comes back with delivery count 2), offset 1 rejected (never back)
    procs = [java_share_consumer(share_queue_java, broker, group, topic, 100, 12, release="0", reject="1")
             for _ in range(2)]
    seen = [java_records(p, 12) for p in procs]
    deliveries = [(r["offset"], r["delivery_count"]) for part in seen for r in part]
    offsets = [o for o, _ in deliveries]
    assert sorted(set(offsets)) == list(range(40)), deliveries
    assert sorted(offsets) == [0, *range(40)], "only the released record twice"
    assert sorted(c for o, c in deliveries if o == 0) == [1, 2]
    assert [c for o, c in deliveries if o == 1] == [1]


def produce_one_batch(broker: Broker, topic: str, n: int) -> None:
    """``n`` records in one record batch (a long linger, flushed once)."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=2000, batch_size=1 << 20)
    try:
        for i in range(n):
            producer.send(topic, value=f"{topic}-0-{i}".encode(), partition=0)
        producer.flush(20)
    finally:
        producer.close(5)


def polls(records: list[dict[str, Any]]) -> list[int]:
    """How many records each poll returned."""
    sizes: dict[int, int] = {}
    for r in records:
        sizes[r["poll"]] = sizes.get(r["poll"], 0) + 1
    return [sizes[p] for p in sorted(sizes)]


def test_java_share_acquire_mode_record_limit(broker: Broker, share_queue_java: list[str]) -> None:
    """KIP-1206: with share.acquire.mode=record_limit no poll returns more than max.poll.records,
    the broker splitting the batch; batch_optimized (the default) may go past it to finish one."""
    topic, limited = new_queue(broker)
    optimized = unique_group("share")
    set_group_configs(broker, optimized, {"share.auto.offset.reset": "earliest"})
    produce_one_batch(broker, topic, 10)
    procs = [java_share_consumer(share_queue_java, broker, group, topic, 10, 15, props={
        "max.poll.records": "3", **({"share.acquire.mode": "record_limit"} if group == limited else {})})
        for group in (limited, optimized)]
    record_limit, batch_optimized = (java_records(p, 15) for p in procs)
    assert sorted(r["offset"] for r in record_limit) == list(range(10))
    assert max(polls(record_limit)) <= 3 and len(polls(record_limit)) >= 4, polls(record_limit)
    assert sorted(r["offset"] for r in batch_optimized) == list(range(10))
    assert polls(batch_optimized) == [10], "the whole batch in one poll"


def test_java_renew_keeps_a_slow_record_from_redelivery(broker: Broker, share_queue_java: list[str]) -> None:
    """KIP-1222: a consumer renews the lock of a record it is slow with (AcknowledgeType.RENEW)
    for three lock durations, then accepts it; a second consumer of the group never gets it,
    and it is delivered once."""
    import json
    import threading

    topic, group = new_queue(broker)
    produce_one_batch(broker, topic, 5)
    hold_ms = 3 * LOCK_MS
    slow = java_share_consumer(share_queue_java, broker, group, topic, 5, 30, renew=f"0:{hold_ms}")
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(slow.stdout), daemon=True)
    reader.start()
    deadline = time.monotonic() + 30
    while not lines and time.monotonic() < deadline and slow.poll() is None:
        time.sleep(0.05)
    assert lines, "the slow consumer got its records"
    other = java_share_consumer(share_queue_java, broker, group, topic, 1, hold_ms / 1000 + 2 * LOCK_MS / 1000)
    got_other = java_records(other, hold_ms / 1000 + 2 * LOCK_MS / 1000)
    slow.wait(timeout=60)
    reader.join(10)
    got_slow = [json.loads(line) for line in lines if line.startswith("{")]
    first = [(r["delivery_count"], r["ack"]) for r in got_slow if r["offset"] == 0]
    assert got_other == [], got_other
    assert {c for c, _ in first} == {1}, first
    assert [a for _, a in first].count("RENEW") >= 2 and first[-1][1] == "ACCEPT", first
    assert sorted(r["offset"] for r in got_slow if r["ack"] == "ACCEPT") == list(range(5))


def test_java_renew_refused_when_the_group_disables_it(broker: Broker, share_queue_java: list[str]) -> None:
    """``share.renew.acknowledge.enable=false`` (Kafka 4.3's group config): the broker refuses
    the consumer's RENEW (INVALID_RECORD_STATE, for the partition's acknowledgements as a whole,
    as Kafka rolls a partition's acknowledgements back together), so the slow record's lock runs
    out and it is delivered again, with delivery count 2, where a renewing group keeps it at 1
    (above); the records accepted along with the refused RENEW come again too, and are accepted."""
    topic, group = new_queue(broker, **{"share.renew.acknowledge.enable": "false"})
    produce_one_batch(broker, topic, 5)
    hold_ms = 3 * LOCK_MS
    slow = java_share_consumer(share_queue_java, broker, group, topic, 5, 15, renew=f"0:{hold_ms}")
    got = java_records(slow, 15)
    first = [(r["delivery_count"], r["ack"]) for r in got if r["offset"] == 0]
    assert first[:2] == [(1, "RENEW"), (2, "RENEW")], first
    assert {r["offset"] for r in got if r["ack"] == "ACCEPT"} == {1, 2, 3, 4}, got
