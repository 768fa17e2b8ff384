"""Password-type dynamic broker configs, encrypted in the metadata log as Kafka encrypts them.

Kafka's PasswordEncoder: a key is derived from ``password.encoder.secret`` with PBKDF2
(``password.encoder.keyfactory.algorithm``, PBKDF2WithHmacSHA512 by default; a 256-byte random
salt; ``password.encoder.iterations``, 4096; ``password.encoder.key.length`` bits, 128) and
the password is encrypted with ``password.encoder.cipher.algorithm`` (AES/CBC/PKCS5Padding, or
AES/GCM/NoPadding) under a random IV. The stored value is Kafka's
``name:value,name:value`` map of the algorithm, key length, iterations, salt, IV, password
length and ciphertext (base64), so nothing in the metadata log, a snapshot or a dump shows
the password.

As Kafka's DynamicBrokerConfig: a config is a password when its name ends with a
password-type dynamic setting (``listener.name.<l>.ssl.keystore.password``,
``listener.name.<l>.<mechanism>.sasl.jaas.config``, ...); a broker without
``password.encoder.secret`` refuses to store one ("Password encoder secret not
configured"), and passwords are per-broker settings only. A stored value that the secret (or
``password.encoder.old.secret``, for a rotation) cannot decode is ignored, with an error log;
at start-up, values only the old secret decodes are stored again under the new one.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, Protocol

import structlog
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC

from config import BrokerConfig, ConfigError, Password
from controller.image import BROKER_RESOURCE, MetadataImage
from wire.errors import ErrorCode

log = structlog.get_logger(__name__)

CBC: Final = "AES/CBC/PKCS5Padding"
GCM: Final = "AES/GCM/NoPadding"
DEFAULT_KEY_FACTORY: Final = "PBKDF2WithHmacSHA512"
KEY_FACTORIES: Final[Mapping[str, Callable[[], hashes.HashAlgorithm]]] = {
    "PBKDF2WithHmacSHA512": hashes.SHA512,
    "PBKDF2WithHmacSHA256": hashes.SHA256,
    "PBKDF2WithHmacSHA1": hashes.SHA1,
}
AES_KEY_BITS: Final = (128, 192, 256)
SALT_BYTES: Final = 256
GCM_TAG_BITS: Final = 128
#: The dynamic settings of password type (Kafka's DynamicPasswordConfigs): a config whose
#: name ends with one of these is encrypted.
PASSWORD_CONFIGS: Final = (
    "ssl.keystore.password", "ssl.key.password", "ssl.truststore.password",
    "ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.truststore.certificates",
    "sasl.jaas.config",
)
NO_SECRET: Final = "Password encoder secret not configured"
NOT_PER_BROKER: Final = "Password config can be defined only at broker level"


class PasswordDecodeError(ValueError):
    """A stored password that this secret cannot decrypt (or that is not Kafka's encoded form)."""


def is_password_config(name: str) -> bool:
    return name.endswith(PASSWORD_CONFIGS)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@dataclass(frozen=True, slots=True)
class PasswordEncoder:
    """Encrypts and decrypts passwords with one secret (Kafka's EncryptingPasswordEncoder)."""

    secret: str
    cipher_algorithm: str = CBC
    key_length: int = 128
    key_factory: str = DEFAULT_KEY_FACTORY
    iterations: int = 4096
    random_bytes: Callable[[int], bytes] = os.urandom

    def __post_init__(self) -> None:
        if self.cipher_algorithm not in (CBC, GCM):
            raise ConfigError("password.encoder.cipher.algorithm",
                              f"{self.cipher_algorithm} is not supported: use {CBC} or {GCM}")
        if self.key_factory not in KEY_FACTORIES:
            raise ConfigError("password.encoder.keyfactory.algorithm",
                              f"{self.key_factory} is not supported: use one of {', '.join(KEY_FACTORIES)}")
        if self.key_length not in AES_KEY_BITS:
            raise ConfigError("password.encoder.key.length", f"AES keys are 128, 192 or 256 bits, not {self.key_length}")

    def encode(self, password: str) -> str:
        salt = self.random_bytes(SALT_BYTES)
        key = _derive(self.secret, self.key_factory, self.key_length, salt, self.iterations)
        fields = {"keyFactoryAlgorithm": self.key_factory, "cipherAlgorithm": self.cipher_algorithm,
                  "keyLength": str(self.key_length), "salt": _b64(salt), "iterations": str(self.iterations)}
        plain = password.encode()
        if self.cipher_algorithm == GCM:
            iv = self.random_bytes(12)
            encrypted = AESGCM(key).encrypt(iv, plain, None)  # the tag is appended, as Java's GCM does
            fields["authenticationTagLength"] = str(GCM_TAG_BITS)
        else:
            iv = self.random_bytes(16)
            padder = padding.PKCS7(128).padder()
            encryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
            encrypted = encryptor.update(padder.update(plain) + padder.finalize()) + encryptor.finalize()
        fields |= {"initializationVector": _b64(iv), "encryptedPassword": _b64(encrypted),
                   "passwordLength": str(len(password))}
        return ",".join(f"{name}:{value}" for name, value in fields.items())

    def decode(self, encoded: str) -> str:
        """The password of an encoded value; the parameters are the value's own, the secret ours."""
        fields: dict[str, str] = {}
        for item in encoded.split(","):
            name, colon, value = item.partition(":")
            if not colon:
                raise PasswordDecodeError("not an encoded password")
            fields[name.strip()] = value.strip()
        try:
            cipher, factory = fields["cipherAlgorithm"], fields["keyFactoryAlgorithm"]
            key_length, iterations = int(fields["keyLength"]), int(fields["iterations"])
            salt, iv = base64.b64decode(fields["salt"]), base64.b64decode(fields["initializationVector"])
            encrypted = base64.b64decode(fields["encryptedPassword"])
            length = int(fields["passwordLength"])
        except (KeyError, ValueError) as ex:
            raise PasswordDecodeError(f"not an encoded password: {ex}") from None
        if factory not in KEY_FACTORIES or key_length not in AES_KEY_BITS or not 1 <= iterations <= 10_000_000:
            raise PasswordDecodeError("unsupported key derivation")
        key = _derive(self.secret, factory, key_length, salt, iterations)
        try:
            if cipher == GCM:
                plain = AESGCM(key).decrypt(iv, encrypted, None)
            elif cipher == CBC:
                decryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).decryptor()
                unpadder = padding.PKCS7(128).unpadder()
                plain = unpadder.update(decryptor.update(encrypted) + decryptor.finalize()) + unpadder.finalize()
            else:
                raise PasswordDecodeError(f"unsupported cipher {cipher}")
            password = plain.decode()
        except (InvalidTag, ValueError) as ex:  # a wrong secret: bad padding, bad tag or bad UTF-8
            raise PasswordDecodeError("the secret does not decrypt this password") from ex
        if len(password) != length:
            raise PasswordDecodeError("the secret does not decrypt this password")
        return password


