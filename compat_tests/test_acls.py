"""ACLs with real clients: every client with an admin API creates, lists and deletes ACLs
(CreateAcls / DescribeAcls / DeleteAcls), and with the StandardAuthorizer on, every client
is refused what the ACLs deny with its own name for Kafka's error.

Over PLAINTEXT every client is User:ANONYMOUS (as in Kafka). The broker runs with
``allow.everyone.if.no.acl.found=true``: ANONYMOUS may do what no ACL mentions, and an ACL
for another principal (alice) on a topic takes that topic away from it. The Python clients
run in process; Java (3.9 and 4.3) and kafkajs run their drivers' ``acl_cycle`` op.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from broker.tools.client import KafkaClient
from compat_tests.conftest import BrokerFactory
from compat_tests.harness import settings
from compat_tests.harness.broker import Broker
from compat_tests.harness.drivers import ClientError, Driver, Record
from compat_tests.harness.drivers.jsonproc import JsonProcessDriver
from compat_tests.harness.groups import GroupMember
from compat_tests.harness.scenario import get_driver, unique_topic
from wire.generated.api_030_create_acls import (
    CreateAclsRequest,
    CreateAclsRequestAclCreation,
    CreateAclsResponse,
)

pytestmark = pytest.mark.skipif(settings.target() != "cormorant", reason="Cormorant's authorizer settings")

AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}
ALICE, ANONYMOUS = "User:alice", "User:ANONYMOUS"
TOPIC, GROUP, CLUSTER, TXN = 2, 3, 4, 5
LITERAL, PREFIXED = 3, 4
ALL, WRITE, CREATE, ALTER = 2, 4, 5, 7
ALLOW = 3
TOPIC_AUTHORIZATION_FAILED = 29
ACL_ADMINS = ("kafka-python", "confluent-kafka", "kafkajs", "java", "java4")
#: Each client's name for TOPIC_AUTHORIZATION_FAILED.
TOPIC_DENIED_NAMES = {
    "kafka-python": "TopicAuthorizationFailedError",
    "aiokafka": "TopicAuthorizationFailedError",
    "confluent-kafka": "TOPIC_AUTHORIZATION_FAILED",
    "kcat": "Broker: Topic authorization failed",
    "kafkajs": "TOPIC_AUTHORIZATION_FAILED",
    "java": "TopicAuthorizationException",
    "java4": "TopicAuthorizationException",
}


def _create_acls(broker: Broker, *creations: CreateAclsRequestAclCreation) -> None:
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        created = c.send(CreateAclsRequest(creations=list(creations)), CreateAclsResponse)
        assert [r.error_code for r in created.results] == [0] * len(creations), created


def _acl(rt: int, name: str, op: int, principal: str = ALICE, pattern: int = LITERAL) -> CreateAclsRequestAclCreation:
    return CreateAclsRequestAclCreation(resource_type=rt, resource_name=name, resource_pattern_type=pattern,
                                        principal=principal, host="*", operation=op, permission_type=ALLOW)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """ACLs on the cluster end allow-everyone there: ANONYMOUS keeps ALTER (ACL management, and
    DESCRIBE with it) but loses CREATE on the cluster, so creating a topic needs CREATE on it.
    Its idempotent producers need WRITE on some topic (KafkaApis' authorizeByResourceType)."""
    factory = BrokerFactory(tmp_path_factory)
    try:
        broker = factory(AUTHORIZER)
        _create_acls(broker, _acl(CLUSTER, "kafka-cluster", ALTER, ANONYMOUS),
                     _acl(TOPIC, "acl-anchor", WRITE, ANONYMOUS))
        yield broker
    finally:
        factory.close_all()


def _confluent_cycle(bootstrap: str, topic: str, principal: str) -> dict[str, list[list[str]]]:
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    allow = AclPermissionType.ALLOW
    created = admin.create_acls([
        AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*", AclOperation.READ, allow),
        AclBinding(ResourceType.TOPIC, f"{topic}-", ResourcePatternType.PREFIXED, principal, "*",
                   AclOperation.WRITE, allow),
    ], request_timeout=30)
    for future in created.values():
        future.result(timeout=30)
    by_principal = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, principal, None,
                                    AclOperation.ANY, AclPermissionType.ANY)

    def rows(bindings: list[Any]) -> list[list[str]]:
        return sorted([b.name, b.resource_pattern_type.name, b.operation.name, b.permission_type.name]
                      for b in bindings)

    described = rows(admin.describe_acls(by_principal, request_timeout=30).result(timeout=30))
    literal = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, None, None,
                               AclOperation.ANY, AclPermissionType.ANY)
    deleted = rows(admin.delete_acls([literal], request_timeout=30)[literal].result(timeout=30))
    after = rows(admin.describe_acls(by_principal, request_timeout=30).result(timeout=30))
    return {"described": described, "deleted": deleted, "after": after}


