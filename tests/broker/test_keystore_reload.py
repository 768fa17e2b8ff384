"""The dynamic listener keystore update's checks and swap, in-process: the update must load,
keep the subject, and name a TLS listener; a metadata image carrying it swaps the context."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.security.keystore_reload import (
    ListenerKeystores,
    check_listener_update,
    listener_keys_of,
)
from broker.security.password_encoder import DynamicPasswords
from broker.security.setup import listener_security
from broker.tools.tls_init import init_tls
from config import BrokerConfig, ConfigError, build_config
from controller.image import BROKER_RESOURCE, MetadataImage

KEY = "listener.name.ssl.ssl.keystore.location"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tls")
    init_tls(root / "a", ["127.0.0.1"])
    init_tls(root / "b", ["127.0.0.1"])  # same subject and SANs, another CA and key
    init_tls(root / "other", ["elsewhere.example"])
    return root


def _config(certs: Path, **extra: str) -> BrokerConfig:
    config, _ = build_config({
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs / "a" / "broker-bundle.pem"), **extra,
    })
    return config


def test_listener_keys_are_recognised() -> None:
    assert listener_keys_of([KEY, "listener.name.ssl.ssl.client.auth", "ssl.keystore.location",
                             "listener.name.x.ssl.truststore.certificates"]) == [
        KEY, "listener.name.x.ssl.truststore.certificates"]


def test_update_checks(certs: Path) -> None:
    config = _config(certs)
    check_listener_update(config, {}, {KEY: str(certs / "b" / "broker-bundle.pem")})
    with pytest.raises(ConfigError, match="DistinguishedName does not match"):
        check_listener_update(config, {}, {KEY: str(certs / "other" / "broker-bundle.pem")})
    with pytest.raises(ConfigError):
        check_listener_update(config, {}, {KEY: str(certs / "absent.pem")})
    with pytest.raises(ConfigError, match="no TLS listener"):
        check_listener_update(config, {}, {"listener.name.plaintext.ssl.keystore.location": "x"})
    allowed = _config(certs, **{"ssl.allow.dn.changes": "true", "ssl.allow.san.changes": "true"})
    check_listener_update(allowed, {}, {KEY: str(certs / "other" / "broker-bundle.pem")})


def test_image_swaps_the_context_once(certs: Path) -> None:
    config = _config(certs)
    security = listener_security(config, config.listeners[1], lambda user, mechanism: None, lambda *a: None)
    assert security is not None
    keystores = ListenerKeystores(config, 1, [security], DynamicPasswords(None))
    original = security.tls
    keystores.on_image(MetadataImage())
    assert security.tls is original
    renewed = MetadataImage(configs={(BROKER_RESOURCE, "1"): {KEY: str(certs / "b" / "broker-bundle.pem")}})
    keystores.on_image(renewed)
    swapped = security.tls
    assert swapped is not original
    keystores.on_image(renewed)
    assert security.tls is swapped, "an unchanged image rebuilds nothing"
    refused = MetadataImage(configs={(BROKER_RESOURCE, "1"): {KEY: str(certs / "absent.pem")}})
    keystores.on_image(refused)
    assert security.tls is swapped, "a keystore that no longer loads keeps the one in force"
