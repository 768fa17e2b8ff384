"""What every controller-listener handler needs: the node's controller role, and the
mapping of controller failures to Kafka error codes."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, TypeVar

import trio

from broker.server.dispatch import RequestContext
from controller.quorum import NotControllerError, QuorumTimeoutError
from wire.errors import ErrorCode

if TYPE_CHECKING:
    from broker.cluster.cluster_mode import ControllerRole

_T = TypeVar("_T")

#: Longest a forwarded change may wait for the quorum when the request gives no timeout.
DEFAULT_TIMEOUT_S = 30.0


def controller_role(ctx: RequestContext) -> ControllerRole:
    role = ctx.services.cluster.controller
    if role is None:
        raise RuntimeError("a controller API reached a node without the controller role")
    return role


async def call(work: Awaitable[_T], timeout_ms: int = 0) -> tuple[_T | None, ErrorCode]:
    """Runs a controller call; NOT_CONTROLLER or REQUEST_TIMED_OUT instead of its result on failure."""
    timeout_s = timeout_ms / 1000 if timeout_ms > 0 else DEFAULT_TIMEOUT_S
    try:
        with trio.fail_after(timeout_s):
            return await work, ErrorCode.NONE
    except NotControllerError:
        return None, ErrorCode.NOT_CONTROLLER
    except (QuorumTimeoutError, trio.TooSlowError):
        return None, ErrorCode.REQUEST_TIMED_OUT
