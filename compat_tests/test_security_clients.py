"""Secured listeners with the clients test_security.py does not drive: aiokafka and kafkajs
over SSL and SASL_SSL with PLAIN and SCRAM (produce, consume in a group, commit), a TLS 1.1
client refused, and confluent-kafka's transactions over SASL_SSL.

The broker is test_security.py's: every kind of listener at once, certificates from
``cormorant tls init``.
"""

from __future__ import annotations

import socket
import ssl
import warnings
from pathlib import Path

import pytest

from compat_tests.harness import settings
from compat_tests.harness.broker import Broker
from compat_tests.harness.drivers.base import DriverUnavailable
from compat_tests.harness.secured import MORE_CLIENTS, ClientSecurity, roundtrip, unique
from compat_tests.test_security import _address, _security, certs, secured  # noqa: F401  (fixtures)

pytestmark = pytest.mark.skipif(settings.target() != "cormorant", reason="secured listeners of cormorant")


@pytest.mark.parametrize("client", MORE_CLIENTS)
@pytest.mark.parametrize("kind", ["ssl", "mtls", "sasl_ssl_plain", "sasl_ssl_scram512", "sasl_ssl_scram256_added",
                                  "sasl_plaintext_scram256"])
def test_produce_consume_group(secured: Broker, certs: Path, client: str, kind: str) -> None:  # noqa: F811
    listener, security = _security(kind, certs)
    topic = unique(f"sec-{kind}-{client}")
    secured.create_topic(topic, partitions=2)
    try:
        roundtrip(client, _address(secured, listener), security, topic)
    except DriverUnavailable as ex:
        pytest.skip(str(ex))


def _tls11_context(ca: Path) -> ssl.SSLContext:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1
        context.maximum_version = ssl.TLSVersion.TLSv1_1
    context.set_ciphers("DEFAULT:@SECLEVEL=0")  # lets OpenSSL 3 offer TLS 1.1 at all
    context.load_verify_locations(str(ca))
    return context


@pytest.mark.parametrize("listener", ["SSL", "SASL_SSL"])
def test_tls_1_1_client_refused(secured: Broker, certs: Path, listener: str) -> None:  # noqa: F811
    port = int(_address(secured, listener).rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        with pytest.raises(ssl.SSLError) as refused:
            _tls11_context(certs / "ca.pem").wrap_socket(sock, server_hostname="127.0.0.1")
    assert "PROTOCOL_VERSION" in refused.value.reason.upper() or "UNSUPPORTED_PROTOCOL" in str(
        refused.value).upper(), refused.value
    # A TLS 1.2 client is served on the same listener.
    modern = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    modern.maximum_version = ssl.TLSVersion.TLSv1_2
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        with modern.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
            assert tls.version() == "TLSv1.2"


@pytest.mark.parametrize("kind", ["sasl_ssl_scram512", "sasl_ssl_plain"])
def test_confluent_transactions_over_sasl_ssl(secured: Broker, certs: Path, kind: str) -> None:  # noqa: F811
    from confluent_kafka import Consumer, Producer

    listener, security = _security(kind, certs)
    bootstrap = _address(secured, listener)
    topic = unique(f"sec-txn-{kind}")
    secured.create_topic(topic, partitions=1)
    common = {"bootstrap.servers": bootstrap, **security.librdkafka()}
    producer = Producer({**common, "transactional.id": unique("txn"), "message.timeout.ms": 30000})
    timeout_s = settings.API_TIMEOUT_MS / 1000
    producer.init_transactions(timeout_s)
    producer.begin_transaction()
    producer.produce(topic, b"aborted")
    producer.abort_transaction(timeout_s)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, f"committed-{i}".encode())
    producer.commit_transaction(timeout_s)

    consumer = Consumer({**common, "group.id": unique("txn-reader"), "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    got: list[bytes] = []
    try:
        consumer.subscribe([topic])
        for _ in range(int(timeout_s * 2)):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value() or b"")
            if len(got) >= 3:
                break
    finally:
        consumer.close()
    assert got == [f"committed-{i}".encode() for i in range(3)]


def test_security_values_are_client_specific() -> None:
    """kafkajs gets PEM text (not paths) and lower-case mechanism names."""
    security = ClientSecurity("SASL_PLAINTEXT", mechanism="SCRAM-SHA-256", user="u", password="p")
    assert security.kafkajs() == {"sasl": {"mechanism": "scram-sha-256", "username": "u", "password": "p"}}
