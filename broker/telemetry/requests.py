"""What the telemetry handlers share: the manager with the image's subscriptions, and the
attributes a client instance is matched on (Kafka's ClientMetricsInstanceMetadata)."""

from __future__ import annotations

import base64
import uuid

from broker.server.dispatch import RequestContext
from broker.telemetry.manager import ClientMetricsManager
from config import client_metrics

CLIENT_METRICS = 16


def telemetry_manager(ctx: RequestContext) -> ClientMetricsManager:
    """The node's manager, its subscriptions brought up to the metadata image."""
    manager = ctx.services.metrics.client_telemetry.manager
    image = ctx.services.image
    if manager.image_seen is not image:  # images are immutable: a new one may have new subscriptions
        manager.update_subscriptions({name: configs for (kind, name), configs in image.configs.items()
                                      if kind == CLIENT_METRICS})
        manager.image_seen = image
    return manager


def kafka_uuid_text(value: uuid.UUID) -> str:
    """A Uuid as Kafka writes it (Uuid.toString): URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def client_attributes(ctx: RequestContext, instance_id: uuid.UUID) -> dict[str, str | None]:
    software = ctx.conn.client_software
    return {
        client_metrics.CLIENT_INSTANCE_ID: kafka_uuid_text(instance_id),
        client_metrics.CLIENT_ID: ctx.client_id,
        client_metrics.CLIENT_SOFTWARE_NAME: software[0] if software else None,
        client_metrics.CLIENT_SOFTWARE_VERSION: software[1] if software else None,
        client_metrics.CLIENT_SOURCE_ADDRESS: ctx.conn.peer_host,
        client_metrics.CLIENT_SOURCE_PORT: str(ctx.conn.peer_port),
    }


def forget_on_close(ctx: RequestContext, manager: ClientMetricsManager, instance_id: uuid.UUID) -> None:
    """The instance this connection last spoke for is forgotten when it closes, as Kafka's
    ClientConnectionDisconnectListener forgets it."""
    conn = ctx.conn
    if conn.on_close is None:
        conn.on_close = []
    forget = next((c for c in conn.on_close if isinstance(c, _Forget)), None)
    if forget is None:
        forget = _Forget(manager)
        conn.on_close.append(forget)
    forget.instance_id = instance_id


class _Forget:
    __slots__ = ("instance_id", "manager")

    def __init__(self, manager: ClientMetricsManager) -> None:
        self.manager = manager
        self.instance_id: uuid.UUID | None = None

    def __call__(self) -> None:
        if self.instance_id is not None:
            self.manager.remove(self.instance_id)
