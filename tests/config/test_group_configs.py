"""config/group.py: Kafka 4.3's (and 4.4's KIP-1191) GroupConfig names and checks (each value, then the broker's
bounds, then session timeout against heartbeat interval), ISO-8601 durations of
``share.auto.offset.reset=by_duration:``, and a share group's settings in force."""

from __future__ import annotations

import pytest

from config import build_config
from config.group import (
    DEFAULTS,
    GROUP_CONFIG_NAMES,
    TYPES,
    GroupConfigError,
    ShareGroupSettings,
    boolean_config,
    bounds_from,
    error,
    parse_duration_ms,
    reset_duration_ms,
    share_group_settings,
    validate,
)
from config.types import ConfigType

BOUNDS = bounds_from(build_config({})[0])


def test_valid_configs_pass() -> None:
    validate({"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "15000",
              "share.delivery.count.limit": "10", "share.partition.max.record.locks": "4000", "errors.deadletterqueue.topic.name": "dlq.orders",
              "share.isolation.level": "read_committed", "share.session.timeout.ms": "60000",
              "share.heartbeat.interval.ms": "15000", "consumer.session.timeout.ms": "45000",
              "consumer.heartbeat.interval.ms": "5000"}, BOUNDS)
    validate({"share.auto.offset.reset": "by_duration:PT1H"}, BOUNDS)
    validate({"share.auto.offset.reset": "by_duration:P1DT0.5S"}, BOUNDS)
    assert error({}, BOUNDS) is None
    assert set(GROUP_CONFIG_NAMES) == {
        "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms", "share.session.timeout.ms",
        "share.heartbeat.interval.ms", "share.record.lock.duration.ms", "share.delivery.count.limit",
        "share.partition.max.record.locks", "share.auto.offset.reset", "share.isolation.level",
        "share.renew.acknowledge.enable", "errors.deadletterqueue.topic.name",
        "errors.deadletterqueue.copy.record.enable"}


RESET_MESSAGE = ("Invalid value {v} for configuration share.auto.offset.reset: Invalid value `{v}` for configuration "
                 "share.auto.offset.reset. The value must be either 'earliest', 'latest' or of the format "
                 "'by_duration:<PnDTnHnMn.nS.>'.")


@pytest.mark.parametrize(("configs", "message"), [
    ({"x": "1"}, "Unknown group config name: x"),
    ({"share.delivery.count.limit": "1"},
     "Invalid value 1 for configuration share.delivery.count.limit: Value must be at least 2"),
    ({"share.delivery.count.limit": "11"},
     "share.delivery.count.limit must be less than or equal to group.share.max.delivery.count.limit"),
    ({"share.partition.max.record.locks": "99"},
     "Invalid value 99 for configuration share.partition.max.record.locks: Value must be at least 100"),
    ({"share.partition.max.record.locks": "4001"},
     "share.partition.max.record.locks must be less than or equal to group.share.max.partition.max.record.locks"),
    ({"share.record.lock.duration.ms": "soon"},
     "Invalid value soon for configuration share.record.lock.duration.ms: Not a number of type INT"),
    ({"share.record.lock.duration.ms": "1000"},
     "share.record.lock.duration.ms must be greater than or equal to group.share.min.record.lock.duration.ms"),
    ({"share.session.timeout.ms": "0"},
     "Invalid value 0 for configuration share.session.timeout.ms: Value must be at least 1"),
    ({"share.session.timeout.ms": "1000"},
     "share.session.timeout.ms must be greater than or equal to group.share.min.session.timeout.ms"),
    ({"share.session.timeout.ms": "60001"},
     "share.session.timeout.ms must be less than or equal to group.share.max.session.timeout.ms"),
    ({"share.heartbeat.interval.ms": "4999"},
     "share.heartbeat.interval.ms must be greater than or equal to group.share.min.heartbeat.interval.ms"),
    ({"share.heartbeat.interval.ms": "15001"},
     "share.heartbeat.interval.ms must be less than or equal to group.share.max.heartbeat.interval.ms"),
    ({"consumer.session.timeout.ms": "44999"},
     "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms"),
    ({"consumer.heartbeat.interval.ms": "20000"},
     "consumer.heartbeat.interval.ms must be less than or equal to group.consumer.max.heartbeat.interval.ms"),
    ({"consumer.heartbeat.interval.ms": "2.5"},
     "Invalid value 2.5 for configuration consumer.heartbeat.interval.ms: Not a number of type INT"),
    ({"share.isolation.level": "read_committed "},
     "Invalid value read_committed  for configuration share.isolation.level: String must be one of: "
     "read_committed, read_uncommitted"),
    ({"share.auto.offset.reset": "by_duration"}, RESET_MESSAGE.format(v="by_duration")),
    ({"share.auto.offset.reset": "by_duration:1h"}, RESET_MESSAGE.format(v="by_duration:1h")),
    ({"share.auto.offset.reset": "by_duration:-PT1H"}, RESET_MESSAGE.format(v="by_duration:-PT1H")),
    ({"share.auto.offset.reset": "by_duration:PT"}, RESET_MESSAGE.format(v="by_duration:PT")),
    ({"share.auto.offset.reset": "none"}, RESET_MESSAGE.format(v="none")),
    ({"errors.deadletterqueue.topic.name": "__consumer_offsets"},
     "errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'"),
    ({"errors.deadletterqueue.copy.record.enable": "yes"},
     "Invalid value yes for configuration errors.deadletterqueue.copy.record.enable: "
     "Expected value to be either true or false"),
    ({"share.renew.acknowledge.enable": "1"},
     "Invalid value 1 for configuration share.renew.acknowledge.enable: Expected value to be either true or false"),
])
def test_kafkas_messages_for_invalid_configs(configs: dict[str, str], message: str) -> None:
    with pytest.raises(GroupConfigError) as raised:
        validate(configs, BOUNDS)
    assert str(raised.value) == message
    assert error(configs, BOUNDS) == message


