"""config/group.py: Kafka's GroupConfig names and checks, and a share group's settings in
force (its group configs over the broker defaults)."""

from __future__ import annotations

import pytest

from config.group import (
    GROUP_CONFIG_NAMES,
    GroupConfigError,
    ShareGroupSettings,
    error,
    share_group_settings,
    validate,
)


def test_valid_configs_pass() -> None:
    validate({"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "1000",
              "share.delivery.count.limit": "10", "errors.deadletterqueue.topic.name": "dlq.orders"})
    assert error({}) is None
    assert set(GROUP_CONFIG_NAMES) == {"share.auto.offset.reset", "share.record.lock.duration.ms",
                                       "share.delivery.count.limit", "errors.deadletterqueue.topic.name"}


@pytest.mark.parametrize(("configs", "message"), [
    ({"x": "1"}, "Unknown group config name: x"),
    ({"share.delivery.count.limit": "1"},
     "Invalid value 1 for configuration share.delivery.count.limit: Value must be in [2, 10]"),
    ({"share.record.lock.duration.ms": "soon"},
     "Invalid value soon for configuration share.record.lock.duration.ms: Not a number of type INT"),
    ({"share.auto.offset.reset": "by_duration:PT1H"},
     "Invalid value by_duration:PT1H for configuration share.auto.offset.reset: String must be one of: "
     "latest, earliest"),
    ({"errors.deadletterqueue.topic.name": ""},
     "Invalid value  for configuration errors.deadletterqueue.topic.name: must not be empty"),
])
def test_kafkas_messages_for_invalid_configs(configs: dict[str, str], message: str) -> None:
    with pytest.raises(GroupConfigError) as raised:
        validate(configs)
    assert str(raised.value) == message
    assert error(configs) == message


def test_settings_in_force() -> None:
    assert share_group_settings({}, 30_000, 5) == ShareGroupSettings("latest", 30_000, 5, None)
    assert share_group_settings({"share.auto.offset.reset": "earliest", "share.delivery.count.limit": "2",
                                 "errors.deadletterqueue.topic.name": "dlq.t"}, 30_000, 5) == \
        ShareGroupSettings("earliest", 30_000, 2, "dlq.t")
