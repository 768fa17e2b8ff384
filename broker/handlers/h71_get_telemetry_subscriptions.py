"""GetTelemetrySubscriptions (71), v0 (KIP-714): the metrics a client instance is asked to
push, how often, and how (broker/telemetry/manager.py, as Kafka's ClientMetricsManager).

A zero instance id gets a fresh random one. A request sooner than the instance's push
interval after its previous request is THROTTLING_QUOTA_EXCEEDED, unless the subscriptions
changed since (the instance is then matched anew and answered at once). Counters and sums
are asked for as deltas, as Kafka asks. Served while the broker's metrics pipeline (its
telemetry receiver) is on.
"""

from __future__ import annotations

import uuid

from broker.server.dispatch import RequestContext
from broker.telemetry.manager import ACCEPTED_COMPRESSION_TYPES
from broker.telemetry.requests import client_attributes, forget_on_close, telemetry_manager
from wire.errors import ErrorCode
from wire.generated.api_071_get_telemetry_subscriptions import (
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
)
from wire.primitives import ZERO_UUID

API_KEY = 71
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: GetTelemetrySubscriptionsRequest) -> GetTelemetrySubscriptionsResponse:
    services = ctx.services
    manager = telemetry_manager(ctx)
    instance_id = request.client_instance_id
    if instance_id == ZERO_UUID:
        instance_id = uuid.uuid4()
        while manager.known(instance_id):
            instance_id = uuid.uuid4()
    now = services.clock_ms()
    instance = manager.instance(instance_id, client_attributes(ctx, instance_id), now)
    forget_on_close(ctx, manager, instance_id)
    if not instance.get_allowed(now):
        manager.stats.throttled_requests += 1
        instance.last_error = ErrorCode.THROTTLING_QUOTA_EXCEEDED.name
        return GetTelemetrySubscriptionsResponse(error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED)
    instance.last_error = ""
    return GetTelemetrySubscriptionsResponse(
        client_instance_id=instance_id,
        subscription_id=instance.subscription_id,
        accepted_compression_types=list(ACCEPTED_COMPRESSION_TYPES),
        push_interval_ms=instance.push_interval_ms,
        telemetry_max_bytes=services.config.telemetry_max_bytes,
        delta_temporality=True,
        requested_metrics=list(instance.metrics),
    )
