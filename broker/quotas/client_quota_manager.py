"""Client byte-rate quotas as Kafka's ClientQuotaManager: the quota that applies, the windowed
rate, and the throttle time a response carries.

The quota of a (user, client id) is the most specific ClientQuotaRecord of the metadata image,
in Kafka's order: (user, client id), (user, default client id), user, (default user, client
id), (default user, default client id), default user, client id, default client id. Clients
that fall under the same quota entity share its rate. The rate is Kafka's windowed Rate:
``quota.window.num`` samples of ``quota.window.size.seconds``, the elapsed time counted as at
least ``num - 1`` whole windows. A request that takes the rate over the bound is throttled for
``(rate - bound) / bound * window`` ms (Kafka's QuotaUtils.throttleTime; for the request quota at
most one window, QuotaUtils.boundedThrottleTime); the response carries it in ``throttle_time_ms`` and clients
that throttle themselves (KIP-219: the Java client) wait that long, and the broker mutes the
connection for as long (``ConnectionInfo.mute``), so clients that ignore the throttle time
(librdkafka) are held too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from controller.quotas import CLIENT_ID, USER, QuotaEntity

#: Idle rates are looked for once per this many recordings.
PURGE_EVERY = 1024

PRODUCE, FETCH = "producer_byte_rate", "consumer_byte_rate"
REQUEST, CONTROLLER_MUTATION = "request_percentage", "controller_mutation_rate"


def quota_for(quotas: Mapping[QuotaEntity, Mapping[str, float]], key: str, user: str,
              client_id: str) -> tuple[QuotaEntity, float] | None:
    """The applying entity and its bound, or None when no quota applies."""
    if not quotas:  # the common case, asked for every request
        return None
    for entity in (
        ((CLIENT_ID, client_id), (USER, user)), ((CLIENT_ID, None), (USER, user)), ((USER, user),),
        ((CLIENT_ID, client_id), (USER, None)), ((CLIENT_ID, None), (USER, None)), ((USER, None),),
        ((CLIENT_ID, client_id),), ((CLIENT_ID, None),),
    ):
        bound = quotas.get(entity, {}).get(key)
        if bound is not None:
            return entity, bound
    return None


@dataclass(slots=True)
class WindowedRate:
    """Kafka's Rate over SampledStat samples (per second)."""

    window_ms: int
    windows: int
    samples: list[list[float]] = field(default_factory=list)  # [start ms, total]

    def record(self, value: float, now_ms: int) -> None:
        if not self.samples or now_ms - self.samples[-1][0] >= self.window_ms:
            self.samples.append([float(now_ms), 0.0])
        self.samples[-1][1] += value
        # A ring of ``windows`` samples, the obsolete ones dropped (SampledStat.purgeObsoleteSamples).
        horizon = now_ms - self.window_ms * self.windows
        while len(self.samples) > self.windows or (len(self.samples) > 1 and self.samples[0][0] < horizon):
            self.samples.pop(0)

    def elapsed_ms(self, now_ms: int) -> float:
        elapsed = now_ms - self.samples[0][0] if self.samples else 0.0
        full = elapsed // self.window_ms
        if full < self.windows - 1:
            elapsed += (self.windows - 1 - full) * self.window_ms
        return elapsed

    def rate(self, now_ms: int) -> float:
        return sum(s[1] for s in self.samples) * 1000.0 / self.elapsed_ms(now_ms)


class ClientQuotaManager:
    """One rate quota type (produce bytes, fetch bytes, request time) for every client of this broker."""

    def __init__(self, key: str, window_ms: int, windows: int, clock_ms: Callable[[], int],
                 quotas: Callable[[], Mapping[QuotaEntity, Mapping[str, float]]]) -> None:
        self.key = key
        #: Throttles at most one window (the request quota), as Kafka's ClientRequestQuotaManager.
        self.bounded = key == REQUEST
        self.window_ms = window_ms
        self.windows = windows
        self.clock_ms = clock_ms
        self._quotas = quotas
        self._rates: dict[QuotaEntity, WindowedRate] = {}
        self._recorded = 0

    def applies(self, user: str, client_id: str) -> bool:
        return quota_for(self._quotas(), self.key, user, client_id) is not None

    def max_value_in_window(self, user: str, client_id: str) -> float | None:
        """Most the client may use in one quota window (Kafka's getMaxValueInQuotaWindow: the bound
        times ``num - 1`` windows); None without a quota. Bounds one fetch's size."""
        applying = quota_for(self._quotas(), self.key, user, client_id)
        if applying is None:
            return None
        return applying[1] * (self.windows - 1) * self.window_ms / 1000

    def unrecord(self, user: str, client_id: str, size: float) -> None:
        """Takes back what :meth:`record` counted (a throttled fetch returns no data)."""
        applying = quota_for(self._quotas(), self.key, user, client_id)
        rate = self._rates.get(applying[0]) if applying is not None else None
        if rate is not None:
            rate.record(-size, self.clock_ms())

    def record(self, user: str, client_id: str, size: float) -> int:
        """Counts ``size`` (bytes, or request time in percent-seconds) for the client; the throttle
        time in ms (0 within the quota)."""
        applying = quota_for(self._quotas(), self.key, user, client_id)
        if applying is None:
            return 0
        entity, bound = applying
        now = self.clock_ms()
        self._recorded += 1
        if self._recorded % PURGE_EVERY == 0:
            self._purge(now)
        rate = self._rates.get(entity)
        if rate is None:
            rate = self._rates[entity] = WindowedRate(self.window_ms, self.windows)
        rate.record(size, now)
        observed = rate.rate(now)
        if observed <= bound:
            return 0
        throttle = round((observed - bound) / bound * rate.elapsed_ms(now))
        # Byte rates use QuotaUtils.throttleTime as it is; the request quota bounds it by one window
        # (ClientRequestQuotaManager: QuotaUtils.boundedThrottleTime).
        return min(throttle, self.window_ms) if self.bounded else throttle

    def _purge(self, now_ms: int) -> None:
        # Entities idle for a whole quota period are forgotten (Kafka expires idle quota sensors),
        # so one rate per client id ever seen is not kept for ever.
        horizon = now_ms - self.window_ms * self.windows
        for entity in [e for e, r in self._rates.items() if not r.samples or r.samples[-1][0] < horizon]:
            del self._rates[entity]
