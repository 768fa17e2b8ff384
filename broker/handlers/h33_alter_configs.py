"""AlterConfigs (33), v0-2: the legacy, replace-everything way to change configs.

Each resource's given configs become its whole set of dynamic configs: any key
not named returns to its default (KIP-339 added IncrementalAlterConfigs because
of this). Checks as Kafka's broker pre-processing and controller: a resource
named twice gets INVALID_REQUEST for each copy; a key named twice or a null
value is INVALID_REQUEST; TOPIC (2) configs must be valid (INVALID_CONFIG) and
the topic must exist (UNKNOWN_TOPIC_OR_PARTITION); BROKER (4) is "" or this
broker's id, with dynamically updatable, parseable settings (INVALID_REQUEST
otherwise; passwords are stored encrypted, as IncrementalAlterConfigs stores
them); GROUP (32) takes the group configs of config/group.py (INVALID_CONFIG
otherwise); CLIENT_METRICS (16) a client metrics subscription (config/client_metrics.py,
checked as IncrementalAlterConfigs checks it); BROKER_LOGGER and any other type are INVALID_REQUEST ("Unknown
resource type"). ``validate_only`` changes nothing. v2 is flexible.
"""

from __future__ import annotations

from broker.handlers.h32_describe_configs import BROKER, CLIENT_METRICS, GROUP, TOPIC
from broker.handlers.h44_incremental_alter_configs import (
    AlterError,
    Op,
    check_broker_name,
    check_client_metrics,
    check_dynamic_result,
    check_group_configs,
    check_keys,
    duplicate_resources,
    encrypted_passwords,
    validate_broker_configs,
    write_changes,
)
from broker.security.acl_operations import config_resource_denied
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_033_alter_configs import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    AlterConfigsResponseAlterConfigsResourceResponse,
)

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2

SET = 0


async def handle(ctx: RequestContext, request: AlterConfigsRequest) -> AlterConfigsResponse:
    response = AlterConfigsResponse()
    duplicates = duplicate_resources([(r.resource_type, r.resource_name) for r in request.resources])
    for resource in request.resources:
        out = AlterConfigsResponseAlterConfigsResourceResponse(
            resource_type=resource.resource_type, resource_name=resource.resource_name, error_message=None
        )
        response.responses.append(out)
        name = resource.resource_name
        try:
            if (resource.resource_type, name) in duplicates:
                raise AlterError(ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")
            denied = config_resource_denied(ctx, resource.resource_type, name, alter=True)
            if denied is not None:
                raise AlterError(denied, None)
            check_keys([Op(c.name, SET, c.value) for c in resource.configs])
            configs = {c.name: c.value for c in resource.configs if c.value is not None}
            stored: dict[str, str | None] = dict(configs)
            if resource.resource_type == BROKER:
                check_broker_name(ctx.services.node_id, name)
                validate_broker_configs(configs, per_broker=bool(name))
                check_dynamic_result(ctx.services, name, configs)
                stored = encrypted_passwords(ctx.services, name, configs)
            elif resource.resource_type == GROUP:
                check_group_configs(ctx, name, configs)
            elif resource.resource_type == CLIENT_METRICS:
                check_client_metrics(name, configs)
            elif resource.resource_type != TOPIC:  # topics: the controller checks them
                raise AlterError(ErrorCode.INVALID_REQUEST, f"Unknown resource type {resource.resource_type}")
            await write_changes(ctx, resource.resource_type, name, stored, True, request.validate_only)
        except AlterError as ex:
            out.error_code = ex.code
            out.error_message = ex.message
            ctx.services.log_client_error("alter_configs_rejected", resource_type=resource.resource_type,
                                          resource_name=name, error=ex.code.name, reason=ex.message,
                                          client_id=ctx.client_id)
    return response
