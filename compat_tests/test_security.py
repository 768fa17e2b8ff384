"""TLS, mutual TLS and SASL listeners with real clients (confluent-kafka, kafka-python, kcat).

One broker serves every kind of listener at once: PLAINTEXT (for the harness), SSL, MTLS
(SSL with ``ssl.client.auth=required``), SASL_PLAINTEXT and SASL_SSL (a PKCS12 keystore,
set per listener). Certificates come from ``cormorant tls init``; a second run makes the
"other CA" whose client certificates must be refused. Every client produces, consumes with
a consumer group and commits on each; wrong credentials, unknown users and foreign
certificates are refused as Kafka refuses them, and the broker serves everyone else on.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from compat_tests.harness import settings
from compat_tests.harness.broker import Broker, CormorantBroker, make_broker
from compat_tests.harness.drivers.base import DriverUnavailable
from compat_tests.harness.secured import (
    CLIENTS,
    ClientSecurity,
    java_roundtrip,
    refused,
    roundtrip,
    secured_java_driver,
    suppressed_client_logs,
    tls_init,
    unique,
)

pytestmark = pytest.mark.skipif(settings.target() != "cormorant", reason="secured listeners of cormorant")

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
P12_PASSWORD = "p12-secret"


def _pkcs12(directory: Path) -> Path:
    key = serialization.load_pem_private_key((directory / "broker-key.pem").read_bytes(), None)
    certs = x509.load_pem_x509_certificates((directory / "broker.pem").read_bytes())
    data = pkcs12.serialize_key_and_certificates(
        b"broker", key, certs[0], certs[1:],  # type: ignore[arg-type]
        serialization.BestAvailableEncryption(P12_PASSWORD.encode()))
    path = directory / "broker.p12"
    path.write_bytes(data)
    return path


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tls_init(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tls_init(tmp_path_factory.mktemp("other-ca"))


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, certs: Path) -> Iterator[Broker]:
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0,"
                     "SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                          "SASL_SSL:SASL_SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs / "broker-bundle.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs / "ca.pem"),
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.sasl_ssl.ssl.keystore.type": "PKCS12",
        "listener.name.sasl_ssl.ssl.keystore.location": str(_pkcs12(certs)),
        "listener.name.sasl_ssl.ssl.keystore.password": P12_PASSWORD,
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "connection.failed.authentication.delay.ms": "50",
    }
    broker = make_broker(tmp_path_factory.mktemp("secured"), overrides)
    assert isinstance(broker, CormorantBroker)
    broker.serve_args = ("--add-scram", "SCRAM-SHA-256=[name=admin,password=admin-secret]",
                         "--add-scram", "SCRAM-SHA-512=[name=admin,password=admin-secret,iterations=8192]")
    broker.start()
    _add_scram_user(broker, "bob", "bob-secret")
    try:
        yield broker
    finally:
        broker.close()


def _add_scram_user(broker: Broker, user: str, password: str) -> None:
    """Both SCRAM mechanisms for ``user``, with confluent-kafka's AdminClient (AlterUserScramCredentials)."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    upsertions = [UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, 4096), password.encode())
                  for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)]
    for future in admin.alter_user_scram_credentials(upsertions).values():  # type: ignore[arg-type]
        future.result(timeout=30)
    described = admin.describe_user_scram_credentials([user])[user].result(timeout=30)
    assert {info.mechanism for info in described.scram_credential_infos} == {
        ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512}


def _address(broker: Broker, listener: str) -> str:
    return f"127.0.0.1:{broker.listener_port(listener)}"  # type: ignore[attr-defined]


