"""Topic regex subscriptions of the consumer rebalance protocol (KIP-848).

Kafka resolves ``SubscribedTopicRegex`` on the broker with RE2/J, so a pattern means
the same to every client: RE2 syntax (no backreferences or lookaround, linear time),
matched against the whole topic name. The google-re2 binding gives the same engine.
Internal topics never match, as in Kafka. Compiled patterns are cached: every
heartbeat resolves its member's pattern against the current topics.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import Any

import re2

from controller.image import INTERNAL_TOPICS


class InvalidRegularExpression(ValueError):
    """A pattern RE2 does not accept."""


@lru_cache(maxsize=1024)
def _compiled(pattern: str) -> Any:
    try:
        return re2.compile(pattern)
    except re2.error as ex:
        raise InvalidRegularExpression(str(ex)) from ex


def validate(pattern: str) -> str | None:
    """None if ``pattern`` is a valid RE2 expression, else why not."""
    try:
        _compiled(pattern)
    except InvalidRegularExpression as ex:
        return str(ex)
    return None


def matches(pattern: str | None, topic: str) -> bool:
    if not pattern or topic in INTERNAL_TOPICS:
        return False
    try:
        return _compiled(pattern).fullmatch(topic) is not None
    except InvalidRegularExpression:
        return False


def resolve(pattern: str | None, topics: Iterable[str]) -> set[str]:
    """The topics ``pattern`` subscribes to."""
    return {t for t in topics if matches(pattern, t)} if pattern else set()