def _kafka_python_cycle(bootstrap: str, topic: str, principal: str) -> dict[str, list[list[str]]]:
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
        ResourceType,
    )

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    try:
        allow = ACLPermissionType.ALLOW
        result = admin.create_acls([
            ACL(principal, "*", ACLOperation.READ, allow,
                ResourcePattern(ResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL)),
            ACL(principal, "*", ACLOperation.WRITE, allow,
                ResourcePattern(ResourceType.TOPIC, f"{topic}-", ACLResourcePatternType.PREFIXED)),
        ])
        assert not result["failed"], result
        by_principal = ACLFilter(principal, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                 ResourcePatternFilter(ResourceType.TOPIC, None, ACLResourcePatternType.ANY))

        def rows(acls: list[Any]) -> list[list[str]]:
            return sorted([a.resource_pattern.resource_name, a.resource_pattern.pattern_type.name,
                           a.operation.name, a.permission_type.name] for a in acls)

        described, error = admin.describe_acls(by_principal)
        assert error.errno == 0
        literal = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                            ResourcePatternFilter(ResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL))
        [(_, matched, delete_error)] = admin.delete_acls([literal])
        assert delete_error.errno == 0
        after, _ = admin.describe_acls(by_principal)
        return {"described": rows(described), "deleted": rows(matched), "after": rows(after)}
    finally:
        admin.close()


def _cycle(client: str, broker: Broker, topic: str, principal: str) -> dict[str, list[list[str]]]:
    if client == "confluent-kafka":
        return _confluent_cycle(broker.bootstrap, topic, principal)
    if client == "kafka-python":
        return _kafka_python_cycle(broker.bootstrap, topic, principal)
    driver = get_driver(client, broker)
    assert isinstance(driver, JsonProcessDriver)
    result: dict[str, list[list[str]]] = driver.call("acl_cycle", topic=topic, principal=principal)
    return result


@pytest.mark.parametrize("client", ACL_ADMINS)
def test_create_list_delete_acls(secured: Broker, client: str) -> None:
    topic = unique_topic(f"acl-{client}")
    principal = f"User:{client}"
    result = _cycle(client, secured, topic, principal)
    # Enum spellings differ per client (kafkajs: LITERAL/READ; Java: LITERAL/READ too).
    assert result["described"] == sorted([[topic, "LITERAL", "READ", "ALLOW"],
                                          [f"{topic}-", "PREFIXED", "WRITE", "ALLOW"]])
    assert result["deleted"] == [[topic, "LITERAL", "READ", "ALLOW"]]
    assert result["after"] == [[f"{topic}-", "PREFIXED", "WRITE", "ALLOW"]]


# ---------------------------------------------------------------- enforcement


@pytest.fixture(scope="module")
def secret_topic(secured: Broker) -> str:
    """A topic that exists but whose only ACL is alice's: ANONYMOUS may not touch it."""
    name = unique_topic("acl-secret")
    secured.create_topic(name, 1)
    _create_acls(secured, _acl(TOPIC, name, ALL))
    return name


def _denied(call: Callable[[], object], client: str) -> ClientError:
    with pytest.raises(ClientError) as caught:
        call()
    error = caught.value
    assert error.code == TOPIC_AUTHORIZATION_FAILED or TOPIC_DENIED_NAMES[client] in str(error), str(error)
    return error


@pytest.mark.parametrize("client", list(TOPIC_DENIED_NAMES))
def test_produce_and_consume_refused_where_denied(secured: Broker, secret_topic: str, client: str) -> None:
    driver: Driver = get_driver(client, secured)
    open_topic = unique_topic(f"acl-open-{client}")
    secured.create_topic(open_topic, 1)
    records = [Record(key=b"k", value=f"v{i}".encode()) for i in range(3)]
    assert len(driver.produce(open_topic, records)) == 3
    if client != "kafkajs":  # kafkajs reads through a group only (below)
        assert len(driver.consume(open_topic, [0], count=3, timeout_s=20)) == 3
    _denied(lambda: driver.produce(secret_topic, records), client)