def _security(kind: str, certs: Path) -> tuple[str, ClientSecurity]:
    ca = certs / "ca.pem"
    return {
        "ssl": ("SSL", ClientSecurity("SSL", ca=ca)),
        "mtls": ("MTLS", ClientSecurity("SSL", ca=ca, cert=certs / "client.pem", key=certs / "client-key.pem")),
        "sasl_plaintext_plain": ("SASL_PLAINTEXT", ClientSecurity("SASL_PLAINTEXT", mechanism="PLAIN",
                                                                  user="alice", password="alice-secret")),
        "sasl_ssl_plain": ("SASL_SSL", ClientSecurity("SASL_SSL", ca=ca, mechanism="PLAIN", user="alice",
                                                      password="alice-secret")),
        "sasl_plaintext_scram256": ("SASL_PLAINTEXT", ClientSecurity("SASL_PLAINTEXT", mechanism="SCRAM-SHA-256",
                                                                     user="admin", password="admin-secret")),
        "sasl_ssl_scram512": ("SASL_SSL", ClientSecurity("SASL_SSL", ca=ca, mechanism="SCRAM-SHA-512",
                                                         user="admin", password="admin-secret")),
        "sasl_ssl_scram256_added": ("SASL_SSL", ClientSecurity("SASL_SSL", ca=ca, mechanism="SCRAM-SHA-256",
                                                               user="bob", password="bob-secret")),
        "sasl_plaintext_scram512_added": ("SASL_PLAINTEXT", ClientSecurity(
            "SASL_PLAINTEXT", mechanism="SCRAM-SHA-512", user="bob", password="bob-secret")),
    }[kind]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("kind", ["ssl", "mtls", "sasl_plaintext_plain", "sasl_ssl_plain", "sasl_plaintext_scram256",
                                  "sasl_ssl_scram512", "sasl_ssl_scram256_added", "sasl_plaintext_scram512_added"])
def test_produce_consume_group(secured: Broker, certs: Path, client: str, kind: str) -> None:
    listener, security = _security(kind, certs)
    topic = unique(f"sec-{kind}-{client}")
    secured.create_topic(topic, partitions=2)
    roundtrip(client, _address(secured, listener), security, topic)


@pytest.mark.parametrize("variant", ["java", "java4"])
@pytest.mark.parametrize("kind", ["ssl", "mtls", "sasl_ssl_plain", "sasl_plaintext_scram256", "sasl_ssl_scram512"])
def test_java_produce_consume_group(secured: Broker, certs: Path, variant: str, kind: str) -> None:
    listener, security = _security(kind, certs)
    topic = unique(f"sec-{kind}-{variant}")
    secured.create_topic(topic, partitions=2)
    try:
        java_roundtrip(variant, _address(secured, listener), security, topic)
    except DriverUnavailable as ex:
        pytest.skip(str(ex))


@pytest.mark.parametrize("kind", ["sasl_plaintext_plain", "sasl_ssl_scram512"])
def test_java_bad_password_refused(secured: Broker, certs: Path, kind: str) -> None:
    listener, security = _security(kind, certs)
    try:
        report = java_roundtrip("java", _address(secured, listener), security.with_credentials(
            security.user or "", "not-the-password"), _new_topic(secured), refused=True)
    except DriverUnavailable as ex:
        pytest.skip(str(ex))
    assert f"due to invalid credentials with SASL mechanism {security.mechanism}" in report, report


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("case", ["wrong_password", "unknown_user"])
@pytest.mark.parametrize("kind", ["sasl_plaintext_plain", "sasl_ssl_plain", "sasl_plaintext_scram256",
                                  "sasl_ssl_scram512"])
def test_bad_credentials_refused(secured: Broker, certs: Path, client: str, case: str, kind: str) -> None:
    listener, security = _security(kind, certs)
    user, password = (security.user or "", "not-the-password") if case == "wrong_password" else (
        "mallory", security.password or "")
    with suppressed_client_logs():
        report = refused(client, _address(secured, listener), security.with_credentials(user, password))
    if client != "kafka_python":
        # Kafka's message, the same whether the user is unknown or the password wrong.
        assert f"due to invalid credentials with SASL mechanism {security.mechanism}" in report, report
    # Good credentials on the same listener are served on.
    roundtrip("confluent", _address(secured, listener), security, _new_topic(secured), count=1)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("case", ["no_certificate", "other_ca"])
