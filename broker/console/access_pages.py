"""The ACLs and Quotas pages and their changes (each asks first and is logged, as every change)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from broker.console import access
from broker.console.access import AclBinding
from broker.console.actions import ActionError
from broker.console.forms import Mutations
from broker.tools.client import ClientError

if TYPE_CHECKING:
    from broker.console.app import Console

ACL_FIELDS = ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission")


class AccessPages(Mutations):
    async def acls(self, request: Request) -> Response:
        principal = request.query_params.get("principal", "").strip()
        resource = request.query_params.get("resource", "").strip()
        listing, error = None, None
        try:
            listing = await anyio.to_thread.run_sync(access.describe_acls, self.state.client, principal, resource)
        except (ClientError, ActionError) as ex:
            error = f"DescribeAcls: {ex}"
        part = request.url.path.startswith("/part/")
        if part and listing is None:
            return self.console.render(request, "result.html", ok=False, message=error)
        return self.console.render(request, "acls_part.html" if part else "acls.html", listing=listing, error=error, principal=principal,
                                   resource=resource, resource_types=access.RESOURCE_TYPES.values(),
                                   pattern_types=access.PATTERN_TYPES.values(),
                                   operations=access.OPERATIONS.values(), permissions=access.PERMISSIONS.values())

    async def quotas(self, request: Request) -> Response:
        entries: tuple[access.QuotaEntry, ...] = ()
        error = None
        try:
            entries = await anyio.to_thread.run_sync(access.describe_quotas, self.state.client)
        except (ClientError, ActionError) as ex:
            error = f"DescribeClientQuotas: {ex}"
        part = request.url.path.startswith("/part/")
        return self.console.render(request, "quotas_part.html" if part else "quotas.html", entries=entries, error=error,
                                   quota_keys=access.QUOTA_KEYS, entity_types=access.QUOTA_ENTITY_TYPES,
                                   quota_text=access.quota_text)

    async def _binding(self, request: Request) -> AclBinding | str:
        form = await request.form()
        values = {k: str(form.get(k, "")).strip() for k in ACL_FIELDS}
        values["host"] = values["host"] or "*"
        if values["resource_type"] == "CLUSTER":
            values["resource_name"] = values["resource_name"] or "kafka-cluster"
        if not values["resource_name"]:
            return "a resource name is required"
        if ":" not in values["principal"]:
            return "a principal is TYPE:NAME, such as User:alice"
        for key, names in (("resource_type", access.RESOURCE_TYPES), ("pattern_type", access.PATTERN_TYPES),
                           ("operation", access.OPERATIONS), ("permission", access.PERMISSIONS)):
            if values[key] not in names.values():
                return f"{key} must be one of {', '.join(names.values())}"
        return AclBinding(**values)

    async def create_acl(self, request: Request) -> Response:
        b = await self._binding(request)
        if isinstance(b, str):
            return await self._fail(request, "create_acl", b)
        fields = {k: getattr(b, k) for k in ACL_FIELDS}
        return await self._run(
            request, "create_acl", f"{b.resource_type}:{b.resource_name}",
            f"{b.permission} {b.principal} from {b.host} to {b.operation} on {b.resource_type} "
            f"'{b.resource_name}' ({b.pattern_type})?", fields,
            lambda: access.create_acl(self.state.client, b), "Created the ACL.")

    async def delete_acl(self, request: Request) -> Response:
        b = await self._binding(request)
        if isinstance(b, str):
            return await self._fail(request, "delete_acl", b)
        fields = {k: getattr(b, k) for k in ACL_FIELDS}
        return await self._run(
            request, "delete_acl", f"{b.resource_type}:{b.resource_name}",
            f"Delete the ACL: {b.permission} {b.principal} from {b.host} to {b.operation} on {b.resource_type} "
            f"'{b.resource_name}' ({b.pattern_type})?", fields,
            lambda: access.delete_acl(self.state.client, b), "Deleted the ACL.", danger=True)

    async def alter_quota(self, request: Request) -> Response:
        form = await request.form()
        entity_type = str(form.get("entity_type", "")).strip()
        raw_name = str(form.get("entity_name", "")).strip()
        key = str(form.get("key", "")).strip()
        remove = form.get("remove") == "on"
        raw_value = str(form.get("value", "")).strip()
        if entity_type not in access.QUOTA_ENTITY_TYPES or key not in access.QUOTA_KEYS:
            return await self._fail(request, "alter_quota", "choose an entity type and a quota")
        value: float | None = None
        if not remove:
            try:
                value = float(raw_value)
            except ValueError:
                return await self._fail(request, "alter_quota", "a quota value is a number")
            if value <= 0:
                return await self._fail(request, "alter_quota", "a quota value is positive")
        # An empty name is the entity type's default, as kafka-configs.sh --entity-default.
        name = raw_name or None
        shown = f"{entity_type} {'<default>' if name is None else repr(name)}"
        fields = {"entity_type": entity_type, "entity_name": raw_name, "key": key, "value": raw_value} | (
            {"remove": "on"} if remove else {})
        summary = f"Remove {key} of {shown}?" if remove else f"Set {key}={access.quota_text(value)} for {shown}?"
        return await self._run(
            request, "alter_quota", f"{entity_type}:{raw_name or '<default>'}", summary, fields,
            lambda: access.alter_quota(self.state.client, entity_type, name, key, value),
            f"{'Removed' if remove else 'Set'} {key} for {shown}.", danger=remove)


def routes(console: Console) -> list[Route]:
    pages = AccessPages(console)
    return [
        Route("/acls", pages.acls, methods=["GET"]), Route("/part/acls", pages.acls),
        Route("/acls", pages.create_acl, methods=["POST"]),
        Route("/acls/delete", pages.delete_acl, methods=["POST"]),
        Route("/quotas", pages.quotas, methods=["GET"]), Route("/part/quotas", pages.quotas),
        Route("/quotas", pages.alter_quota, methods=["POST"]),
    ]