@pytest.mark.parametrize("client", [c for c in TOPIC_DENIED_NAMES if c != "kcat"])
def test_admin_refused_where_denied(secured: Broker, secret_topic: str, client: str) -> None:
    driver = get_driver(client, secured)
    driver.require_admin()
    _denied(lambda: driver.delete_topic(secret_topic), client)
    # A prefixed ACL of alice's makes every "<secret>-…" name hers: ANONYMOUS may not create one.
    _create_acls(secured, _acl(TOPIC, f"{secret_topic}-{client}-", CREATE, pattern=PREFIXED))
    _denied(lambda: driver.create_topic(f"{secret_topic}-{client}-x", 1), client)
    allowed = unique_topic(f"acl-free-{client}")
    driver.create_topic(allowed, 1)
    deadline = time.monotonic() + 10
    while allowed not in driver.metadata().topics and time.monotonic() < deadline:
        time.sleep(0.2)
    driver.delete_topic(allowed)


GROUP_CLIENTS = ("kafka-python", "aiokafka", "confluent-kafka", "kcat", "kafkajs", "java", "java4")


def _told_refused(member: GroupMember) -> bool:
    return any(e.kind == "error" and "GROUP_AUTHORIZATION_FAILED" in e.message for e in member.events())


@pytest.mark.parametrize("client", GROUP_CLIENTS)
def test_group_consume_and_commit_where_allowed_only(secured: Broker, client: str) -> None:
    """A consumer group reads and commits under the authorizer; in a group alice's ACL covers,
    the same client reads nothing and commits nothing."""
    from compat_tests.harness.groups import GroupOptions

    driver = get_driver(client, secured)
    topic = unique_topic(f"acl-grp-{client}")
    secured.create_topic(topic, 1)
    driver.produce(topic, [Record(key=b"k", value=f"v{i}".encode()) for i in range(4)])
    options = GroupOptions(client_id=f"compat-{client}")
    read = driver.group_consume(topic, unique_topic(f"acl-free-{client}"), 4, options, timeout_s=45)
    assert len(read) == 4
    locked = unique_topic(f"acl-locked-{client}")
    _create_acls(secured, _acl(GROUP, locked, ALL))
    member = driver.start_member(topic, locked, options, count=4)
    try:
        # Until the member reads, ends, or reports the refusal (confluent-kafka keeps polling
        # after it, and tells it as an error event).
        member.wait_until(lambda m: bool(m.consumed()) or not m.alive() or _told_refused(m), 12,
                          f"{client} in a denied group")
    except AssertionError:
        pass  # still trying after 12 s without a record: what a refused consumer does
    finally:
        member.kill()
    assert member.consumed() == [], member.describe()
    assert member.committed() == {}, member.describe()
    with KafkaClient.connect(secured.bootstrap, timeout_s=20) as c:
        from wire.generated.api_009_offset_fetch import (
            OffsetFetchRequest,
            OffsetFetchRequestTopic,
            OffsetFetchResponse,
        )

        fetched = c.send(OffsetFetchRequest(group_id=locked, topics=[OffsetFetchRequestTopic(
            name=topic, partition_indexes=[0])]), OffsetFetchResponse, 7)
        assert fetched.error_code == 30  # GROUP_AUTHORIZATION_FAILED


def test_transactions_need_write_on_the_transactional_id(secured: Broker) -> None:
    """confluent-kafka and kafka-python: a transactional id another principal's ACL covers is
    refused at init with each client's name for TRANSACTIONAL_ID_AUTHORIZATION_FAILED; a free
    one commits."""
    from confluent_kafka import KafkaException, Producer
    from kafka import KafkaProducer
    from kafka.errors import TransactionalIdAuthorizationFailedError

    topic = unique_topic("acl-txn")
    secured.create_topic(topic, 1)
    denied_id = unique_topic("acl-tx-denied")
    _create_acls(secured, _acl(TXN, denied_id, ALL))

    refused = Producer({"bootstrap.servers": secured.bootstrap, "transactional.id": denied_id})
    with pytest.raises(KafkaException) as caught:
        refused.init_transactions(20)
    error = caught.value.args[0]
    # A traceback that holds this frame (the one just caught, or one a client keeps) would keep
    # the producer alive, reconnecting to a stopped broker for the rest of the run.
    del caught, refused
    assert error.name() == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    allowed = Producer({"bootstrap.servers": secured.bootstrap, "transactional.id": unique_topic("acl-tx-ok")})
    allowed.init_transactions(20)
    allowed.begin_transaction()
    allowed.produce(topic, b"v")
    allowed.commit_transaction(20)
    allowed.close()

    kp = KafkaProducer(bootstrap_servers=secured.bootstrap, transactional_id=denied_id)
    try:
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            kp.init_transactions()
    finally:
        kp.close(timeout=5)