def test_mutual_tls_refuses_foreign_clients(secured: Broker, certs: Path, other_ca: Path, client: str,
                                            case: str) -> None:
    ca = certs / "ca.pem"
    security = (ClientSecurity("SSL", ca=ca) if case == "no_certificate" else
                ClientSecurity("SSL", ca=ca, cert=other_ca / "client.pem", key=other_ca / "client-key.pem"))
    with suppressed_client_logs():
        refused(client, _address(secured, "MTLS"), security)
    # The same client certificate problem does not matter on the server-auth-only listener.
    roundtrip("confluent", _address(secured, "SSL"), ClientSecurity("SSL", ca=ca), _new_topic(secured), count=1)


def test_client_trusting_another_ca_refuses_the_broker(secured: Broker, other_ca: Path) -> None:
    with suppressed_client_logs():
        report = refused("confluent", _address(secured, "SSL"), ClientSecurity("SSL", ca=other_ca / "ca.pem"))
    assert "certificate verify failed" in report or "SSL" in report, report


def _new_topic(broker: Broker) -> str:
    topic = unique("sec")
    broker.create_topic(topic)
    return topic


# -- raw exchanges: nothing is served before authentication ------------------------------------

def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return bytes(out)


def _closed_without_answer(sock: socket.socket) -> bool:
    sock.settimeout(10)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _metadata_v1() -> bytes:
    body = struct.pack(">hhih", 3, 1, 7, -1) + struct.pack(">i", -1)  # all topics
    return struct.pack(">i", len(body)) + body


def test_metadata_before_authentication_closes_the_connection(secured: Broker) -> None:
    with socket.create_connection(("127.0.0.1", secured.listener_port("SASL_PLAINTEXT")), timeout=10) as sock:  # type: ignore[attr-defined]
        sock.sendall(_metadata_v1())
        assert _closed_without_answer(sock)
    # The same request is answered on the PLAINTEXT listener.
    with socket.create_connection(("127.0.0.1", secured.port or 0), timeout=10) as sock:
        sock.sendall(_metadata_v1())
        size = struct.unpack(">i", _recv_exactly(sock, 4))[0]
        assert struct.unpack(">i", _recv_exactly(sock, size)[:4])[0] == 7


def test_plaintext_request_on_tls_listener_is_closed(secured: Broker, certs: Path) -> None:
    with socket.create_connection(("127.0.0.1", secured.listener_port("SSL")), timeout=10) as sock:  # type: ignore[attr-defined]
        sock.sendall(_metadata_v1())
        assert _closed_without_answer(sock)
    assert "TLS handshake failed" in secured.log_tail()
    roundtrip("kcat", _address(secured, "SSL"), ClientSecurity("SSL", ca=certs / "ca.pem"), _new_topic(secured),
              count=1)


def test_tls_client_on_plaintext_listener_is_closed(secured: Broker) -> None:
    with suppressed_client_logs():
        refused("kcat", f"127.0.0.1:{secured.port}", ClientSecurity("SSL"))
    assert "TLS handshake on a plaintext listener" in secured.log_tail()


# -- KIP-368 re-authentication ---------------------------------------------------------------

REAUTH_MS = 2000


@pytest.fixture(scope="module")
def reauth_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    broker = make_broker(tmp_path_factory.mktemp("reauth"), {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "connections.max.reauth.ms": str(REAUTH_MS),
    })
    assert isinstance(broker, CormorantBroker)
    broker.serve_args = ("--add-scram", "SCRAM-SHA-256=[name=admin,password=admin-secret]")
    broker.start()
    try:
        yield broker
    finally:
        broker.close()


def _produce_over_time(client: str, bootstrap: str, security: ClientSecurity, topic: str) -> None:
    """One producer, records sent 0, 1.5 and 3 session lifetimes after it connected."""
    pauses = [0.0, REAUTH_MS / 1000 * 1.5, REAUTH_MS / 1000 * 1.5]
    if client == "confluent":
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": bootstrap, **security.librdkafka(), "acks": "all"})
        errors: list[str] = []
        for i, pause in enumerate(pauses):
            time.sleep(pause)
            producer.produce(topic, f"r{i}".encode(),
                             on_delivery=lambda err, _m: errors.append(str(err)) if err else None)
            assert producer.flush(20) == 0 and not errors, errors
    else:
        from kafka import KafkaProducer

        kp = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **security.kafka_python())
        try:
            for i, pause in enumerate(pauses):
                time.sleep(pause)
                kp.send(topic, f"r{i}".encode()).get(timeout=20)
        finally:
            kp.close()


