"""A listener keystore replaced with IncrementalAlterConfigs, as Kafka's dynamic listener update.

confluent-kafka's AdminClient sets ``listener.name.ssl.ssl.keystore.location`` on the broker's
own resource; new TLS connections (Python's ``ssl``) then get the new certificate, a connection
opened before keeps its certificate and is still served, and confluent-kafka produces over the
new certificate. Keystores that do not load, or name another subject are refused with
INVALID_REQUEST and change nothing. A PKCS12 keystore's password set the same way is kept
encrypted with ``password.encoder.secret`` (nowhere on disk in clear, null in
DescribeConfigs, decoded again after a restart); a broker without the secret refuses it.
"""

from __future__ import annotations

import datetime
import socket
import ssl
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from compat_tests.harness import settings
from compat_tests.harness.broker import Broker, CormorantBroker, make_broker
from compat_tests.harness.secured import tls_init

pytestmark = pytest.mark.skipif(settings.target() != "cormorant", reason="secured listeners of cormorant")

TIMEOUT_S = 30.0
KEYSTORE_KEY = "listener.name.ssl.ssl.keystore.location"
ENCODER_SECRET = "encoder-secret-for-tests"


def _reissue(certs: Path, out: Path) -> int:
    """A new broker certificate from the same CA with the same subject and SANs; its serial."""
    ca_key = serialization.load_pem_private_key((certs / "ca-key.pem").read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    old = x509.load_pem_x509_certificates((certs / "broker.pem").read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(old[0].subject).issuer_name(old[0].issuer)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1)))
    for extension in old[0].extensions:
        if not isinstance(extension.value, (x509.SubjectKeyIdentifier, x509.AuthorityKeyIdentifier)):
            builder = builder.add_extension(extension.value, extension.critical)
    cert = builder.sign(ca_key, hashes.SHA256())
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    out.write_bytes(key_pem + cert.public_bytes(serialization.Encoding.PEM)
                    + old[1].public_bytes(serialization.Encoding.PEM))
    return cert.serial_number


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tls_init(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory, certs: Path) -> Iterator[Broker]:
    broker = make_broker(tmp_path_factory.mktemp("reload"), {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs / "broker-bundle.pem"),
        "password.encoder.secret": ENCODER_SECRET,
    })
    assert isinstance(broker, CormorantBroker)
    broker.start()
    try:
        yield broker
    finally:
        broker.close()


def _ssl_port(broker: Broker) -> int:
    return broker.listener_port("SSL")  # type: ignore[attr-defined, no-any-return]


def _connect(broker: Broker, certs: Path) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    sock = socket.create_connection(("127.0.0.1", _ssl_port(broker)), timeout=TIMEOUT_S)
    return context.wrap_socket(sock, server_hostname="127.0.0.1")


def _serial(conn: ssl.SSLSocket) -> int:
    der = conn.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def _api_versions_answered(conn: ssl.SSLSocket) -> bool:
    """An ApiVersions v0 request over ``conn`` is answered with its correlation id."""
    body = struct.pack(">hhih", 18, 0, 4242, 4) + b"test"
    conn.sendall(struct.pack(">i", len(body)) + body)
    header = conn.recv(8)
    return len(header) == 8 and struct.unpack(">ii", header)[1] == 4242


def _alter(admin: AdminClient, broker_id: str, key: str, value: str) -> None:
    entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.BROKER, broker_id, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource], request_timeout=TIMEOUT_S).values():
        future.result(timeout=TIMEOUT_S)


def _own_id(admin: AdminClient) -> str:
    return str(next(iter(admin.list_topics(timeout=TIMEOUT_S).brokers)))


