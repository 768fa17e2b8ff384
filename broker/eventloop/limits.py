"""Process limits: the open-file limit, naming the limit an error ran into, and
background loops that survive hitting one.

A broker must never die because a limit was reached: a request that hits one
gets an error naming it, a background loop that hits one logs once, backs off
and tries again, and the broker keeps serving what it has.
"""

from __future__ import annotations

import errno
import inspect
import resource
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog
import trio

log = structlog.get_logger(__name__)

#: The errors that mean "a limit was reached", not "this request or file is wrong".
RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOSPC, errno.EDQUOT, errno.ENOMEM})
#: A background loop that keeps failing waits at most this long between attempts.
MAX_BACKOFF_S = 30.0


@dataclass(frozen=True, slots=True)
class OpenFileLimit:
    soft_before: int
    soft: int
    hard: int


def raise_open_file_limit() -> OpenFileLimit:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit (as far as the system allows)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if target == resource.RLIM_INFINITY or target > 1 << 20:
        # An unlimited hard limit is not a number the kernel accepts for the soft one.
        target = max(soft, 1 << 20)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError):
            target = soft
    else:
        target = soft
    return OpenFileLimit(soft_before=soft, soft=target, hard=hard)


def open_file_limit() -> int:
    """The soft ``RLIMIT_NOFILE`` now."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def is_resource_error(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in RESOURCE_ERRNOS


def describe_error(exc: BaseException) -> str:
    """What went wrong, naming the limit if one was reached (for error messages and logs)."""
    if not isinstance(exc, OSError) or exc.errno is None:
        return f"{type(exc).__name__}: {exc}"
    where = f" ({exc.filename})" if exc.filename else ""
    code = exc.errno
    if code == errno.EMFILE:
        return f"open-file limit reached (RLIMIT_NOFILE {open_file_limit()}){where}"
    if code == errno.ENFILE:
        return f"system-wide open-file limit reached (fs.file-max){where}"
    if code == errno.ENOSPC:
        return f"no space left on the log directory's disk{where}"
    if code == errno.EDQUOT:
        return f"disk quota exceeded{where}"
    if code == errno.ENOMEM:
        return f"out of memory{where}"
    return f"{exc.strerror or exc}{where}"


async def run_periodically(
    name: str,
    interval_s: float,
    step: Callable[[], object],
    *,
    sleep: Callable[[float], Awaitable[None]] = trio.sleep,
    max_backoff_s: float = MAX_BACKOFF_S,
) -> None:
    """Call ``step`` every ``interval_s`` seconds, forever, surviving its failures (a
    ``step`` that returns an awaitable is awaited: one that yields as it goes).

    A failure is logged once (with the limit it hit, if any), then retried with
    exponential back-off; the first success after failures is logged too. Only
    cancellation ends the loop: a failing background task never takes the
    broker down.
    """
    failures = 0
    delay = interval_s
    while True:
        await sleep(delay)
        try:
            result = step()
            if inspect.isawaitable(result):  # a step that gives the loop back as it goes
                await result
        except Exception as exc:
            failures += 1
            if failures == 1:
                log.error(
                    "background_task_failed",
                    task=name,
                    error=describe_error(exc),
                    limit_reached=is_resource_error(exc),
                    exc_info=not is_resource_error(exc),
                )
            delay = min(max(interval_s, 0.1) * 2**failures, max(max_backoff_s, interval_s))
            continue
        if failures:
            log.info("background_task_recovered", task=name, failed_attempts=failures)
        failures = 0
        delay = interval_s


async def supervise(
    name: str,
    run: Callable[[], Awaitable[object]],
    *,
    sleep: Callable[[float], Awaitable[None]] = trio.sleep,
    max_backoff_s: float = MAX_BACKOFF_S,
) -> None:
    """Run the long-lived task ``run``; if it fails, log it and start it again after a back-off."""
    failures = 0
    while True:
        try:
            await run()
            return
        except Exception as exc:
            failures += 1
            log.error(
                "background_task_failed",
                task=name,
                error=describe_error(exc),
                limit_reached=is_resource_error(exc),
                restarts=failures,
                exc_info=not is_resource_error(exc),
            )
        await sleep(min(0.1 * 2**failures, max_backoff_s))
