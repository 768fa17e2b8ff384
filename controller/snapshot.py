"""Metadata snapshots: an image written as the records that rebuild it.

As in KRaft, a snapshot is a sequence of ordinary metadata records that, applied
to the empty image, give the image at the snapshot's end offset. The same records
serve three purposes: pysyncobj's log compaction file (:func:`write_snapshot_file`,
with the Raft entries pysyncobj needs to resume from it), FetchSnapshot answers
to brokers (:func:`encode_record_batches`), and tests comparing images.

Snapshot file layout: ``magic "CMRS" | version u16 | end offset i64 | last and
previous Raft entry (index u64, term u64, command length u32, command) | voter
count u16, each (length u16, id) | record count u32, each (length u32, record)
| crc32c u32`` over everything before it. A file that fails its CRC is never
used.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import crc32c

from controller.delta import MetadataDelta
from controller.image import MetadataImage
from controller.records import decode_record, encode_record
from wire.batch_builder import build_batch
from wire.exceptions import CorruptRecordError, DecodeError
from wire.generated.metadata.rec_000_register_broker_record import (
    RegisterBrokerRecord,
    RegisterBrokerRecordBrokerEndpoint,
)
from wire.generated.metadata.rec_002_topic_record import TopicRecord
from wire.generated.metadata.rec_003_partition_record import PartitionRecord
from wire.generated.metadata.rec_004_config_record import ConfigRecord
from wire.generated.metadata.rec_011_user_scram_credential_record import UserScramCredentialRecord
from wire.generated.metadata.rec_012_feature_level_record import FeatureLevelRecord
from wire.generated.metadata.rec_014_client_quota_record import (
    ClientQuotaRecord,
    ClientQuotaRecordEntityData,
)
from wire.generated.metadata.rec_015_producer_ids_record import ProducerIdsRecord
from wire.generated.metadata.rec_018_access_control_entry_record import AccessControlEntryRecord
from wire.primitives import Message
from wire.records import NewRecord, iter_batch_headers, iter_records

SNAPSHOT_MAGIC = b"CMRS"
SNAPSHOT_VERSION = 1
_HEAD = struct.Struct(">4sHq")
_ENTRY = struct.Struct(">QQI")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
#: Records per batch when a snapshot or a log range is sent as record batches.
RECORDS_PER_BATCH = 500

RaftEntry = tuple[bytes, int, int]


class SnapshotCorruptError(Exception):
    """A snapshot file that is truncated, fails its CRC, or holds undecodable records."""


def image_records(image: MetadataImage) -> list[Message]:
    """Records that rebuild ``image`` from the empty image, in a deterministic order."""
    out: list[Message] = []
    for name, level in sorted(image.features.items()):
        out.append(FeatureLevelRecord(name=name, feature_level=level))
    for broker_id in sorted(image.brokers):
        b = image.brokers[broker_id]
        out.append(RegisterBrokerRecord(
            broker_id=b.broker_id,
            incarnation_id=b.incarnation_id,
            broker_epoch=b.epoch,
            end_points=[
                RegisterBrokerRecordBrokerEndpoint(name=e.name, host=e.host, port=e.port,
                                                   security_protocol=e.security_protocol)
                for e in b.endpoints
            ],
            rack=b.rack,
            fenced=b.fenced,
            in_controlled_shutdown=b.in_controlled_shutdown,
        ))
    for topic in sorted(image.topics_by_id.values(), key=lambda t: t.name):
        out.append(TopicRecord(name=topic.name, topic_id=topic.topic_id))
        for index in sorted(topic.partitions):
            p = topic.partitions[index]
            out.append(PartitionRecord(
                partition_id=p.partition,
                topic_id=p.topic_id,
                replicas=list(p.replicas),
                isr=list(p.isr),
                removing_replicas=list(p.removing_replicas),
                adding_replicas=list(p.adding_replicas),
                leader=p.leader,
                leader_epoch=p.leader_epoch,
                partition_epoch=p.partition_epoch,
            ))
    for (resource_type, resource_name), values in sorted(image.configs.items()):
        for key, value in sorted(values.items()):
            out.append(ConfigRecord(resource_type=resource_type, resource_name=resource_name, name=key, value=value))
    if image.next_producer_id:
        out.append(ProducerIdsRecord(broker_id=-1, broker_epoch=-1, next_producer_id=image.next_producer_id))
    for (user, mechanism), credential in sorted(image.scram_credentials.items()):
        out.append(UserScramCredentialRecord(name=user, mechanism=mechanism, salt=credential.salt,
                                             stored_key=credential.stored_key, server_key=credential.server_key,
                                             iterations=credential.iterations))
    for acl_id, acl in sorted(image.acls.items(), key=lambda item: (*item[1].sort_key(), str(item[0]))):
        out.append(AccessControlEntryRecord(
            id=acl_id, resource_type=acl.resource_type, resource_name=acl.resource_name,
            pattern_type=acl.pattern_type, principal=acl.principal, host=acl.host,
            operation=acl.operation, permission_type=acl.permission))
    for entity, quotas in sorted(image.client_quotas.items(), key=lambda item: repr(item[0])):
        for quota_key, quota_value in sorted(quotas.items()):
            out.append(ClientQuotaRecord(
                entity=[ClientQuotaRecordEntityData(entity_type=t, entity_name=n) for t, n in entity],
                key=quota_key, value=quota_value))
    return out


def image_from_records(records: Iterable[Message], end_offset: int) -> MetadataImage:
    """The image a snapshot's records stand for, as of ``end_offset - 1``."""
    delta = MetadataDelta(MetadataImage())
    delta.replay_all((-1, record) for record in records)
    return replace(delta.apply(), offset=end_offset - 1)