def test_new_keystore_serves_new_connections_only(tls_broker: Broker, certs: Path, tmp_path: Path) -> None:
    admin = AdminClient({"bootstrap.servers": tls_broker.bootstrap})
    broker_id = _own_id(admin)
    first = x509.load_pem_x509_certificates((certs / "broker.pem").read_bytes())[0]
    existing = _connect(tls_broker, certs)
    assert _serial(existing) == first.serial_number
    new_serial = _reissue(certs, tmp_path / "renewed.pem")

    _alter(admin, broker_id, KEYSTORE_KEY, str(tmp_path / "renewed.pem"))

    deadline = time.monotonic() + TIMEOUT_S
    while True:
        with _connect(tls_broker, certs) as fresh:
            served = _serial(fresh)
            subject = x509.load_der_x509_certificate(fresh.getpeercert(binary_form=True) or b"").subject
        if served == new_serial or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert served == new_serial, "new connections still get the old certificate"
    assert subject == first.subject
    with existing:
        assert _serial(existing) == first.serial_number
        assert _api_versions_answered(existing), "the connection opened before the change is no longer served"

    producer = Producer({"bootstrap.servers": f"127.0.0.1:{_ssl_port(tls_broker)}", "security.protocol": "SSL",
                         "ssl.ca.location": str(certs / "ca.pem"), "message.timeout.ms": int(TIMEOUT_S * 1000)})
    outcome: list[object] = []
    producer.produce("reloaded-keystore", b"v", on_delivery=lambda err, _msg: outcome.append(err))
    assert producer.flush(TIMEOUT_S) == 0
    assert outcome == [None]


@pytest.mark.parametrize("case", ["missing-file", "other-subject"])
def test_bad_keystore_updates_refused(tls_broker: Broker, certs: Path, tmp_path_factory: pytest.TempPathFactory,
                                      case: str) -> None:
    admin = AdminClient({"bootstrap.servers": tls_broker.bootstrap})
    broker_id = _own_id(admin)
    with _connect(tls_broker, certs) as before:
        serial_before = _serial(before)
    value = str(tmp_path_factory.mktemp("absent") / "nothing.pem")
    if case == "other-subject":
        other = tmp_path_factory.mktemp("other")
        _tls_init_hosts(other, "elsewhere.example")
        value = str(other / "broker-bundle.pem")
    with pytest.raises(KafkaException) as refused:
        _alter(admin, broker_id, KEYSTORE_KEY, value)
    assert refused.value.args[0].name() == "INVALID_REQUEST"
    with _connect(tls_broker, certs) as after:
        assert _serial(after) == serial_before


def _tls_init_hosts(directory: Path, hosts: str) -> None:
    from broker.tools.tls_init import init_tls

    init_tls(directory, hosts.split(","))


def _alter_many(admin: AdminClient, broker_id: str, configs: dict[str, str]) -> None:
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
    resource = ConfigResource(ResourceType.BROKER, broker_id, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource], request_timeout=TIMEOUT_S).values():
        future.result(timeout=TIMEOUT_S)


def _pkcs12_of(bundle: Path, out: Path, password: str) -> Path:
    """The PEM bundle (key, leaf, CA) written by _reissue as a PKCS12 keystore under ``password``."""
    from cryptography.hazmat.primitives.serialization import pkcs12

    key = serialization.load_pem_private_key(bundle.read_bytes(), None)
    chain = x509.load_pem_x509_certificates(bundle.read_bytes())
    out.write_bytes(pkcs12.serialize_key_and_certificates(
        b"broker", key, chain[0], chain[1:],  # type: ignore[arg-type]
        serialization.BestAvailableEncryption(password.encode())))
    return out


