"""Authorized operations: Kafka's AclOperation codes and the bit sets responses carry.

Metadata (v8+ topics, v8-10 cluster), DescribeCluster, DescribeTopicPartitions and
DescribeGroups (v3+) report, per resource, the operations the caller may perform as a
32-bit field with bit ``code`` set for each AclOperation (Kafka's ``Utils.to32BitField``).
Without an authorizer Kafka reports every operation the resource type supports
(``AclEntry.supportedOperations``); :func:`authorized_operations` is the one place that
decides, so an authorizer replaces it alone. A field not asked for stays
:data:`OPERATIONS_NOT_REQUESTED` (the schemas' default, INT32_MIN).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from broker.dispatch import RequestContext

#: The schemas' default for an authorized-operations field: not requested.
OPERATIONS_NOT_REQUESTED: Final = -(2**31)


class AclOperation(enum.IntEnum):
    """org.apache.kafka.common.acl.AclOperation, by code."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class ResourceType(enum.IntEnum):
    """org.apache.kafka.common.resource.ResourceType, by code."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


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
#: The CLUSTER resource's one name.
CLUSTER_NAME: Final = "kafka-cluster"


def to_bit_field(operations: Iterable[AclOperation]) -> int:
    """Kafka's ``Utils.to32BitField``: bit ``code`` set for each operation."""
    field = 0
    for op in operations:
        if not 0 <= op < 32:
            raise ValueError(f"operation code {int(op)} does not fit a 32-bit field")
        field |= 1 << op
    return field - (1 << 32) if field & (1 << 31) else field


_EVERY_SUPPORTED: Final = {rt: to_bit_field(ops) for rt, ops in SUPPORTED_OPERATIONS.items()}


def authorized_operations(ctx: RequestContext, resource_type: ResourceType, resource_name: str) -> int:
    """The bit field of what the caller of ``ctx`` may do to one resource.

    No authorizer: every operation the resource type supports, as Kafka answers.
    """
    del ctx, resource_name  # what an authorizer decides on
    return _EVERY_SUPPORTED[resource_type]
