"""AlterClientQuotas (49), v0-1: set or remove client quotas, kept as ClientQuotaRecords.

As Kafka: ALTER_CONFIGS on the cluster is needed (CLUSTER_AUTHORIZATION_FAILED per entry);
the active controller validates each entry (INVALID_REQUEST with Kafka's message for an
empty or unknown entity type, ``ip`` combined with another type, an invalid IP, an unknown
key, a non-positive value or a fraction for a byte rate); a key named twice in one entry is
INVALID_REQUEST. ``validate_only`` changes nothing. v1 is flexible. Of the quotas,
``producer_byte_rate`` is enforced (broker/quotas/client_quota_manager.py); the others are stored only.
"""

from __future__ import annotations

from collections.abc import Sequence

from broker.quotas.quota_requests import changes_of
from broker.security.acl_operations import AclOperation, authorize_cluster
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_049_alter_client_quotas import (
    AlterClientQuotasRequest,
    AlterClientQuotasRequestEntityData,
    AlterClientQuotasResponse,
    AlterClientQuotasResponseEntityData,
    AlterClientQuotasResponseEntryData,
)

API_KEY = 49
MIN_VERSION = 0
MAX_VERSION = 1


def error_response(request: AlterClientQuotasRequest, code: ErrorCode,
                   message: str | None = None) -> AlterClientQuotasResponse:
    return AlterClientQuotasResponse(entries=[_entry(e.entity, code, message) for e in request.entries])


def _entry(entity: Sequence[AlterClientQuotasRequestEntityData], code: ErrorCode, message: str | None) -> AlterClientQuotasResponseEntryData:
    return AlterClientQuotasResponseEntryData(error_code=code, error_message=message, entity=[
        AlterClientQuotasResponseEntityData(entity_type=e.entity_type, entity_name=e.entity_name)
        for e in entity])


async def handle(ctx: RequestContext, request: AlterClientQuotasRequest) -> AlterClientQuotasResponse:
    if not authorize_cluster(ctx, AclOperation.ALTER_CONFIGS):
        return error_response(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    outcomes, changes = changes_of(request.entries)
    if changes:
        results = await ctx.services.controller.alter_client_quotas([c for _, c in changes], request.validate_only)
        outcomes.update({i: r for (i, _), r in zip(changes, results, strict=True)})
    return AlterClientQuotasResponse(entries=[
        _entry(e.entity, *outcomes[i]) for i, e in enumerate(request.entries)])
