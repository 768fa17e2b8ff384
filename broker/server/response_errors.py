"""The error codes a response carries, wherever the schema puts them.

Kafka responses hold error codes at the top level and inside nested entries
(per topic, per partition, per group, per transaction...). Dispatch counts
every non-zero code (``cormorant.request.errors``) and logs the ones that
mean something went wrong on the broker's side. The walk is planned once per
response class from the generated dataclasses' field types, so a response
costs one attribute read per entry that can hold an error code.
"""

from __future__ import annotations

import dataclasses
import time
import types
import typing
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from wire.errors import ErrorCode

log = structlog.get_logger(__name__)

#: Codes that say the broker (not the client's request) is in trouble. Each one a client
#: receives is logged, with the request's context.
BROKER_SIDE_ERRORS: frozenset[int] = frozenset({
    ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.BROKER_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.LOG_DIR_NOT_FOUND,
})  # fmt: skip

#: Of those, the ones logged at error level (the rest are warnings: the cluster is degraded).
_ERROR_LEVEL = frozenset({ErrorCode.UNKNOWN_SERVER_ERROR, ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.LOG_DIR_NOT_FOUND})
#: Lines per (API, error code) and second before further ones are only counted.
LOG_BURST = 10

#: Field names that name the entity an entry is about, for log context.
_NAME_FIELDS = ("name", "topic", "group_id", "transactional_id", "resource_name")
_INDEX_FIELDS = ("partition_index", "index", "partition")


@dataclass(frozen=True, slots=True)
class _Plan:
    error_fields: tuple[str, ...]
    #: (field name, holds a list, plan of the element)
    children: tuple[tuple[str, bool, _Plan], ...]


_PLANS: dict[type, _Plan | None] = {}


