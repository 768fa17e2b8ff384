"""Collections split between the Trio thread and a worker thread.

The observable instruments' callbacks read the broker's state (partitions, groups, the event
loop's statistics), which only the Trio thread may touch, and they are cheap. What a collection
costs — OpenTelemetry aggregating every series and the Prometheus text, over a second of CPU
with 20,000 partitions (six per-partition series each) — touches none of that state. So a
scrape first runs every callback on the Trio thread (:meth:`CallbackSnapshot.take`), then
collects in a worker thread where each callback returns what it returned then
(:meth:`CallbackSnapshot.replaying`): the event loop keeps serving during the expensive part.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from opentelemetry.metrics import CallbackOptions, Observation

if TYPE_CHECKING:
    from opentelemetry.metrics import Meter

Callback = Callable[[CallbackOptions], Iterable[Observation]]


class ObservableMeter(Protocol):
    """What registering the observable instruments needs of a meter."""

    def create_observable_counter(self, name: str, callbacks: Sequence[Callback] | None = None,
                                  unit: str = "", description: str = "") -> Any: ...

    def create_observable_up_down_counter(self, name: str, callbacks: Sequence[Callback] | None = None,
                                          unit: str = "", description: str = "") -> Any: ...

    def create_observable_gauge(self, name: str, callbacks: Sequence[Callback] | None = None,
                                unit: str = "", description: str = "") -> Any: ...


class CallbackSnapshot:
    """The observations of every wrapped callback, taken at once, replayed in one thread."""

    def __init__(self) -> None:
        self._callbacks: list[Callback] = []
        self._local = threading.local()

    def wrap(self, callback: Callback) -> Callback:
        index = len(self._callbacks)
        self._callbacks.append(callback)

        def observe(options: CallbackOptions) -> Iterable[Observation]:
            taken: Sequence[list[Observation]] | None = getattr(self._local, "taken", None)
            return callback(options) if taken is None else taken[index]

        return observe

    def take(self) -> list[list[Observation]]:
        """Every callback's observations now (on the thread that owns the state they read)."""
        return [list(callback(CallbackOptions())) for callback in self._callbacks]

    @contextlib.contextmanager
    def replaying(self, taken: list[list[Observation]]) -> Iterator[None]:
        """In this thread, until the end of the block, callbacks return ``taken`` instead of reading."""
        self._local.taken = taken
        try:
            yield
        finally:
            self._local.taken = None


class SnapshotMeter:
    """A meter whose observable instruments' callbacks go through a :class:`CallbackSnapshot`."""

    def __init__(self, meter: Meter, snapshot: CallbackSnapshot) -> None:
        self._meter = meter
        self._snapshot = snapshot

    def _wrapped(self, callbacks: Sequence[Callback] | None) -> list[Callback]:
        return [self._snapshot.wrap(c) for c in callbacks or ()]

    def create_observable_counter(self, name: str, callbacks: Sequence[Callback] | None = None,
                                  unit: str = "", description: str = "") -> Any:
        return self._meter.create_observable_counter(name, self._wrapped(callbacks), unit=unit,
                                                     description=description)

    def create_observable_up_down_counter(self, name: str, callbacks: Sequence[Callback] | None = None,
                                          unit: str = "", description: str = "") -> Any:
        return self._meter.create_observable_up_down_counter(name, self._wrapped(callbacks), unit=unit,
                                                             description=description)

    def create_observable_gauge(self, name: str, callbacks: Sequence[Callback] | None = None,
                                unit: str = "", description: str = "") -> Any:
        return self._meter.create_observable_gauge(name, self._wrapped(callbacks), unit=unit,
                                                   description=description)
