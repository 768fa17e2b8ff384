"""Carrying on a coroutine that was started by hand (see ``Connection._handle_here``)."""

from __future__ import annotations

import types
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

T = TypeVar("T")


@types.coroutine
def resume(handling: Coroutine[Any, Any, T], waits_for: Any) -> Generator[Any, Any, T]:
    """Carries on a handler that was started by hand and is waiting on ``waits_for`` (what it
    gave the scheduler): the rest of its run, in the same task, as ``await handling`` would."""
    while True:
        try:
            sent = yield waits_for
        except BaseException as ex:  # Cancelled, and anything else the scheduler throws in
            try:
                waits_for = handling.throw(ex)
            except StopIteration as done:
                result: T = done.value
                return result
        else:
            try:
                waits_for = handling.send(sent)
            except StopIteration as done:
                result = done.value
                return result