@pytest.mark.parametrize("client", ["confluent", "kafka_python"])
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_clients_reauthenticate_and_keep_their_connection(reauth_broker: Broker, client: str,
                                                          mechanism: str) -> None:
    user, password = ("alice", "alice-secret") if mechanism == "PLAIN" else ("admin", "admin-secret")
    security = ClientSecurity("SASL_PLAINTEXT", mechanism=mechanism, user=user, password=password)
    before = reauth_broker.log_tail(200_000).count("sasl_reauthenticated")
    _produce_over_time(client, _address(reauth_broker, "SASL_PLAINTEXT"), security, _new_topic(reauth_broker))
    log = reauth_broker.log_tail(200_000)
    assert log.count("sasl_reauthenticated") > before


# -- cormorant's own tools with --command-config -------------------------------------------------

def _tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "broker", *args], capture_output=True, text=True, timeout=90,
                          cwd=settings.PROJECT_ROOT, check=False)


def _command_config(directory: Path, kind: str, certs: Path) -> Path:
    _, security = _security(kind, certs)
    lines = [f"{key}={value}" for key, value in security.java().items()]
    path = directory / f"{kind}.properties"
    path.write_text("\n".join(lines).replace("\\", "\\\\") + "\n")
    return path


@pytest.mark.parametrize("kind", ["mtls", "sasl_ssl_plain", "sasl_plaintext_scram256", "sasl_ssl_scram512"])
def test_tools_with_command_config(secured: Broker, certs: Path, tmp_path: Path, kind: str) -> None:
    listener, _ = _security(kind, certs)
    config = _command_config(tmp_path, kind, certs)
    address = _address(secured, listener)
    topic = unique(f"tool-{kind}")
    created = _tool("topics", "--bootstrap-server", address, "create", topic, "--partitions", "2",
                    "--command-config", str(config))
    assert created.returncode == 0, created.stderr
    listed = _tool("--command-config", str(config), "topics", "--bootstrap-server", address, "list")
    assert listed.returncode == 0 and topic in listed.stdout.split(), listed.stderr
    user = unique("tool-user")
    added = _tool("users", "--bootstrap-server", address, "add", user, "--password", "p-secret",
                  "--mechanism", "SCRAM-SHA-512", "--command-config", str(config))
    assert added.returncode == 0, added.stderr
    users = _tool("users", "--bootstrap-server", address, "list", user, "--command-config", str(config))
    assert users.returncode == 0 and f"{user}\tSCRAM-SHA-512 (iterations=4096)" in users.stdout, users.stderr
    # The new user authenticates right away, with a real client.
    roundtrip("confluent", _address(secured, "SASL_SSL"), ClientSecurity(
        "SASL_SSL", ca=certs / "ca.pem", mechanism="SCRAM-SHA-512", user=user, password="p-secret"),
        _new_topic(secured), count=1)
    deleted = _tool("users", "--bootstrap-server", address, "delete", user, "--mechanism", "SCRAM-SHA-512",
                    "--command-config", str(config))
    assert deleted.returncode == 0, deleted.stderr
    with suppressed_client_logs():
        refused("confluent", _address(secured, "SASL_SSL"), ClientSecurity(
            "SASL_SSL", ca=certs / "ca.pem", mechanism="SCRAM-SHA-512", user=user, password="p-secret"))


def test_tools_without_credentials_are_refused(secured: Broker, certs: Path, tmp_path: Path) -> None:
    config = tmp_path / "wrong.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config="
                      "org.apache.kafka.common.security.plain.PlainLoginModule required "
                      'username="alice" password="wrong";\n')
    result = _tool("topics", "--bootstrap-server", _address(secured, "SASL_PLAINTEXT"), "list",
                   "--command-config", str(config))
    assert result.returncode != 0
    assert "invalid credentials with SASL mechanism PLAIN" in result.stderr


