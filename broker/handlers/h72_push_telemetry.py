"""PushTelemetry (72), v0 (KIP-714): a client instance's metrics, checked as Kafka's
ClientMetricsManager checks them and exported through the broker's OpenTelemetry pipeline
(broker/telemetry/export.py).

In Kafka's order: a reserved instance id (zero or one) is INVALID_REQUEST; after a terminating push, any push
is INVALID_REQUEST; a push sooner than the push interval (the first one after a
GetTelemetrySubscriptions excepted, and a terminating one) is THROTTLING_QUOTA_EXCEEDED; a
subscription id other than the instance's current one (an unknown instance is matched
anew) is UNKNOWN_SUBSCRIPTION_ID; a compression id Kafka does not know is
UNSUPPORTED_COMPRESSION_TYPE; metrics over ``telemetry.max.bytes`` are TELEMETRY_TOO_LARGE;
metrics that do not decompress (to at most four times that) or parse as OTLP MetricsData are
INVALID_RECORD. Compressed or large payloads are decoded in a worker thread, and at most
``MAX_SERIES`` data points of one push are kept (the rest are counted as dropped).
"""

from __future__ import annotations

import uuid

import trio

from broker.server.dispatch import RequestContext
from broker.telemetry.export import PayloadError, decode
from broker.telemetry.manager import KNOWN_COMPRESSION_TYPES
from broker.telemetry.requests import client_attributes, forget_on_close, telemetry_manager
from config import client_metrics
from wire.errors import ErrorCode
from wire.generated.api_072_push_telemetry import PushTelemetryRequest, PushTelemetryResponse
from wire.primitives import ZERO_UUID

API_KEY = 72
MIN_VERSION = 0
MAX_VERSION = 0

#: Kafka's Uuid.RESERVED: the zero id and the metadata topic's id (1).
RESERVED_IDS = frozenset({ZERO_UUID, uuid.UUID(int=1)})
#: Uncompressed payloads up to this size are decoded on the event loop; others in a worker thread.
INLINE_DECODE_BYTES = 16_384
NO_COMPRESSION = 0
#: The client attributes every exported series carries.
SERIES_ATTRIBUTES = (client_metrics.CLIENT_INSTANCE_ID, client_metrics.CLIENT_ID,
                     client_metrics.CLIENT_SOFTWARE_NAME, client_metrics.CLIENT_SOFTWARE_VERSION)


def _refuse(ctx: RequestContext, code: ErrorCode, reason: str) -> PushTelemetryResponse:
    ctx.services.log_client_error("push_telemetry_rejected", error=code.name, reason=reason, client_id=ctx.client_id)
    return PushTelemetryResponse(error_code=code)


async def handle(ctx: RequestContext, request: PushTelemetryRequest) -> PushTelemetryResponse:
    instance_id = request.client_instance_id
    if instance_id in RESERVED_IDS:
        return _refuse(ctx, ErrorCode.INVALID_REQUEST, "invalid client instance id")
    telemetry = ctx.services.metrics.client_telemetry
    manager = telemetry_manager(ctx)
    now = ctx.services.clock_ms()
    instance = manager.instance(instance_id, client_attributes(ctx, instance_id), now)
    forget_on_close(ctx, manager, instance_id)
    code, reason = ErrorCode.NONE, ""
    max_bytes = ctx.services.config.telemetry_max_bytes
    if instance.terminating:
        code, reason = ErrorCode.INVALID_REQUEST, "a push after a terminating push"
    elif not instance.push_allowed(now) and not request.terminating:
        manager.stats.throttled_requests += 1
        code, reason = ErrorCode.THROTTLING_QUOTA_EXCEEDED, "a push before the next push interval"
    elif request.subscription_id != instance.subscription_id:
        manager.stats.unknown_subscription_requests += 1
        code, reason = ErrorCode.UNKNOWN_SUBSCRIPTION_ID, "unknown client subscription id"
    elif request.compression_type not in KNOWN_COMPRESSION_TYPES:
        code, reason = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"compression type {request.compression_type}"
    elif len(request.metrics) > max_bytes:
        code, reason = ErrorCode.TELEMETRY_TOO_LARGE, f"{len(request.metrics)} bytes over {max_bytes}"
    instance.terminating = request.terminating
    if code != ErrorCode.NONE:
        instance.last_error = code.name
        return _refuse(ctx, code, reason)
    if request.metrics:
        payload = bytes(request.metrics)
        try:
            # Inline only what cannot grow: a small compressed payload may inflate to many points.
            if request.compression_type == NO_COMPRESSION and len(payload) <= INLINE_DECODE_BYTES:
                points, skipped = decode(request.compression_type, payload, max_bytes)
            else:
                points, skipped = await trio.to_thread.run_sync(decode, request.compression_type, payload, max_bytes)
        except PayloadError as ex:
            manager.stats.export_errors += 1
            instance.last_error = ErrorCode.INVALID_RECORD.name
            return _refuse(ctx, ErrorCode.INVALID_RECORD, f"metrics not readable: {ex}")
        telemetry.series.dropped += skipped
        if manager.known(instance_id):  # the instance may have expired while the thread decoded
            telemetry.series.record(instance_id, {k: instance.attributes.get(k) for k in SERIES_ATTRIBUTES}, points)
        manager.stats.exports += 1
    instance.last_error = ""
    return PushTelemetryResponse()
