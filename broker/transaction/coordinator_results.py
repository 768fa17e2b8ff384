"""What the transaction coordinator answers: InitProducerId, DescribeTransactions and
ListTransactions results."""

from __future__ import annotations

from dataclasses import dataclass

from wire.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    transactional_id: str
    error: ErrorCode
    state: str = ""
    timeout_ms: int = 0
    start_time_ms: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    partitions: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str
