"""How a handler or the network drops a connection."""

from __future__ import annotations

from wire.frame import EncodedFrame


def first_close(group: BaseExceptionGroup[CloseConnection], kind: type[CloseConnection]) -> CloseConnection:
    for ex in group.exceptions:
        if isinstance(ex, BaseExceptionGroup):
            return first_close(ex, kind)
        if isinstance(ex, kind):
            return ex
    raise AssertionError("empty exception group")


class CloseConnection(Exception):
    """Raised by a handler to drop the connection without answering (Kafka's reaction to
    protocol violations)."""

    def __init__(self, reason: str, *, response: EncodedFrame | None = None, **context: object) -> None:
        super().__init__(reason)
        self.reason = reason
        self.context = context
        #: Sent before closing (Kafka answers a failed authentication, then closes).
        self.response = response
