"""Metadata commit latency: a quorum wrapper that times each append until it commits."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from controller.quorum import CommitListener, MetadataQuorum
from wire.primitives import Message

if TYPE_CHECKING:
    from broker.observability.metrics import BrokerMetrics


class TimedQuorum:
    """A :class:`controller.quorum.MetadataQuorum` that times each append until commit."""

    def __init__(self, quorum: MetadataQuorum, metrics: BrokerMetrics) -> None:
        self._quorum = quorum
        self._metrics = metrics

    @property
    def leader_id(self) -> int:
        return self._quorum.leader_id

    @property
    def epoch(self) -> int:
        return self._quorum.epoch

    @property
    def end_offset(self) -> int:
        return self._quorum.end_offset

    def is_leader(self) -> bool:
        return self._quorum.is_leader()

    async def append(self, records: Sequence[Message]) -> int:
        started = time.perf_counter()
        offset = await self._quorum.append(records)
        self._metrics.metadata_committed(time.perf_counter() - started)
        return offset

    def add_listener(self, listener: CommitListener) -> None:
        self._quorum.add_listener(listener)

    def close(self) -> None:
        self._quorum.close()