# -- SASL/OAUTHBEARER ------------------------------------------------------------------------

OAUTH_AUDIENCE = "cormorant"
OAUTH_ISSUER = "https://issuer.example"


@pytest.fixture(scope="module")
def oauth_key() -> Any:
    from cryptography.hazmat.primitives.asymmetric import rsa

    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def oauth_broker(tmp_path_factory: pytest.TempPathFactory, oauth_key: Any, certs: Path) -> Iterator[Broker]:
    import json

    import jwt

    directory = tmp_path_factory.mktemp("oauth")
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(oauth_key.public_key()))
    jwks = directory / "jwks.json"
    jwks.write_text(json.dumps({"keys": [{**public, "kid": "key-1", "use": "sig", "alg": "RS256"}]}))
    broker = make_broker(directory, {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,JWKS://127.0.0.1:0,"
                     "SASL_SSL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,JWKS:SASL_PLAINTEXT,"
                                          "SASL_SSL:SASL_SSL",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
        "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs / "broker-bundle.pem"),
        "listener.name.jwks.sasl.oauthbearer.jwks.endpoint.url": jwks.as_uri(),
        "listener.name.jwks.sasl.oauthbearer.expected.audience": OAUTH_AUDIENCE,
        "listener.name.jwks.sasl.oauthbearer.expected.issuer": OAUTH_ISSUER,
    })
    broker.start()
    try:
        yield broker
    finally:
        broker.close()


def _signed_token(key: Any, *, expires_in_s: float = 600, audience: str = OAUTH_AUDIENCE) -> str:
    import jwt

    now = time.time()
    return jwt.encode({"sub": "alice", "iat": int(now), "exp": int(now + expires_in_s), "aud": audience,
                       "iss": OAUTH_ISSUER, "scope": "kafka"}, key, algorithm="RS256", headers={"kid": "key-1"})


def _unsigned_token(expires_in_s: float = 600) -> str:
    import jwt

    return jwt.encode({"sub": "alice", "exp": int(time.time() + expires_in_s)}, key="", algorithm="none")


def _oauth_roundtrip(client: str, bootstrap: str, token: str | None, topic: str) -> None:
    values = [f"{client}-oauth-{i}".encode() for i in range(3)]
    if client == "confluent":
        from confluent_kafka import Consumer, Producer

        common: dict[str, Any] = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                                  "sasl.mechanism": "OAUTHBEARER"}
        if token is None:
            common |= {"enable.sasl.oauthbearer.unsecure.jwt": True, "sasl.oauthbearer.config": "principal=alice"}
        else:
            common["oauth_cb"] = lambda _config: (token, time.time() + 600)
        producer = Producer({**common, "acks": "all"})
        for value in values:
            producer.produce(topic, value)
        assert producer.flush(20) == 0
        consumer = Consumer({**common, "group.id": unique("oauth"), "auto.offset.reset": "earliest"})
        got: list[bytes] = []
        try:
            consumer.subscribe([topic])
            deadline = time.monotonic() + 30
            while len(got) < len(values) and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    got.append(msg.value() or b"")
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()
        assert sorted(got) == sorted(values)
        return
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class FixedToken(AbstractTokenProvider):  # type: ignore[misc]
        def token(self) -> str:
            return token or _unsigned_token()

    options: dict[str, Any] = {"bootstrap_servers": bootstrap, "security_protocol": "SASL_PLAINTEXT",
                               "sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": FixedToken()}
    producer = KafkaProducer(acks="all", **options)
    try:
        for value in values:
            producer.send(topic, value).get(timeout=20)
    finally:
        producer.close()
    consumer = KafkaConsumer(topic, group_id=unique("oauth"), auto_offset_reset="earliest",
                             consumer_timeout_ms=20_000, enable_auto_commit=False, **options)
    try:
        got = [m.value for _, m in zip(range(len(values)), consumer, strict=False)]
        consumer.commit()
    finally:
        consumer.close()
    assert sorted(got) == sorted(values)


