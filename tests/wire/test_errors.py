"""The error-code table against Kafka 3.9's: numbers, names and retriable flags."""

from __future__ import annotations

import pytest

from wire.errors import ErrorCode

# (name, code, retriable) as listed in the error table of Kafka 3.9's protocol guide.
KAFKA_SPOT_CHECKS: list[tuple[str, int, bool]] = [
    ("UNKNOWN_SERVER_ERROR", -1, False),
    ("NONE", 0, False),
    ("OFFSET_OUT_OF_RANGE", 1, False),
    ("CORRUPT_MESSAGE", 2, True),
    ("UNKNOWN_TOPIC_OR_PARTITION", 3, True),
    ("LEADER_NOT_AVAILABLE", 5, True),
    ("NOT_LEADER_OR_FOLLOWER", 6, True),
    ("REQUEST_TIMED_OUT", 7, True),
    ("MESSAGE_TOO_LARGE", 10, False),
    ("NETWORK_EXCEPTION", 13, True),
    ("COORDINATOR_LOAD_IN_PROGRESS", 14, True),
    ("COORDINATOR_NOT_AVAILABLE", 15, True),
    ("NOT_COORDINATOR", 16, True),
    ("INVALID_TOPIC_EXCEPTION", 17, False),
    ("RECORD_LIST_TOO_LARGE", 18, False),
    ("NOT_ENOUGH_REPLICAS", 19, True),
    ("NOT_ENOUGH_REPLICAS_AFTER_APPEND", 20, True),
    ("INVALID_REQUIRED_ACKS", 21, False),
    ("ILLEGAL_GENERATION", 22, False),
    ("UNKNOWN_MEMBER_ID", 25, False),
    ("INVALID_SESSION_TIMEOUT", 26, False),
    ("REBALANCE_IN_PROGRESS", 27, False),
    ("INVALID_TIMESTAMP", 32, False),
    ("UNSUPPORTED_SASL_MECHANISM", 33, False),
    ("ILLEGAL_SASL_STATE", 34, False),
    ("UNSUPPORTED_VERSION", 35, False),
    ("TOPIC_ALREADY_EXISTS", 36, False),
    ("INVALID_PARTITIONS", 37, False),
    ("INVALID_REPLICATION_FACTOR", 38, False),
    ("INVALID_CONFIG", 40, False),
    ("NOT_CONTROLLER", 41, True),
    ("INVALID_REQUEST", 42, False),
    ("OUT_OF_ORDER_SEQUENCE_NUMBER", 45, False),
    ("DUPLICATE_SEQUENCE_NUMBER", 46, False),
    ("INVALID_PRODUCER_EPOCH", 47, False),
    ("CONCURRENT_TRANSACTIONS", 51, True),
    ("KAFKA_STORAGE_ERROR", 56, True),
    ("SASL_AUTHENTICATION_FAILED", 58, False),
    ("UNKNOWN_PRODUCER_ID", 59, False),
    ("FETCH_SESSION_ID_NOT_FOUND", 70, True),
    ("INVALID_FETCH_SESSION_EPOCH", 71, True),
    ("FENCED_LEADER_EPOCH", 74, True),
    ("UNKNOWN_LEADER_EPOCH", 75, True),
    ("UNSUPPORTED_COMPRESSION_TYPE", 76, False),
    ("OFFSET_NOT_AVAILABLE", 78, True),
    ("MEMBER_ID_REQUIRED", 79, False),
    ("FENCED_INSTANCE_ID", 82, False),
    ("INVALID_RECORD", 87, False),
    ("UNSTABLE_OFFSET_COMMIT", 88, True),
    ("THROTTLING_QUOTA_EXCEEDED", 89, True),
    ("PRODUCER_FENCED", 90, False),
    ("UNKNOWN_TOPIC_ID", 100, True),
    ("INCONSISTENT_TOPIC_ID", 103, True),
    ("FENCED_MEMBER_EPOCH", 110, False),
    ("STALE_MEMBER_EPOCH", 113, False),
    ("TRANSACTION_ABORTABLE", 120, False),
    ("VOTER_NOT_FOUND", 127, False),
]

# Kafka 3.9's highest code; a later Kafka appends codes after it.
HIGHEST_KAFKA_3_9_CODE = 127
#: The highest code here: Kafka 4.0's INVALID_REGULAR_EXPRESSION (KIP-848 regex subscriptions).
HIGHEST_CODE = 128


@pytest.mark.parametrize(("name", "code", "retriable"), KAFKA_SPOT_CHECKS)
def test_code_name_and_retriable_match_kafka(name: str, code: int, retriable: bool) -> None:
    member = ErrorCode[name]
    assert member == code
    assert member.value == code
    assert member.retriable is retriable
    assert ErrorCode(code) is member


def test_codes_are_unique() -> None:
    codes = [int(member) for member in ErrorCode]
    assert len(codes) == len(set(codes))


def test_codes_are_contiguous_from_minus_one_to_the_highest() -> None:
    # Kafka numbers its codes without gaps from -1 upwards; a gap here means a missing code.
    codes = sorted(int(member) for member in ErrorCode)
    assert codes == list(range(-1, HIGHEST_CODE + 1))


def test_names_are_kafka_style() -> None:
    for member in ErrorCode:
        assert member.name.isupper()
        assert " " not in member.name


def test_every_code_has_a_description() -> None:
    for member in ErrorCode:
        assert isinstance(member.description, str)
        assert member.description.strip()
        assert member.description.endswith(".")


def test_retriable_is_a_bool_for_every_code() -> None:
    for member in ErrorCode:
        assert isinstance(member.retriable, bool)


@pytest.mark.parametrize("code", [-1, 0, 6, 35, 87, HIGHEST_KAFKA_3_9_CODE])
def test_for_code_finds_known_codes(code: int) -> None:
    assert ErrorCode.for_code(code) == code


@pytest.mark.parametrize("code", [-2, HIGHEST_CODE + 1, 10_000, -32768])
def test_for_code_maps_unknown_codes_to_unknown_server_error(code: int) -> None:
    assert ErrorCode.for_code(code) is ErrorCode.UNKNOWN_SERVER_ERROR


def test_members_behave_as_ints_on_the_wire() -> None:
    # Encoders write the member straight into an int16 field.
    assert ErrorCode.NOT_LEADER_OR_FOLLOWER + 0 == 6
    assert int(ErrorCode.UNKNOWN_SERVER_ERROR).to_bytes(2, "big", signed=True) == b"\xff\xff"
    assert int(ErrorCode.NONE) == 0
    assert not ErrorCode.NONE
