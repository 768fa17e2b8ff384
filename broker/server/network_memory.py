"""Memory for requests across connections (``queued.max.request.bytes``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import trio


class NetworkMemory:
    """Bytes held by requests and responses of every connection.

    Requests: the announced size of each frame is reserved before its body is read and
    released when its request has been answered. A frame is admitted when it fits in what
    is left, or when nothing of its class is reserved (so one frame larger than the whole
    limit, up to ``socket.request.max.bytes``, still gets through, as with Kafka's memory
    pool); otherwise its connection waits, unread. Waiting frames are admitted first fit,
    in arrival order: a frame that fits is not held behind one that does not, so
    connections announcing huge frames and sending them slowly cannot hold up a producer's
    ordinary batches while any room is left. Frames of at most ``SMALL_FRAME`` bytes —
    nearly every request but large produces — have a budget of their own (an eighth of the
    limit, at least 256 KiB). Responses: bytes built and not yet sent (file regions
    excluded: they stay on disk until ``sendfile``).
    """

    SMALL_FRAME = 64 * 1024

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.small_limit = max(limit // 8, 4 * self.SMALL_FRAME) if limit >= 0 else -1
        self.large = 0
        self.small = 0
        self.responses = 0
        self._waiting: list[_MemoryWaiter] = []

    @property
    def requests(self) -> int:
        return self.large + self.small

    @property
    def waiting(self) -> int:
        """Connections waiting for request memory."""
        return len(self._waiting)

    def fits(self, size: int) -> bool:
        """Whether a frame of ``size`` bytes would be admitted now."""
        return self._fits(size)

    def take_if_room(self, size: int) -> bool:
        """Takes ``size`` bytes of the small-frame budget if they fit within it (never beyond
        it, unlike a frame): for bytes read ahead of the frame being read."""
        if self.small_limit >= 0 and self.small + size > self.small_limit:
            return False
        self.small += size
        return True

    def _fits(self, size: int) -> bool:
        if size <= self.SMALL_FRAME:
            return self.small_limit < 0 or self.small == 0 or self.small + size <= self.small_limit
        return self.limit < 0 or self.large == 0 or self.large + size <= self.limit

    def _take(self, size: int) -> None:
        if size <= self.SMALL_FRAME:
            self.small += size
        else:
            self.large += size

    async def reserve(self, size: int) -> None:
        if self._fits(size):
            self._take(size)
            return
        waiter = _MemoryWaiter(size)
        self._waiting.append(waiter)
        try:
            await waiter.admitted.wait()
        except BaseException:
            if waiter.admitted.is_set():
                self.release(size)  # admitted as it was cancelled: give it back
            else:
                self._waiting.remove(waiter)
            raise

    def release(self, size: int) -> None:
        if size <= self.SMALL_FRAME:
            self.small -= size
        else:
            self.large -= size
        self._admit()

    def _admit(self) -> None:
        if not self._waiting:
            return
        still: list[_MemoryWaiter] = []
        for waiter in self._waiting:
            if self._fits(waiter.size):
                self._take(waiter.size)
                waiter.admitted.set()
            else:
                still.append(waiter)
        self._waiting = still


@dataclass(slots=True)
class _MemoryWaiter:
    size: int
    admitted: trio.Event = field(default_factory=trio.Event)
