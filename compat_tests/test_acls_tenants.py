"""Two tenants on one cluster, kept apart by PREFIXED ACLs, with authenticated principals.

SCRAM-SHA-256 users ``tenant-a`` and ``tenant-b`` each hold ALL on the topics and groups under
their own prefix (``tenant-a.``, ``tenant-b.``) and nothing else; ``admin`` is a super user.
Each tenant creates its topic, produces, consumes in a group and commits with librdkafka
(confluent-kafka) and the Java client; each is refused the other's topic (producing, consuming)
and the other's groups with its client's own error, and does not even see the other's topic in
its metadata.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from compat_tests.harness import settings
from compat_tests.harness.broker import Broker, CormorantBroker, make_broker
from compat_tests.harness.drivers import ClientError, Record
from compat_tests.harness.groups import GroupOptions
from compat_tests.harness.secured import ClientSecurity, secured_java_driver, unique

pytestmark = pytest.mark.skipif(settings.target() != "cormorant", reason="Cormorant's authorizer settings")
#: The matrix's client of the tests that do not name one (the Java tests name theirs).
MATRIX_CLIENT = "confluent-kafka"

TENANTS = ("tenant-a", "tenant-b")
PASSWORDS = {"admin": "admin-secret", "tenant-a": "a-secret", "tenant-b": "b-secret"}


def security(user: str) -> ClientSecurity:
    return ClientSecurity("SASL_PLAINTEXT", mechanism="SCRAM-SHA-256", user=user, password=PASSWORDS[user])


def address(broker: Broker) -> str:
    return f"127.0.0.1:{broker.listener_port('SASL_PLAINTEXT')}"  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    broker = make_broker(tmp_path_factory.mktemp("tenants"), {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
    })
    assert isinstance(broker, CormorantBroker)
    broker.serve_args = tuple(arg for user, password in PASSWORDS.items()
                              for arg in ("--add-scram", f"SCRAM-SHA-256=[name={user},password={password}]"))
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": address(broker), **security("admin").librdkafka()})
        bindings = [AclBinding(resource, f"{tenant}.", ResourcePatternType.PREFIXED, f"User:{tenant}", "*",
                               AclOperation.ALL, AclPermissionType.ALLOW)
                    for tenant in TENANTS for resource in (ResourceType.TOPIC, ResourceType.GROUP)]
        for future in admin.create_acls(bindings).values():
            future.result(timeout=30)
        yield broker
    finally:
        broker.close()


def create_own_topic(broker: Broker, tenant: str) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = unique(f"{tenant}.orders")
    admin = AdminClient({"bootstrap.servers": address(broker), **security(tenant).librdkafka()})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)  # CREATE through the prefix
    deadline = time.monotonic() + 15
    while topic not in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.2)
    return topic


def confluent_produce(broker: Broker, tenant: str, topic: str, count: int = 3) -> list[str]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": address(broker), **security(tenant).librdkafka(), "acks": "all",
                         "message.timeout.ms": 10_000})
    errors: list[str] = []
    for i in range(count):
        producer.produce(topic, f"{tenant}-{i}".encode(),
                         on_delivery=lambda err, _m: errors.append(err.name()) if err else None)
    assert producer.flush(15) == 0
    return errors


def confluent_consume(broker: Broker, tenant: str, topic: str, group: str, count: int = 3) -> tuple[int, list[str]]:
    """Records read (and committed) in ``group``, and the errors the consumer reported."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": address(broker), **security(tenant).librdkafka(), "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    got, errors = 0, list[str]()
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 20
        while got < count and not errors and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                errors.append(error.name())
                continue
            got += 1
        if got:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got, errors


@pytest.mark.parametrize("tenant", TENANTS)
def test_confluent_tenant_uses_its_prefix_and_is_refused_the_other(cluster: Broker, tenant: str) -> None:
    from confluent_kafka.admin import AdminClient

    other = next(t for t in TENANTS if t != tenant)
    own, theirs = create_own_topic(cluster, tenant), create_own_topic(cluster, other)
    assert confluent_produce(cluster, tenant, own) == []
    assert confluent_consume(cluster, tenant, own, f"{tenant}.billing") == (3, [])

    assert set(confluent_produce(cluster, tenant, theirs, 1)) == {"TOPIC_AUTHORIZATION_FAILED"}
    assert confluent_consume(cluster, tenant, theirs, f"{tenant}.spy")[1] == ["TOPIC_AUTHORIZATION_FAILED"]
    # Its own topic, but the other tenant's group.
    assert confluent_consume(cluster, tenant, own, f"{other}.billing")[1] == ["GROUP_AUTHORIZATION_FAILED"]
    listed = AdminClient({"bootstrap.servers": address(cluster), **security(tenant).librdkafka()}).list_topics(
        timeout=10).topics
    assert own in listed and theirs not in listed and not any(t.startswith(f"{other}.") for t in listed)


@pytest.mark.parametrize("variant", ["java", "java4"])
def test_java_tenants_are_isolated(cluster: Broker, variant: str) -> None:
    a_topic, b_topic = create_own_topic(cluster, "tenant-a"), create_own_topic(cluster, "tenant-b")
    tenant_a = secured_java_driver(variant, address(cluster), security("tenant-a").java())
    assert len(tenant_a.produce(a_topic, [Record(key=None, value=f"a-{i}".encode()) for i in range(3)])) == 3
    member = tenant_a.start_member(a_topic, unique("tenant-a.java"), GroupOptions(), count=3)
    try:
        member.wait_until(lambda m: len(m.consumed()) >= 3 and sum(m.committed().values()) >= 3,
                          settings.API_TIMEOUT_MS / 1000 + 20, "3 records consumed and committed")
    finally:
        member.stop()
    with pytest.raises(ClientError, match="TopicAuthorizationException"):
        tenant_a.produce(b_topic, [Record(key=None, value=b"intrusion")])
    tenant_b = secured_java_driver(variant, address(cluster), security("tenant-b").java())
    with pytest.raises(ClientError, match="TopicAuthorizationException"):
        tenant_b.produce(a_topic, [Record(key=None, value=b"intrusion")])
    with pytest.raises(ClientError, match="TopicAuthorizationException"):
        tenant_b.consume(a_topic, [0], count=1, timeout_s=10)
