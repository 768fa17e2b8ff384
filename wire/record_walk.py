"""Walking the records of a batch without decoding them: the produce path's check.

Kafka's LogValidator reads every record of every produced batch, whatever its codec,
so that a batch no consumer could read is refused instead of stored. :func:`walk_records`
does that over a batch's record bytes (inflated already, if the batch is compressed):
it checks every length, varint, offset delta and header count, and reports what the
validator needs besides — the largest record timestamp, the records without a key
and the records whose timestamp is out of range — without building a record object.

The C accelerator has the same function (``wire._speedups.walk_records``); the code
below is the reference and both must agree on every input. A structural fault raises
:class:`~wire.exceptions.CorruptRecordError` whose ``reason`` names the record.
Set ``CORMORANT_WIRE_PURE=1`` to run without the accelerator.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, TypeAlias

from wire.exceptions import CorruptRecordError

BytesLike: TypeAlias = bytes | bytearray | memoryview

NO_TIMESTAMP = -1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
_UINT64 = 2**64

# Structural faults, reported as (code, record index, value); one table of messages
# serves both implementations so their errors read the same.
RECORDS_TRUNCATED = 1
VARINT_TRUNCATED = 2
VARINT_TOO_LONG = 3
VARINT_OUT_OF_RANGE = 4
RECORD_LENGTH = 5
OFFSET_DELTA = 6
KEY_LENGTH = 7
VALUE_LENGTH = 8
HEADER_COUNT = 9
HEADER_KEY_LENGTH = 10
HEADER_KEY_NOT_UTF8 = 11
HEADER_VALUE_LENGTH = 12
RECORD_TRAILING = 13
BATCH_TRAILING = 14

_MESSAGES = {
    RECORDS_TRUNCATED: "the batch declares more records than it holds (premature end of the records)",
    VARINT_TRUNCATED: "truncated varint",
    VARINT_TOO_LONG: "varint too long",
    VARINT_OUT_OF_RANGE: "varint out of range",
    RECORD_LENGTH: "record length {value} out of range",
    OFFSET_DELTA: "offset delta {value} is not the record's index",
    KEY_LENGTH: "key length {value} out of range",
    VALUE_LENGTH: "value length {value} out of range",
    HEADER_COUNT: "header count {value} out of range",
    HEADER_KEY_LENGTH: "header key length {value} out of range",
    HEADER_KEY_NOT_UTF8: "header key is not UTF-8",
    HEADER_VALUE_LENGTH: "header value length {value} out of range",
    RECORD_TRAILING: "record length mismatch: {value} bytes unread",
    BATCH_TRAILING: "{value} bytes after the last record (records still remaining)",
}


def fault_message(code: int, index: int, value: int) -> str:
    return f"record {index}: " + _MESSAGES[code].format(value=value)


@dataclass(frozen=True, slots=True)
class RecordWalk:
    """What the walk found in a structurally sound batch."""

    #: The largest record timestamp (NO_TIMESTAMP if every record has none).
    max_timestamp: int
    #: Indexes of records with a null key (collected only when asked).
    keyless: list[int]
    #: (index, timestamp) of records outside the allowed range (only when asked);
    #: a keyless record is reported as keyless only, as Kafka reports one error per record.
    bad_timestamps: list[tuple[int, int]]


class _Fault(Exception):
    def __init__(self, code: int, index: int, value: int = 0) -> None:
        super().__init__(code)
        self.code = code
        self.index = index
        self.value = value


def _varint(data: bytes, pos: int, end: int, index: int, max_bytes: int, bits: int) -> tuple[int, int]:
    raw = 0
    shift = 0
    start = pos
    while True:
        if pos >= end:
            raise _Fault(VARINT_TRUNCATED, index)
        byte = data[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if pos - start >= max_bytes:
            raise _Fault(VARINT_TOO_LONG, index)
    if raw >> bits:
        raise _Fault(VARINT_OUT_OF_RANGE, index)
    return (raw >> 1) ^ -(raw & 1), pos


def walk_records_py(
    data: BytesLike,
    count: int,
    base_timestamp: int,
    min_timestamp: int,
    max_timestamp: int,
    check_timestamps: bool,
    check_keys: bool,
) -> tuple[int, int, int, list[int], list[tuple[int, int]]]:
    """The reference walk: (0, max timestamp, 0, keyless, bad timestamps) or (fault code, index, value, [], [])."""
    buf = data if isinstance(data, bytes) else bytes(data)
    end = len(buf)
    pos = 0
    highest = NO_TIMESTAMP
    keyless: list[int] = []
    bad: list[tuple[int, int]] = []
    try:
        for index in range(count):
            if pos >= end:
                raise _Fault(RECORDS_TRUNCATED, index)
            length, pos = _varint(buf, pos, end, index, 5, 32)
            if length < 1 or length > end - pos:
                raise _Fault(RECORD_LENGTH, index, length)
            record_end = pos + length
            pos += 1  # attributes: unused in magic 2
            delta, pos = _varint(buf, pos, record_end, index, 10, 64)
            offset_delta, pos = _varint(buf, pos, record_end, index, 5, 32)
            if offset_delta != index:
                raise _Fault(OFFSET_DELTA, index, offset_delta)
            size, pos = _varint(buf, pos, record_end, index, 5, 32)
            if size < -1 or size > record_end - pos:
                raise _Fault(KEY_LENGTH, index, size)
            has_key = size >= 0
            if has_key:
                pos += size
            size, pos = _varint(buf, pos, record_end, index, 5, 32)
            if size < -1 or size > record_end - pos:
                raise _Fault(VALUE_LENGTH, index, size)
            if size > 0:
                pos += size
            headers, pos = _varint(buf, pos, record_end, index, 5, 32)
            if headers < 0 or headers > (record_end - pos) // 2:
                raise _Fault(HEADER_COUNT, index, headers)
            for _ in range(headers):
                size, pos = _varint(buf, pos, record_end, index, 5, 32)
                if size < 0 or size > record_end - pos:
                    raise _Fault(HEADER_KEY_LENGTH, index, size)
                try:
                    buf[pos : pos + size].decode("utf-8")
                except UnicodeDecodeError:
                    raise _Fault(HEADER_KEY_NOT_UTF8, index) from None
                pos += size
                size, pos = _varint(buf, pos, record_end, index, 5, 32)
                if size < -1 or size > record_end - pos:
                    raise _Fault(HEADER_VALUE_LENGTH, index, size)
                if size > 0:
                    pos += size
            if pos != record_end:
                raise _Fault(RECORD_TRAILING, index, record_end - pos)
            # Java's long arithmetic: the sum wraps.
            timestamp = (base_timestamp + delta) % _UINT64
            if timestamp > INT64_MAX:
                timestamp -= _UINT64
            if timestamp > highest:
                highest = timestamp
            if check_keys and not has_key:
                keyless.append(index)
            elif (check_timestamps and timestamp != NO_TIMESTAMP
                  and not min_timestamp <= timestamp <= max_timestamp):
                bad.append((index, timestamp))
        if pos != end:
            raise _Fault(BATCH_TRAILING, count, end - pos)
    except _Fault as fault:
        return fault.code, fault.index, fault.value, [], []
    return 0, highest, 0, keyless, bad


def _load_accelerated() -> Any:
    if os.environ.get("CORMORANT_WIRE_PURE", "") not in ("", "0"):
        return None
    try:
        from wire import _speedups  # type: ignore[attr-defined]
    except ImportError:
        return None
    return getattr(_speedups, "walk_records", None)


_accelerated: Any = _load_accelerated()


def accelerated() -> bool:
    """Whether :func:`walk_records` runs in the C accelerator."""
    return _accelerated is not None


def walk_records(
    data: BytesLike,
    count: int,
    base_timestamp: int,
    *,
    min_timestamp: int = INT64_MIN,
    max_timestamp: int = INT64_MAX,
    check_timestamps: bool = False,
    check_keys: bool = False,
) -> RecordWalk:
    """Walk ``count`` records in ``data`` (a batch's records, inflated).

    Raises :class:`CorruptRecordError` for a structural fault: a bad length or
    varint, an offset delta other than the record's index, a null or non-UTF-8
    header key, fewer records than ``count`` or bytes after the last one.
    """
    if count < 0:
        raise CorruptRecordError(f"negative record count {count}")
    lo = max(min_timestamp, INT64_MIN)
    hi = min(max_timestamp, INT64_MAX)
    walk = _accelerated if _accelerated is not None else walk_records_py
    code, first, value, keyless, bad = walk(data, count, base_timestamp, lo, hi, check_timestamps, check_keys)
    if code:
        raise CorruptRecordError(fault_message(code, first, value))
    return RecordWalk(first, keyless, bad)
