"""A TLS listener in-process, with the stdlib as the client: who the principal is, which
clients get in, and what a stalled or plaintext client gets."""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import pytest
import trio

from broker.security.setup import ListenerSecurity, listener_security
from broker.server.listener import Listener
from broker.server.network import ConnectionInfo, NetworkLimits
from broker.tools.tls_init import init_tls
from config import build_config
from wire.frame import EncodedFrame, encode_response
from wire.generated.api_018_api_versions import ApiVersionsResponse


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tls")
    init_tls(directory, ["127.0.0.1"], client_name="alice")
    init_tls(directory / "other", ["127.0.0.1"], client_name="mallory")
    return directory


class _Recorder:
    """Answers every frame with an empty ApiVersions response and remembers who sent it."""

    def __init__(self) -> None:
        self.principals: list[str] = []

    async def handle(self, conn: ConnectionInfo, frame: bytearray | memoryview) -> EncodedFrame | None:
        self.principals.append(str(conn.principal))
        return encode_response(ApiVersionsResponse(), 0, 1)


def _security(certs: Path, **settings: str) -> ListenerSecurity:
    config, _ = build_config({
        "listeners": "SSL://127.0.0.1:0", "listener.security.protocol.map": "SSL:SSL",
        "inter.broker.listener.name": "SSL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs / "broker-bundle.pem"),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs / "ca.pem"),
        "ssl.handshake.timeout.ms": "300", **settings,
    })
    security = listener_security(config, config.listeners[0], lambda user, mechanism: None, lambda *a: None)
    assert security is not None
    return security


def _client_context(certs: Path, cert_dir: Path | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    if cert_dir is not None:
        context.load_cert_chain(str(cert_dir / "client.pem"), str(cert_dir / "client-key.pem"))
    return context


def _run(security: ListenerSecurity, client: Callable[[int], Awaitable[object]]) -> tuple[_Recorder, object]:
    recorder = _Recorder()
    outcome: list[object] = []

    async def main() -> None:
        listener = Listener("SSL", "SSL", "127.0.0.1", 0, recorder, NetworkLimits(), setup=security)
        port = await listener.bind()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(listener.serve)
            with trio.fail_after(20):
                outcome.append(await client(port))
            listener.stop_accepting()
            listener.close_connections()

    trio.run(main)
    return recorder, outcome[0]


async def _request(context: ssl.SSLContext, port: int) -> bytes:
    stream = await trio.open_ssl_over_tcp_stream("127.0.0.1", port, ssl_context=context)
    try:
        await stream.send_all(b"\0\0\0\x0a\0\x12\0\0\0\0\0\x01\xff\xff")
        data = b""
        while len(data) < 4:
            chunk = await stream.receive_some()
            if not chunk:
                break
            data += chunk
        return data
    finally:
        await stream.aclose()


async def _refused(context: ssl.SSLContext, port: int) -> str:
    try:
        data = await _request(context, port)
    except (trio.BrokenResourceError, ssl.SSLError, OSError) as ex:
        return type(ex).__name__
    return "refused" if not data else "served"


def test_mutual_tls_principal_is_the_certificate_dn(certs: Path) -> None:
    recorder, data = _run(_security(certs, **{"ssl.client.auth": "required"}),
                          partial(_request, _client_context(certs, certs)))
    assert data and recorder.principals == ["User:CN=alice"]


def test_principal_mapping_rules(certs: Path) -> None:
    security = _security(certs, **{"ssl.client.auth": "required",
                                   "ssl.principal.mapping.rules": "RULE:^CN=(.*)$/$1-user/U,DEFAULT"})
    recorder, _ = _run(security, partial(_request, _client_context(certs, certs)))
    assert recorder.principals == ["User:ALICE-USER"]


def test_required_refuses_no_certificate_and_another_ca(certs: Path) -> None:
    security = _security(certs, **{"ssl.client.auth": "required"})
    for cert_dir in (None, certs / "other"):
        recorder, outcome = _run(security, partial(_refused, _client_context(certs, cert_dir)))
        assert outcome != "served" and recorder.principals == []


def test_requested_serves_anonymous_without_a_certificate(certs: Path) -> None:
    security = _security(certs, **{"ssl.client.auth": "requested"})
    recorder, data = _run(security, partial(_request, _client_context(certs, None)))
    assert data and recorder.principals == ["User:ANONYMOUS"]
    recorder, _ = _run(security, partial(_request, _client_context(certs, certs)))
    assert recorder.principals == ["User:CN=alice"]


def test_server_auth_only_ignores_client_certificates(certs: Path) -> None:
    recorder, _ = _run(_security(certs), partial(_request, _client_context(certs, certs)))
    assert recorder.principals == ["User:ANONYMOUS"]


def test_tls12_only_refuses_tls13_clients(certs: Path) -> None:
    security = _security(certs, **{"ssl.enabled.protocols": "TLSv1.2"})
    context = _client_context(certs, None)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    recorder, outcome = _run(security, partial(_refused, context))
    assert outcome != "served" and recorder.principals == []
    _, data = _run(security, partial(_request, _client_context(certs, None)))
    assert data


def test_stalled_handshake_is_closed_after_the_deadline(certs: Path) -> None:
    async def stall(port: int) -> float:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        started = trio.current_time()
        with trio.fail_after(10):
            while await stream.receive_some():
                pass
        return trio.current_time() - started

    _, waited = _run(_security(certs), stall)
    assert isinstance(waited, float) and 0.25 <= waited < 5


def test_pkcs12_keystore_and_truststore(certs: Path, tmp_path: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    key = serialization.load_pem_private_key((certs / "broker-key.pem").read_bytes(), None)
    chain = x509.load_pem_x509_certificates((certs / "broker.pem").read_bytes())
    encryption = serialization.BestAvailableEncryption(b"secret")
    (tmp_path / "ks.p12").write_bytes(pkcs12.serialize_key_and_certificates(
        b"broker", key, chain[0], chain[1:], encryption))  # type: ignore[arg-type]
    (tmp_path / "ts.p12").write_bytes(pkcs12.serialize_key_and_certificates(
        None, None, None, [chain[-1]], encryption))
    security = _security(certs, **{
        "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(tmp_path / "ks.p12"),
        "ssl.keystore.password": "secret", "ssl.truststore.type": "PKCS12",
        "ssl.truststore.location": str(tmp_path / "ts.p12"), "ssl.truststore.password": "secret",
        "ssl.client.auth": "required"})
    recorder, _ = _run(security, partial(_request, _client_context(certs, certs)))
    assert recorder.principals == ["User:CN=alice"]


def test_inline_pem_keystore(certs: Path) -> None:
    security = _security(certs, **{
        "ssl.keystore.location": "", "ssl.keystore.certificate.chain": (certs / "broker.pem").read_text(),
        "ssl.keystore.key": (certs / "broker-key.pem").read_text(),
        "ssl.truststore.location": "", "ssl.truststore.certificates": (certs / "ca.pem").read_text()})
    _, data = _run(security, partial(_request, _client_context(certs, None)))
    assert data


@pytest.mark.parametrize(("settings", "names"), [
    ({"ssl.keystore.password": "wrong", "ssl.keystore.type": "PKCS12"}, "ssl.keystore"),
    ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type"),
    ({"ssl.client.auth": "required", "ssl.truststore.location": "", "ssl.truststore.type": "JKS"},
     "ssl.client.auth"),
])
def test_misconfiguration_names_the_setting(certs: Path, settings: dict[str, str], names: str) -> None:
    from config import ConfigError

    with pytest.raises(ConfigError) as caught:
        _security(certs, **settings)
    assert caught.value.key.startswith(names)
