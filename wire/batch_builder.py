"""Building Kafka record batches (magic 2): :class:`RecordBatchBuilder`, whole batches,
the empty batch compaction keeps, and transaction markers (control batches). Reading and
checking batches is :mod:`wire.records`."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import TypeAlias

import crc32c

from wire.compression import (
    Compression,
    compress,
)
from wire.records import (
    ATTRIBUTES_OFFSET,
    CONTROL_FLAG_MASK,
    CONTROL_KEY,
    CONTROL_VALUE,
    CRC_COVERED_HEADER,
    DELETE_HORIZON_FLAG_MASK,
    HEADER_PREFIX,
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    PARTITION_LEADER_EPOCH_OFFSET,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    ControlRecordType,
    NewRecord,
    Record,
    RecordBatchHeader,
    TimestampType,
)

# ---------------------------------------------------------------------------
# Building batches


def _write_varint(out: bytearray, value: int) -> None:
    """Append a zigzag varint (or varlong: the encoding is the same)."""
    raw = (value << 1) ^ (value >> 63)
    while raw > 0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def _write_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        out.append(0x01)  # zigzag(-1)
    else:
        _write_varint(out, len(value))
        out += value


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


# offset delta, timestamp, key, value, headers, attributes
_PendingRecord: TypeAlias = tuple[
    int, int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]], int
]


class RecordBatchBuilder:
    """Accumulates records and produces one complete magic 2 batch."""

    def __init__(
        self,
        base_offset: int = 0,
        compression: Compression = Compression.NONE,
        timestamp_type: TimestampType = TimestampType.CREATE_TIME,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        is_transactional: bool = False,
        is_control: bool = False,
        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
        compression_level: int | None = None,
        delete_horizon_ms: int | None = None,
    ) -> None:
        """``delete_horizon_ms`` sets compaction's delete horizon (KIP-534): it becomes
        the base timestamp, with the flag in the attributes."""
        if timestamp_type is TimestampType.NO_TIMESTAMP:
            raise ValueError("a v2 batch needs CREATE_TIME or LOG_APPEND_TIME")
        if delete_horizon_ms is not None and not 0 <= delete_horizon_ms <= INT64_MAX:
            raise ValueError(f"delete horizon {delete_horizon_ms} is not a timestamp")
        self.base_offset = base_offset
        self.compression = Compression(compression)
        self.compression_level = compression_level
        self.timestamp_type = timestamp_type
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional
        self.is_control = is_control
        self.partition_leader_epoch = partition_leader_epoch
        self.delete_horizon_ms = delete_horizon_ms
        self._encoded: list[_PendingRecord] = []
        self._last_delta = -1
        self._last_offset_override: int | None = None

    def __len__(self) -> int:
        return len(self._encoded)

    @property
    def last_offset(self) -> int | None:
        """The absolute offset of the last record appended, None if there is none."""
        return self.base_offset + self._last_delta if self._encoded else None

    def append(
        self,
        value: bytes | None,
        key: bytes | None = None,
        headers: Iterable[tuple[str, bytes | None]] = (),
        timestamp: int | None = None,
        offset_delta: int | None = None,
        attributes: int = 0,
    ) -> int:
        """Add a record; returns its offset delta."""
        delta = self._last_delta + 1 if offset_delta is None else offset_delta
        if delta <= self._last_delta or delta > INT32_MAX:
            raise ValueError(f"offset delta {delta} must increase and fit an int32")
        ts = _now_ms() if timestamp is None else timestamp
        if not INT64_MIN <= ts <= INT64_MAX:
            raise ValueError(f"timestamp {ts} does not fit an int64")
        self._encoded.append((delta, ts, key, value, tuple(headers), attributes))
        self._last_delta = delta
        return delta

    def append_record(self, record: Record | NewRecord) -> int:
        """Add a record; a :class:`Record` keeps its absolute offset."""
        if isinstance(record, Record):
            return self.append(
                record.value,
                record.key,
                record.headers,
                record.timestamp,
                record.offset - self.base_offset,
                record.attributes,
            )
        return self.append(
            record.value, record.key, record.headers, record.timestamp, record.offset_delta
        )

    def override_last_offset(self, last_offset: int) -> None:
        """End the batch at ``last_offset`` even if its last record comes earlier.

        Compaction keeps a batch's last offset when it removes the batch's last
        records, so the producer's last sequence (base sequence plus last offset
        delta) and the log's offsets stay as they were (Kafka's
        MemoryRecordsBuilder.overrideLastOffset). :meth:`build` checks that no
        record lies past it.
        """
        if not 0 <= last_offset - self.base_offset <= INT32_MAX:
            raise ValueError(f"last offset {last_offset} does not fit a batch based at {self.base_offset}")
        self._last_offset_override = last_offset

    def build(self) -> bytes:
        """The complete batch, CRC included."""
        records = self._encoded
        if records:
            base_timestamp = records[0][1]
            max_timestamp = max(r[1] for r in records)
            last_offset_delta = self._last_delta
        else:
            base_timestamp = max_timestamp = NO_TIMESTAMP
            last_offset_delta = 0
        if self._last_offset_override is not None:
            override_delta = self._last_offset_override - self.base_offset
            if override_delta < self._last_delta:
                raise ValueError(
                    f"last offset {self._last_offset_override} precedes the last record's"
                    f" {self.base_offset + self._last_delta}"
                )
            last_offset_delta = override_delta
        if self.delete_horizon_ms is not None:
            # Record timestamps are stored as deltas from it, so they read back unchanged.
            base_timestamp = self.delete_horizon_ms
        payload = bytearray()
        body = bytearray()
        for delta, ts, key, value, headers, attributes in records:
            timestamp_delta = ts - base_timestamp
            if not INT64_MIN <= timestamp_delta <= INT64_MAX:
                raise ValueError(f"timestamp {ts} too far from the first record's")
            body.clear()
            body.append(attributes & 0xFF)
            _write_varint(body, timestamp_delta)
            _write_varint(body, delta)
            _write_bytes(body, key)
            _write_bytes(body, value)
            _write_varint(body, len(headers))
            for name, header_value in headers:
                _write_bytes(body, name.encode("utf-8"))
                _write_bytes(body, header_value)
            _write_varint(payload, len(body))
            payload += body
        attributes = int(self.compression)
        if self.timestamp_type is TimestampType.LOG_APPEND_TIME:
            attributes |= TIMESTAMP_TYPE_MASK
        if self.is_transactional:
            attributes |= TRANSACTIONAL_FLAG_MASK
        if self.is_control:
            attributes |= CONTROL_FLAG_MASK
        if self.delete_horizon_ms is not None:
            attributes |= DELETE_HORIZON_FLAG_MASK
        covered = CRC_COVERED_HEADER.pack(
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            len(records),
        ) + compress(self.compression, payload, self.compression_level)
        crc = crc32c.crc32c(covered)
        batch_length = len(covered) + (ATTRIBUTES_OFFSET - PARTITION_LEADER_EPOCH_OFFSET)
        prefix = HEADER_PREFIX.pack(
            self.base_offset, batch_length, self.partition_leader_epoch, MAGIC_V2, crc
        )
        return prefix + covered


def build_batch(
    records: Iterable[Record | NewRecord],
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    compression_level: int | None = None,
) -> bytes:
    """One complete batch holding ``records`` (see :class:`RecordBatchBuilder`)."""
    builder = RecordBatchBuilder(
        base_offset=base_offset,
        compression=compression,
        timestamp_type=timestamp_type,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        is_control=is_control,
        partition_leader_epoch=partition_leader_epoch,
        compression_level=compression_level,
    )
    for record in records:
        builder.append_record(record)
    return builder.build()


def build_empty_batch(header: RecordBatchHeader) -> bytes:
    """A batch with ``header``'s offsets, producer fields, flags and max timestamp but no records.

    What compaction keeps of a batch whose records all went when the batch
    must stay, e.g. because it holds its producer's last sequence (Kafka's
    DefaultRecordBatch.writeEmptyHeader): uncompressed, base timestamp
    NO_TIMESTAMP, no delete horizon.
    """
    attributes = header.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK)
    covered = CRC_COVERED_HEADER.pack(
        attributes,
        header.last_offset_delta,
        NO_TIMESTAMP,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        0,
    )
    batch_length = len(covered) + (ATTRIBUTES_OFFSET - PARTITION_LEADER_EPOCH_OFFSET)
    prefix = HEADER_PREFIX.pack(
        header.base_offset,
        batch_length,
        header.partition_leader_epoch,
        MAGIC_V2,
        crc32c.crc32c(covered),
    )
    return prefix + covered




def build_control_batch(
    control_type: ControlRecordType,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    base_offset: int = 0,
    timestamp_ms: int | None = None,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A transaction marker: a transactional control batch holding one control record."""
    builder = RecordBatchBuilder(
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )
    builder.append(
        CONTROL_VALUE.pack(0, coordinator_epoch),
        key=CONTROL_KEY.pack(0, int(control_type)),
        timestamp=timestamp_ms,
    )
    return builder.build()
