"""Password-type dynamic configs encrypted as Kafka's PasswordEncoder encrypts them."""

from __future__ import annotations

import base64

import pytest

from broker.config import ConfigError, build_config
from broker.security.password_encoder import (
    CBC,
    GCM,
    NO_SECRET,
    NOT_PER_BROKER,
    DynamicPasswords,
    PasswordDecodeError,
    PasswordEncoder,
    is_password_config,
)


def _fields(encoded: str) -> dict[str, str]:
    return dict(item.split(":", 1) for item in encoded.split(","))


@pytest.mark.parametrize("cipher", [CBC, GCM])
@pytest.mark.parametrize("factory", ["PBKDF2WithHmacSHA512", "PBKDF2WithHmacSHA1"])
def test_encode_decode_roundtrip(cipher: str, factory: str) -> None:
    encoder = PasswordEncoder("the-secret", cipher, 256, factory, 1024)
    encoded = encoder.encode("pässwörd,with:separators")
    assert "pässwörd" not in encoded
    fields = _fields(encoded)
    assert fields["cipherAlgorithm"] == cipher and fields["keyFactoryAlgorithm"] == factory
    assert fields["keyLength"] == "256" and fields["iterations"] == "1024"
    assert len(base64.b64decode(fields["salt"])) == 256
    assert fields["passwordLength"] == str(len("pässwörd,with:separators"))
    assert ("authenticationTagLength" in fields) == (cipher == GCM)
    assert encoder.decode(encoded) == "pässwörd,with:separators"
    # Another encoder with the same secret decodes it: the parameters travel with the value.
    assert PasswordEncoder("the-secret").decode(encoded) == "pässwörd,with:separators"
    assert encoder.encode("x") != encoder.encode("x"), "a fresh salt and IV each time"


def test_wrong_secret_and_garbage_do_not_decode() -> None:
    encoded = PasswordEncoder("right").encode("p12-password")
    for encoder in (PasswordEncoder("wrong"), PasswordEncoder("wrong", GCM)):
        with pytest.raises(PasswordDecodeError):
            encoder.decode(encoded)
    for bad in ("p12-password", "a:b", encoded.replace("iterations:4096", "iterations:0"), ""):
        with pytest.raises(PasswordDecodeError):
            PasswordEncoder("right").decode(bad)


def test_unsupported_parameters_are_config_errors() -> None:
    for kwargs, key in (({"cipher_algorithm": "DES/ECB/NoPadding"}, "password.encoder.cipher.algorithm"),
                        ({"key_factory": "PBKDF2WithHmacMD5"}, "password.encoder.keyfactory.algorithm"),
                        ({"key_length": 100}, "password.encoder.key.length")):
        with pytest.raises(ConfigError) as refused:
            PasswordEncoder("s", **kwargs)  # type: ignore[arg-type]
        assert refused.value.key == key


def test_password_configs_by_name() -> None:
    for name in ("listener.name.ssl.ssl.keystore.password", "listener.name.sasl_ssl.plain.sasl.jaas.config",
                 "listener.name.x.ssl.keystore.key", "ssl.truststore.certificates"):
        assert is_password_config(name)
    for name in ("listener.name.ssl.ssl.keystore.location", "log.retention.ms", "password.encoder.secret"):
        assert not is_password_config(name)


def test_dynamic_passwords_from_the_broker_config() -> None:
    config, _ = build_config({"password.encoder.secret": "s3cret", "password.encoder.old.secret": "old",
                              "password.encoder.cipher.algorithm": GCM, "password.encoder.iterations": "2048"})
    passwords = DynamicPasswords.from_config(config)
    changes = {"listener.name.ssl.ssl.keystore.password": "p", "listener.name.ssl.ssl.keystore.location": "/k.p12",
               "listener.name.ssl.ssl.key.password": None}
    stored = passwords.encode_changes(changes, per_broker=True)
    assert stored["listener.name.ssl.ssl.keystore.location"] == "/k.p12"
    assert stored["listener.name.ssl.ssl.key.password"] is None
    encoded = stored["listener.name.ssl.ssl.keystore.password"]
    assert encoded is not None and _fields(encoded)["cipherAlgorithm"] == GCM
    assert _fields(encoded)["iterations"] == "2048"
    # Values the old secret encrypted still decode while the secret is rotated; others are dropped.
    by_old = PasswordEncoder("old").encode("older")
    by_other = PasswordEncoder("someone-else").encode("lost")
    assert passwords.decoded({"listener.name.a.ssl.keystore.password": encoded,
                              "listener.name.b.ssl.keystore.password": by_old,
                              "listener.name.c.ssl.keystore.password": by_other,
                              "listener.name.a.ssl.keystore.location": "/k.p12"}) == {
        "listener.name.a.ssl.keystore.password": "p", "listener.name.b.ssl.keystore.password": "older",
        "listener.name.a.ssl.keystore.location": "/k.p12"}
    with pytest.raises(ConfigError, match=NOT_PER_BROKER):
        passwords.encode_changes({"listener.name.ssl.ssl.keystore.password": "p"}, per_broker=False)


def test_without_a_secret_passwords_are_refused() -> None:
    config, _ = build_config({})
    passwords = DynamicPasswords.from_config(config)
    assert passwords.encoder is None
    with pytest.raises(ConfigError, match=NO_SECRET):
        passwords.encode_changes({"listener.name.ssl.ssl.keystore.password": "p"}, per_broker=True)
    assert passwords.encode_changes({"log.retention.ms": "1000", "listener.name.ssl.ssl.key.password": None},
                                    per_broker=True) == {"log.retention.ms": "1000",
                                                         "listener.name.ssl.ssl.key.password": None}
