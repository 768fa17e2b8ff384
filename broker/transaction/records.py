"""The records of ``__transaction_state``, byte for byte as Kafka 3.9 writes them
(Kafka's TransactionLog).

Key: int16 version 0, then TransactionLogKey (the transactional id). Value:
int16 version, then TransactionLogValue — version 0 while the cluster's
``transaction.version`` feature is 0, as Kafka writes; from level 1, version 1 (flexible)
with Kafka 4's tagged fields: the previous producer id (tag 0), the next producer id of a
transactions-v2 producer whose epoch ran out (tag 1) and the client's transaction version
(tag 2), so that a coordinator taking over keeps transactions v2 going. An Empty
transaction has a null partition list. A null value (tombstone) removes the transactional
id. The last producer epoch is not stored, as in Kafka.
"""

from __future__ import annotations

import struct
from collections import defaultdict

from broker.transaction.metadata import TransactionMetadata, TransactionState, TxnTransitMetadata
from wire.exceptions import DecodeError
from wire.generated.coordinator.transaction_log_key import TransactionLogKey
from wire.generated.coordinator.transaction_log_value import (
    TransactionLogValue,
    TransactionLogValuePartitionsSchema,
)
from wire.records import NO_PRODUCER_EPOCH

_VERSION = struct.Struct(">h")
KEY_VERSION = 0
#: TransactionLogValue version by ``transaction.version`` level (Kafka's TransactionVersion).
LEGACY_VALUE_VERSION = 0
FLEXIBLE_VALUE_VERSION = 1


class RecordFormatError(ValueError):
    """A ``__transaction_state`` record that cannot be read."""


def key_bytes(transactional_id: str) -> bytes:
    return _VERSION.pack(KEY_VERSION) + TransactionLogKey(transactional_id=transactional_id).encode(KEY_VERSION)


def value_bytes(transit: TxnTransitMetadata, transaction_version_level: int = 0) -> bytes:
    if transit.txn_state is TransactionState.EMPTY and transit.topic_partitions:
        raise ValueError(f"an Empty transaction has no partitions: {transit}")
    partitions: list[TransactionLogValuePartitionsSchema] | None = None
    if transit.txn_state is not TransactionState.EMPTY:
        by_topic: dict[str, list[int]] = defaultdict(list)
        for topic, partition in sorted(transit.topic_partitions):
            by_topic[topic].append(partition)
        partitions = [TransactionLogValuePartitionsSchema(topic=t, partition_ids=p) for t, p in by_topic.items()]
    value = TransactionLogValue(
        producer_id=transit.producer_id,
        producer_epoch=transit.producer_epoch,
        transaction_timeout_ms=transit.txn_timeout_ms,
        transaction_status=transit.txn_state.id,
        transaction_partitions=partitions,
        transaction_last_update_timestamp_ms=transit.txn_last_update_timestamp,
        transaction_start_timestamp_ms=transit.txn_start_timestamp,
    )
    version = LEGACY_VALUE_VERSION
    if transaction_version_level >= 1:
        version = FLEXIBLE_VALUE_VERSION
        value.previous_producer_id = transit.last_producer_id
        value.next_producer_id = transit.next_producer_id
        value.client_transaction_version = transit.client_transaction_version
    return _VERSION.pack(version) + value.encode(version)


def parse_key(data: bytes) -> str | None:
    """The transactional id, or None for a key version this broker does not know."""
    if len(data) < _VERSION.size:
        raise RecordFormatError("key shorter than its version")
    (version,) = _VERSION.unpack_from(data)
    if not TransactionLogKey.MIN_VERSION <= version <= TransactionLogKey.MAX_VERSION:
        return None
    try:
        return TransactionLogKey.decode(data[_VERSION.size:], version).transactional_id
    except (DecodeError, ValueError) as ex:
        raise RecordFormatError(f"bad key: {ex}") from ex


def parse_value(transactional_id: str, data: bytes) -> TransactionMetadata:
    if len(data) < _VERSION.size:
        raise RecordFormatError("value shorter than its version")
    (version,) = _VERSION.unpack_from(data)
    if not TransactionLogValue.MIN_VERSION <= version <= TransactionLogValue.MAX_VERSION:
        raise RecordFormatError(f"unknown transaction log value version {version}")
    try:
        v = TransactionLogValue.decode(data[_VERSION.size:], version)
        state = TransactionState.from_id(v.transaction_status)
    except (DecodeError, ValueError) as ex:
        raise RecordFormatError(f"bad value: {ex}") from ex
    metadata = TransactionMetadata(
        transactional_id, v.producer_id, v.previous_producer_id, v.producer_epoch, NO_PRODUCER_EPOCH,
        v.transaction_timeout_ms, state, set(), v.transaction_start_timestamp_ms,
        v.transaction_last_update_timestamp_ms, next_producer_id=v.next_producer_id,
        client_transaction_version=v.client_transaction_version,
    )
    if state is not TransactionState.EMPTY:
        for schema in v.transaction_partitions or []:
            metadata.topic_partitions.update((schema.topic, p) for p in schema.partition_ids)
    return metadata
