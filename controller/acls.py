"""ACLs: Kafka's ACL model, its validation and filters, and StandardAuthorizer's decision.

Pure (no I/O, no clock), shared by the controller, which validates ACL changes and
turns them into AccessControlEntryRecord / RemoveAccessControlEntryRecord, and the
brokers, which decide every request from the ACLs of the metadata image. The codes
are Kafka's (``org.apache.kafka.common.acl`` and ``.resource``); the decision is
StandardAuthorizerData's: super users are allowed everything; otherwise the ACLs
matching the resource (literal name, the literal wildcard ``*``, and every prefixed
ACL whose prefix starts the name) are checked for the principal (or ``User:*``),
the host (or ``*``) and the operation; any DENY wins over any ALLOW; ALLOW ACLs for
READ, WRITE, DELETE and ALTER imply DESCRIBE and ALTER_CONFIGS implies
DESCRIBE_CONFIGS (DENY ACLs imply nothing); with no ACL on the resource at all the
answer is ``allow.everyone.if.no.acl.found``.
"""

from __future__ import annotations

import bisect
import enum
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final


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


class PatternType(enum.IntEnum):
    """org.apache.kafka.common.resource.PatternType, by code. ANY and MATCH only in filters."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclPermissionType(enum.IntEnum):
    """org.apache.kafka.common.acl.AclPermissionType, by code."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: The literal resource name matching every resource of its type, and the any-host / any-user wildcards.
WILDCARD: Final = "*"
WILDCARD_PRINCIPAL: Final = "User:*"
#: The CLUSTER resource's one name.
CLUSTER_NAME: Final = "kafka-cluster"

_IMPLIES_DESCRIBE: Final = frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                                      AclOperation.DELETE, AclOperation.ALTER})
_IMPLIES_DESCRIBE_CONFIGS: Final = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})


class AclError(ValueError):
    """An ACL or filter Kafka rejects with INVALID_REQUEST; the message is Kafka's."""


def _enum_or_unknown(cls: type[enum.IntEnum], code: int) -> int:
    try:
        return int(cls(code))
    except ValueError:
        return 0  # Kafka maps unknown codes to UNKNOWN


@dataclass(frozen=True, slots=True)
class StandardAcl:
    """One ACL binding: a resource pattern and an access control entry."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    @classmethod
    def of(cls, resource_type: int, resource_name: str, pattern_type: int, principal: str, host: str,
           operation: int, permission: int) -> StandardAcl:
        """From wire codes; codes Kafka does not know become UNKNOWN."""
        return cls(ResourceType(_enum_or_unknown(ResourceType, resource_type)), resource_name,
                   PatternType(_enum_or_unknown(PatternType, pattern_type)), principal, host,
                   AclOperation(_enum_or_unknown(AclOperation, operation)),
                   AclPermissionType(_enum_or_unknown(AclPermissionType, permission)))

    def sort_key(self) -> tuple[int, str, int, str, str, int, int]:
        return (self.resource_type, self.resource_name, self.pattern_type, self.principal, self.host,
                self.operation, self.permission)


def validate_new_acl(acl: StandardAcl) -> None:
    """Kafka's checks of an ACL to create (AclApis and AclControlManager.validateNewAcl)."""
    if acl.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise AclError(f"Invalid resourceType {acl.resource_type.name}")
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise AclError(f"Invalid patternType {acl.pattern_type.name}")
    if acl.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise AclError(f"Invalid operation {acl.operation.name}")
    if acl.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise AclError(f"Invalid permissionType {acl.permission.name}")
    if acl.resource_type == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        raise AclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not acl.resource_name:
        raise AclError("Invalid empty resource name")
    principal_type, colon, principal_name = acl.principal.partition(":")
    if not colon or not principal_type or not principal_name:
        raise AclError(f"Could not parse principal from `{acl.principal}` (no colon is present separating the "
                       "principal type from the principal name)")


