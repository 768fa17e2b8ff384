"""``cormorant dump-log``: print the record batches of a ``.log`` segment, like kafka-dump-log.sh.

One line per batch in the format of Kafka's DumpLogSegments (baseOffset,
lastOffset, count, sequences, producer, leader epoch, flags, delete horizon,
position, timestamp, size, magic, codec, CRC and whether the CRC matches);
with ``deep`` each record follows on a line of its own starting with ``|``.
The file is read one batch at a time, so a segment of any size needs little
memory. Reading stops at the first bytes that are not a whole batch — the torn
tail a crash leaves — and says how many there were, as Kafka's tool does.
Offsets that do not follow each other are listed on stderr at the end.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from wire.exceptions import CorruptRecordError
from wire.records import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    NO_SEQUENCE,
    RecordBatchHeader,
    TimestampType,
    batch_size_at,
    compute_crc,
    increment_sequence,
    iter_records,
    parse_control_record,
    read_batch_header,
)

LOG_SUFFIX = ".log"
RECORD_INDENT = "|"
EXIT_FAILURE = 1
_TIMESTAMP_TYPE_NAMES = {
    TimestampType.CREATE_TIME: "CreateTime",
    TimestampType.LOG_APPEND_TIME: "LogAppendTime",
    TimestampType.NO_TIMESTAMP: "NoTimestampType",
}
_CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def _batches(fd: int, file_size: int) -> Iterator[tuple[int, RecordBatchHeader | None, bytes]]:
    """(position, header, batch bytes) of each whole v2 batch; the header is None at the end.

    The final item (header None) marks where readable batches stop.
    """
    position = 0
    while True:
        prefix = os.pread(fd, BATCH_HEADER_SIZE, position) if file_size - position >= LOG_OVERHEAD else b""
        try:
            size = batch_size_at(prefix)
        except CorruptRecordError:
            size = None
        if (
            size is None
            or size < BATCH_HEADER_SIZE
            or size > file_size - position
            or len(prefix) < BATCH_HEADER_SIZE
            or prefix[MAGIC_OFFSET] != MAGIC_V2
        ):
            yield position, None, b""
            return
        data = os.pread(fd, size, position)
        if len(data) != size:
            yield position, None, b""
            return
        yield position, read_batch_header(data), data
        position += size


def _timestamp_type_name(header: RecordBatchHeader) -> str:
    return _TIMESTAMP_TYPE_NAMES[header.timestamp_type]


def _batch_line(position: int, header: RecordBatchHeader, data: bytes) -> str:
    try:
        valid = compute_crc(data, 0, header) == header.crc
    except CorruptRecordError:
        valid = False
    horizon = header.delete_horizon_ms
    return (
        f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} count: {header.records_count}"
        f" baseSequence: {header.base_sequence} lastSequence: {header.last_sequence}"
        f" producerId: {header.producer_id} producerEpoch: {header.producer_epoch}"
        f" partitionLeaderEpoch: {header.partition_leader_epoch}"
        f" isTransactional: {str(header.is_transactional).lower()} isControl: {str(header.is_control).lower()}"
        f" deleteHorizonMs: {'OptionalLong.empty' if horizon is None else f'OptionalLong[{horizon}]'}"
        f" position: {position} {_timestamp_type_name(header)}: {header.max_timestamp}"
        f" size: {header.size_in_bytes} magic: {header.magic}"
        f" compresscodec: {_CODEC_NAMES.get(header.codec_id, f'unknown({header.codec_id})')}"
        f" crc: {header.crc} isvalid: {str(valid).lower()}"
    )


def _record_lines(header: RecordBatchHeader, data: bytes) -> Iterator[tuple[int, str]]:
    """(offset, line) for each record of a batch; a batch that cannot be decoded says why."""
    try:
        for record in iter_records(data, verify_crc=False):
            delta = record.offset - header.base_offset
            sequence = (
                NO_SEQUENCE if header.base_sequence == NO_SEQUENCE
                else increment_sequence(header.base_sequence, delta)
            )
            key_size = -1 if record.key is None else len(record.key)
            value_size = -1 if record.value is None else len(record.value)
            line = (
                f"{RECORD_INDENT} offset: {record.offset} {_timestamp_type_name(header)}: {record.timestamp}"
                f" keySize: {key_size} valueSize: {value_size}"
                f" sequence: {sequence} headerKeys: [{','.join(k for k, _ in record.headers)}]"
            )
            if header.is_control:
                try:
                    control_type, coordinator_epoch = parse_control_record(record)
                    line += f" endTxnMarker: {control_type.name} coordinatorEpoch: {coordinator_epoch}"
                except CorruptRecordError as ex:
                    line += f" controlType: unknown ({ex.reason})"
            yield record.offset, line
    except CorruptRecordError as ex:
        yield -1, f"{RECORD_INDENT} cannot read the records of this batch: {ex.reason}"


def dump_log(path: Path, deep: bool, out: TextIO, err: TextIO | None = None) -> int:
    """Print the batches of the segment at ``path``; returns the exit status."""
    err = err or sys.stderr
    if not path.exists():
        print(f"cormorant dump-log: {path}: not found", file=err)
        return EXIT_FAILURE
    if path.is_dir():
        print(f"cormorant dump-log: {path} is a directory; give one of its {LOG_SUFFIX} segments", file=err)
        return EXIT_FAILURE
    if not path.name.endswith(LOG_SUFFIX):
        print(f"cormorant dump-log: cannot dump {path}: only {LOG_SUFFIX} segment files are supported", file=err)
        return EXIT_FAILURE
    try:
        start_offset = int(path.name[: -len(LOG_SUFFIX)].split(".")[0])
    except ValueError:
        print(f"cormorant dump-log: cannot dump {path}: a segment's name is its base offset", file=err)
        return EXIT_FAILURE
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as ex:
        print(f"cormorant dump-log: cannot open {path}: {ex.strerror}", file=err)
        return EXIT_FAILURE
    gaps: list[tuple[int, int]] = []
    try:
        file_size = os.fstat(fd).st_size
        print(f"Dumping {path}", file=out)
        print(f"Log starting offset: {start_offset}", file=out)
        last_offset = -1
        for position, header, data in _batches(fd, file_size):
            if header is None:
                trailing = file_size - position
                if trailing > 0:
                    print(f"Found {trailing} invalid bytes at the end of {path.name}", file=out)
                break
            print(_batch_line(position, header, data), file=out)
            if not deep:
                continue
            for offset, line in _record_lines(header, data):
                if offset >= 0:
                    if last_offset != -1 and offset != last_offset + 1:
                        gaps.append((last_offset, offset))
                    last_offset = offset
                print(line, file=out)
    finally:
        os.close(fd)
    if gaps:
        print(f"Non-consecutive offsets in {path.absolute()}", file=err)
        for before, after in gaps:
            print(f"  {before} is followed by {after}", file=err)
    return 0
