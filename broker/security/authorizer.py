"""The node's authorizer: Kafka's StandardAuthorizer over the ACLs of the metadata image.

Built when ``authorizer.class.name`` names StandardAuthorizer; every broker replays
the same AccessControlEntryRecords, so every broker decides alike, and a change
reaches a broker as soon as its image has the record. The index is rebuilt only
when the image's ACL map changes (images share unchanged parts, so an identity
check suffices). Denials, and allowed mutations (create, delete, alter, alter
configs), go to the audit log (:mod:`broker.security.audit_log`, Kafka's ``kafka.authorizer.logger``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from broker.security.audit_log import AuditLog
from controller.acls import (
    AclIndex,
    AclOperation,
    AuthorizerRules,
    Decision,
    ResourceType,
    StandardAcl,
    authorize,
    authorize_by_resource_type,
)
from controller.image import MetadataImage

#: Operations whose ALLOW is logged too (every DENY is): the ones that change something.
MUTATIONS = frozenset({AclOperation.CREATE, AclOperation.DELETE, AclOperation.ALTER, AclOperation.ALTER_CONFIGS})


class StandardAuthorizer:
    def __init__(self, rules: AuthorizerRules, image: Callable[[], MetadataImage],
                 audit: AuditLog | None = None) -> None:
        self.rules = rules
        self.audit = audit if audit is not None else AuditLog()
        self._image = image
        self._acls: Mapping[Any, StandardAcl] | None = None
        self._index = AclIndex()

    def index(self) -> AclIndex:
        acls = self._image().acls
        if acls is not self._acls:
            self._index = AclIndex.build(acls.values())
            self._acls = acls
        return self._index

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str, log_denied: bool = True, listener: str = "", api: str = "",
                  log_allowed: bool | None = None) -> Decision:
        """``log_denied`` False: a probe (authorized-operation bits, filtering a listing), not logged
        unless ``log_allowed`` says an allowed mutation is (Kafka's logIfAllowed, logIfDenied)."""
        decision = authorize(self.index(), self.rules, principal, host, operation, resource_type, name)
        logged = (log_denied if log_allowed is None else log_allowed) if decision.allowed else log_denied
        if not logged or (decision.allowed and operation not in MUTATIONS):
            return decision
        acl = decision.acl
        self.audit.decision(decision.allowed, principal=principal, host=host, listener=listener, api=api,
                            operation=operation.name, resource_type=resource_type.name, resource_name=name,
                            reason=decision.reason,
                            acl=None if acl is None else f"{acl.pattern_type.name}:{acl.resource_name}")
        return decision

    def authorize_by_resource_type(self, principal: str, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        return authorize_by_resource_type(self.index(), self.rules, principal, host, operation, resource_type)