@dataclass(frozen=True, slots=True)
class AclFilter:
    """An AclBindingFilter: None (or ANY) fields match everything."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    @classmethod
    def of(cls, resource_type: int, resource_name: str | None, pattern_type: int, principal: str | None,
           host: str | None, operation: int, permission: int) -> AclFilter:
        return cls(ResourceType(_enum_or_unknown(ResourceType, resource_type)), resource_name,
                   PatternType(_enum_or_unknown(PatternType, pattern_type)), principal, host,
                   AclOperation(_enum_or_unknown(AclOperation, operation)),
                   AclPermissionType(_enum_or_unknown(AclPermissionType, permission)))

    def validate(self) -> None:
        """Kafka's AclControlManager.validateFilter: no UNKNOWN element."""
        if self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN:
            raise AclError("Unknown patternFilter.")
        if self.operation == AclOperation.UNKNOWN or self.permission == AclPermissionType.UNKNOWN:
            raise AclError("Unknown entryFilter.")

    def matches(self, acl: StandardAcl) -> bool:
        """Kafka's AclBindingFilter.matches (ResourcePatternFilter and AccessControlEntryFilter)."""
        if self.resource_type not in (ResourceType.ANY, acl.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, acl.pattern_type):
            return False
        if self.resource_name is not None:
            if self.pattern_type in (PatternType.ANY, acl.pattern_type):
                if self.resource_name != acl.resource_name:
                    return False
            elif acl.pattern_type == PatternType.LITERAL:  # MATCH
                if acl.resource_name not in (self.resource_name, WILDCARD):
                    return False
            elif acl.pattern_type == PatternType.PREFIXED:
                if not self.resource_name.startswith(acl.resource_name):
                    return False
            else:
                return False
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation not in (AclOperation.ANY, acl.operation):
            return False
        return self.permission in (AclPermissionType.ANY, acl.permission)


def _entry_result(acl: StandardAcl, principals: tuple[str, str], host: str,
                  operation: AclOperation) -> AclPermissionType | None:
    """StandardAuthorizerData.findResult: what one ACL says about an action, if anything."""
    if acl.principal not in principals:
        return None
    if acl.host != WILDCARD and acl.host != host:
        return None
    if acl.operation != AclOperation.ALL:
        if acl.permission == AclPermissionType.ALLOW:
            if operation == AclOperation.DESCRIBE:
                if acl.operation not in _IMPLIES_DESCRIBE:
                    return None
            elif operation == AclOperation.DESCRIBE_CONFIGS:
                if acl.operation not in _IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif acl.operation != operation:
                return None
        elif acl.operation != operation:
            return None
    return acl.permission


@dataclass(frozen=True, slots=True)
class Decision:
    """An authorization answer and the ACL that decided it (None: super user or default rule)."""

    allowed: bool
    acl: StandardAcl | None = None
    reason: str = ""


@dataclass(slots=True)
class AclIndex:
    """The ACLs by resource type and literal name, and prefixed ACLs by sorted prefix lengths.

    A decision looks up the literal name, the wildcard, and one prefix per distinct
    prefix length not longer than the name: no scan of the whole ACL set.
    """

    literal: dict[tuple[ResourceType, str], list[StandardAcl]] = field(default_factory=dict)
    prefixed: dict[tuple[ResourceType, str], list[StandardAcl]] = field(default_factory=dict)
    prefix_lengths: dict[ResourceType, list[int]] = field(default_factory=dict)
    by_type: dict[ResourceType, list[StandardAcl]] = field(default_factory=dict)

    @classmethod
    def build(cls, acls: Iterable[StandardAcl]) -> AclIndex:
        index = cls()
        lengths: dict[ResourceType, set[int]] = {}
        for acl in acls:
            index.by_type.setdefault(acl.resource_type, []).append(acl)
            key = (acl.resource_type, acl.resource_name)
            if acl.pattern_type == PatternType.PREFIXED:
                index.prefixed.setdefault(key, []).append(acl)
                lengths.setdefault(acl.resource_type, set()).add(len(acl.resource_name))
            else:
                index.literal.setdefault(key, []).append(acl)
        index.prefix_lengths = {rt: sorted(ls) for rt, ls in lengths.items()}
        return index

    def matching(self, resource_type: ResourceType, name: str) -> Iterable[StandardAcl]:
        """Every ACL whose resource pattern covers ``name``."""
        yield from self.literal.get((resource_type, name), ())
        if name != WILDCARD:
            yield from self.literal.get((resource_type, WILDCARD), ())
        lengths = self.prefix_lengths.get(resource_type)
        if lengths:
            for length in lengths[: bisect.bisect_right(lengths, len(name))]:
                yield from self.prefixed.get((resource_type, name[:length]), ())


