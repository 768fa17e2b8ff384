"""Shared helpers for the log tests: a settable clock, batch builders, and readers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from broker.log import PartitionLog
from wire.batch_builder import build_batch
from wire.compression import Compression
from wire.records import (
    NewRecord,
    RecordBatchHeader,
    crc_is_valid,
    iter_batch_headers,
    iter_records,
)

T0 = 1_700_000_000_000


class Clock:
    """A wall clock the test moves by hand."""

    def __init__(self, now_ms: int = T0 + 1_000_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


def make_batch(
    records: int = 1,
    *,
    timestamp: int = T0,
    value_size: int = 10,
    base_offset: int = 0,
    leader_epoch: int = -1,
    compression: Compression = Compression.NONE,
    timestamps: Sequence[int] | None = None,
) -> bytearray:
    """A valid v2 batch of ``records`` records, timestamps rising by 1 ms from ``timestamp``."""
    stamps = list(timestamps) if timestamps is not None else [timestamp + i for i in range(records)]
    batch = build_batch(
        [
            NewRecord(f"k{i}".encode(), bytes([i % 256]) * value_size, timestamp=ts)
            for i, ts in enumerate(stamps)
        ],
        base_offset=base_offset,
        compression=compression,
        partition_leader_epoch=leader_epoch,
    )
    return bytearray(batch)


@dataclass(frozen=True)
class ReadBatch:
    header: RecordBatchHeader
    data: bytes


def batches_in(data: bytes) -> list[ReadBatch]:
    """Split ``data`` into whole batches, asserting each is complete and CRC-valid."""
    out = []
    end = 0
    for position, header in iter_batch_headers(data):
        assert crc_is_valid(data, position), f"bad CRC at {position}"
        out.append(ReadBatch(header, data[position : position + header.size_in_bytes]))
        end = position + header.size_in_bytes
    assert end == len(data), "a read returned a partial batch"
    return out


def read_all(
    log: PartitionLog, start: int | None = None, max_bytes: int = 64 * 1024
) -> list[ReadBatch]:
    """Every batch from ``start`` (default: log start) to the log end, via repeated reads."""
    offset = log.log_start_offset if start is None else start
    out: list[ReadBatch] = []
    while offset < log.log_end_offset:
        fetched = log.read(offset, max_bytes)
        if fetched.region is None:
            break
        got = batches_in(fetched.region.read())
        assert got, "a non-empty region held no batch"
        assert got[0].header.base_offset == fetched.first_offset
        out.extend(got)
        offset = got[-1].header.next_offset
    return out


def record_offsets(batches: Sequence[ReadBatch]) -> list[int]:
    return [record.offset for batch in batches for record in iter_records(batch.data)]