@pytest.mark.parametrize("client", ["confluent", "kafka_python"])
@pytest.mark.parametrize("validator", ["unsecured", "jwks"])
def test_oauthbearer_produce_consume_group(oauth_broker: Broker, oauth_key: Any, client: str,
                                           validator: str) -> None:
    listener = "SASL_PLAINTEXT" if validator == "unsecured" else "JWKS"
    token = None if validator == "unsecured" else _signed_token(oauth_key)
    _oauth_roundtrip(client, _address(oauth_broker, listener), token, _new_topic(oauth_broker))


class _TokenSecurity(ClientSecurity):
    """librdkafka settings presenting a fixed OAUTHBEARER token."""

    def __init__(self, token: str) -> None:
        super().__init__("SASL_PLAINTEXT", mechanism="OAUTHBEARER")
        object.__setattr__(self, "token", token)

    def librdkafka(self) -> dict[str, Any]:  # type: ignore[override]
        token: str = object.__getattribute__(self, "token")
        return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                "oauth_cb": lambda _config: (token, time.time() + 600)}


@pytest.mark.parametrize("case", ["expired", "wrong_audience", "unsigned", "other_key"])
def test_oauthbearer_bad_tokens_refused(oauth_broker: Broker, oauth_key: Any, case: str) -> None:
    from cryptography.hazmat.primitives.asymmetric import rsa

    token = {
        "expired": lambda: _signed_token(oauth_key, expires_in_s=-120),
        "wrong_audience": lambda: _signed_token(oauth_key, audience="someone-else"),
        "unsigned": lambda: _unsigned_token(),
        "other_key": lambda: _signed_token(rsa.generate_private_key(public_exponent=65537, key_size=2048)),
    }[case]()
    with suppressed_client_logs():
        report = refused("confluent", _address(oauth_broker, "JWKS"), _TokenSecurity(token))
    assert "due to invalid credentials with SASL mechanism OAUTHBEARER" in report, report
    assert "invalid token" in oauth_broker.log_tail()


OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required"


@pytest.mark.parametrize("variant", ["java", "java4"])
@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_oauthbearer_java_unsecured(oauth_broker: Broker, certs: Path, variant: str, listener: str) -> None:
    """Kafka's unsecured login and validator (an unsigned JWS built from the JAAS options)."""
    if not any((settings.JAVA_DIR / "lib").glob("jackson-databind-*.jar")):
        pytest.skip(f"kafka-clients' OAUTHBEARER login needs jackson-databind in compat_tests/java/lib "
                    f"({settings.INSTALL_HINT})")
    security = ClientSecurity(listener, ca=certs / "ca.pem" if listener == "SASL_SSL" else None)
    java_config = {**security.java(), "sasl.mechanism": "OAUTHBEARER",
                   "sasl.jaas.config": f'{OAUTH_MODULE} unsecuredLoginStringClaim_sub="alice";'}
    try:
        java_roundtrip(variant, _address(oauth_broker, listener), security, _new_topic(oauth_broker),
                       java_config=java_config)
    except DriverUnavailable as ex:
        pytest.skip(str(ex))


