"""Admin API per client that has one: create (with configs), describe configs, alter a
config, reject a bad config value, delete. kcat has no admin API."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from compat_tests.harness.broker import Broker
from compat_tests.harness.drivers import DRIVER_NAMES, ClientError, Driver, DriverUnavailable
from compat_tests.harness.drivers.base import INVALID_CONFIG, TOPIC_ALREADY_EXISTS
from compat_tests.harness.quirks import NO_ALTER_CONFIGS_V0, NO_CONFIG_VALIDATION, tansu_quirk
from compat_tests.harness.scenario import unique_topic

ADMIN_CLIENTS = tuple(n for n in DRIVER_NAMES if n != "kcat")
# Clients whose alter call is AlterConfigs (API 33) rather than IncrementalAlterConfigs (44).
ALTER_CONFIGS_V0_CLIENTS = ("aiokafka", "kafkajs")
CREATE_CONFIGS = {"retention.ms": "3600000", "cleanup.policy": "delete"}
DELETE_WAIT_S = 15.0


def _alter_cases() -> list[object]:
    return [
        pytest.param(
            c,
            marks=[tansu_quirk(NO_ALTER_CONFIGS_V0)] if c in ALTER_CONFIGS_V0_CLIENTS else [],
            id=c,
        )
        for c in ADMIN_CLIENTS
    ]


@pytest.mark.parametrize("client", ADMIN_CLIENTS)
def test_create_topic_with_configs(
    broker: Broker, driver_for: Callable[[str], Driver], client: str
) -> None:
    admin = driver_for(client)
    topic = unique_topic(f"adm-create-{client}")

    admin.create_topic(topic, 3, CREATE_CONFIGS)

    assert admin.metadata().topics.get(topic) == 3
    configs = admin.describe_topic_configs(topic)
    for key, value in CREATE_CONFIGS.items():
        assert configs.get(key) == value, f"{key}: described {configs.get(key)!r}"
    with pytest.raises(ClientError) as caught:
        admin.create_topic(topic, 3)
    assert caught.value.code == TOPIC_ALREADY_EXISTS, str(caught.value)


@pytest.mark.parametrize("client", _alter_cases())
def test_alter_config_then_describe(
    broker: Broker, driver_for: Callable[[str], Driver], client: str
) -> None:
    admin = driver_for(client)
    topic = unique_topic(f"adm-alter-{client}")
    broker.create_topic(topic, 1, {"retention.ms": "3600000"})

    admin.alter_topic_config(topic, "retention.ms", "7200000")

    assert admin.describe_topic_configs(topic).get("retention.ms") == "7200000"


@pytest.mark.parametrize(
    "client",
    [pytest.param(c, marks=[tansu_quirk(NO_CONFIG_VALIDATION)], id=c) for c in ADMIN_CLIENTS],
)
def test_bad_config_value_is_rejected(
    broker: Broker, driver_for: Callable[[str], Driver], client: str
) -> None:
    admin = driver_for(client)
    topic = unique_topic(f"adm-bad-{client}")
    broker.create_topic(topic, 1, {"retention.ms": "3600000"})

    with pytest.raises(ClientError) as caught:
        admin.alter_topic_config(topic, "retention.ms", "not-a-number")

    assert caught.value.code == INVALID_CONFIG, str(caught.value)
    assert admin.describe_topic_configs(topic).get("retention.ms") == "3600000"


@pytest.mark.parametrize(
    "client",
    [pytest.param(c, marks=[tansu_quirk(NO_CONFIG_VALIDATION)], id=c) for c in ADMIN_CLIENTS],
)
def test_create_topic_with_bad_config_is_rejected(
    broker: Broker, driver_for: Callable[[str], Driver], client: str
) -> None:
    admin = driver_for(client)
    topic = unique_topic(f"adm-badcreate-{client}")

    with pytest.raises(ClientError) as caught:
        admin.create_topic(topic, 1, {"retention.ms": "not-a-number"})

    assert caught.value.code == INVALID_CONFIG, str(caught.value)
    assert topic not in admin.metadata().topics


@pytest.mark.parametrize("client", ADMIN_CLIENTS)
def test_delete_topic(broker: Broker, driver_for: Callable[[str], Driver], client: str) -> None:
    admin = driver_for(client)
    topic = unique_topic(f"adm-delete-{client}")
    broker.create_topic(topic, 2)

    admin.delete_topic(topic)

    deadline = time.monotonic() + DELETE_WAIT_S
    while topic in admin.metadata().topics:
        assert time.monotonic() < deadline, f"{topic} still listed {DELETE_WAIT_S} s after delete"
        time.sleep(0.2)


def test_kcat_has_no_admin_api(broker: Broker) -> None:
    """Documents the gap instead of silently leaving kcat out of the admin scenarios."""
    from compat_tests.harness.drivers import make_driver

    try:
        driver = make_driver("kcat", broker.bootstrap)
    except DriverUnavailable as exc:
        pytest.skip(str(exc))
    assert not driver.capabilities.admin
