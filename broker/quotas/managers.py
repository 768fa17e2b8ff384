"""Kafka's quota managers of one broker, and how a throttle reaches the client.

* ``producer_byte_rate`` and ``consumer_byte_rate``: the size of Produce requests and Fetch
  responses (:class:`broker.quotas.client_quota_manager.ClientQuotaManager`);
* ``request_percentage``: the share of the event loop a client's requests take, in percent of
  one request handler as Kafka counts it (100 = all of Cormorant's event loop), measured as
  the time the request's task runs — waits (a long-polling Fetch, acks=all) are not counted,
  as they do not hold a Kafka request handler thread; plus the time the connection's reader and
  writer run (Kafka's network thread time, recorded without throttling the response);
* ``controller_mutation_rate`` (KIP-599): partitions created or deleted per second, a token
  bucket as Kafka's ControllerMutationQuotaManager, strict (THROTTLING_QUOTA_EXCEEDED) from
  CreateTopics v6, CreatePartitions v3 and DeleteTopics v5, permissive before.

A throttled response carries the throttle time in ``throttle_time_ms`` (clients that honour
KIP-219 wait that long) and the connection is muted as long (:meth:`ConnectionInfo.mute`), so
clients that ignore it wait too; responses of versions older than KIP-219 are sent only after
the throttle time (:func:`client_throttles`). Inter-broker requests (CLUSTER_ACTION APIs, follower fetches)
are exempt from the request quota, as Kafka's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import trio

from broker.quotas.client_quota_manager import (
    CONTROLLER_MUTATION,
    FETCH,
    PRODUCE,
    PURGE_EVERY,
    REQUEST,
    ClientQuotaManager,
    quota_for,
)
from config import BrokerConfig
from controller.quotas import QuotaEntity
from wire.errors import ErrorCode

#: Throttle types as the metrics name them (Kafka's QuotaType).
QUOTA_TYPES = {PRODUCE: "produce", FETCH: "fetch", REQUEST: "request", CONTROLLER_MUTATION: "controller_mutation"}
#: APIs only brokers and controllers send (CLUSTER_ACTION): never throttled by the request quota.
EXEMPT_APIS = frozenset({4, 5, 6, 7, 27, 52, 53, 54, 56, 57, 58, 62, 63, 64, 67, 80, 81, 82, 83})
#: Request versions from which a controller mutation quota refuses (KIP-599 strict mode).
STRICT_SINCE = {19: 6, 20: 5, 37: 3}
THROTTLING_MESSAGE = "The throttling quota has been exceeded."
#: The response version from which the client waits out a throttle itself (KIP-219; Kafka's
#: AbstractResponse.shouldClientThrottle). Older versions of these APIs, and the APIs not listed
#: below 43 (which have no throttle time), get their response only after the throttle time.
CLIENT_THROTTLES_SINCE = {
    0: 6, 1: 8, 2: 3, 3: 6, 8: 4, 9: 4, 10: 2, 11: 3, 12: 2, 13: 2, 14: 2, 15: 2, 16: 2, 18: 2, 19: 3,
    20: 2, 21: 1, 22: 1, 23: 2, 24: 1, 25: 1, 26: 1, 28: 1, 29: 1, 30: 1, 31: 1, 32: 2, 33: 1, 34: 1,
    35: 1, 37: 1, 38: 1, 39: 1, 40: 1, 41: 1, 42: 1,
}
#: From this API key on every version was defined after KIP-219.
KIP_219_API_KEYS_FROM = 43


def client_throttles(api_key: int, api_version: int) -> bool:
    """Whether the client waits out ``throttle_time_ms`` itself (else the broker delays the response)."""
    if api_key >= KIP_219_API_KEYS_FROM:
        return True
    since = CLIENT_THROTTLES_SINCE.get(api_key)
    return since is not None and api_version >= since


class TaskTimer(trio.abc.Instrument):
    """Time the event loop spends running given tasks (a request's own steps, not its waits).

    Installed the first time a request quota applies; until then nothing is measured."""

    def __init__(self) -> None:
        #: task -> [seconds run, start of the current step]
        self.tasks: dict[trio.lowlevel.Task, list[float]] = {}

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        spent = self.tasks.get(task)
        if spent is not None:
            spent[1] = time.perf_counter()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        spent = self.tasks.get(task)
        if spent is not None:
            spent[0] += time.perf_counter() - spent[1]

    def task_exited(self, task: trio.lowlevel.Task) -> None:
        self.tasks.pop(task, None)  # a closed connection's reader and writer


@dataclass(slots=True)
class RequestThrottle:
    """One request's throttling: handlers set the bandwidth or mutation throttle, the
    dispatcher adds the request-time throttle and mutes the connection."""

    user: str
    client_id: str
    #: The largest throttle (ms) a byte-rate or mutation quota asked for, and its type.
    throttle_ms: int = 0
    quota_type: str = ""
    #: Request time recorded already (the Fetch handler records it before building its answer).
    request_recorded: bool = False
    request_throttle_ms: int = 0
    started: list[float] | None = None
    task: trio.lowlevel.Task | None = None
    #: The connection's reader and writer, whose time counts too (Kafka's network thread time).
    io_tasks: Sequence[trio.lowlevel.Task] = ()
    #: The network time of the reader's task, set aside while the request runs in that task.
    io_entry: list[float] | None = None

    def add(self, quota_type: str, throttle_ms: int) -> None:
        if throttle_ms > self.throttle_ms:
            self.throttle_ms, self.quota_type = throttle_ms, quota_type


@dataclass(slots=True)
class TokenBucket:
    """Kafka's TokenBucket: ``burst`` tokens at most, refilled at ``rate`` per second; starts full."""

    tokens: float
    last_ms: int

    def refill(self, rate: float, burst: float, now_ms: int) -> float:
        self.tokens = min(burst, self.tokens + rate * (now_ms - self.last_ms) / 1000)
        self.last_ms = now_ms
        return self.tokens


@dataclass(slots=True)
class MutationQuota:
    """The controller mutation quota of one request: strict (refuses) or permissive."""

    manager: ControllerMutationQuotaManager
    user: str
    client_id: str
    strict: bool
    throttle_ms: int = 0

    def record(self, partitions: int) -> bool:
        """Counts ``partitions`` mutations; False when refused (strict mode, quota already exceeded)."""
        outcome = self.manager.record(self.user, self.client_id, partitions, self.strict)
        if outcome is None:
            return True
        accepted, throttle = outcome
        self.throttle_ms = max(self.throttle_ms, throttle)
        return accepted

    @property
    def error(self) -> tuple[ErrorCode, str]:
        return ErrorCode.THROTTLING_QUOTA_EXCEEDED, THROTTLING_MESSAGE


class ControllerMutationQuotaManager:
    """``controller_mutation_rate`` per quota entity, as Kafka's ControllerMutationQuotaManager."""

    def __init__(self, window_ms: int, windows: int, clock_ms: Callable[[], int],
                 quotas: Callable[[], Mapping[QuotaEntity, Mapping[str, float]]]) -> None:
        self.window_ms = window_ms
        self.windows = windows
        self.clock_ms = clock_ms
        self._quotas = quotas
        self._buckets: dict[QuotaEntity, TokenBucket] = {}
        self._recorded = 0

    def for_request(self, api_key: int, api_version: int, user: str, client_id: str) -> MutationQuota:
        return MutationQuota(self, user, client_id, api_version >= STRICT_SINCE.get(api_key, 1 << 16))

    def record(self, user: str, client_id: str, partitions: int, strict: bool) -> tuple[bool, int] | None:
        """None without a quota; else whether the mutations are accepted and the throttle time in ms
        (0 within the quota). Strict: a
        quota already exceeded refuses and records nothing; otherwise the partitions are
        recorded even when they overdraw the bucket (Kafka's StrictControllerMutationQuota)."""
        applying = quota_for(self._quotas(), CONTROLLER_MUTATION, user, client_id)
        if applying is None:
            return None
        entity, rate = applying
        now = self.clock_ms()
        burst = (self.windows - 1) * self.window_ms / 1000 * rate
        self._recorded += 1
        if self._recorded % PURGE_EVERY == 0:
            self._buckets = {e: b for e, b in self._buckets.items() if b.refill(rate, burst, now) < burst}
        bucket = self._buckets.get(entity)
        if bucket is None:
            bucket = self._buckets[entity] = TokenBucket(burst, now)
        tokens = bucket.refill(rate, burst, now)
        if strict and tokens < 0:
            return False, _token_throttle(tokens, rate)
        bucket.tokens = min(burst, tokens - partitions)
        return True, _token_throttle(bucket.tokens, rate) if bucket.tokens < 0 else 0


def _token_throttle(tokens: float, rate: float) -> int:
    # ControllerMutationQuotaManager.throttleTimeMs: the time to refill the overdraft.
    return round(-tokens / rate * 1000)


@dataclass
class QuotaManagers:
    """Every client quota of this broker (Kafka's QuotaFactory.QuotaManagers)."""

    produce: ClientQuotaManager
    fetch: ClientQuotaManager
    request: ClientQuotaManager
    controller_mutation: ControllerMutationQuotaManager
    #: Called with (quota type, throttle ms) for every throttled response (metrics).
    on_throttle: Callable[[str, int], None] = field(default=lambda quota_type, ms: None)
    _timer: TaskTimer | None = None

    @classmethod
    def create(cls, window_ms: int, windows: int, controller_window_ms: int, controller_windows: int,
               clock_ms: Callable[[], int],
               quotas: Callable[[], Mapping[QuotaEntity, Mapping[str, float]]]) -> QuotaManagers:
        return cls(
            ClientQuotaManager(PRODUCE, window_ms, windows, clock_ms, quotas),
            ClientQuotaManager(FETCH, window_ms, windows, clock_ms, quotas),
            ClientQuotaManager(REQUEST, window_ms, windows, clock_ms, quotas),
            ControllerMutationQuotaManager(controller_window_ms, controller_windows, clock_ms, quotas),
        )

    @classmethod
    def from_config(cls, config: BrokerConfig, clock_ms: Callable[[], int],
                    quotas: Callable[[], Mapping[QuotaEntity, Mapping[str, float]]]) -> QuotaManagers:
        return cls.create(
            config.quota_window_size_seconds * 1000, config.quota_window_num,
            config.controller_quota_window_size_seconds * 1000, config.controller_quota_window_num,
            clock_ms, quotas)

    def start_request(self, api_key: int, user: str, client_id: str, follower_fetch: bool,
                      io_tasks: Sequence[trio.lowlevel.Task] = ()) -> RequestThrottle:
        """Begins measuring the request's event-loop time when a request quota applies to it, and
        the time its connection's ``io_tasks`` spend reading and writing."""
        throttle = RequestThrottle(user, client_id)
        if api_key in EXEMPT_APIS or follower_fetch or not self.request.applies(user, client_id):
            throttle.request_recorded = True
            return throttle
        if self._timer is None:
            self._timer = TaskTimer()
            trio.lowlevel.add_instrument(self._timer)
        task = trio.lowlevel.current_task()
        throttle.task = task
        tasks = self._timer.tasks
        now = time.perf_counter()
        if task in io_tasks:
            # The request runs in its connection's reader task (it has not waited yet): from
            # here to its end the task's time is the request's, before it the network's.
            io_entry = tasks.get(task)
            if io_entry is not None:
                io_entry[0] += now - io_entry[1]
            throttle.io_entry = io_entry
            throttle.started = tasks[task] = [0.0, now]
        else:
            throttle.started = tasks.setdefault(task, [0.0, now])
        for io_task in io_tasks:
            tasks.setdefault(io_task, [0.0, now])
        throttle.io_tasks = io_tasks
        return throttle

    def record_request_time(self, throttle: RequestThrottle) -> int:
        """Records the request's time so far against ``request_percentage`` (once); its throttle in ms."""
        if throttle.request_recorded:
            return throttle.request_throttle_ms
        throttle.request_recorded = True
        started = throttle.started
        # The steps run so far, and the current one up to now.
        spent = started[0] + time.perf_counter() - started[1] if started is not None else 0.0
        # Kafka records nanoseconds as a percentage of one second: percent-seconds per second.
        throttle.request_throttle_ms = self.request.record(throttle.user, throttle.client_id, spent * 100)
        return throttle.request_throttle_ms

    def finish_request(self, throttle: RequestThrottle) -> tuple[str, int]:
        """The throttle the response carries and the connection is muted for: (type, ms)."""
        request_ms = self.record_request_time(throttle)
        if throttle.task is not None and self._timer is not None:
            if throttle.task in throttle.io_tasks:  # back to counting the reader's network time
                entry = throttle.io_entry if throttle.io_entry is not None else [0.0, 0.0]
                entry[1] = time.perf_counter()
                self._timer.tasks[throttle.task] = entry
            else:
                self._timer.tasks.pop(throttle.task, None)
            throttle.task = None
            self._record_network_time(throttle)
        quota_type, ms = (throttle.quota_type, throttle.throttle_ms)
        if request_ms > ms:
            quota_type, ms = REQUEST, request_ms
        if ms > 0:
            self.on_throttle(QUOTA_TYPES[quota_type], ms)
        return quota_type, ms

    def _record_network_time(self, throttle: RequestThrottle) -> None:
        """Counts the time the connection's reader and writer ran since the last request (reading
        this one, sending the previous answers) against ``request_percentage`` without throttling
        this response: Kafka's recordNoThrottle of the network thread time."""
        timer = self._timer
        if timer is None or not throttle.io_tasks:
            return
        spent = 0.0
        for io_task in throttle.io_tasks:
            times = timer.tasks.get(io_task)
            if times is not None:
                spent += times[0]
                times[0] = 0.0
        if spent > 0:
            self.request.record(throttle.user, throttle.client_id, spent * 100)
