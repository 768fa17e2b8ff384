"""Connection limits of one broker, as Kafka's ConnectionQuotas (KIP-308, KIP-402, KIP-612).

* ``max.connections`` (every listener together) and ``listener.name.<l>.max.connections``: a
  listener at its limit stops accepting until a connection closes; connections wait in the
  kernel's backlog meanwhile. The inter-broker listener (when there are others) is bound only by
  its own limit, so brokers can always reach each other.
* ``max.connection.creation.rate`` and ``listener.name.<l>.max.connection.creation.rate``: a
  listener over its rate waits the throttle time before accepting the next connection.
* ``max.connections.per.ip`` and ``max.connections.per.ip.overrides``: one more connection from
  an address at its limit is closed at once.
* the ``ip`` client quota ``connection_creation_rate`` (ClientQuotaRecords, per address or the
  default address): a connection over it is held unserved for the throttle time, then closed,
  and not counted.

Rates are Kafka's windowed rates over ``quota.window.num`` windows of
``quota.window.size.seconds``; a throttle is at most one window.
"""

from __future__ import annotations

import ipaddress
import socket
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import structlog
import trio

from broker.quotas.client_quota_manager import PURGE_EVERY, WindowedRate
from config import INT_MAX, BrokerConfig
from config.catalog.quotas import connection_overrides
from controller.quotas import IP, QuotaEntity

log = structlog.get_logger(__name__)

CONNECTION_CREATION_RATE = "connection_creation_rate"


