"""Group configs (Kafka 4.3's GroupConfig) set as a user sets them, with Java 4.3's Admin
``incrementalAlterConfigs`` on a GROUP resource, and what they change for real clients:

- every group config is accepted within the broker's bounds, refused outside them with
  Kafka's INVALID_CONFIG message, described with its source and broker default, and
  deleted back to the default;
- ``share.auto.offset.reset=by_duration:<ISO-8601>`` starts a share group at the first
  record at most that old (Java ``KafkaShareConsumer`` and confluent-kafka ``ShareConsumer``);
- ``share.isolation.level=read_committed`` delivers neither records of aborted transactions
  nor those of an open one until it commits (confluent-kafka and Java);
- ``consumer.session.timeout.ms`` of a consumer-protocol group fences a dead member after the
  group's timeout, not the broker's.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import BrokerFactory
from .harness.broker import Broker
from .harness.groups import GroupMember
from .harness.scenario import get_driver, unique_topic
from .test_groups import SETTLE_S, split_evenly, start, unique_group, wait_for

confluent_kafka = pytest.importorskip("confluent_kafka")

OVERRIDES = {
    "share.coordinator.state.topic.replication.factor": "1",
    "offsets.topic.replication.factor": "1",
    # Low enough for the group's own session timeout below; the broker's stays 45 s.
    "group.consumer.min.session.timeout.ms": "6000",
    "group.consumer.min.heartbeat.interval.ms": "500",
}
JAVA_DIR = Path(__file__).parent / "java" / "share"
TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def broker(broker_factory: BrokerFactory) -> Iterator[Broker]:
    b = broker_factory(OVERRIDES)
    try:
        yield b
    finally:
        b.close()


@pytest.fixture(scope="module")
def java4(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """``java`` command line (class path included) of compat_tests/java/share/*.java,
    compiled against kafka-clients 4."""
    from .harness.drivers.java import compile_java4_programs

    cmd = compile_java4_programs(tmp_path_factory.mktemp("group-configs-java"),
                                 [JAVA_DIR / "GroupConfigs.java", JAVA_DIR / "ShareQueue.java"])
    if cmd is None:
        pytest.skip("javac or kafka-clients 4.x not installed")
    return cmd


def java_admin(java4: list[str], broker: Broker, group: str, *ops: str) -> list[dict[str, Any]]:
    done = subprocess.run([*java4, "GroupConfigs", broker.bootstrap, group, *ops], capture_output=True, text=True,
                          timeout=120, check=True)
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def described(java4: list[str], broker: Broker, group: str) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in java_admin(java4, broker, group, "describe")}


# (config, a good value, a value below the broker's bounds or its own, Kafka's message for it)
CASES = [
    ("consumer.session.timeout.ms", "50000", "5000",
     "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms"),
    ("consumer.heartbeat.interval.ms", "6000", "16000",
     "consumer.heartbeat.interval.ms must be less than or equal to group.consumer.max.heartbeat.interval.ms"),
    ("share.session.timeout.ms", "50000", "61000",
     "share.session.timeout.ms must be less than or equal to group.share.max.session.timeout.ms"),
    ("share.heartbeat.interval.ms", "6000", "4000",
     "share.heartbeat.interval.ms must be greater than or equal to group.share.min.heartbeat.interval.ms"),
    ("share.record.lock.duration.ms", "20000", "999",
     "Invalid value 999 for configuration share.record.lock.duration.ms: Value must be at least 1000"),
    ("share.delivery.count.limit", "3", "11",
     "share.delivery.count.limit must be less than or equal to group.share.max.delivery.count.limit"),
    ("share.partition.max.record.locks", "3000", "5000",
     "share.partition.max.record.locks must be less than or equal to group.share.max.partition.max.record.locks"),
    ("share.auto.offset.reset", "by_duration:PT1H", "by_duration:-PT1H",
     "Invalid value by_duration:-PT1H for configuration share.auto.offset.reset: Invalid value `by_duration:-PT1H` "
     "for configuration share.auto.offset.reset. The value must be either 'earliest', 'latest' or of the format "
     "'by_duration:<PnDTnHnMn.nS.>'."),
    ("share.isolation.level", "read_committed", "READ_COMMITTED",
     "Invalid value READ_COMMITTED for configuration share.isolation.level: String must be one of: "
     "read_committed, read_uncommitted"),
    ("share.renew.acknowledge.enable", "false", "1",
     "Invalid value 1 for configuration share.renew.acknowledge.enable: Expected value to be either true or false"),
    ("errors.deadletterqueue.topic.name", "dlq.orders", "__orders",
     "errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'"),
    ("errors.deadletterqueue.copy.record.enable", "true", "yes",
     "Invalid value yes for configuration errors.deadletterqueue.copy.record.enable: Expected value to be either "
     "true or false"),
]
DEFAULTS = {"consumer.session.timeout.ms": ("45000", "group.consumer.session.timeout.ms"),
            "consumer.heartbeat.interval.ms": ("5000", "group.consumer.heartbeat.interval.ms"),
            "share.session.timeout.ms": ("45000", "group.share.session.timeout.ms"),
            "share.heartbeat.interval.ms": ("5000", "group.share.heartbeat.interval.ms"),
            "share.record.lock.duration.ms": ("30000", "group.share.record.lock.duration.ms"),
            "share.delivery.count.limit": ("5", "group.share.delivery.count.limit"),
            "share.partition.max.record.locks": ("2000", "group.share.partition.max.record.locks"),
            "share.auto.offset.reset": ("latest", None), "share.isolation.level": ("read_uncommitted", None),
            "share.renew.acknowledge.enable": ("true", None), "errors.deadletterqueue.topic.name": ("", None),
            "errors.deadletterqueue.copy.record.enable": ("false", None)}


def test_java_admin_sets_describes_refuses_and_deletes_each_group_config(broker: Broker, java4: list[str]) -> None:
    group = unique_group("gcfg")
    before = described(java4, broker, group)
    for name, (value, synonym) in DEFAULTS.items():
        assert (before[name]["value"], before[name]["source"]) == (value, "DEFAULT_CONFIG"), before[name]
        if synonym is not None:
            assert before[name]["synonyms"] == [[synonym, value, "DEFAULT_CONFIG"]], before[name]
    ops = [op for name, good, bad, _ in CASES for op in (f"set:{name}={good}", f"set:{name}={bad}")]
    results = java_admin(java4, broker, group, *ops)
    for (name, good, _bad, message), ok, refused in zip(CASES, results[::2], results[1::2], strict=True):
        assert ok == {"op": f"set:{name}={good}", "ok": True}, ok
        assert (refused["error"], refused["message"]) == ("InvalidConfigurationException", message), refused
    after = described(java4, broker, group)
    for name, good, _, _ in CASES:
        assert (after[name]["value"], after[name]["source"]) == (good, "DYNAMIC_GROUP_CONFIG"), after[name]
        assert after[name]["synonyms"][0] == [name, good, "DYNAMIC_GROUP_CONFIG"], after[name]
    deleted = java_admin(java4, broker, group, *(f"delete:{name}" for name, *_ in CASES))
    assert all(r.get("ok") for r in deleted), deleted
    again = described(java4, broker, group)
    assert {n: (e["value"], e["source"]) for n, e in again.items() if n in DEFAULTS} == {
        n: (v, "DEFAULT_CONFIG") for n, (v, _) in DEFAULTS.items()}


# ------------------------------------------------------------------------------ share groups


def share_consumer(broker: Broker, group: str, topic: str) -> Any:
    c = confluent_kafka.ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    c.subscribe([topic])
    return c


def share_values(broker: Broker, group: str, topic: str, want: int, timeout_s: float = TIMEOUT_S,
                 then: float = 0.0) -> list[tuple[int, str]]:
    """(offset, value) of what a confluent-kafka share consumer gets: until ``want`` records
    (or the timeout), then ``then`` more seconds to see that nothing else comes."""
    c = share_consumer(broker, group, topic)
    got: list[tuple[int, str]] = []
    try:
        deadline = time.monotonic() + timeout_s
        while len(got) < want and time.monotonic() < deadline:
            got.extend((m.offset(), m.value().decode()) for m in c.poll(0.2) or [] if m.error() is None)
        extra = time.monotonic() + then
        while time.monotonic() < extra:
            got.extend((m.offset(), m.value().decode()) for m in c.poll(0.2) or [] if m.error() is None)
    finally:
        c.close()
    return got


def set_group(java4: list[str], broker: Broker, group: str, **configs: str) -> None:
    results = java_admin(java4, broker, group, *(f"set:{k.replace('_', '.')}={v}" for k, v in configs.items()))
    assert all(r.get("ok") for r in results), results


def test_by_duration_starts_at_the_first_record_that_recent(broker: Broker, java4: list[str]) -> None:
    topic = unique_topic("by-duration")
    broker.create_topic(topic, 1)
    now_ms = int(time.time() * 1000)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    for i, age_ms in enumerate([3 * 3_600_000] * 3 + [7_200_000] * 2 + [600_000] * 3):
        producer.produce(topic, value=f"r{i}".encode(), partition=0, timestamp=now_ms - age_ms)
    assert producer.flush(20) == 0
    # Java KafkaShareConsumer, by_duration:PT1H: the three records of the last hour.
    java_group = unique_group("bd-java")
    set_group(java4, broker, java_group, share_auto_offset_reset="by_duration:PT1H")
    proc = subprocess.run([*java4, "ShareQueue", broker.bootstrap, java_group, topic, "8", "10000", "-", "-"],
                          capture_output=True, text=True, timeout=120)
    seen = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [r["offset"] for r in seen] == [5, 6, 7], seen
    # confluent-kafka, by_duration:PT150M: two hours old too, not three.
    group = unique_group("bd-ck")
    set_group(java4, broker, group, share_auto_offset_reset="by_duration:PT150M")
    assert [o for o, _ in share_values(broker, group, topic, 8, timeout_s=10)] == [3, 4, 5, 6, 7]
    # No record that recent: the share group starts at the end, and gets what comes next.
    late = unique_group("bd-late")
    set_group(java4, broker, late, share_auto_offset_reset="by_duration:PT1M")
    assert share_values(broker, late, topic, 1, timeout_s=6) == []
    producer.produce(topic, value=b"new", partition=0)
    assert producer.flush(20) == 0
    assert share_values(broker, late, topic, 1) == [(8, "new")]


def test_read_committed_share_group_skips_aborted_and_open_transactions(broker: Broker, java4: list[str]) -> None:
    topic = unique_topic("share-rc")
    broker.create_topic(topic, 1)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                         "transactional.id": unique_group("share-rc-tx")})
    producer.init_transactions(20)

    def transaction(values: list[str], commit: bool | None) -> None:
        producer.begin_transaction()
        for v in values:
            producer.produce(topic, value=v.encode(), partition=0)
        producer.flush(20)
        if commit is True:
            producer.commit_transaction(20)
        elif commit is False:
            producer.abort_transaction(20)

    transaction(["c0", "c1", "c2"], True)
    transaction(["a0", "a1", "a2"], False)
    transaction(["c3", "c4"], True)
    transaction(["o0"], None)  # left open
    committed, uncommitted = unique_group("rc"), unique_group("ru")
    set_group(java4, broker, committed, share_auto_offset_reset="earliest", share_isolation_level="read_committed")
    set_group(java4, broker, uncommitted, share_auto_offset_reset="earliest")
    # read_uncommitted (the default): every data record, aborted and open ones too.
    assert sorted(v for _, v in share_values(broker, uncommitted, topic, 9)) == [
        "a0", "a1", "a2", "c0", "c1", "c2", "c3", "c4", "o0"]
    rc = share_consumer(broker, committed, topic)
    got: list[str] = []
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < 5 and time.monotonic() < deadline:
            got.extend(m.value().decode() for m in rc.poll(0.2) or [] if m.error() is None)
        settle = time.monotonic() + 4
        while time.monotonic() < settle:  # the open transaction's record stays away
            got.extend(m.value().decode() for m in rc.poll(0.2) or [] if m.error() is None)
        assert got == ["c0", "c1", "c2", "c3", "c4"]
        # Java's KafkaShareConsumer in another read_committed group: the same five.
        java_group = unique_group("rc-java")
        set_group(java4, broker, java_group, share_auto_offset_reset="earliest",
                  share_isolation_level="read_committed")
        proc = subprocess.run([*java4, "ShareQueue", broker.bootstrap, java_group, topic, "6", "10000", "-", "-"],
                              capture_output=True, text=True, timeout=120)
        seen = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        assert [(r["offset"], r["value"]) for r in seen] == [
            (0, "c0"), (1, "c1"), (2, "c2"), (8, "c3"), (9, "c4")], seen
        producer.commit_transaction(20)
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < 6 and time.monotonic() < deadline:
            got.extend(m.value().decode() for m in rc.poll(0.2) or [] if m.error() is None)
        assert got == ["c0", "c1", "c2", "c3", "c4", "o0"]
    finally:
        rc.close()


# ------------------------------------------------------------------------ consumer groups


def test_a_consumer_protocol_member_expires_after_its_groups_session_timeout(
        broker: Broker, java4: list[str], members: list[GroupMember]) -> None:
    """The broker's consumer session timeout is 45 s; the group's own 6 s fences a killed member."""
    driver = get_driver("confluent-kafka", broker)
    topic, group, n = unique_topic("cg-session"), unique_group("cg-session"), 4
    broker.create_topic(topic, n)
    set_group(java4, broker, group, consumer_session_timeout_ms="6000", consumer_heartbeat_interval_ms="500")
    a = start(driver, topic, group, members, group_protocol="consumer")
    b = start(driver, topic, group, members, group_protocol="consumer")
    wait_for(lambda: split_evenly([a, b], n), SETTLE_S, "two members split the partitions", members)
    b.kill()
    took = wait_for(lambda: a.assignment() == frozenset(range(n)), SETTLE_S,
                    "the survivor took the dead member's partitions", members)
    assert 5 < took < 20, f"the dead member's partitions took {took:.1f} s to move"
