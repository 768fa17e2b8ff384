"""Unit tests of the admin handlers' pure parts: config operations, synonyms, assignments, levels."""

from __future__ import annotations

import logging
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.handlers.h32_describe_configs import broker_entries, broker_synonym_chain, log4j_level
from broker.handlers.h44_incremental_alter_configs import (
    APPEND,
    DELETE,
    SET,
    SUBTRACT,
    AlterError,
    Op,
    apply_ops,
    check_broker_name,
    check_keys,
    merged,
    validate_broker_configs,
)
from config import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    ConfigError,
    ConfigSource,
    TopicConfig,
    build_config,
)
from controller.image import BrokerImage, MetadataImage
from controller.topic_creation import manual_assignment_error
from wire.errors import ErrorCode


def _topic_ops(current: dict[str, str], *ops: Op) -> dict[str, str | None]:
    return apply_ops(current, ops, TOPIC_CONFIGS, lambda op: f"not a list: {op.name}")


def test_append_and_subtract_start_from_the_default() -> None:
    assert _topic_ops({}, Op("cleanup.policy", APPEND, "compact")) == {"cleanup.policy": "delete,compact"}
    assert _topic_ops({}, Op("cleanup.policy", SUBTRACT, "delete")) == {"cleanup.policy": ""}
    assert _topic_ops({"cleanup.policy": "compact"}, Op("cleanup.policy", APPEND, "compact,delete")) == {
        "cleanup.policy": "compact,delete"}
    assert _topic_ops({}, Op("leader.replication.throttled.replicas", APPEND, "0:1,1:1,")) == {
        "leader.replication.throttled.replicas": "0:1,1:1"}


def test_set_delete_and_refusals() -> None:
    changes = _topic_ops({"retention.ms": "1"}, Op("retention.ms", DELETE, None), Op("segment.ms", SET, "5"))
    assert changes == {"retention.ms": None, "segment.ms": "5"}
    assert merged({"retention.ms": "1", "a": "b"}, changes) == {"a": "b", "segment.ms": "5"}
    with pytest.raises(AlterError) as refused:
        _topic_ops({}, Op("retention.ms", APPEND, "1"))
    assert (refused.value.code, refused.value.message) == (ErrorCode.INVALID_CONFIG, "not a list: retention.ms")
    with pytest.raises(AlterError) as unknown_op:
        _topic_ops({}, Op("retention.ms", 9, "1"))
    assert unknown_op.value.code == ErrorCode.INVALID_REQUEST


@given(
    st.lists(st.sampled_from(["a", "b", "c"]), unique=True),
    st.lists(st.sampled_from(["x", "y", "z"]), unique=True, min_size=1),
)
def test_append_then_subtract_restores_a_list(start: list[str], added: list[str]) -> None:
    key = "follower.replication.throttled.replicas"
    after_append = _topic_ops({key: ",".join(start)}, Op(key, APPEND, ",".join(added)))[key]
    assert after_append is not None and after_append.split(",")[: len(start)] == start
    restored = _topic_ops({key: after_append}, Op(key, SUBTRACT, ",".join(added)))[key]
    assert restored == ",".join(start)


def test_check_keys() -> None:
    check_keys([Op("a", SET, "1"), Op("b", DELETE, None)])
    with pytest.raises(AlterError, match="duplicate config keys"):
        check_keys([Op("a", SET, "1"), Op("a", SET, "2")])
    with pytest.raises(AlterError, match="Null value not supported for : a, c"):
        check_keys([Op("a", SET, None), Op("b", DELETE, None), Op("c", APPEND, None)])


