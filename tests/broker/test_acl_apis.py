"""CreateAcls, DescribeAcls and DeleteAcls against a real broker process.

One broker runs with the StandardAuthorizer and ``super.users=User:ANONYMOUS`` (every
PLAINTEXT client is User:ANONYMOUS, so the test client may manage ACLs); one without
an authorizer answers SECURITY_DISABLED, as Kafka. The ACLs survive a restart (they
are metadata records).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from broker.tools.client import KafkaClient
from tests.broker.broker_process import BrokerProcess
from wire.errors import ErrorCode
from wire.generated.api_029_describe_acls import DescribeAclsRequest, DescribeAclsResponse
from wire.generated.api_030_create_acls import (
    CreateAclsRequest,
    CreateAclsRequestAclCreation,
    CreateAclsResponse,
)
from wire.generated.api_031_delete_acls import (
    DeleteAclsRequest,
    DeleteAclsRequestDeleteAclsFilter,
    DeleteAclsResponse,
)
from wire.generated.api_060_describe_cluster import DescribeClusterRequest, DescribeClusterResponse

AUTHORIZER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "super.users": "User:ANONYMOUS"}
TOPIC, GROUP, CLUSTER = 2, 3, 4
ANY, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
READ, WRITE, ALTER, DESCRIBE = 3, 4, 7, 8
DENY, ALLOW = 2, 3


def creation(name: str, op: int = READ, principal: str = "User:alice", rt: int = TOPIC, pattern: int = LITERAL,
             perm: int = ALLOW) -> CreateAclsRequestAclCreation:
    return CreateAclsRequestAclCreation(resource_type=rt, resource_name=name, resource_pattern_type=pattern,
                                        principal=principal, host="*", operation=op, permission_type=perm)


def describe_all(c: KafkaClient, **kw: object) -> DescribeAclsResponse:
    request = DescribeAclsRequest(resource_type_filter=ANY, resource_name_filter=None, pattern_type_filter=ANY,
                                  principal_filter=None, host_filter=None, operation=ANY, permission_type=ANY)
    for key, value in kw.items():
        setattr(request, key, value)
    return c.send(request, DescribeAclsResponse)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("acls") / "data", AUTHORIZER).start()
    try:
        yield b
    finally:
        assert b.stop() == 0, b.logs()[-3000:]


def test_create_describe_delete_survive_restart(broker: BrokerProcess) -> None:
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        created = c.send(CreateAclsRequest(creations=[
            creation("orders"), creation("tenant-a.", WRITE, pattern=PREFIXED), creation("g1", READ, rt=GROUP),
            creation("orders"),  # a duplicate succeeds without a second ACL
            creation("x", READ, principal="alice"), creation("other", ALTER, rt=CLUSTER),
            creation("", READ), creation("x", ANY),
        ]), CreateAclsResponse)
        codes = [r.error_code for r in created.results]
        assert codes == [0, 0, 0, 0] + [ErrorCode.INVALID_REQUEST] * 4
        assert "kafka-cluster" in (created.results[5].error_message or "")
        listed = describe_all(c)
        assert listed.error_code == 0
        assert {(r.resource_type, r.resource_name, r.pattern_type, len(r.acls)) for r in listed.resources} == {
            (TOPIC, "orders", LITERAL, 1), (TOPIC, "tenant-a.", PREFIXED, 1), (GROUP, "g1", LITERAL, 1)}
        matched = describe_all(c, resource_type_filter=TOPIC, resource_name_filter="tenant-a.x",
                               pattern_type_filter=MATCH)
        assert [r.resource_name for r in matched.resources] == ["tenant-a."]
        bad = describe_all(c, operation=0)
        assert bad.error_code == ErrorCode.INVALID_REQUEST
    broker.stop()
    broker.start()
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        assert len(describe_all(c).resources) == 3
        deleted = c.send(DeleteAclsRequest(filters=[
            DeleteAclsRequestDeleteAclsFilter(resource_type_filter=TOPIC, resource_name_filter=None,
                                              pattern_type_filter=ANY, principal_filter="User:alice",
                                              host_filter=None, operation=ANY, permission_type=ANY),
            DeleteAclsRequestDeleteAclsFilter(resource_type_filter=TOPIC, resource_name_filter="orders",
                                              pattern_type_filter=LITERAL, principal_filter=None,
                                              host_filter=None, operation=ANY, permission_type=ANY),
            DeleteAclsRequestDeleteAclsFilter(resource_type_filter=0, resource_name_filter=None,
                                              pattern_type_filter=ANY, principal_filter=None,
                                              host_filter=None, operation=ANY, permission_type=ANY),
        ]), DeleteAclsResponse)
        results = deleted.filter_results
        assert sorted(m.resource_name for m in results[0].matching_acls) == ["orders", "tenant-a."]
        assert [m.resource_name for m in results[1].matching_acls] == ["orders"]
        assert results[2].error_code == ErrorCode.INVALID_REQUEST
        assert [(r.resource_type, r.resource_name) for r in describe_all(c).resources] == [(GROUP, "g1")]
    # The audit lines: allowed mutations (here ACL changes, ALTER on the cluster by a super user).
    allowed = [line for line in broker.logs().splitlines() if "authorization_allowed" in line]
    assert allowed and all("User:ANONYMOUS" in line and "ALTER" in line for line in allowed), allowed[:3]


def test_without_authorizer_security_disabled(tmp_path_factory: pytest.TempPathFactory) -> None:
    b = BrokerProcess(tmp_path_factory.mktemp("noauth") / "data").start()
    try:
        with KafkaClient.connect(b.bootstrap, timeout_s=20) as c:
            created = c.send(CreateAclsRequest(creations=[creation("t")]), CreateAclsResponse)
            assert created.results[0].error_code == ErrorCode.SECURITY_DISABLED
            assert describe_all(c).error_code == ErrorCode.SECURITY_DISABLED
            deleted = c.send(DeleteAclsRequest(filters=[DeleteAclsRequestDeleteAclsFilter(
                resource_type_filter=ANY, pattern_type_filter=ANY, operation=ANY, permission_type=ANY)]),
                DeleteAclsResponse)
            assert deleted.filter_results[0].error_code == ErrorCode.SECURITY_DISABLED
    finally:
        assert b.stop() == 0


def test_cluster_alter_needed(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Without super user rights or an ACL, ANONYMOUS may not manage ACLs; DESCRIBE on the cluster
    (implied by ALTER) lets it list them."""
    b = BrokerProcess(tmp_path_factory.mktemp("noacl") / "data",
                      {"authorizer.class.name": AUTHORIZER["authorizer.class.name"]}).start()
    try:
        with KafkaClient.connect(b.bootstrap, timeout_s=20) as c:
            created = c.send(CreateAclsRequest(creations=[creation("t")]), CreateAclsResponse)
            assert created.results[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            assert describe_all(c).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            cluster = c.send(DescribeClusterRequest(include_cluster_authorized_operations=True),
                             DescribeClusterResponse)
            assert cluster.cluster_authorized_operations == 0
        denied = [line for line in b.logs().splitlines() if "authorization_denied" in line]
        assert any("CLUSTER" in line and "127.0.0.1" in line and "PLAINTEXT" in line for line in denied), denied
    finally:
        assert b.stop() == 0
