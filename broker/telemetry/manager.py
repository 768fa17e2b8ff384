"""Kafka's ClientMetricsManager: which metrics each client instance is asked for, and whether
its GetTelemetrySubscriptions and PushTelemetry requests come when they may.

Subscriptions are the CLIENT_METRICS config resources of the metadata image; a client
instance is matched against all of them when first seen and again after they change. Its
requested metrics are the union of the matching subscriptions' ``metrics`` (``*`` if one
names all), its push interval the smallest of their ``interval.ms`` (default 300000), and
its subscription id a CRC32C of both XORed with the instance id's hash, so the id changes
when what the client must push changes and is the same at every broker.

Instances live in a bounded LRU cache (16384, as Kafka's) and expire after
max(60 s, three push intervals) without a request, or when the connection that last sent
their requests closes; their exported series go with them.
Every method runs on the Trio thread.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import crc32c
import structlog

from config import client_metrics
from config.client_metrics import Subscription

log = structlog.get_logger(__name__)

#: Kafka's CACHE_MAX_SIZE: 16k client instances per broker.
CACHE_MAX_SIZE = 16_384
#: Kafka's DEFAULT_CACHE_EXPIRY_MS.
CACHE_EXPIRY_MS = 60_000
#: Kafka's SUPPORTED_COMPRESSION_TYPES, in its order: zstd, lz4, gzip, snappy.
ACCEPTED_COMPRESSION_TYPES = (4, 3, 1, 2)
#: Compression ids a push may use (Kafka accepts any CompressionType, none included).
KNOWN_COMPRESSION_TYPES = frozenset({0, 1, 2, 3, 4})


@dataclass(slots=True)
class ClientInstance:
    instance_id: uuid.UUID
    attributes: dict[str, str | None]
    subscription_id: int
    subscription_version: int
    metrics: tuple[str, ...]
    push_interval_ms: int
    last_get_ms: int = -(2**62)
    last_push_ms: int = -(2**62)
    last_seen_ms: int = 0
    terminating: bool = False
    #: The error of the last refused request ("" after an accepted one).
    last_error: str = ""

    @property
    def expiry_ms(self) -> int:
        return max(CACHE_EXPIRY_MS, 3 * self.push_interval_ms)

    def get_allowed(self, now_ms: int) -> bool:
        """Kafka's maybeUpdateGetRequestTimestamp."""
        if now_ms - max(self.last_get_ms, self.last_push_ms) >= self.push_interval_ms:
            self.last_get_ms = now_ms
            return True
        return False

    def push_allowed(self, now_ms: int) -> bool:
        """Kafka's maybeUpdatePushRequestTimestamp: the first push after a GetTelemetrySubscriptions
        may come early (clients jitter the interval), later ones one interval apart."""
        if self.last_get_ms > self.last_push_ms or now_ms - self.last_push_ms >= self.push_interval_ms:
            self.last_push_ms = now_ms
            return True
        return False


@dataclass(slots=True)
class TelemetryStats:
    unknown_subscription_requests: int = 0
    throttled_requests: int = 0
    exports: int = 0
    export_errors: int = 0


def uuid_hash(instance_id: uuid.UUID) -> int:
    """Kafka's Uuid.hashCode (an int32)."""
    value = instance_id.int
    h = (value >> 64) ^ (value & (2**64 - 1))
    return _int32(((h >> 32) ^ h) & 0xFFFFFFFF)


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - 2**32 if value >= 2**31 else value


def subscription_id(metrics: Iterable[str], push_interval_ms: int, instance_id: uuid.UUID) -> int:
    """Kafka's computeSubscriptionId: CRC32C of the metrics and interval, XOR the id's hash."""
    text = "[" + ", ".join(sorted(metrics)) + "]" + str(push_interval_ms)
    return _int32(crc32c.crc32c(text.encode()) ^ (uuid_hash(instance_id) & 0xFFFFFFFF))


