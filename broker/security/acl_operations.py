"""Authorization checks of handlers (Kafka's AuthHelper) and the authorized-operations bit sets.

Every handler asks here: :func:`authorize` for one action on one resource,
:func:`authorized_names` to filter a list, :func:`authorize_by_resource_type` for
"some resource of this type" (idempotent producers). Without an authorizer
(``authorizer.class.name`` empty) everything is allowed, as in Kafka.

Metadata (v8+ topics, v8-10 cluster), DescribeCluster, DescribeTopicPartitions and
DescribeGroups (v3+) report, per resource, the operations the caller may perform as a
32-bit field with bit ``code`` set for each AclOperation (Kafka's ``Utils.to32BitField``):
the supported operations of the resource type (``AclEntry.supportedOperations``) that the
authorizer allows. A field not asked for stays :data:`OPERATIONS_NOT_REQUESTED` (the
schemas' default, INT32_MIN).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Final, TypeVar

from controller.acls import CLUSTER_NAME, AclOperation, ResourceType
from wire.errors import ErrorCode

if TYPE_CHECKING:
    from broker.server.dispatch import RequestContext

__all__ = [
    "CLUSTER_NAME",
    "OPERATIONS_NOT_REQUESTED",
    "SUPPORTED_OPERATIONS",
    "AclOperation",
    "ResourceType",
    "authorize",
    "authorize_by_resource_type",
    "authorize_cluster",
    "authorized_names",
    "authorized_operations",
    "checker",
    "config_resource_denied",
    "init_producer_id_denied",
    "replica_or_topic_checker",
    "to_bit_field",
    "txn_offset_commit_denied",
]

#: The schemas' default for an authorized-operations field: not requested.
OPERATIONS_NOT_REQUESTED: Final = -(2**31)

_O = AclOperation
#: Kafka's AclEntry.supportedOperations (3.9) for each concrete resource type. Kafka 4 adds
#: DESCRIBE_CONFIGS and ALTER_CONFIGS to GROUP with group configs, which Cormorant does not have.
SUPPORTED_OPERATIONS: Final[Mapping[ResourceType, frozenset[AclOperation]]] = {
    ResourceType.TOPIC: frozenset({_O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER,
                                   _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({_O.READ, _O.DESCRIBE, _O.DELETE}),
    ResourceType.CLUSTER: frozenset({_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS,
                                     _O.IDEMPOTENT_WRITE, _O.ALTER, _O.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({_O.DESCRIBE, _O.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({_O.DESCRIBE}),
    ResourceType.USER: frozenset({_O.CREATE_TOKENS, _O.DESCRIBE_TOKENS}),
}


def to_bit_field(operations: Iterable[AclOperation]) -> int:
    """Kafka's ``Utils.to32BitField``: bit ``code`` set for each operation."""
    field = 0
    for op in operations:
        if not 0 <= op < 32:
            raise ValueError(f"operation code {int(op)} does not fit a 32-bit field")
        field |= 1 << op
    return field - (1 << 32) if field & (1 << 31) else field


_EVERY_SUPPORTED: Final = {rt: to_bit_field(ops) for rt, ops in SUPPORTED_OPERATIONS.items()}
_N = TypeVar("_N", bound=str | None)


def authorize(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType, name: str,
              log_denied: bool = True, log_allowed: bool | None = None) -> bool:
    """Whether the caller of ``ctx`` may perform ``operation`` on one resource."""
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return True
    return authorizer.authorize(str(ctx.principal), ctx.client_host, operation, resource_type, name,
                                log_denied, ctx.conn.listener, _api_name(ctx.header.request_api_key),
                                log_allowed).allowed


def _api_name(api_key: int) -> str:
    from wire.generated.registry import API_SPECS

    spec = API_SPECS.get(api_key)
    return spec.name if spec is not None else str(api_key)


def authorize_cluster(ctx: RequestContext, operation: AclOperation, log_denied: bool = True,
                      log_allowed: bool | None = None) -> bool:
    return authorize(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME, log_denied, log_allowed)


