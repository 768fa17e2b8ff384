"""The config package: pure, one declaration of each setting's typed attribute, one catalog."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import types
import typing

import pytest

from broker.log.config import LogConfig
from config import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
    ConfigType,
    TopicConfig,
    build_config,
    default_config,
)
from config.catalog import group, log, quotas, replication, security, server, transaction
from tests.shared import ROOT

#: BrokerConfig attributes whose value Kafka derives from several settings.
DERIVED = {
    "node_id", "controller_quorum_voters", "controller_listener_names", "listeners", "advertised_listeners",
    "listener_security_protocol_map", "inter_broker_listener_name", "log_dirs", "log_retention_ms",
    "log_roll_ms", "log_roll_jitter_ms", "log_flush_interval_ms", "super_users", "group_consumer_assignors",
    "metrics_listener",
}  # fmt: skip


def test_importing_config_loads_nothing_of_the_broker_nor_trio() -> None:
    code = (
        "import sys, config, config.docs\n"
        "loaded = sorted({m.split('.')[0] for m in sys.modules} & {'broker', 'controller', 'trio', 'structlog'})\n"
        "print(','.join(loaded))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                            env={"PYTHONPATH": str(ROOT)})
    assert result.stdout.strip() == ""


def test_every_broker_attribute_is_a_catalog_setting_or_derived() -> None:
    attributes = {f.name for f in dataclasses.fields(BrokerConfig)} - {"raw", "values"}
    from_catalog = {name.replace(".", "_") for name in BROKER_CONFIGS}
    assert attributes - from_catalog - DERIVED == set()
    assert DERIVED <= attributes


def _runtime_types(declared: object) -> tuple[type, ...]:
    origin = typing.get_origin(declared)
    if origin in (typing.Union, types.UnionType):
        return tuple(t for arg in typing.get_args(declared) for t in _runtime_types(arg))
    found = origin or declared
    assert isinstance(found, type)
    return (found,)


def test_broker_attributes_hold_values_of_their_declared_type() -> None:
    config = default_config()
    hints = typing.get_type_hints(BrokerConfig)
    for name in BROKER_CONFIGS:
        attribute = name.replace(".", "_")
        if attribute not in hints or attribute in DERIVED:
            continue
        value = getattr(config, attribute)
        declared = hints[attribute]
        assert isinstance(value, _runtime_types(declared)), (name, value, declared)
        assert value == config.get(name)


def test_explicit_settings_reach_their_attribute() -> None:
    config, _ = build_config({"offsets.topic.num.partitions": "7", "log.cleaner.io.buffer.load.factor": "0.75",
                              "broker.rack": "r1", "group.consumer.migration.policy": "upgrade"})
    assert (config.offsets_topic_num_partitions, config.log_cleaner_io_buffer_load_factor) == (7, 0.75)
    assert (config.broker_rack, config.group_consumer_migration_policy) == ("r1", "upgrade")


def test_the_catalog_is_the_area_modules_in_documentation_order() -> None:
    sections = [server.NODE_AND_CLUSTER, server.LISTENERS_AND_NETWORK, log.TOPICS_AND_LOGS, log.LOG_CLEANER,
                replication.REPLICATION, group.CONSUMER_GROUPS_AND_OFFSETS, group.CONSUMER_GROUP_PROTOCOL,
                group.SHARE_GROUPS, transaction.TRANSACTIONS, security.SECURITY, security.PASSWORD_ENCODER, quotas.QUOTAS, quotas.AUDIT,
                security.AUTHORIZATION, server.CORMORANT]
    names = [k.name for section in sections for k in section]
    assert names == list(BROKER_CONFIGS)
    assert len(set(names)) == len(names)
    for section in sections:
        assert len({k.group for k in section}) == 1


def test_the_log_reads_the_topic_configuration_with_the_catalogs_defaults() -> None:
    assert LogConfig is TopicConfig
    plain = TopicConfig()
    for name, key in TOPIC_CONFIGS.items():
        assert plain.get(name) == key.default_value, name
    assert plain == TopicConfig.resolve(default_config().topic_defaults(), {})


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"segment_bytes": 13}, "segment.bytes"),
        ({"segment_bytes": 2**31}, "segment.bytes"),
        ({"cleanup_policy": ("compact", "archive")}, "cleanup.policy"),
        ({"message_timestamp_type": "NoTime"}, "message.timestamp.type"),
        ({"min_compaction_lag_ms": 10, "max_compaction_lag_ms": 5}, "min.compaction.lag.ms"),
    ],
)
def test_a_topic_configuration_built_directly_is_validated_as_a_resolved_one(
    settings: dict[str, object], key: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        TopicConfig(**settings)  # type: ignore[arg-type]
    assert caught.value.key == key


def test_topic_setting_types_are_the_catalogs() -> None:
    hints = typing.get_type_hints(TopicConfig)
    expected = {ConfigType.INT: int, ConfigType.LONG: int, ConfigType.BOOLEAN: bool, ConfigType.DOUBLE: float,
                ConfigType.STRING: str, ConfigType.LIST: tuple[str, ...]}
    for name, key in TOPIC_CONFIGS.items():
        assert hints[name.replace(".", "_")] == expected[key.type], name
