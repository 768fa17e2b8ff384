"""AlterClientQuotas (49), v0-1, on the controller listener: quota changes forwarded by brokers.

The active controller validates each entry and writes ClientQuotaRecords. NOT_CONTROLLER
(41) on a controller that is not active.
"""

from __future__ import annotations

from broker.controller_handlers._common import call, controller_role
from broker.quotas.quota_requests import changes_of
from broker.server.dispatch import RequestContext
from wire.generated.api_049_alter_client_quotas import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    AlterClientQuotasResponseEntityData,
    AlterClientQuotasResponseEntryData,
)

API_KEY = 49
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: AlterClientQuotasRequest) -> AlterClientQuotasResponse:
    role = controller_role(ctx)
    outcomes, changes = changes_of(request.entries)
    if changes:
        results, code = await call(role.controller.alter_client_quotas([c for _, c in changes],
                                                                       request.validate_only))
        for n, (i, _) in enumerate(changes):
            outcomes[i] = (code, None) if results is None else results[n]
    return AlterClientQuotasResponse(entries=[
        AlterClientQuotasResponseEntryData(error_code=outcomes[i][0], error_message=outcomes[i][1], entity=[
            AlterClientQuotasResponseEntityData(entity_type=e.entity_type, entity_name=e.entity_name)
            for e in entry.entity])
        for i, entry in enumerate(request.entries)])
