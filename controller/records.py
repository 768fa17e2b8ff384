"""Framing of metadata records in the metadata log, as Kafka's MetadataRecordSerde:
unsigned varint frame version, unsigned varint record type, unsigned varint record
version, then the record body (metadata records are always flexible)."""

from __future__ import annotations

from wire.exceptions import DecodeError
from wire.generated.registry import METADATA_RECORDS
from wire.primitives import Message, Regions, as_memoryview, read_uvarint, write_uvarint

FRAME_VERSION = 1


def encode_record(record: Message, version: int | None = None) -> bytes:
    v = type(record).MAX_VERSION if version is None else version
    w = bytearray()
    write_uvarint(w, FRAME_VERSION)
    write_uvarint(w, record.API_KEY)
    write_uvarint(w, v)
    regions: Regions = []
    record.encode_into(w, v, regions)
    return bytes(w)


def decode_record(data: bytes | bytearray | memoryview) -> Message:
    buf = as_memoryview(data)
    frame, p = read_uvarint(buf, 0, len(buf))
    if frame != FRAME_VERSION:
        raise DecodeError(f"unknown metadata record frame version {frame}", 0)
    rtype, p = read_uvarint(buf, p, len(buf))
    version, p = read_uvarint(buf, p, len(buf))
    cls = METADATA_RECORDS.get(rtype)
    if cls is None:
        raise DecodeError(f"unknown metadata record type {rtype}", 1)
    record, _ = cls.decode_at(buf, p, version)
    return record
