"""ACLs (DescribeAcls, CreateAcls, DeleteAcls) and client quotas (DescribeClientQuotas,
AlterClientQuotas): read when a page asks, changed one binding or one quota at a time.

The numbers are Kafka's (``org.apache.kafka.common.acl`` and ``resource`` enums).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from broker.console.actions import ActionError
from broker.console.kafka import ClusterClient
from broker.tools.client import ClientError
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
from wire.generated.api_048_describe_client_quotas import (
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from wire.generated.api_049_alter_client_quotas import (
    AlterClientQuotasRequest,
    AlterClientQuotasRequestEntityData,
    AlterClientQuotasRequestEntryData,
    AlterClientQuotasRequestOpData,
    AlterClientQuotasResponse,
)
from wire.primitives import Message

_R = TypeVar("_R", bound=Message)

RESOURCE_TYPES = {2: "TOPIC", 3: "GROUP", 4: "CLUSTER", 5: "TRANSACTIONAL_ID", 6: "DELEGATION_TOKEN", 7: "USER"}
PATTERN_TYPES = {3: "LITERAL", 4: "PREFIXED"}
OPERATIONS = {2: "ALL", 3: "READ", 4: "WRITE", 5: "CREATE", 6: "DELETE", 7: "ALTER", 8: "DESCRIBE",
              9: "CLUSTER_ACTION", 10: "DESCRIBE_CONFIGS", 11: "ALTER_CONFIGS", 12: "IDEMPOTENT_WRITE",
              13: "CREATE_TOKENS", 14: "DESCRIBE_TOKENS"}
PERMISSIONS = {2: "DENY", 3: "ALLOW"}
ANY = 1
MATCH = 2
#: The quota keys Kafka knows for users and client ids.
QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")
QUOTA_ENTITY_TYPES = ("user", "client-id")


def quota_text(value: float | None) -> str:
    """A quota as kafka-configs.sh shows it: whole numbers without a fraction."""
    if value is None:
        return "-"
    return str(int(value)) if value.is_integer() else repr(value)


def code_of(names: dict[int, str], name: str) -> int:
    for code, known in names.items():
        if known == name.strip().upper():
            return code
    raise ActionError(f"unknown {name!r}: one of {', '.join(names.values())}")


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    resource_type: str
    resource_name: str
    pattern_type: str
    principal: str
    host: str
    operation: str
    permission: str


@dataclass(frozen=True, slots=True)
class AclListing:
    bindings: tuple[AclBinding, ...]
    #: False when the cluster has no authorizer (SECURITY_DISABLED).
    enabled: bool


def describe_acls(client: ClusterClient, principal: str = "", resource: str = "") -> AclListing:
    """Every binding, or those of ``principal`` and on resources named like ``resource``."""
    request = DescribeAclsRequest(resource_type_filter=ANY, resource_name_filter=None, pattern_type_filter=ANY,
                                  principal_filter=principal.strip() or None, host_filter=None,
                                  operation=ANY, permission_type=ANY)
    response = client.any_broker(request, DescribeAclsResponse)
    if response.error_code == ErrorCode.SECURITY_DISABLED:
        return AclListing((), False)
    _check(response.error_code, response.error_message)
    wanted = resource.strip().lower()
    return AclListing(tuple(sorted(
        AclBinding(RESOURCE_TYPES.get(r.resource_type, str(r.resource_type)), r.resource_name,
                   PATTERN_TYPES.get(r.pattern_type, str(r.pattern_type)), a.principal, a.host,
                   OPERATIONS.get(a.operation, str(a.operation)), PERMISSIONS.get(a.permission_type, str(a.permission_type)))
        for r in response.resources if not wanted or wanted in r.resource_name.lower() for a in r.acls)
        ), True)


def create_acl(client: ClusterClient, b: AclBinding) -> None:
    creation = CreateAclsRequestAclCreation(
        resource_type=code_of(RESOURCE_TYPES, b.resource_type), resource_name=b.resource_name,
        resource_pattern_type=code_of(PATTERN_TYPES, b.pattern_type), principal=b.principal, host=b.host,
        operation=code_of(OPERATIONS, b.operation), permission_type=code_of(PERMISSIONS, b.permission))
    response = _send(client, CreateAclsRequest(creations=[creation]), CreateAclsResponse)
    for result in response.results:
        _check(result.error_code, result.error_message)


def delete_acl(client: ClusterClient, b: AclBinding) -> int:
    """Delete exactly binding ``b``; the number of bindings deleted."""
    exact = DeleteAclsRequestDeleteAclsFilter(
        resource_type_filter=code_of(RESOURCE_TYPES, b.resource_type), resource_name_filter=b.resource_name,
        pattern_type_filter=code_of(PATTERN_TYPES, b.pattern_type), principal_filter=b.principal,
        host_filter=b.host, operation=code_of(OPERATIONS, b.operation),
        permission_type=code_of(PERMISSIONS, b.permission))
    response = _send(client, DeleteAclsRequest(filters=[exact]), DeleteAclsResponse)
    deleted = 0
    for result in response.filter_results:
        _check(result.error_code, result.error_message)
        for matching in result.matching_acls:
            _check(matching.error_code, matching.error_message)
            deleted += 1
    return deleted


@dataclass(frozen=True, slots=True)
class QuotaEntry:
    #: (entity type, name); a name of None is the type's default entity.
    entity: tuple[tuple[str, str | None], ...]
    values: tuple[tuple[str, float], ...]

    @property
    def label(self) -> str:
        return ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in self.entity)


def describe_quotas(client: ClusterClient) -> tuple[QuotaEntry, ...]:
    response = client.any_broker(DescribeClientQuotasRequest(components=[], strict=False),
                                 DescribeClientQuotasResponse)
    _check(response.error_code, response.error_message)
    return tuple(sorted((QuotaEntry(tuple((e.entity_type, e.entity_name) for e in entry.entity),
                                    tuple(sorted((v.key, v.value) for v in entry.values)))
                         for entry in response.entries or []), key=lambda q: q.label))


def alter_quota(client: ClusterClient, entity_type: str, entity_name: str | None, key: str,
                value: float | None) -> None:
    """Set ``key`` to ``value`` for the entity, or remove it when ``value`` is None."""
    op = AlterClientQuotasRequestOpData(key=key, value=value or 0.0, remove=value is None)
    entry = AlterClientQuotasRequestEntryData(
        entity=[AlterClientQuotasRequestEntityData(entity_type=entity_type, entity_name=entity_name)], ops=[op])
    response = _send(client, AlterClientQuotasRequest(entries=[entry]), AlterClientQuotasResponse)
    for result in response.entries:
        _check(result.error_code, result.error_message)


def _check(code: int, message: str | None) -> None:
    if code != ErrorCode.NONE:
        name = ErrorCode.for_code(code).name
        raise ActionError(f"{name}: {message}" if message else name)


def _send(client: ClusterClient, request: Message, response_type: type[_R]) -> _R:
    try:
        return client.any_broker(request, response_type)
    except ClientError as ex:
        raise ActionError(str(ex)) from ex