def _files_holding(root: Path, needle: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def _wait_for_serial(broker: Broker, certs: Path, serial: int) -> int:
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        with _connect(broker, certs) as fresh:
            served = _serial(fresh)
        if served == serial or time.monotonic() > deadline:
            return served
        time.sleep(0.1)


def test_keystore_password_is_stored_encrypted(tls_broker: Broker, certs: Path, tmp_path: Path) -> None:
    password = "p12-password-" + tmp_path.name
    admin = AdminClient({"bootstrap.servers": tls_broker.bootstrap})
    broker_id = _own_id(admin)
    serial = _reissue(certs, tmp_path / "renewed.pem")
    keystore = _pkcs12_of(tmp_path / "renewed.pem", tmp_path / "renewed.p12", password)
    _alter_many(admin, broker_id, {"listener.name.ssl.ssl.keystore.type": "PKCS12",
                                   KEYSTORE_KEY: str(keystore),
                                   "listener.name.ssl.ssl.keystore.password": password})
    assert _wait_for_serial(tls_broker, certs, serial) == serial, "the PKCS12 keystore was not loaded"

    resource = ConfigResource(ResourceType.BROKER, broker_id)
    described = admin.describe_configs([resource])[resource].result(timeout=TIMEOUT_S)
    entry = described["listener.name.ssl.ssl.keystore.password"]
    assert entry.value is None and entry.is_sensitive
    assert _files_holding(tls_broker.work_dir, password.encode()) == [], "the password is on disk in clear"

    # After a restart (on the same ports) the broker decodes the stored password with its secret.
    assert isinstance(tls_broker, CormorantBroker)
    tls_broker.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{tls_broker.port},SSL://127.0.0.1:{_ssl_port(tls_broker)}"
    tls_broker.stop()
    tls_broker.start()
    assert _wait_for_serial(tls_broker, certs, serial) == serial, "the keystore was not reloaded after a restart"
    assert "dynamic_password_config_ignored" not in tls_broker.log_tail()

    # A rotation: the new secret, with the old one as password.encoder.old.secret; the broker
    # decodes with the old one and stores the password again under the new one...
    tls_broker.overrides |= {"password.encoder.secret": "rotated-secret", "password.encoder.old.secret": ENCODER_SECRET}
    tls_broker.stop()
    tls_broker.start()
    assert _wait_for_serial(tls_broker, certs, serial) == serial
    deadline = time.monotonic() + TIMEOUT_S
    while "dynamic_passwords_reencoded" not in tls_broker.log_tail() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "dynamic_passwords_reencoded" in tls_broker.log_tail()
    # ...so the old secret can then go.
    del tls_broker.overrides["password.encoder.old.secret"]
    tls_broker.stop()
    tls_broker.start()
    assert _wait_for_serial(tls_broker, certs, serial) == serial, "the re-encrypted password does not decode"
    assert "dynamic_password_config_ignored" not in tls_broker.log_tail()
    assert _files_holding(tls_broker.work_dir, password.encode()) == []


def test_keystore_password_refused_without_encoder_secret(certs: Path, tmp_path: Path) -> None:
    broker = make_broker(tmp_path / "no-secret", {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs / "broker-bundle.pem"),
    })
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        _reissue(certs, tmp_path / "renewed.pem")
        keystore = _pkcs12_of(tmp_path / "renewed.pem", tmp_path / "renewed.p12", "p12-secret")
        with pytest.raises(KafkaException) as refused:
            _alter_many(admin, _own_id(admin), {"listener.name.ssl.ssl.keystore.type": "PKCS12",
                                                KEYSTORE_KEY: str(keystore),
                                                "listener.name.ssl.ssl.keystore.password": "p12-secret"})
        error = refused.value.args[0]
        assert error.name() == "INVALID_REQUEST"
        assert "Password encoder secret not configured" in error.str(), error.str()
        # And at the cluster-default level (no client library names the "" resource; Cormorant's
        # own request client does), as Kafka: passwords are per-broker settings only.
        from broker.tools.client import KafkaClient
        from wire.generated.api_044_incremental_alter_configs import (
            IncrementalAlterConfigsRequest,
            IncrementalAlterConfigsRequestAlterableConfig,
            IncrementalAlterConfigsRequestAlterConfigsResource,
            IncrementalAlterConfigsResponse,
        )

        request = IncrementalAlterConfigsRequest(resources=[IncrementalAlterConfigsRequestAlterConfigsResource(
            resource_type=4, resource_name="", configs=[IncrementalAlterConfigsRequestAlterableConfig(
                name="listener.name.ssl.plain.sasl.jaas.config", config_operation=0, value="x required;")])])
        with KafkaClient.connect(broker.bootstrap) as client:
            answer = client.send(request, IncrementalAlterConfigsResponse)
        assert [(r.error_code, r.error_message) for r in answer.responses] == [
            (42, "Invalid config value for resource ConfigResource(type=BROKER, name=''): "
                 "Password config can be defined only at broker level")]
    finally:
        broker.close()
