"""One partition replica on this broker (Kafka's ``kafka.cluster.Partition``).

The partition is the one way into its log:

- :meth:`Partition.append_records_to_leader` (Kafka's ``appendRecordsToLeader``) serves
  Produce, the coordinators' writes to their internal topics and, through
  :meth:`Partition.append_txn_marker`, WriteTxnMarkers: it checks leadership and
  ``min.insync.replicas``, asks the producer state whether the batches may go in, appends
  them, records in the producer state what the log appended, moves the high watermark and
  wakes whoever waits on the partition;
- :meth:`Partition.append_records_to_follower` is the replica fetcher's append;
- :meth:`Partition.replication_outcome` decides a write waiting for the high watermark
  (acks=all, markers, coordinator writes; :mod:`broker.replication.delayed_produce`).

"Under min ISR" is computed here only (:attr:`Partition.under_min_isr`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import structlog
import trio

from broker.log.config import LogConfig
from broker.log.partition_log import AppendInfo, PartitionLog
from broker.log.producer_state import (
    AppendOrigin,
    BatchMetadata,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerStateError,
    ProducerStateManager,
    TransactionCoordinatorFencedError,
    VerificationGuard,
)
from wire.batch_builder import build_control_batch
from wire.errors import ErrorCode
from wire.records import ControlRecordType, RecordBatchHeader, iter_batch_headers

log = structlog.get_logger(__name__)

_STATE_ERRORS: dict[type[ProducerStateError], ErrorCode] = {
    OutOfOrderSequenceError: ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
    InvalidProducerEpochError: ErrorCode.INVALID_PRODUCER_EPOCH,
    InvalidTxnStateError: ErrorCode.INVALID_TXN_STATE,
    TransactionCoordinatorFencedError: ErrorCode.TRANSACTION_COORDINATOR_FENCED,
}


def state_error_code(ex: ProducerStateError) -> ErrorCode:
    """The Kafka error code of a producer-state refusal."""
    for cls, code in _STATE_ERRORS.items():
        if isinstance(ex, cls):
            return code
    return ErrorCode.UNKNOWN_SERVER_ERROR


class AppendRefusedError(Exception):
    """The partition refused an append before writing anything; ``code`` goes to the client."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