def _derive(secret: str, factory: str, key_bits: int, salt: bytes, iterations: int) -> bytes:
    kdf = PBKDF2HMAC(algorithm=KEY_FACTORIES[factory](), length=key_bits // 8, salt=salt, iterations=iterations)
    return kdf.derive(secret.encode())


class DynamicPasswords:
    """The broker's encoders: the secret's, and the old secret's for values not yet re-encoded."""

    def __init__(self, encoder: PasswordEncoder | None, old: PasswordEncoder | None = None) -> None:
        self.encoder = encoder
        self.old = old

    @classmethod
    def from_config(cls, config: BrokerConfig) -> DynamicPasswords:
        cipher, factory = config.get("password.encoder.cipher.algorithm"), config.get(
            "password.encoder.keyfactory.algorithm")
        key_length, iterations = config.get("password.encoder.key.length"), config.get("password.encoder.iterations")
        assert isinstance(cipher, str) and isinstance(key_length, int) and isinstance(iterations, int)

        def encoder(key: str) -> PasswordEncoder | None:
            secret = config.get(key)
            if not isinstance(secret, Password) or not secret.value:
                return None
            return PasswordEncoder(secret.value, cipher, key_length,
                                   factory if isinstance(factory, str) and factory else DEFAULT_KEY_FACTORY,
                                   iterations)

        return cls(encoder("password.encoder.secret"), encoder("password.encoder.old.secret"))

    def encode_changes(self, changes: Mapping[str, str | None], per_broker: bool) -> dict[str, str | None]:
        """``changes`` with password values encrypted; ConfigError as Kafka refuses them."""
        out = dict(changes)
        for name, value in changes.items():
            if value is None or not is_password_config(name):
                continue
            if not per_broker:
                raise ConfigError(name, NOT_PER_BROKER)
            if self.encoder is None:
                raise ConfigError(name, NO_SECRET)
            out[name] = self.encoder.encode(value)
        return out

    def decode(self, name: str, stored: str) -> str:
        """The password stored for ``name``; PasswordDecodeError when no secret decodes it."""
        encoders = [e for e in (self.encoder, self.old) if e is not None]
        if not encoders:
            raise PasswordDecodeError(NO_SECRET)
        error = PasswordDecodeError("no secret")
        for encoder in encoders:
            try:
                return encoder.decode(stored)
            except PasswordDecodeError as ex:
                error = ex
        raise error

    def reencoded(self, configs: Mapping[str, str]) -> dict[str, str | None]:
        """The stored passwords only ``password.encoder.old.secret`` decodes, encrypted again
        with ``password.encoder.secret`` (what a rotation leaves to do)."""
        if self.encoder is None or self.old is None:
            return {}
        out: dict[str, str | None] = {}
        for name, value in configs.items():
            if not is_password_config(name):
                continue
            try:
                self.encoder.decode(value)
                continue
            except PasswordDecodeError:
                pass
            try:
                out[name] = self.encoder.encode(self.old.decode(value))
            except PasswordDecodeError:
                continue  # neither secret: decoded() logs it
        return out

    def decoded(self, configs: Mapping[str, str]) -> dict[str, str]:
        """A resource's stored configs with passwords in clear; those that cannot be decoded are
        left out and logged (by name only), as Kafka ignores them."""
        out: dict[str, str] = {}
        for name, value in configs.items():
            if not is_password_config(name):
                out[name] = value
                continue
            try:
                out[name] = self.decode(name, value)
            except PasswordDecodeError as ex:
                log.error("dynamic_password_config_ignored", config=name, reason=str(ex))
        return out


class ConfigWriter(Protocol):
    @property
    def image(self) -> MetadataImage: ...

    async def alter_configs(self, resource_type: int, resource_name: str, changes: Mapping[str, str | None],
                            replace_all: bool, validate_only: bool) -> tuple[ErrorCode, str | None]: ...


async def reencode_stored_passwords(passwords: DynamicPasswords, controller: ConfigWriter, node_id: int) -> None:
    """At start-up, as Kafka's brokers do after a secret rotation: this broker's stored passwords
    that only the old secret decodes are stored again under the new one."""
    changes = passwords.reencoded(controller.image.broker_config(node_id))
    if not changes:
        return
    code, message = await controller.alter_configs(BROKER_RESOURCE, str(node_id), changes, False, False)
    if code != ErrorCode.NONE:
        log.error("dynamic_passwords_reencode_failed", configs=sorted(changes), error=code.name, reason=message)
    else:
        log.info("dynamic_passwords_reencoded", configs=sorted(changes))