# ---------------------------------------------------------------- record batches


def encode_record_batches(records: Sequence[Message], base_offset: int) -> bytes:
    """Metadata records as Kafka record batches (values are framed metadata records)."""
    out = bytearray()
    for start in range(0, len(records), RECORDS_PER_BATCH):
        chunk = records[start : start + RECORDS_PER_BATCH]
        out += build_batch(
            [NewRecord(key=None, value=encode_record(r), timestamp=0) for r in chunk],
            base_offset=base_offset + start,
        )
    return bytes(out)


def decode_record_batches(data: bytes | bytearray | memoryview) -> list[tuple[int, Message]]:
    """(offset, record) of every whole batch in ``data``; a partial last batch is ignored."""
    out: list[tuple[int, Message]] = []
    try:
        for pos, header in iter_batch_headers(data):
            if pos + header.size_in_bytes > len(data):
                break
            for record in iter_records(data, pos):
                if record.value is None:
                    raise CorruptRecordError("metadata record without a value", offset=pos)
                out.append((record.offset, decode_record(record.value)))
    except CorruptRecordError:
        raise
    except DecodeError as ex:
        raise CorruptRecordError(f"undecodable metadata record: {ex}", offset=0) from ex
    return out


# ---------------------------------------------------------------- snapshot files


@dataclass(frozen=True, slots=True)
class SnapshotFile:
    end_offset: int
    image: MetadataImage
    last_entry: RaftEntry
    previous_entry: RaftEntry
    voters: tuple[str, ...]


def write_snapshot_file(
    path: Path,
    image: MetadataImage,
    end_offset: int,
    last_entry: RaftEntry,
    previous_entry: RaftEntry,
    voters: Iterable[str],
    fsync: Callable[[int], None] = os.fsync,
) -> None:
    """Writes and fsyncs a snapshot file at ``path`` (the caller renames it into place)."""
    out = bytearray(_HEAD.pack(SNAPSHOT_MAGIC, SNAPSHOT_VERSION, end_offset))
    for command, index, term in (last_entry, previous_entry):
        out += _ENTRY.pack(index, term, len(command)) + command
    ids = sorted(voters)
    out += _U16.pack(len(ids))
    for node in ids:
        raw = node.encode()
        out += _U16.pack(len(raw)) + raw
    records = image_records(image)
    out += _U32.pack(len(records))
    for record in records:
        raw = encode_record(record)
        out += _U32.pack(len(raw)) + raw
    out += _U32.pack(crc32c.crc32c(out))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, out)
        fsync(fd)
    finally:
        os.close(fd)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise SnapshotCorruptError("snapshot file is truncated")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: struct.Struct) -> tuple[int, ...]:
        return fmt.unpack(self.take(fmt.size))


def _open_snapshot(path: Path | bytes) -> tuple[_Reader, int, list[RaftEntry]]:
    data = path if isinstance(path, bytes) else path.read_bytes()
    name = "snapshot" if isinstance(path, bytes) else str(path)
    if len(data) < _HEAD.size + _U32.size:
        raise SnapshotCorruptError(f"{name} is truncated")
    (crc,) = _U32.unpack_from(data, len(data) - _U32.size)
    body = data[: len(data) - _U32.size]
    if crc32c.crc32c(body) != crc:
        raise SnapshotCorruptError(f"{name} fails its checksum")
    r = _Reader(body)
    magic, version, end_offset = _HEAD.unpack(r.take(_HEAD.size))
    if magic != SNAPSHOT_MAGIC or version != SNAPSHOT_VERSION:
        raise SnapshotCorruptError(f"{name} is not a snapshot of version {SNAPSHOT_VERSION}")
    entries: list[RaftEntry] = []
    for _ in range(2):
        index, term, length = r.unpack(_ENTRY)
        entries.append((r.take(length), index, term))
    return r, end_offset, entries


def read_snapshot_entries(path: Path | bytes) -> tuple[RaftEntry, RaftEntry]:
    """The (last, previous) Raft entries a snapshot (file or bytes) stands for, without decoding its records."""
    _, _, entries = _open_snapshot(path)
    return entries[0], entries[1]


def read_snapshot_file(path: Path) -> SnapshotFile:
    r, end_offset, entries = _open_snapshot(path)
    body = r.data
    (count,) = r.unpack(_U16)
    voters = tuple(r.take(r.unpack(_U16)[0]).decode() for _ in range(count))
    (n_records,) = r.unpack(_U32)
    records: list[Message] = []
    try:
        for _ in range(n_records):
            records.append(decode_record(r.take(r.unpack(_U32)[0])))
    except DecodeError as ex:
        raise SnapshotCorruptError(f"{path} holds an undecodable record: {ex}") from ex
    if r.pos != len(body):
        raise SnapshotCorruptError(f"{path} has {len(body) - r.pos} trailing bytes")
    return SnapshotFile(end_offset, image_from_records(records, end_offset), entries[0], entries[1], voters)