@dataclass(eq=False, slots=True)
class Partition:
    topic: str
    index: int
    topic_id: uuid.UUID
    log: PartitionLog
    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    #: Idempotent and transactional producers of this partition (dedup, LSO, aborted txns).
    producer_state: ProducerStateManager
    #: This broker's id.
    local_id: int
    #: ``min.insync.replicas`` of a topic (its config can change at any time).
    min_insync_replicas_of: Callable[[str], int]
    high_watermark: int = 0
    #: Log end offsets of the followers, from their fetch offsets (leader only).
    follower_end_offsets: dict[int, int] = field(default_factory=dict)
    #: When each follower was last caught up with this leader's log end (ms).
    follower_caught_up_ms: dict[int, int] = field(default_factory=dict)
    #: Each follower's previous fetch: (when, this leader's log end offset then).
    follower_last_fetch: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: The ISR this leader asked the controller for and has not seen committed yet.
    pending_isr: tuple[int, ...] | None = None
    #: Fetches and acks=all produces waiting for this partition to change.
    waiters: set[trio.Event] = field(default_factory=set)
    #: False once this broker stopped hosting the partition (deleted, reassigned away).
    online: bool = True

    @property
    def config(self) -> LogConfig:
        """The topic's settings, as the log holds them."""
        return self.log.config

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        """read_committed consumers stop here: before the first open transaction, or the
        first one whose marker is not yet below the high watermark."""
        return self.producer_state.last_stable_offset(self.high_watermark)

    @property
    def is_leader(self) -> bool:
        return self.leader == self.local_id

    @property
    def min_insync_replicas(self) -> int:
        return self.min_insync_replicas_of(self.topic)

    @property
    def under_min_isr(self) -> bool:
        """Fewer in-sync replicas than ``min.insync.replicas``: acks=all writes are refused."""
        return len(self.isr) < self.min_insync_replicas_of(self.topic)

    def wake(self) -> None:
        for event in self.waiters:
            event.set()
        self.waiters.clear()

    # ------------------------------------------------------------ high watermark

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR plus the replicas this leader asked to add and has not seen committed
        (Kafka's maximalIsr): the controller may already count them in the ISR, and elect
        one of them, so the high watermark must wait for them too."""
        pending = self.pending_isr
        if pending is None:
            return self.isr
        return self.isr + tuple(r for r in pending if r not in self.isr)

    def maybe_increment_high_watermark(self) -> bool:
        """HW = the smallest log end offset over the maximal ISR; it only moves forward."""
        if self.leader != self.local_id:
            return False
        hw = self.log.log_end_offset
        for replica in self.maximal_isr:
            if replica != self.local_id:
                hw = min(hw, self.follower_end_offsets.get(replica, self.high_watermark))
        if hw > self.high_watermark:
            self.high_watermark = hw
            self.wake()
            return True
        return False

    # ------------------------------------------------------------ appending

    def check_leader_append(self, required_acks: int) -> None:
        """Whether this broker may append now: it leads, and for acks=all the ISR is not
        below ``min.insync.replicas``; raises :class:`AppendRefusedError`."""
        if not self.is_leader:
            raise AppendRefusedError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if required_acks == -1 and self.under_min_isr:
            raise AppendRefusedError(ErrorCode.NOT_ENOUGH_REPLICAS)

    def append_records_to_leader(
        self,
        data: bytearray | bytes | memoryview,
        *,
        origin: AppendOrigin,
        required_acks: int = -1,
        batches: Sequence[tuple[int, RecordBatchHeader]] | None = None,
        verification_guard: VerificationGuard | None = None,
    ) -> AppendInfo:
        """Append ``data`` as this partition's leader (Kafka's Partition.appendRecordsToLeader).

        ``batches`` are the headers the produce path validated (CRC and LogAppendTime
        done, so the log does not repeat them); without them the log validates ``data``.
        An exact retry of a retained batch appends nothing and returns that batch's
        offsets. Raises :class:`AppendRefusedError` (nothing written) and, from the log,
        :class:`~broker.log.errors.LogError` or :class:`OSError`.
        """
        self.check_leader_append(required_acks)
        state = self.producer_state
        headers = batches if batches is not None else list(iter_batch_headers(data))
        end_before = self.log.log_end_offset
        try:
            plan = state.analyze_append(headers, end_before, origin, verification_guard)
        except ProducerStateError as ex:
            code = state_error_code(ex)
            log.info("produce_refused", topic=self.topic, partition=self.index, error=code.name, reason=str(ex))
            raise AppendRefusedError(code) from ex
        if isinstance(plan, BatchMetadata):
            log.info("duplicate_batch", partition=f"{self.topic}-{self.index}", producer_id=headers[0][1].producer_id,
                     first_sequence=headers[0][1].base_sequence, first_offset=plan.first_offset)
            return AppendInfo(plan.first_offset, plan.last_offset, plan.timestamp, plan.last_offset,
                              plan.timestamp, self.log.log_start_offset, 0, 0, 0)
        # Offsets and the leader epoch are written into the batches: in ``data`` itself when writable.
        info = self.log.append_as_leader(data, self.leader_epoch, validated=batches is not None, headers=headers)
        if info.batch_count:
            state.update(end_before, info, plan)
        self.maybe_increment_high_watermark()
        self.wake()
        return info

    def append_txn_marker(
        self, control_type: ControlRecordType, producer_id: int, producer_epoch: int, coordinator_epoch: int,
        timestamp_ms: int, transaction_version: int = 0,
    ) -> AppendInfo:
        """Append a COMMIT or ABORT marker as leader (WriteTxnMarkers); as
        :meth:`append_records_to_leader`, with acks=all's ``min.insync.replicas`` check.
        ``transaction_version`` is the marker's (WriteTxnMarkers v2, KIP-1228)."""
        self.check_leader_append(-1)
        state = self.producer_state
        try:
            plan = state.analyze_marker(control_type, producer_id, producer_epoch, coordinator_epoch, timestamp_ms,
                                        transaction_version=transaction_version)
        except ProducerStateError as ex:
            code = state_error_code(ex)
            log.info("txn_marker_refused", topic=self.topic, partition=self.index, producer_id=producer_id,
                     error=code.name, reason=str(ex))
            raise AppendRefusedError(code) from ex
        end_before = self.log.log_end_offset
        batch = bytearray(build_control_batch(control_type, producer_id, producer_epoch, coordinator_epoch,
                                              timestamp_ms=timestamp_ms))
        info = self.log.append_as_leader(batch, self.leader_epoch)
        state.update(end_before, info, plan)
        self.maybe_increment_high_watermark()
        self.wake()
        return info

    def append_records_to_follower(self, records: bytes) -> AppendInfo:
        """Append batches fetched from the leader, keeping their offsets and epochs; the
        producer state records them as replication (no sequence checks). Raises
        :class:`~broker.log.errors.LogError` or :class:`ProducerStateError` (nothing written)."""
        state = self.producer_state
        headers = list(iter_batch_headers(records))
        end_before = self.log.log_end_offset
        plan = state.analyze_append(headers, end_before, AppendOrigin.REPLICATION, buffer=records)
        assert not isinstance(plan, BatchMetadata)  # duplicates are a client's retry only
        info = self.log.append_as_follower(records)
        if info.batch_count:
            state.update(end_before, info, plan)
            self.wake()
        return info

    # ------------------------------------------------------------ waiting for replication

    def replication_outcome(self, required_offset: int) -> ErrorCode | None:
        """A write ending below ``required_offset`` waits for the high watermark (Kafka's
        DelayedProduce check): NONE once it passed, an error once it never will here,
        None while it may still come."""
        if self.high_watermark >= required_offset:
            # An ISR that shrank below min.insync.replicas lets the high watermark pass at once:
            # the write is on fewer replicas than asked (Kafka's checkEnoughReplicasReachOffset).
            if len(self.maximal_isr) < self.min_insync_replicas_of(self.topic):
                return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            return ErrorCode.NONE
        if not self.online or self.leader != self.local_id:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER  # leadership moved while waiting
        if self.under_min_isr:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return None
