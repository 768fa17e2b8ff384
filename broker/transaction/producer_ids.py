"""Producer ids, handed out from blocks the controller allocates (Kafka's RPCProducerIdManager).

Each block (1000 ids) is a ProducerIdsRecord committed to the metadata quorum
before any id in it is used, so ids stay unique across brokers and restarts:
a restarted broker asks for a new block and never reuses the rest of its old
one. The next block is fetched in the background once 90% of the current one
is used, so InitProducerId rarely waits on the quorum.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog
import trio

log = structlog.get_logger(__name__)

#: Fraction of a block used before the next one is requested (Kafka's PID_PREFETCH_THRESHOLD).
PREFETCH_THRESHOLD = 0.90


class ProducerIdsUnavailableError(Exception):
    """No block could be allocated now; clients retry (COORDINATOR_LOAD_IN_PROGRESS, as Kafka)."""


class ProducerIdManager:
    def __init__(self, allocate: Callable[[], Awaitable[tuple[int, int]]]) -> None:
        """``allocate()`` commits a new block and returns (first id, block size)."""
        self._allocate = allocate
        self._current: tuple[int, int] | None = None  # (next id, end exclusive)
        self._next_block: tuple[int, int] | None = None
        self._prefetch_threshold: int | None = None
        self._lock = trio.Lock()
        self._prefetch_wanted = trio.Event()

    async def generate_producer_id(self) -> int:
        async with self._lock:
            if self._current is None or self._current[0] >= self._current[1]:
                if self._next_block is not None:
                    self._install(self._next_block)
                    self._next_block = None
                else:
                    self._install(await self._fetch())
            assert self._current is not None
            producer_id, end = self._current
            self._current = (producer_id + 1, end)
            if self._prefetch_threshold is not None and producer_id >= self._prefetch_threshold:
                self._prefetch_threshold = None
                self._prefetch_wanted.set()
            return producer_id

    def _install(self, block: tuple[int, int]) -> None:
        first, size = block
        self._current = (first, first + size)
        self._prefetch_threshold = first + int(size * PREFETCH_THRESHOLD)
        log.info("producer_id_block_installed", first_producer_id=first, size=size)

    async def _fetch(self) -> tuple[int, int]:
        try:
            first, size = await self._allocate()
        except Exception as ex:
            log.warning("producer_id_block_allocation_failed", error=repr(ex))
            raise ProducerIdsUnavailableError(str(ex)) from ex
        if size <= 0 or first < 0:
            raise ProducerIdsUnavailableError(f"controller returned block ({first}, {size})")
        return first, size

    async def run(self) -> None:
        """Fetches the next block ahead of need; run in the owner's nursery."""
        while True:
            await self._prefetch_wanted.wait()
            self._prefetch_wanted = trio.Event()
            if self._next_block is None:
                try:
                    self._next_block = await self._fetch()
                except ProducerIdsUnavailableError:
                    await trio.sleep(1)
                    self._prefetch_wanted.set()
