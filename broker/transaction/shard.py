"""The transactional ids of one ``__transaction_state`` partition (Kafka's per-partition
TxnMetadataCacheEntry), loaded by the coordinator runtime.

Replay keeps the last record of each transactional id; a tombstone removes it.
When the load ends, transactions found in PrepareCommit or PrepareAbort still
need their markers: the coordinator is told (``on_loaded``) and resends them,
as Kafka's loadTransactionsForTxnTopicPartition does.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from broker.coordinator import ReplayedRecord, ShardContext
from broker.transaction.metadata import TransactionMetadata
from broker.transaction.records import RecordFormatError, parse_key, parse_value

log = structlog.get_logger(__name__)


class TransactionShard:
    def __init__(
        self,
        ctx: ShardContext,
        coordinator_epoch: int,
        on_loaded: Callable[[TransactionShard], None],
    ) -> None:
        self.ctx = ctx
        #: The leader epoch of this partition when it was loaded: stamped on markers.
        self.coordinator_epoch = coordinator_epoch
        self.transactions: dict[str, TransactionMetadata] = {}
        self.loaded = False
        self.unloaded = False
        self._on_loaded = on_loaded

    @property
    def partition(self) -> int:
        return self.ctx.partition

    def replay(self, record: ReplayedRecord) -> None:
        try:
            transactional_id = parse_key(record.key)
            if transactional_id is None:
                log.warning("txn_log_unknown_key", partition=self.partition, offset=record.offset)
                return
            if record.value is None:
                self.transactions.pop(transactional_id, None)
            else:
                self.transactions[transactional_id] = parse_value(transactional_id, record.value)
        except RecordFormatError as ex:
            log.error("txn_log_record_unreadable", partition=self.partition, offset=record.offset, error=str(ex))

    def replay_end_transaction(self, producer_id: int, committed: bool, offset: int) -> None:
        """``__transaction_state`` holds no transactional data; nothing to do."""

    def on_loaded(self) -> None:
        self.loaded = True
        self._on_loaded(self)

    def on_unloaded(self) -> None:
        self.unloaded = True
        for metadata in self.transactions.values():
            metadata.pending_state = None