def test_session_timeout_above_heartbeat_interval_with_the_broker_defaults_for_the_unset_one() -> None:
    loose = bounds_from(build_config({"group.share.min.session.timeout.ms": "1000",
                                      "group.share.min.heartbeat.interval.ms": "1000"})[0])
    assert error({"share.session.timeout.ms": "5000"}, loose) == \
        "share.session.timeout.ms must be greater than share.heartbeat.interval.ms"
    assert error({"share.session.timeout.ms": "5000", "share.heartbeat.interval.ms": "1000"}, loose) is None
    assert error({"share.session.timeout.ms": "5000"}, BOUNDS) == \
        "share.session.timeout.ms must be greater than or equal to group.share.min.session.timeout.ms"


@pytest.mark.parametrize(("text", "ms"), [
    ("PT1H", 3_600_000), ("pt1h", 3_600_000), ("P1D", 86_400_000), ("PT0S", 0), ("PT1.5S", 1500),
    ("P1DT2H3M4.005S", 93_784_005), ("PT-1H", -3_600_000), ("-PT1M", -60_000), ("+PT2M", 120_000),
    ("PT", None), ("P", None), ("1H", None), ("PT1X", None), ("P1W", None), ("", None),
])
def test_iso_8601_durations_as_java_reads_them(text: str, ms: int | None) -> None:
    assert parse_duration_ms(text) == ms


def test_by_duration_look_back() -> None:
    assert reset_duration_ms("by_duration:PT10M") == 600_000
    assert reset_duration_ms("by_duration:PT-10M") is None
    assert reset_duration_ms("latest") is None
    settings = share_group_settings({"share.auto.offset.reset": "by_duration:PT10M"}, 30_000, 5)
    assert settings.reset_timestamp(1_000_000) == 400_000
    assert share_group_settings({}, 30_000, 5).reset_timestamp(1_000_000) is None


def test_settings_in_force() -> None:
    assert share_group_settings({}, 30_000, 5) == ShareGroupSettings("latest", 30_000, 5, None, "read_uncommitted")
    assert share_group_settings({"share.auto.offset.reset": "earliest", "share.delivery.count.limit": "2",
                                 "errors.deadletterqueue.topic.name": "dlq.t",
                                 "share.isolation.level": "read_committed"}, 30_000, 5) == \
        ShareGroupSettings("earliest", 30_000, 2, "dlq.t", "read_committed")
    assert share_group_settings({"share.isolation.level": "read_committed"}, 30_000, 5).read_committed
    assert share_group_settings({"share.partition.max.record.locks": "150"}, 30_000, 5,
                                2000).partition_max_record_locks == 150


def test_kafka_4_4_group_configs_pass_and_default_as_kafka() -> None:
    # Blank is Kafka's default (no dead-letter topic); the prefix is checked at write time only.
    for configs in ({"errors.deadletterqueue.topic.name": ""}, {"errors.deadletterqueue.topic.name": "orders.dead"},
                    {"errors.deadletterqueue.copy.record.enable": "TRUE"},
                    {"share.renew.acknowledge.enable": " false "}):
        assert error(configs, BOUNDS) is None, configs
    assert DEFAULTS["share.renew.acknowledge.enable"] == "true"
    assert DEFAULTS["errors.deadletterqueue.copy.record.enable"] == "false"
    assert DEFAULTS["errors.deadletterqueue.topic.name"] == ""
    assert TYPES["share.renew.acknowledge.enable"] is ConfigType.BOOLEAN
    names = ("share.renew.acknowledge.enable", "errors.deadletterqueue.copy.record.enable")
    assert [boolean_config({}, n) for n in names] == [True, False]
    assert [boolean_config({n: " FALSE" if i == 0 else "True"}, n) for i, n in enumerate(names)] == [False, True]
    assert share_group_settings({}, 30_000, 5).dead_letter_topic is None
    assert share_group_settings({"errors.deadletterqueue.topic.name": " "}, 30_000, 5).dead_letter_topic is None