class TooManyConnections(Exception):
    """The address has ``limit`` connections already (Kafka's TooManyConnectionsException)."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.limit = limit


class ConnectionThrottled(Exception):
    """The address is over its connection creation rate: hold the connection ``throttle_ms``, then close it."""

    def __init__(self, throttle_ms: int) -> None:
        super().__init__(throttle_ms)
        self.throttle_ms = throttle_ms


@dataclass(slots=True)
class _ListenerLimits:
    max_connections: int
    rate: WindowedRate | None
    max_rate: int


def normalized_ip(host: str) -> str:
    try:
        return ipaddress.ip_address(host).compressed
    except ValueError:
        return host


def resolve_overrides(overrides: Mapping[str, int]) -> dict[str, int]:
    """Host names resolved to addresses, as Kafka's InetAddress.getByName; unresolvable ones skipped."""
    resolved: dict[str, int] = {}
    for host, limit in overrides.items():
        try:
            address = normalized_ip(socket.gethostbyname(host)) if not _is_ip(host) else normalized_ip(host)
        except OSError as ex:
            log.warning("connection_override_unresolved", host=host, error=str(ex))
            continue
        resolved[address] = limit
    return resolved


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class ConnectionQuotas:
    """Counts and rates of the connections of every client listener of this broker."""

    def __init__(self, config: BrokerConfig, listeners: Iterable[str], clock_ms: Callable[[], int],
                 ip_quotas: Callable[[], Mapping[QuotaEntity, Mapping[str, float]]],
                 on_blocked: Callable[[str, float], None] = lambda listener, seconds: None) -> None:
        self.clock_ms = clock_ms
        self.window_ms = config.quota_window_size_seconds * 1000
        self.windows = config.quota_window_num
        self.max_connections = config.max_connections
        self.max_per_ip = config.max_connections_per_ip
        self.per_ip_overrides = resolve_overrides(
            connection_overrides("max.connections.per.ip.overrides", config.max_connections_per_ip_overrides))
        self.max_rate = config.max_connection_creation_rate
        self.broker_rate = WindowedRate(self.window_ms, self.windows)
        self.listeners: dict[str, _ListenerLimits] = {}
        for name in listeners:
            # Only the listener's own setting bounds it (Kafka: Int.MaxValue when unset).
            own_max = config.raw.get(f"listener.name.{name.lower()}.max.connections")
            own_rate = config.raw.get(f"listener.name.{name.lower()}.max.connection.creation.rate")
            self.listeners[name] = _ListenerLimits(
                int(own_max) if own_max is not None else INT_MAX,
                WindowedRate(self.window_ms, self.windows) if own_rate is not None else None,
                int(own_rate) if own_rate is not None else INT_MAX)
        self.inter_broker_listener = config.inter_broker_listener_name
        self._ip_quotas = ip_quotas
        self._on_blocked = on_blocked
        self.total = 0
        self.per_listener: Counter[str] = Counter()
        self.per_ip: Counter[str] = Counter()
        self._ip_rates: dict[str, WindowedRate] = {}
        self._ip_recorded = 0
        self._slot_freed = trio.lowlevel.ParkingLot()

    # ------------------------------------------------------------ the acceptor's side

    async def wait_for_slot(self, listener: str) -> None:
        """Kafka's waitForConnectionSlot, after each accept: the creation rates, then the counts."""
        started = trio.current_time()
        throttle_ms = self._record_connection(listener, self.clock_ms())
        if throttle_ms > 0:
            log.debug("connection_accept_throttled", listener=listener, throttle_ms=throttle_ms)
            await trio.sleep(throttle_ms / 1000)
        while not self._slot_available(listener):
            await self._slot_freed.park()
        blocked = trio.current_time() - started
        if blocked > 0.001:
            self._on_blocked(listener, blocked)

    def admit(self, listener: str, host: str) -> None:
        """Counts a new connection from ``host``; raises when its address may not have it."""
        ip = normalized_ip(host)
        self._record_ip(ip)
        limit = self.per_ip_overrides.get(ip, self.max_per_ip)
        if self.per_ip[ip] >= limit:
            raise TooManyConnections(limit)
        self.per_ip[ip] += 1
        self.per_listener[listener] += 1
        self.total += 1

    def release(self, listener: str, host: str) -> None:
        ip = normalized_ip(host)
        self.per_ip[ip] -= 1
        if self.per_ip[ip] <= 0:
            del self.per_ip[ip]
        self.per_listener[listener] -= 1
        self.total -= 1
        self._slot_freed.unpark_all()

    # ------------------------------------------------------------ Kafka's rules

    def _protected(self, listener: str) -> bool:
        return listener == self.inter_broker_listener and len(self.listeners) > 1

    def _slot_available(self, listener: str) -> bool:
        limits = self.listeners.get(listener)
        if limits is not None and self.per_listener[listener] >= limits.max_connections:
            return False
        return self._protected(listener) or self.total < self.max_connections

    def _record_connection(self, listener: str, now_ms: int) -> int:
        throttle = 0
        if not self._protected(listener):
            throttle = self._record(self.broker_rate, self.max_rate, now_ms)
        limits = self.listeners.get(listener)
        if limits is not None and limits.rate is not None:
            throttle = max(throttle, self._record(limits.rate, limits.max_rate, now_ms))
        return throttle

    def _record(self, rate: WindowedRate, bound: float, now_ms: int) -> int:
        if bound >= INT_MAX:  # no bound set: nothing to measure
            return 0
        rate.record(1, now_ms)
        observed = rate.rate(now_ms)
        if bound <= 0:
            return self.window_ms
        if observed <= bound:
            return 0
        return min(round((observed - bound) / bound * rate.elapsed_ms(now_ms)), self.window_ms)

    def _ip_rate_bound(self, ip: str) -> float | None:
        quotas = self._ip_quotas()
        for entity in (((IP, ip),), ((IP, None),)):
            bound = quotas.get(entity, {}).get(CONNECTION_CREATION_RATE)
            if bound is not None:
                return bound
        return None

    def _record_ip(self, ip: str) -> None:
        bound = self._ip_rate_bound(ip)
        if bound is None:
            return
        now = self.clock_ms()
        self._ip_recorded += 1
        if self._ip_recorded % PURGE_EVERY == 0:
            horizon = now - self.window_ms * self.windows
            self._ip_rates = {a: r for a, r in self._ip_rates.items() if r.samples and r.samples[-1][0] >= horizon}
        rate = self._ip_rates.get(ip)
        if rate is None:
            rate = self._ip_rates[ip] = WindowedRate(self.window_ms, self.windows)
        throttle = self._record(rate, bound, now)
        if throttle > 0:
            rate.record(-1, now)  # not accepted, so not counted (as Kafka)
            raise ConnectionThrottled(throttle)