def authorized_names(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType,
                     names: Iterable[_N], log_denied: bool = True) -> set[_N]:
    """The names among ``names`` the caller may act on (Kafka's AuthHelper.filterByAuthorized)."""
    return {n for n in set(names) if n is not None and authorize(ctx, operation, resource_type, n, log_denied)}


def authorize_by_resource_type(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType) -> bool:
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return True
    return authorizer.authorize_by_resource_type(str(ctx.principal), ctx.client_host, operation, resource_type)


def authorized_operations(ctx: RequestContext, resource_type: ResourceType, resource_name: str) -> int:
    """The bit field of what the caller of ``ctx`` may do to one resource.

    No authorizer: every operation the resource type supports, as Kafka answers.
    """
    if ctx.services.authorizer is None:
        return _EVERY_SUPPORTED[resource_type]
    if resource_type == ResourceType.CLUSTER and not authorize_cluster(ctx, AclOperation.DESCRIBE, log_denied=False):
        return 0  # Metadata and DescribeCluster report nothing to whoever may not describe the cluster
    return to_bit_field(op for op in SUPPORTED_OPERATIONS[resource_type]
                        if authorize(ctx, op, resource_type, resource_name, log_denied=False))


def checker(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType) -> Callable[[str], bool]:
    """A cached per-name check, for handlers that meet the same name once per partition."""
    if ctx.services.authorizer is None:
        return _always
    seen: dict[str, bool] = {}

    def check(name: str) -> bool:
        if name not in seen:
            seen[name] = authorize(ctx, operation, resource_type, name)
        return seen[name]

    return check


def _always(name: str) -> bool:
    del name
    return True


def replica_or_topic_checker(ctx: RequestContext, replica_id: int, operation: AclOperation) -> Callable[[str], bool]:
    """Fetch and OffsetForLeaderEpoch: a follower (replica id >= 0) needs CLUSTER_ACTION for
    every partition (TOPIC_AUTHORIZATION_FAILED otherwise, as Kafka); a consumer ``operation``
    on each topic."""
    if replica_id >= 0:
        return _always if authorize_cluster(ctx, AclOperation.CLUSTER_ACTION) else _never
    return checker(ctx, operation, ResourceType.TOPIC)


def _never(name: str) -> bool:
    del name
    return False


def init_producer_id_denied(ctx: RequestContext, transactional_id: str | None) -> ErrorCode | None:
    """InitProducerId: WRITE on the transactional id; an idempotent producer needs IDEMPOTENT_WRITE
    on the cluster or WRITE on some topic (Kafka's KafkaApis)."""
    if transactional_id is not None:
        if not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return None
    if authorize_cluster(ctx, AclOperation.IDEMPOTENT_WRITE, log_denied=False) or authorize_by_resource_type(
            ctx, AclOperation.WRITE, ResourceType.TOPIC):
        return None
    return ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def txn_offset_commit_denied(ctx: RequestContext, transactional_id: str, group_id: str) -> ErrorCode | None:
    """TxnOffsetCommit: WRITE on the transactional id, then READ on the group."""
    if not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    return None


#: ConfigResource.Type TOPIC; every other config resource (broker, broker logger, client metrics) is the cluster's.
_TOPIC_CONFIGS = 2


def config_resource_denied(ctx: RequestContext, resource_type: int, name: str, alter: bool) -> ErrorCode | None:
    """DescribeConfigs / (Incremental)AlterConfigs: DESCRIBE_CONFIGS or ALTER_CONFIGS on the topic,
    or on the cluster for broker-level resources (Kafka's ConfigAdminManager / ConfigHelper)."""
    operation = AclOperation.ALTER_CONFIGS if alter else AclOperation.DESCRIBE_CONFIGS
    if resource_type == _TOPIC_CONFIGS:
        return None if authorize(ctx, operation, ResourceType.TOPIC, name) else ErrorCode.TOPIC_AUTHORIZATION_FAILED
    return None if authorize_cluster(ctx, operation) else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
