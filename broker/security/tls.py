"""TLS server contexts from Kafka's ``ssl.*`` settings of one listener.

Keystores and truststores are PEM (KIP-651: inline in ``ssl.keystore.certificate.chain`` /
``ssl.keystore.key`` / ``ssl.truststore.certificates``, or a PEM file at ``*.location``) or
PKCS12 files; ``cryptography`` reads them and the stdlib ``ssl`` serves them. JKS files are
refused with a message saying how to convert them.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from config import ConfigError, ConfigValue, Password

_PROTOCOLS: Final = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH: Final = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL, "none": ssl.CERT_NONE}
#: Java/IANA names of TLS 1.2 suites to OpenSSL's; OpenSSL names are accepted as they are.
_IANA_TO_OPENSSL: Final = {
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384": "DHE-RSA-AES256-GCM-SHA384",
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256": "DHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384": "ECDHE-ECDSA-AES256-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384": "ECDHE-RSA-AES256-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
}
_TLS13_SUITES: Final = frozenset(("TLS_AES_256_GCM_SHA384", "TLS_AES_128_GCM_SHA256", "TLS_CHACHA20_POLY1305_SHA256"))

Setting = Callable[[str], ConfigValue]


@dataclass(frozen=True, slots=True)
class KeyMaterial:
    """A PEM certificate chain (leaf first) and its unencrypted PEM private key."""

    chain_pem: bytes
    key_pem: bytes


def _secret(value: ConfigValue) -> str | None:
    """A setting's text; empty counts as unset."""
    if value is None:
        return None
    text = value.value if isinstance(value, Password) else str(value)
    return text or None


def _store_type(setting: Setting, key: str) -> str:
    kind = str(setting(key))
    if kind == "JKS":
        location = _secret(setting(key.replace(".type", ".location")))
        inline = _secret(setting("ssl.keystore.certificate.chain" if "keystore" in key else "ssl.truststore.certificates"))
        if location is None and inline is None:
            return kind
        raise ConfigError(key, "JKS stores are not supported: use PKCS12 (keytool -importkeystore "
                               "-deststoretype pkcs12) or PEM")
    return kind


def _read(key: str, location: str) -> bytes:
    try:
        return Path(location).read_bytes()
    except OSError as ex:
        raise ConfigError(key, f"cannot read {location}: {ex.strerror}") from ex


def _pkcs12(key: str, data: bytes, password: str | None) -> pkcs12.PKCS12KeyAndCertificates:
    try:
        return pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError as ex:
        raise ConfigError(key, f"cannot open the PKCS12 store (wrong password or not PKCS12): {ex}") from ex


def _pem_certs(certs: list[x509.Certificate]) -> bytes:
    return b"".join(cert.public_bytes(serialization.Encoding.PEM) for cert in certs)


def _unencrypted_key(key: str, pem: bytes, password: str | None) -> bytes:
    try:
        private = serialization.load_pem_private_key(pem, password.encode() if password else None)
    except (ValueError, TypeError) as ex:
        raise ConfigError(key, f"cannot read the private key (wrong ssl.key.password?): {ex}") from ex
    return private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())


def load_keystore(setting: Setting) -> KeyMaterial | None:
    kind = _store_type(setting, "ssl.keystore.type")
    location = _secret(setting("ssl.keystore.location"))
    key_password = _secret(setting("ssl.key.password"))
    if kind == "PKCS12":
        if location is None:
            raise ConfigError("ssl.keystore.location", "a PKCS12 keystore needs ssl.keystore.location")
        store = _pkcs12("ssl.keystore.location", _read("ssl.keystore.location", str(location)),
                        _secret(setting("ssl.keystore.password")))
        if store.key is None or store.cert is None:
            raise ConfigError("ssl.keystore.location", "the PKCS12 keystore holds no private key and certificate")
        chain = [store.cert.certificate, *(c.certificate for c in store.additional_certs)]
        key_pem = store.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption())
        return KeyMaterial(_pem_certs(chain), key_pem)
    if kind == "PEM":
        inline_chain = _secret(setting("ssl.keystore.certificate.chain"))
        inline_key = _secret(setting("ssl.keystore.key"))
        if inline_chain is not None and inline_key is not None:
            if location is not None:
                raise ConfigError("ssl.keystore.location", "set the PEM keystore inline or as a file, not both")
            chain_pem, key_source = inline_chain.encode(), inline_key.encode()
        elif location is not None:
            chain_pem = key_source = _read("ssl.keystore.location", str(location))
        else:
            raise ConfigError("ssl.keystore.type", "a PEM keystore needs ssl.keystore.certificate.chain and "
                                                  "ssl.keystore.key, or ssl.keystore.location")
        try:
            certs = x509.load_pem_x509_certificates(chain_pem)
        except ValueError as ex:
            raise ConfigError("ssl.keystore.certificate.chain", f"no PEM certificate: {ex}") from ex
        return KeyMaterial(_pem_certs(certs), _unencrypted_key("ssl.keystore.key", key_source, key_password))
    return None


