"""__consumer_offsets record formats and the key-to-partition hash, checked against Kafka's bytes."""

from __future__ import annotations

from broker.coordinator.hashing import java_string_hash, kafka_abs, partition_for
from broker.group.records import (
    GroupKey,
    OffsetAndMetadata,
    OffsetKey,
    UnknownKey,
    group_metadata_key,
    offset_commit_key,
    offset_commit_value,
    parse_key,
    parse_offset_value,
)

# (key, String.hashCode(), Utils.abs(hashCode) % 50), printed by a JVM.
JAVA_VALUES = [
    ("console-consumer-12345", 158455506, 6),
    ("aaaaaaaaaaaaaaaaaaaa", 1542361408, 8),
    ("test-group", 627841412, 12),
    ("my-group", -1906497762, 12),
    ("polygenelubricants", -(2**31), 0),
    ("grüße-gruppe", 80269105, 5),
]


def test_key_hash_and_partition_match_kafka() -> None:
    for key, hash_code, partition in JAVA_VALUES:
        assert java_string_hash(key) == hash_code, key
        assert partition_for(key, 50) == partition, key
    assert java_string_hash("") == 0
    # A supplementary character counts as two UTF-16 units, as in Java.
    assert java_string_hash("\U0001F600") == 31 * 0xD83D + 0xDE00
    # Utils.abs maps Integer.MIN_VALUE to 0 (Math.abs would keep it negative).
    assert kafka_abs(-(2**31)) == 0 and kafka_abs(-5) == 5


def test_offset_commit_records_are_kafkas_bytes() -> None:
    key = offset_commit_key("g", "t", 3)
    # version 1, string "g", string "t", int32 3
    assert key == bytes.fromhex("0001" "0001" "67" "0001" "74" "00000003")
    assert parse_key(key) == OffsetKey("g", "t", 3)
    value = offset_commit_value(OffsetAndMetadata(42, 5, "m", 1000))
    # version 3: offset, leader epoch, metadata, commit timestamp
    assert value == bytes.fromhex("0003" "000000000000002a" "00000005" "0001" "6d" "00000000000003e8")
    assert parse_offset_value(value) == OffsetAndMetadata(42, 5, "m", 1000, None)
    expiring = offset_commit_value(OffsetAndMetadata(1, None, "", 1000, 5000))
    assert expiring[:2] == b"\x00\x01"  # v1 carries the expire timestamp
    assert parse_offset_value(expiring) == OffsetAndMetadata(1, None, "", 1000, 5000)


def test_group_metadata_key_and_unknown_keys() -> None:
    assert group_metadata_key("grp") == bytes.fromhex("0002" "0003") + b"grp"
    assert parse_key(group_metadata_key("grp")) == GroupKey("grp")
    # KIP-848 record types are skipped by the classic coordinator.
    assert parse_key(b"\x00\x03\x00\x01x") == UnknownKey(3)
