"""The console against a SASL_SSL listener, with the client properties every Kafka tool takes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from broker.tools.tls_init import init_tls
from tests.broker.broker_process import BrokerProcess
from tests.console.harness import running_console, wait_until

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402
from confluent_kafka.cimpl import NewTopic  # noqa: E402

pytestmark = pytest.mark.timeout(180)
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" user_admin="admin-secret";')


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, Path]]:
    certs = tmp_path_factory.mktemp("tls")
    init_tls(certs, ["127.0.0.1"])
    base = tmp_path_factory.mktemp("secured-broker")
    proc = BrokerProcess(base / "data", {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs / "broker-bundle.pem"),
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "connection.failed.authentication.delay.ms": "50",
    }).start()
    try:
        yield proc, certs
    finally:
        proc.kill9()


def _client_properties(path: Path, certs: Path, password: str) -> Path:
    path.write_text("security.protocol=SASL_SSL\n"
                    "ssl.truststore.type=PEM\n"
                    f"ssl.truststore.location={certs / 'ca.pem'}\n"
                    "sasl.mechanism=PLAIN\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                    f'username="admin" password="{password}";\n'
                    "client.id=console-over-tls\n")
    return path


def _containing(http: httpx.Client, path: str, text: str) -> str | None:
    page = http.get(path).text
    return page if text in page else None


def test_the_console_shows_a_sasl_ssl_cluster(secured: tuple[BrokerProcess, Path], tmp_path: Path) -> None:
    proc, certs = secured
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    admin.create_topics([NewTopic("behind-tls", 3, 1)], operation_timeout=30)["behind-tls"].result(30)
    sasl_ssl = f"127.0.0.1:{proc.listener_port('SASL_SSL')}"
    config = _client_properties(tmp_path / "client.properties", certs, "admin-secret")
    with running_console(tmp_path, sasl_ssl, "--command-config", str(config)) as console:
        http = httpx.Client(base_url=console.url, timeout=10)
        page = wait_until(lambda: _containing(http, "/topics", "behind-tls"), 30, "the topic on the topics page")
        assert "cluster unreachable" not in page
        assert "behind-tls" in http.get("/topics/behind-tls").text
        assert "console_poll_failed" not in console.logs()


def test_a_wrong_password_is_a_banner_not_a_traceback(secured: tuple[BrokerProcess, Path], tmp_path: Path) -> None:
    proc, certs = secured
    sasl_ssl = f"127.0.0.1:{proc.listener_port('SASL_SSL')}"
    config = _client_properties(tmp_path / "client.properties", certs, "wrong")
    with running_console(tmp_path, sasl_ssl, "--command-config", str(config)) as console:
        http = httpx.Client(base_url=console.url, timeout=10)
        banner = wait_until(lambda: _containing(http, "/part/cluster", "invalid credentials"), 30,
                            "the authentication banner")
        assert "cluster unreachable" in banner and "Traceback" not in banner
        page = http.get("/topics")
        assert page.status_code == 200 and "invalid credentials" in page.text
        assert "Traceback" not in console.logs()