@pytest.mark.parametrize("variant", ["java", "java4"])
def test_oauthbearer_java_jwks(oauth_broker: Broker, oauth_key: Any, tmp_path: Path, variant: str,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A signed token from a ``file:`` token endpoint (Kafka's OAuthBearerLoginCallbackHandler),
    validated by the broker against the JWKS; a token signed by another key is refused."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    if not any((settings.JAVA_DIR / "lib").glob("jose4j-*.jar")):
        pytest.skip(f"kafka-clients' OAUTHBEARER token endpoint needs jose4j in compat_tests/java/lib "
                    f"({settings.INSTALL_HINT})")
    token_file = tmp_path / "token.jwt"
    # Kafka 3.9.1+/4.x clients only read token URLs and files a system property allows.
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={token_file.as_uri()} "
                                            f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.files={token_file}")
    java_config = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                   "sasl.oauthbearer.token.endpoint.url": token_file.as_uri(),
                   "sasl.login.callback.handler.class":
                       "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
                   "sasl.jaas.config": f"{OAUTH_MODULE} ;"}
    security = ClientSecurity("SASL_PLAINTEXT")
    try:
        token_file.write_text(_signed_token(oauth_key))
        java_roundtrip(variant, _address(oauth_broker, "JWKS"), security, _new_topic(oauth_broker),
                       java_config=java_config)
        token_file.write_text(_signed_token(rsa.generate_private_key(public_exponent=65537, key_size=2048)))
        report = java_roundtrip(variant, _address(oauth_broker, "JWKS"), security, _new_topic(oauth_broker),
                                refused=True, java_config=java_config)
    except DriverUnavailable as ex:
        pytest.skip(str(ex))
    assert "invalid credentials with SASL mechanism OAUTHBEARER" in report, report


def _oauth_command_config(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(["security.protocol=SASL_PLAINTEXT", "sasl.mechanism=OAUTHBEARER", *lines]) + "\n")
    return path


def test_tools_with_oauthbearer(oauth_broker: Broker, oauth_key: Any, tmp_path: Path) -> None:
    """``--command-config`` with OAUTHBEARER, as Kafka's tools: the unsecured login from the JAAS
    options, and a signed token from a ``file:`` token endpoint on the JWKS listener."""
    unsecured = _oauth_command_config(tmp_path / "unsecured.properties", [
        f'sasl.jaas.config={OAUTH_MODULE} unsecuredLoginStringClaim_sub="alice";'])
    token_file = tmp_path / "token.jwt"
    token_file.write_text(_signed_token(oauth_key))
    signed = _oauth_command_config(tmp_path / "signed.properties", [
        f"sasl.oauthbearer.token.endpoint.url={token_file.as_uri()}",
        "sasl.login.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
        f"sasl.jaas.config={OAUTH_MODULE} ;"])
    for listener, config in (("SASL_PLAINTEXT", unsecured), ("JWKS", signed)):
        topic = unique("tool-oauth")
        address = _address(oauth_broker, listener)
        created = _tool("topics", "--bootstrap-server", address, "create", topic, "--command-config", str(config))
        assert created.returncode == 0, created.stderr
        listed = _tool("topics", "--bootstrap-server", address, "list", "--command-config", str(config))
        assert listed.returncode == 0 and topic in listed.stdout.split(), listed.stderr
    # An unsigned token on the JWKS listener is refused with Kafka's message.
    refused_run = _tool("topics", "--bootstrap-server", _address(oauth_broker, "JWKS"), "list",
                        "--command-config", str(unsecured))
    assert refused_run.returncode != 0
    assert "invalid credentials with SASL mechanism OAUTHBEARER" in refused_run.stderr, refused_run.stderr


# -- transactions over secured listeners --------------------------------------------------------

@pytest.mark.parametrize("variant", ["java", "java4"])
def test_java_transactions_over_sasl_ssl(secured: Broker, certs: Path, variant: str) -> None:
    """Commit, abort, commit through SASL_SSL/SCRAM-SHA-512; read_committed sees the committed ones."""
    from compat_tests.harness.drivers.base import Record
    from compat_tests.harness.transactions import TxnSpec, consume_isolated, produce_transactions

    listener, security = _security("sasl_ssl_scram512", certs)
    try:
        driver = secured_java_driver(variant, _address(secured, listener), security.java())
    except DriverUnavailable as ex:
        pytest.skip(str(ex))
    topic = _new_topic(secured)
    specs = [TxnSpec([Record(key=None, value=f"t{n}-{i}".encode(), partition=0) for i in range(3)], commit)
             for n, commit in enumerate((True, False, True))]
    outcomes = produce_transactions(driver, topic, unique("txn"), specs)
    assert [o.committed for o in outcomes] == [True, False, True]
    committed = consume_isolated(driver, topic, [0], count=6, isolation="read_committed")
    assert [r.value for r in committed] == [f"t{n}-{i}".encode() for n in (0, 2) for i in range(3)]