def _element_type(hint: Any) -> tuple[Any, bool]:
    """(the dataclass type in ``hint``, whether it is a list of them), or (None, False)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(hint):
            if arg is not type(None):
                return _element_type(arg)
        return None, False
    if origin is list:
        (arg,) = typing.get_args(hint)
        inner, _ = _element_type(arg)
        return inner, True
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return hint, False
    return None, False


def _plan(cls: type) -> _Plan | None:
    if cls in _PLANS:
        return _PLANS[cls]
    _PLANS[cls] = None  # schemas are trees, but never recurse forever
    hints = typing.get_type_hints(cls)
    errors: list[str] = []
    children: list[tuple[str, bool, _Plan]] = []
    for f in dataclasses.fields(cls):
        if f.name.endswith("error_code"):
            errors.append(f.name)
            continue
        inner, is_list = _element_type(hints.get(f.name))
        if inner is None:
            continue
        sub = _plan(inner)
        if sub is not None:
            children.append((f.name, is_list, sub))
    plan = _Plan(tuple(errors), tuple(children)) if errors or children else None
    _PLANS[cls] = plan
    return plan


def _walk(obj: Any, plan: _Plan, out: list[int]) -> None:
    for name in plan.error_fields:
        code = getattr(obj, name)
        if code:
            out.append(code)
    for name, is_list, sub in plan.children:
        value = getattr(obj, name)
        if value is None:
            continue
        if is_list:
            for item in value:
                _walk(item, sub, out)
        else:
            _walk(value, sub, out)


def error_codes(response: Any) -> list[int]:
    """Every non-zero error code in ``response`` (one per entry that carries it)."""
    cls = type(response)
    plan = _PLANS[cls] if cls in _PLANS else _plan(cls)
    out: list[int] = []
    if plan is not None:
        _walk(response, plan, out)
    return out


def error_code_counts(response: Any) -> Counter[int]:
    """How many entries of ``response`` carry each non-zero error code."""
    return Counter(error_codes(response))


def where(response: Any, code: int, limit: int = 10) -> list[str]:
    """Up to ``limit`` places in ``response`` holding ``code``, as ``topic-3`` or ``group``
    paths; for logs only (slow path)."""
    plan = _plan(type(response))
    found: list[str] = []
    if plan is not None:
        for path in _paths(response, plan, code, ""):
            found.append(path or "(response)")
            if len(found) >= limit:
                break
    return found


def _label(obj: Any, prefix: str) -> str:
    name = next((getattr(obj, f) for f in _NAME_FIELDS if isinstance(getattr(obj, f, None), str)), None)
    index = next((getattr(obj, f) for f in _INDEX_FIELDS if isinstance(getattr(obj, f, None), int)), None)
    label = prefix
    if name:
        label = f"{label}/{name}" if label else name
    if index is not None:
        label = f"{label}-{index}" if label else str(index)
    return label


def _paths(obj: Any, plan: _Plan, code: int, prefix: str) -> Iterator[str]:
    label = _label(obj, prefix)
    if any(getattr(obj, name) == code for name in plan.error_fields):
        yield label
    for name, is_list, sub in plan.children:
        value = getattr(obj, name)
        if value is None:
            continue
        for item in value if is_list else (value,):
            yield from _paths(item, sub, code, label)


class BrokerErrorLog:
    """Logs every broker-side error code a client receives, once per response and code,
    with the request's context and where in the response the code sits.

    A failing disk answers every produce with KAFKA_STORAGE_ERROR, so lines are limited
    to LOG_BURST per (API, code) and second; the next line logged carries the number
    of responses left out (``suppressed``).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._windows: dict[tuple[int, int], list[float | int]] = {}

    def report(
        self,
        api: str,
        api_key: int,
        api_version: int,
        client_id: str | None,
        peer: str,
        request: Any,
        response: Any,
        codes: Mapping[int, int],
        *,
        skip: int | None = None,
    ) -> None:
        """``codes``: how many entries carry each non-zero code; ``skip``: a code already
        logged with more detail (a handler's traceback)."""
        for code in sorted(set(codes) & BROKER_SIDE_ERRORS):
            if code == skip:
                continue
            suppressed = self._admit(api_key, code)
            if suppressed is None:
                continue
            context: dict[str, Any] = {}
            for name in ("group_id", "transactional_id"):
                value = getattr(request, name, None)
                if isinstance(value, str) and value:
                    context[name] = value
            if suppressed:
                context["suppressed"] = suppressed
            emit = log.error if code in _ERROR_LEVEL else log.warning
            emit("broker_error_returned", api=api, api_version=api_version, error=ErrorCode.for_code(code).name,
                 entries=codes[code], where=where(response, code), client_id=client_id,
                 peer=peer, **context)

    def _admit(self, api_key: int, code: int) -> int | None:
        """None when this line is over the limit; else how many were left out before it."""
        now = self.clock()
        window = self._windows.get((api_key, code))
        if window is None or now - window[0] >= 1.0:
            suppressed = int(window[2]) if window is not None else 0
            self._windows[(api_key, code)] = [now, 1, 0]
            return suppressed
        if window[1] < LOG_BURST:
            window[1] += 1
            return 0
        window[2] += 1
        return None


class ClientErrorLog:
    """Lines about a client's mistakes (an unknown partition, a bad config name): at most
    LOG_BURST per event and second, so that a request naming a million unknown
    partitions writes ten lines, not a million; the next line admitted carries the
    number left out (``suppressed``)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._windows: dict[str, list[float | int]] = {}

    def admit(self, event: str) -> int | None:
        """None when this line is over the limit; else how many were left out before it."""
        now = self.clock()
        window = self._windows.get(event)
        if window is None or now - window[0] >= 1.0:
            suppressed = int(window[2]) if window is not None else 0
            self._windows[event] = [now, 1, 0]
            return suppressed
        if window[1] < LOG_BURST:
            window[1] += 1
            return 0
        window[2] += 1
        return None

    def log(self, event: str, **context: Any) -> None:
        """Logs ``event`` at info level unless it is over the limit."""
        suppressed = self.admit(event)
        if suppressed is None:
            return
        if suppressed:
            context["suppressed"] = suppressed
        log.info(event, **context)
