"""Batches of metadata records as one replicated command, with their compare-and-set end offset."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from controller.records import decode_record, encode_record
from wire.exceptions import DecodeError
from wire.primitives import Message

_BATCH = struct.Struct(">BBqI")
_LEN = struct.Struct(">I")
BATCH_VERSION = 1
#: A barrier batch commits whatever the log holds; it carries no records.
FLAG_UNCONDITIONAL = 1


@dataclass(frozen=True, slots=True)
class Batch:
    expected_end_offset: int
    records: tuple[Message, ...]
    unconditional: bool = False


def encode_batch(records: Sequence[Message], expected_end_offset: int, unconditional: bool = False) -> bytes:
    out = bytearray(_BATCH.pack(BATCH_VERSION, FLAG_UNCONDITIONAL if unconditional else 0,
                                expected_end_offset, len(records)))
    for record in records:
        raw = encode_record(record)
        out += _LEN.pack(len(raw)) + raw
    return bytes(out)


def decode_batch(payload: bytes) -> Batch:
    if len(payload) < _BATCH.size:
        raise DecodeError("metadata batch shorter than its header", 0)
    version, flags, expected, count = _BATCH.unpack_from(payload, 0)
    if version != BATCH_VERSION:
        raise DecodeError(f"unknown metadata batch version {version}", 0)
    pos = _BATCH.size
    records: list[Message] = []
    for _ in range(count):
        if pos + _LEN.size > len(payload):
            raise DecodeError("metadata batch is truncated", pos)
        (length,) = _LEN.unpack_from(payload, pos)
        pos += _LEN.size
        if pos + length > len(payload):
            raise DecodeError("metadata record runs past the batch", pos)
        records.append(decode_record(payload[pos : pos + length]))
        pos += length
    if pos != len(payload):
        raise DecodeError("bytes after the last record of a metadata batch", pos)
    return Batch(expected, tuple(records), bool(flags & FLAG_UNCONDITIONAL))


#: Outcomes of applying a batch, as seen by the node that submitted it.
STALE = "stale"
REJECTED = "rejected"


