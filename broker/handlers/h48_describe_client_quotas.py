"""DescribeClientQuotas (48), v0-1: the client quotas of this broker's metadata image.

As Kafka: DESCRIBE_CONFIGS on the cluster is needed (CLUSTER_AUTHORIZATION_FAILED); a
filter naming an entity type twice, an unknown type, an exact match without a name, or
``ip`` with another type is INVALID_REQUEST. Components match EXACT (a name), DEFAULT (the
default entity) or SPECIFIED (any named entity); ``strict`` leaves out entities with
other types. v1 is flexible.
"""

from __future__ import annotations

from broker.security.acl_operations import AclOperation, authorize_cluster
from broker.server.dispatch import RequestContext
from controller.quotas import QuotaError, QuotaFilter, check_filters, matches
from wire.errors import ErrorCode
from wire.generated.api_048_describe_client_quotas import (
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    DescribeClientQuotasResponseEntityData,
    DescribeClientQuotasResponseEntryData,
    DescribeClientQuotasResponseValueData,
)

API_KEY = 48
MIN_VERSION = 0
MAX_VERSION = 1


def error_response(request: DescribeClientQuotasRequest, code: ErrorCode,
                   message: str | None = None) -> DescribeClientQuotasResponse:
    return DescribeClientQuotasResponse(error_code=code, error_message=message, entries=None)


async def handle(ctx: RequestContext, request: DescribeClientQuotasRequest) -> DescribeClientQuotasResponse:
    if not authorize_cluster(ctx, AclOperation.DESCRIBE_CONFIGS):
        return error_response(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    components = [QuotaFilter(c.entity_type, c.match_type, c.match) for c in request.components]
    try:
        check_filters(components)
    except QuotaError as ex:
        return error_response(request, ErrorCode.INVALID_REQUEST, str(ex))
    quotas = ctx.services.image.client_quotas
    return DescribeClientQuotasResponse(error_message=None, entries=[
        DescribeClientQuotasResponseEntryData(
            entity=[DescribeClientQuotasResponseEntityData(entity_type=t, entity_name=n) for t, n in entity],
            values=[DescribeClientQuotasResponseValueData(key=k, value=v) for k, v in sorted(values.items())])
        for entity, values in sorted(quotas.items(), key=lambda item: repr(item[0]))
        if matches(entity, components, request.strict)])