@dataclass(frozen=True, slots=True)
class AuthorizerRules:
    """``super.users`` and ``allow.everyone.if.no.acl.found``."""

    super_users: frozenset[str] = frozenset()
    allow_if_no_acl: bool = False


def authorize(index: AclIndex, rules: AuthorizerRules, principal: str, host: str,
              operation: AclOperation, resource_type: ResourceType, name: str) -> Decision:
    """StandardAuthorizerData.authorize for one action."""
    if principal in rules.super_users:
        return Decision(True, reason="super user")
    principals = (principal, WILDCARD_PRINCIPAL)
    found = False
    allow: StandardAcl | None = None
    for acl in index.matching(resource_type, name):
        found = True
        result = _entry_result(acl, principals, host, operation)
        if result == AclPermissionType.DENY:
            return Decision(False, acl, "denied by ACL")
        if result == AclPermissionType.ALLOW and allow is None:
            allow = acl
    if allow is not None:
        return Decision(True, allow, "allowed by ACL")
    if not found:
        return Decision(rules.allow_if_no_acl, reason="no ACL on the resource")
    return Decision(False, reason="no matching ALLOW ACL")


def authorize_by_resource_type(index: AclIndex, rules: AuthorizerRules, principal: str, host: str,
                               operation: AclOperation, resource_type: ResourceType) -> bool:
    """Kafka's Authorizer.authorizeByResourceType: may the principal do ``operation`` on *some*
    resource of the type? True when an ALLOW ACL (the operation or ALL) is not cancelled by a
    DENY ACL covering the same names; the wildcard DENY cancels everything."""
    if principal in rules.super_users:
        return True
    principals = (principal, WILDCARD_PRINCIPAL)
    acls = index.by_type.get(resource_type, [])
    if not acls and rules.allow_if_no_acl:
        return True

    def applies(acl: StandardAcl) -> bool:
        return (acl.principal in principals and acl.host in (WILDCARD, host)
                and acl.operation in (AclOperation.ALL, operation))

    deny_literal: set[str] = set()
    deny_prefixes: list[str] = []
    for acl in acls:
        if acl.permission == AclPermissionType.DENY and applies(acl):
            if acl.pattern_type == PatternType.LITERAL:
                if acl.resource_name == WILDCARD:
                    return False
                deny_literal.add(acl.resource_name)
            else:
                deny_prefixes.append(acl.resource_name)
    for acl in acls:
        if acl.permission != AclPermissionType.ALLOW or not applies(acl):
            continue
        name = acl.resource_name
        if acl.pattern_type == PatternType.LITERAL and name in deny_literal:
            continue
        if any(name.startswith(p) for p in deny_prefixes):
            continue
        return True
    return False


def matching_ids(acls: Mapping[uuid.UUID, StandardAcl], flt: AclFilter) -> list[uuid.UUID]:
    """Ids of the ACLs a filter matches, in a stable order."""
    return sorted((acl_id for acl_id, acl in acls.items() if flt.matches(acl)),
                  key=lambda i: acls[i].sort_key())


def parse_super_users(text: str | None) -> frozenset[str]:
    """``super.users``: principals separated by semicolons, as Kafka."""
    return frozenset(p.strip() for p in (text or "").split(";") if p.strip())