def test_broker_names_and_dynamic_validation() -> None:
    check_broker_name(1, "")
    check_broker_name(1, "1")
    with pytest.raises(AlterError, match="must be an integer"):
        check_broker_name(1, "one")
    with pytest.raises(AlterError, match="expected 1, but received 2"):
        check_broker_name(1, "2")
    validate_broker_configs({"log.retention.ms": "1000", "my.custom.setting": "x"}, per_broker=False)
    with pytest.raises(AlterError, match=r"dynamically: Set\(log.dirs, node.id\)"):
        validate_broker_configs({"node.id": "2", "log.dirs": "/x"}, per_broker=True)
    with pytest.raises(AlterError, match="Invalid value"):
        validate_broker_configs({"log.retention.ms": "forever"}, per_broker=True)
    per_broker = [k for k, v in BROKER_CONFIGS.items() if v.update_mode.name == "PER_BROKER"]
    if per_broker:
        with pytest.raises(AlterError, match="broker id must be specified"):
            validate_broker_configs({per_broker[0]: BROKER_CONFIGS[per_broker[0]].default or "1"}, per_broker=False)


def test_broker_synonym_chain_layers() -> None:
    config, _ = build_config({"log.retention.hours": "24"})
    chain = broker_synonym_chain(config, "log.retention.hours", {}, {})
    assert [(s.name, s.value, s.source) for s in chain] == [
        ("log.retention.hours", "24", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    ]
    chain = broker_synonym_chain(config, "log.retention.ms", {"log.retention.minutes": "5"}, {"log.retention.ms": "9"})
    # Dynamic per-broker before the cluster default; a higher-precedence synonym set elsewhere is dropped.
    assert [(s.name, s.source) for s in chain] == [
        ("log.retention.ms", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.hours", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", ConfigSource.DEFAULT_CONFIG),
    ]


def test_broker_entries_hide_unknown_keys() -> None:
    config, _ = build_config({})
    entries = {e.name: e for e in broker_entries(config, {"my.secret.thing": "x"}, {})}
    assert set(BROKER_CONFIGS) <= set(entries)
    secret = entries["my.secret.thing"]
    assert (secret.value, secret.is_sensitive, secret.source) == (None, True, ConfigSource.DYNAMIC_BROKER_CONFIG)


def test_manual_assignment_checks() -> None:
    image = MetadataImage(brokers={i: BrokerImage(i, 0, uuid.UUID(int=i), (), None, False) for i in (1, 2)})
    assert manual_assignment_error(image, [2, 1], None) is None
    assert manual_assignment_error(image, [], None) == "The manual partition assignment includes an empty replica list."
    assert "broker 3, but no such broker" in (manual_assignment_error(image, [1, 3], None) or "")
    assert "broker 1 more than once" in (manual_assignment_error(image, [1, 1], None) or "")
    assert "which have 1 replica(s)" in (manual_assignment_error(image, [1, 2], 1) or "")


def test_log4j_levels() -> None:
    assert [log4j_level(v) for v in (5, logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR,
                                     logging.CRITICAL)] == ["TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"]


def test_dynamic_log_settings_layer_over_static_ones() -> None:
    config, _ = build_config({"log.retention.hours": "24", "log.retention.ms": "5000", "log.segment.bytes": "1048576"})
    # Only settings topics default from apply; anything else leaves the configuration as it is.
    assert config.with_dynamic({"log.cleaner.threads": "3"}, {"num.io.threads": "4"}) is config
    # A static log.retention.ms still beats a dynamic log.retention.hours (Kafka derives after merging).
    assert config.with_dynamic({}, {"log.retention.hours": "1"}).log_retention_ms == 5000
    assert config.with_dynamic({}, {"log.retention.ms": "60000"}).log_retention_ms == 60000
    # Per broker beats the cluster default, key by key.
    both = config.with_dynamic({"log.segment.bytes": "2097152"}, {"log.segment.bytes": "4194304",
                                                                  "log.retention.ms": "1000"})
    assert (both.get("log.segment.bytes"), both.log_retention_ms) == (2097152, 1000)
    assert TopicConfig.resolve(both.topic_defaults(), {}).segment_bytes == 2097152
    assert TopicConfig.resolve(both.topic_defaults(), {"segment.bytes": "1048576"}).segment_bytes == 1048576
    with pytest.raises(ConfigError):
        config.with_dynamic({}, {"log.segment.bytes": "1"})