class ClientMetricsManager:
    def __init__(self, cache_max_size: int = CACHE_MAX_SIZE) -> None:
        self._cache_max_size = cache_max_size
        self._instances: OrderedDict[uuid.UUID, ClientInstance] = OrderedDict()
        self._subscriptions: dict[str, Subscription] = {}
        self._stored: dict[str, Mapping[str, str]] = {}
        self._version = 0
        self.stats = TelemetryStats()
        #: The metadata image the subscriptions were last read from.
        self.image_seen: object | None = None
        #: Called with the id of each instance that leaves the cache (its series go).
        self._removed_listeners: list[Callable[[uuid.UUID], None]] = []

    @property
    def instance_count(self) -> int:
        return len(self._instances)

    def add_removal_listener(self, listener: Callable[[uuid.UUID], None]) -> None:
        self._removed_listeners.append(listener)

    def update_subscriptions(self, stored: Mapping[str, Mapping[str, str]]) -> None:
        """The CLIENT_METRICS resources as the metadata image has them now (name -> configs)."""
        if stored == self._stored:
            return
        parsed: dict[str, Subscription] = {}
        for name, configs in stored.items():
            if not configs:
                continue
            try:
                parsed[name] = client_metrics.subscription(name, configs)
            except client_metrics.ClientMetricsConfigError as ex:
                log.warning("client_metrics_subscription_ignored", subscription=name, reason=str(ex))
        self._stored = {name: dict(configs) for name, configs in stored.items()}
        self._subscriptions = parsed
        self._version += 1

    def instance(self, instance_id: uuid.UUID, attributes: Mapping[str, str | None], now_ms: int) -> ClientInstance:
        """The cached instance (re-matched if subscriptions changed since), or a new one."""
        self.expire(now_ms)
        found = self._instances.get(instance_id)
        if found is None:
            found = self._create(instance_id, dict(attributes))
            self._instances[instance_id] = found
            while len(self._instances) > self._cache_max_size:
                evicted, _ = self._instances.popitem(last=False)
                self._removed(evicted)
        elif found.subscription_version < self._version:
            # As Kafka: a new instance, so a GetTelemetrySubscriptions is answered at once.
            found = self._instances[instance_id] = self._create(instance_id, found.attributes)
        self._instances.move_to_end(instance_id)
        found.last_seen_ms = now_ms
        return found

    def expire(self, now_ms: int) -> None:
        """Drops instances idle past their expiry (the least recently seen come first)."""
        while self._instances:
            oldest = next(iter(self._instances.values()))
            if now_ms - oldest.last_seen_ms < oldest.expiry_ms:
                # Expiry differs per instance; a later one is reached when the earlier ones go.
                break
            del self._instances[oldest.instance_id]
            self._removed(oldest.instance_id)

    def remove(self, instance_id: uuid.UUID) -> None:
        """The client's connection closed (Kafka's ConnectionDisconnectListener): it is forgotten."""
        if self._instances.pop(instance_id, None) is not None:
            self._removed(instance_id)

    def known(self, instance_id: uuid.UUID) -> bool:
        return instance_id in self._instances

    def _removed(self, instance_id: uuid.UUID) -> None:
        for listener in self._removed_listeners:
            listener(instance_id)

    def _create(self, instance_id: uuid.UUID, attributes: dict[str, str | None]) -> ClientInstance:
        interval = client_metrics.DEFAULT_INTERVAL_MS
        metrics: set[str] = set()
        for sub in self._subscriptions.values():
            if sub.matches(attributes):
                metrics |= sub.metrics
                interval = min(interval, sub.interval_ms)
        if client_metrics.ALL_METRICS in metrics:
            metrics = {client_metrics.ALL_METRICS}
        return ClientInstance(instance_id, attributes, subscription_id(metrics, interval, instance_id),
                              self._version, tuple(sorted(metrics)), interval)
