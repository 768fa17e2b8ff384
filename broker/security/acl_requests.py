"""ACL changes in wire form: CreateAcls/DeleteAcls entries to and from :mod:`controller.acls`,
and their forwarding from a broker to the active controller (as Kafka's brokers forward them)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from controller.acls import AclFilter, StandardAcl
from controller.image import MetadataImage
from wire.errors import ErrorCode
from wire.generated.api_030_create_acls import (
    CreateAclsRequest,
    CreateAclsRequestAclCreation,
    CreateAclsResponse,
)
from wire.generated.api_031_delete_acls import (
    DeleteAclsRequest,
    DeleteAclsRequestDeleteAclsFilter,
    DeleteAclsResponse,
    DeleteAclsResponseDeleteAclsMatchingAcl,
)

if TYPE_CHECKING:
    from broker.cluster.controller_channel import ControllerChannel

WaitForImage = Callable[[Callable[[MetadataImage], bool], float], Awaitable[bool]]
DeleteOutcome = tuple[ErrorCode, str | None, list[StandardAcl]]


def acl_of_creation(c: CreateAclsRequestAclCreation) -> StandardAcl:
    return StandardAcl.of(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host,
                          c.operation, c.permission_type)


def creation_of(acl: StandardAcl) -> CreateAclsRequestAclCreation:
    return CreateAclsRequestAclCreation(
        resource_type=acl.resource_type, resource_name=acl.resource_name, resource_pattern_type=acl.pattern_type,
        principal=acl.principal, host=acl.host, operation=acl.operation, permission_type=acl.permission)


def filter_of_wire(f: DeleteAclsRequestDeleteAclsFilter) -> AclFilter:
    return AclFilter.of(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter, f.principal_filter,
                        f.host_filter, f.operation, f.permission_type)


def wire_of_filter(f: AclFilter) -> DeleteAclsRequestDeleteAclsFilter:
    return DeleteAclsRequestDeleteAclsFilter(
        resource_type_filter=f.resource_type, resource_name_filter=f.resource_name, pattern_type_filter=f.pattern_type,
        principal_filter=f.principal, host_filter=f.host, operation=f.operation, permission_type=f.permission)


def matching_acl_of(acl: StandardAcl) -> DeleteAclsResponseDeleteAclsMatchingAcl:
    return DeleteAclsResponseDeleteAclsMatchingAcl(
        error_code=0, error_message=None, resource_type=acl.resource_type, resource_name=acl.resource_name,
        pattern_type=acl.pattern_type, principal=acl.principal, host=acl.host, operation=acl.operation,
        permission_type=acl.permission)


def acl_of_matching(m: DeleteAclsResponseDeleteAclsMatchingAcl) -> StandardAcl:
    return StandardAcl.of(m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host, m.operation,
                          m.permission_type)


async def forward_create_acls(channel: ControllerChannel, timeout_s: float, wait_for_image: WaitForImage,
                              wait_s: float, acls: Sequence[StandardAcl]) -> list[tuple[ErrorCode, str | None]]:
    """CreateAcls at the active controller; returns once this broker's image has the new ACLs."""
    reply = await channel.send_to_active(
        CreateAclsRequest(creations=[creation_of(a) for a in acls]), CreateAclsResponse, timeout_s=timeout_s,
        not_controller=lambda r: any(x.error_code == ErrorCode.NOT_CONTROLLER for x in r.results))
    out = [(ErrorCode.for_code(r.error_code), r.error_message) for r in reply.results]
    created = {acl for acl, (code, _) in zip(acls, out, strict=False) if code == ErrorCode.NONE}
    if created:
        await wait_for_image(lambda image: created <= set(image.acls.values()), wait_s)
    return out


async def forward_delete_acls(channel: ControllerChannel, timeout_s: float, wait_for_image: WaitForImage,
                              wait_s: float, filters: Sequence[AclFilter]) -> list[DeleteOutcome]:
    """DeleteAcls at the active controller; returns once this broker's image has lost the ACLs."""
    reply = await channel.send_to_active(
        DeleteAclsRequest(filters=[wire_of_filter(f) for f in filters]), DeleteAclsResponse, timeout_s=timeout_s,
        not_controller=lambda r: any(x.error_code == ErrorCode.NOT_CONTROLLER for x in r.filter_results))
    out: list[DeleteOutcome] = [
        (ErrorCode.for_code(r.error_code), r.error_message, [acl_of_matching(m) for m in r.matching_acls])
        for r in reply.filter_results]
    gone = {acl for _, _, acls in out for acl in acls}
    if gone:
        await wait_for_image(lambda image: not gone & set(image.acls.values()), wait_s)
    return out