def load_truststore(setting: Setting) -> bytes | None:
    """The trusted CA certificates as PEM, or None when no truststore is set."""
    kind = _store_type(setting, "ssl.truststore.type")
    location = _secret(setting("ssl.truststore.location"))
    if kind == "PKCS12":
        if location is None:
            raise ConfigError("ssl.truststore.location", "a PKCS12 truststore needs ssl.truststore.location")
        store = _pkcs12("ssl.truststore.location", _read("ssl.truststore.location", str(location)),
                        _secret(setting("ssl.truststore.password")))
        certs = [c.certificate for c in store.additional_certs]
        if store.cert is not None:
            certs.insert(0, store.cert.certificate)
        return _pem_certs(certs)
    if kind == "PEM":
        inline = _secret(setting("ssl.truststore.certificates"))
        data = inline.encode() if inline is not None else (
            _read("ssl.truststore.location", str(location)) if location is not None else None)
        if data is None:
            raise ConfigError("ssl.truststore.type", "a PEM truststore needs ssl.truststore.certificates "
                                                    "or ssl.truststore.location")
        try:
            return _pem_certs(x509.load_pem_x509_certificates(data))
        except ValueError as ex:
            raise ConfigError("ssl.truststore.certificates", f"no PEM certificate: {ex}") from ex
    return None


def _ciphers(suites: tuple[str, ...]) -> str | None:
    names = [_IANA_TO_OPENSSL.get(suite, suite) for suite in suites if suite not in _TLS13_SUITES]
    return ":".join(names) if names else None


def server_context(listener: str, setting: Setting) -> ssl.SSLContext:
    """The TLS context of one listener; ConfigError names the setting that is wrong."""
    keys = load_keystore(setting)
    if keys is None:
        raise ConfigError("ssl.keystore.location", f"listener {listener} uses TLS but has no keystore")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    enabled = setting("ssl.enabled.protocols")
    protocols = [_PROTOCOLS[name] for name in enabled] if isinstance(enabled, tuple) else []
    if not protocols:
        raise ConfigError("ssl.enabled.protocols", "no TLS version enabled")
    context.minimum_version = min(protocols)
    context.maximum_version = max(protocols)
    suites = setting("ssl.cipher.suites")
    cipher_list = _ciphers(suites if isinstance(suites, tuple) else ())
    if cipher_list is not None:
        try:
            context.set_ciphers(cipher_list)
        except ssl.SSLError as ex:
            raise ConfigError("ssl.cipher.suites", f"no usable cipher suite in {cipher_list}") from ex
    load_chain(context, keys)
    client_auth = str(setting("ssl.client.auth"))
    context.verify_mode = _CLIENT_AUTH[client_auth]
    trusted = load_truststore(setting)
    if trusted is not None:
        context.load_verify_locations(cadata=trusted.decode())
    elif client_auth != "none":
        raise ConfigError("ssl.client.auth", f"ssl.client.auth={client_auth} needs a truststore")
    return context


def load_chain(context: ssl.SSLContext, keys: KeyMaterial) -> None:
    # ssl loads keys from files only: a private directory holds them for the call.
    with tempfile.TemporaryDirectory(prefix="cormorant-tls-") as directory:
        path = os.path.join(directory, "keystore.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(keys.key_pem + keys.chain_pem)
        try:
            context.load_cert_chain(path)
        except ssl.SSLError as ex:
            raise ConfigError("ssl.keystore.key", f"the private key does not match the certificate: {ex}") from ex


def peer_distinguished_name(der: bytes) -> str:
    """The subject of a DER certificate in RFC 2253 form, as Java's X500Principal.getName()."""
    return x509.load_der_x509_certificate(der).subject.rfc4514_string()
