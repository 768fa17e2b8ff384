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

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Final, TypeVar

from controller.acls import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from broker.dispatch import RequestContext

__all__ = [
    "CLUSTER_NAME", "OPERATIONS_NOT_REQUESTED", "SUPPORTED_OPERATIONS", "AclOperation", "ResourceType",
    "authorize", "authorize_by_resource_type", "authorize_cluster", "authorized_names",
    "authorized_operations", "to_bit_field",
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
              log_denied: bool = True) -> bool:
    """Whether the caller of ``ctx`` may perform ``operation`` on one resource."""
    authorizer = ctx.node.authorizer
    if authorizer is None:
        return True
    return authorizer.authorize(str(ctx.principal), ctx.client_host, operation, resource_type, name,
                                log_denied).allowed


def authorize_cluster(ctx: RequestContext, operation: AclOperation) -> bool:
    return authorize(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def authorized_names(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType,
                     names: Iterable[_N], log_denied: bool = True) -> set[_N]:
    """The names among ``names`` the caller may act on (Kafka's AuthHelper.filterByAuthorized)."""
    return {n for n in set(names) if n is not None and authorize(ctx, operation, resource_type, n, log_denied)}


def authorize_by_resource_type(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType) -> bool:
    authorizer = ctx.node.authorizer
    if authorizer is None:
        return True
    return authorizer.authorize_by_resource_type(str(ctx.principal), ctx.client_host, operation, resource_type)


def authorized_operations(ctx: RequestContext, resource_type: ResourceType, resource_name: str) -> int:
    """The bit field of what the caller of ``ctx`` may do to one resource.

    No authorizer: every operation the resource type supports, as Kafka answers.
    """
    if ctx.node.authorizer is None:
        return _EVERY_SUPPORTED[resource_type]
    return to_bit_field(op for op in SUPPORTED_OPERATIONS[resource_type]
                        if authorize(ctx, op, resource_type, resource_name, log_denied=False))
