"""The records of ``__consumer_offsets``, byte for byte as Kafka 3.9 writes them.

Keys and values are an int16 version followed by the struct; for keys the
version is the record type (OffsetCommitKey 0-1, GroupMetadataKey 2). Kafka
3.9 writes OffsetCommitKey v1, OffsetCommitValue v3 (v1 when the commit
carries an explicit expire timestamp, OffsetCommit v2-4's retention time),
GroupMetadataKey v2 and GroupMetadataValue v3. A null value is a tombstone.
Keys of the KIP-848 and share-group record types are recognised and skipped,
as Kafka's old coordinator does.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from wire.exceptions import DecodeError
from wire.generated.coordinator.group_metadata_key import GroupMetadataKey
from wire.generated.coordinator.group_metadata_value import GroupMetadataValue
from wire.generated.coordinator.offset_commit_key import OffsetCommitKey
from wire.generated.coordinator.offset_commit_value import OffsetCommitValue
from wire.primitives import Message

_VERSION = struct.Struct(">h")

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_WITH_EXPIRY_VERSION = 1
GROUP_METADATA_VALUE_VERSION = 3

NO_LEADER_EPOCH = -1
NO_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed offset (Kafka's OffsetAndMetadata). ``leader_epoch`` None: not given."""

    offset: int
    leader_epoch: int | None
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None = None


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class UnknownKey:
    version: int


class RecordFormatError(ValueError):
    """A record of ``__consumer_offsets`` that cannot be read."""


def _prefixed(version: int, message: Message) -> bytes:
    return _VERSION.pack(version) + message.encode(version)


def offset_commit_key(group_id: str, topic: str, partition: int) -> bytes:
    return _prefixed(OFFSET_COMMIT_KEY_VERSION, OffsetCommitKey(group=group_id, topic=topic, partition=partition))


def group_metadata_key(group_id: str) -> bytes:
    return _prefixed(GROUP_METADATA_KEY_VERSION, GroupMetadataKey(group=group_id))


def offset_commit_value(o: OffsetAndMetadata) -> bytes:
    version = OFFSET_COMMIT_VALUE_WITH_EXPIRY_VERSION if o.expire_timestamp_ms is not None else OFFSET_COMMIT_VALUE_VERSION
    return _prefixed(version, OffsetCommitValue(
        offset=o.offset,
        leader_epoch=NO_LEADER_EPOCH if o.leader_epoch is None else o.leader_epoch,
        metadata=o.metadata,
        commit_timestamp=o.commit_timestamp_ms,
        expire_timestamp=NO_TIMESTAMP if o.expire_timestamp_ms is None else o.expire_timestamp_ms,
    ))


def group_metadata_value(value: GroupMetadataValue) -> bytes:
    return _prefixed(GROUP_METADATA_VALUE_VERSION, value)


def parse_key(data: bytes) -> OffsetKey | GroupKey | UnknownKey:
    if len(data) < 2:
        raise RecordFormatError("key shorter than its version")
    (version,) = _VERSION.unpack_from(data)
    try:
        if OffsetCommitKey.MIN_VERSION <= version <= OffsetCommitKey.MAX_VERSION:
            k = OffsetCommitKey.decode(data[2:], version)
            return OffsetKey(k.group, k.topic, k.partition)
        if GroupMetadataKey.MIN_VERSION <= version <= GroupMetadataKey.MAX_VERSION:
            return GroupKey(GroupMetadataKey.decode(data[2:], version).group)
    except (DecodeError, ValueError) as ex:
        raise RecordFormatError(f"bad key of version {version}: {ex}") from ex
    return UnknownKey(version)


def parse_offset_value(data: bytes) -> OffsetAndMetadata:
    (version,) = _VERSION.unpack_from(data)
    if not OffsetCommitValue.MIN_VERSION <= version <= OffsetCommitValue.MAX_VERSION:
        raise RecordFormatError(f"unknown offset commit value version {version}")
    try:
        v = OffsetCommitValue.decode(data[2:], version)
    except (DecodeError, ValueError) as ex:
        raise RecordFormatError(f"bad offset commit value: {ex}") from ex
    return OffsetAndMetadata(
        offset=v.offset,
        leader_epoch=None if v.leader_epoch == NO_LEADER_EPOCH else v.leader_epoch,
        metadata=v.metadata,
        commit_timestamp_ms=v.commit_timestamp,
        expire_timestamp_ms=None if v.expire_timestamp == NO_TIMESTAMP else v.expire_timestamp,
    )


def parse_group_value(data: bytes) -> tuple[int, GroupMetadataValue]:
    """(version, value): version 0 values have no rebalance timeout (it is the session timeout)."""
    (version,) = _VERSION.unpack_from(data)
    if not GroupMetadataValue.MIN_VERSION <= version <= GroupMetadataValue.MAX_VERSION:
        raise RecordFormatError(f"unknown group metadata value version {version}")
    try:
        return version, GroupMetadataValue.decode(data[2:], version)
    except (DecodeError, ValueError) as ex:
        raise RecordFormatError(f"bad group metadata value: {ex}") from ex
