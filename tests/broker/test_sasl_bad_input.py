"""A SASL listener fed bad input, over real sockets to a broker process.

As Kafka's SaslServerAuthenticator: frames before authentication are bounded by
sasl.server.max.receive.size (huge or negative sizes close the connection unread);
a request other than ApiVersions/SaslHandshake first closes the connection; after the
handshake, a request other than SaslAuthenticate is answered ILLEGAL_SASL_STATE, then the
connection closes; a failed login is answered SASL_AUTHENTICATION_FAILED after the
configured delay, then closed. The broker serves everyone else throughout.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker.broker_process import BrokerProcess
from tests.broker.raw_client import RawClient
from wire.errors import ErrorCode
from wire.generated.api_003_metadata import MetadataRequest, MetadataResponse
from wire.generated.api_017_sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from wire.generated.api_018_api_versions import ApiVersionsRequest, ApiVersionsResponse
from wire.generated.api_036_sasl_authenticate import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
)

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_alice="alice-secret" user_bob="bob-secret";')
REAUTH_MS = 1500
DELAY_MS = 200


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("sasl") / "data", {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "connection.failed.authentication.delay.ms": str(DELAY_MS),
        "listener.name.sasl_plaintext.connections.max.reauth.ms": str(REAUTH_MS),
        "metrics.listener": "127.0.0.1:0",
    }).start()
    try:
        yield process
    finally:
        process.stop()


def _client(broker: BrokerProcess) -> RawClient:
    return RawClient(f"127.0.0.1:{broker.listener_port('SASL_PLAINTEXT')}")


def _closed(client: RawClient) -> bool:
    client.sock.settimeout(10)
    try:
        return client.sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _login(client: RawClient, password: str, user: str = "alice") -> SaslAuthenticateResponse:
    handshake = client.call(SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse, 1)
    assert isinstance(handshake, SaslHandshakeResponse) and handshake.error_code == 0
    assert handshake.mechanisms == ["PLAIN"]
    reply = client.call(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{password}".encode()),
                        SaslAuthenticateResponse, 2)
    assert isinstance(reply, SaslAuthenticateResponse)
    return reply


def _served(broker: BrokerProcess) -> None:
    """A client that authenticates is served (and a PLAINTEXT one too)."""
    client = _client(broker)
    try:
        assert _login(client, "alice-secret").error_code == 0
        metadata = client.call(MetadataRequest(topics=[]), MetadataResponse, 9)
        assert isinstance(metadata, MetadataResponse) and metadata.brokers
    finally:
        client.close()
    plain = RawClient(broker.bootstrap)
    try:
        assert isinstance(plain.call(MetadataRequest(topics=[]), MetadataResponse, 9), MetadataResponse)
    finally:
        plain.close()


@pytest.mark.parametrize("size", [2**31 - 1, 512 * 1024 + 1, -1, -(2**31)])
def test_frame_sizes_out_of_bounds_close_before_authentication(broker: BrokerProcess, size: int) -> None:
    client = _client(broker)
    try:
        client.sock.sendall(struct.pack(">i", size) + b"\0" * 64)
        assert _closed(client)
    finally:
        client.close()
    _served(broker)


def test_request_before_handshake_closes_without_answer(broker: BrokerProcess) -> None:
    client = _client(broker)
    try:
        client.send(MetadataRequest(topics=[]), 9)
        assert _closed(client)
    finally:
        client.close()
    _served(broker)


def test_sasl_authenticate_before_handshake_closes(broker: BrokerProcess) -> None:
    client = _client(broker)
    try:
        client.send(SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-secret"), 2)
        assert _closed(client)
    finally:
        client.close()


def test_api_versions_once_then_handshake(broker: BrokerProcess) -> None:
    client = _client(broker)
    try:
        versions = client.call(ApiVersionsRequest(), ApiVersionsResponse, 0)
        assert isinstance(versions, ApiVersionsResponse)
        assert {17, 36} <= {k.api_key for k in versions.api_keys}
        client.send(ApiVersionsRequest(), 0)  # a second one is a protocol violation
        assert _closed(client)
    finally:
        client.close()


def test_second_handshake_gets_illegal_sasl_state_then_close(broker: BrokerProcess) -> None:
    client = _client(broker)
    try:
        assert client.call(SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse, 1).error_code == 0  # type: ignore[attr-defined]
        again = client.call(SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse, 1)
        assert isinstance(again, SaslHandshakeResponse)
        assert again.error_code == ErrorCode.ILLEGAL_SASL_STATE
        assert _closed(client)
    finally:
        client.close()


def test_unsupported_mechanism_is_answered_then_closed(broker: BrokerProcess) -> None:
    client = _client(broker)
    try:
        reply = client.call(SaslHandshakeRequest(mechanism="GSSAPI"), SaslHandshakeResponse, 1)
        assert isinstance(reply, SaslHandshakeResponse)
        assert reply.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM and reply.mechanisms == ["PLAIN"]
        assert _closed(client)
    finally:
        client.close()


def test_handshake_after_authentication_is_illegal_sasl_state(broker: BrokerProcess) -> None:
    client = _client(broker)
    try:
        assert _login(client, "alice-secret").error_code == 0
        # v1 handshakes start a re-authentication (KIP-368); a v0 one cannot, nor can a bare
        # SaslAuthenticate.
        again = client.call(SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse, 0)
        assert isinstance(again, SaslHandshakeResponse) and again.error_code == ErrorCode.ILLEGAL_SASL_STATE
        token = client.call(SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-secret"), SaslAuthenticateResponse, 2)
        assert isinstance(token, SaslAuthenticateResponse) and token.error_code == ErrorCode.ILLEGAL_SASL_STATE
        # The connection stays usable, as in Kafka (KafkaApis answers, nothing closes).
        assert isinstance(client.call(MetadataRequest(topics=[]), MetadataResponse, 9), MetadataResponse)
    finally:
        client.close()


def test_v0_handshake_then_raw_tokens(broker: BrokerProcess) -> None:
    """SaslHandshake v0: the tokens that follow are bare size-prefixed frames (pre-KIP-152)."""
    for password, served in (("alice-secret", True), ("wrong", False)):
        client = _client(broker)
        try:
            handshake = client.call(SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse, 0)
            assert isinstance(handshake, SaslHandshakeResponse) and handshake.error_code == 0
            token = f"\0alice\0{password}".encode()
            client.sock.sendall(struct.pack(">i", len(token)) + token)
            if served:
                assert client._exactly(4) == struct.pack(">i", 0)  # the empty PLAIN answer
                _metadata(client)
            else:
                assert _closed(client)  # as Kafka: no answer to a v0 client, just the close
        finally:
            client.close()


def test_failed_login_is_delayed_then_closed(broker: BrokerProcess) -> None:
    client = _client(broker)
    try:
        started = time.monotonic()
        reply = _login(client, "wrong")
        assert time.monotonic() - started >= DELAY_MS / 1000 * 0.9
        assert reply.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert reply.error_message == ("Authentication failed during authentication due to invalid credentials "
                                       "with SASL mechanism PLAIN")
        assert _closed(client)
    finally:
        client.close()


def _metadata(client: RawClient) -> MetadataResponse:
    reply = client.call(MetadataRequest(topics=[]), MetadataResponse, 9)
    assert isinstance(reply, MetadataResponse)
    return reply


def test_session_lifetime_and_expiry(broker: BrokerProcess) -> None:
    """KIP-368: the session lifetime is announced; past it the next request closes the connection."""
    client = _client(broker)
    try:
        reply = _login(client, "alice-secret")
        assert reply.error_code == 0 and reply.session_lifetime_ms == REAUTH_MS
        _metadata(client)
        time.sleep(REAUTH_MS / 1000 + 0.2)
        client.send(MetadataRequest(topics=[]), 9)
        assert _closed(client)
    finally:
        client.close()


def test_reauthentication_keeps_the_connection(broker: BrokerProcess) -> None:
    client = _client(broker)
    try:
        assert _login(client, "alice-secret").error_code == 0
        for _ in range(2):
            time.sleep(REAUTH_MS / 1000 * 0.6)
            assert _login(client, "alice-secret").error_code == 0  # re-authenticates before expiry
            _metadata(client)
        time.sleep(REAUTH_MS / 1000 * 0.6)
        _metadata(client)  # 1.8 lifetimes after the first login: alive thanks to re-authentication
    finally:
        client.close()
    assert "sasl_reauthenticated" in broker.logs()


def test_reauthentication_cannot_change_the_principal(broker: BrokerProcess) -> None:
    client = _client(broker)
    try:
        assert _login(client, "alice-secret").error_code == 0
        reply = _login(client, "bob-secret", user="bob")
        assert reply.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert _closed(client)
    finally:
        client.close()


def test_authentications_are_counted_per_listener_and_mechanism(broker: BrokerProcess) -> None:
    import re
    import urllib.request

    for password in ("alice-secret", "wrong"):
        client = _client(broker)
        try:
            _login(client, password)
        finally:
            client.close()
    match = re.search(r"metrics=(\S+)", broker.ready_line)
    assert match is not None, broker.ready_line
    with urllib.request.urlopen(match.group(1), timeout=10) as response:
        text = response.read().decode()
    counts = {m.group(1): float(m.group(2)) for m in re.finditer(
        r'cormorant_network_authentications_total\{[^}]*listener="SASL_PLAINTEXT",mechanism="PLAIN",'
        r'result="(\w+)"[^}]*\} (\S+)', text)}
    assert counts.get("success", 0) >= 1 and counts.get("failure", 0) >= 1, counts
    assert "alice" not in text  # no user names in metrics


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_many_failed_logins_in_a_row_keep_memory_bounded(broker: BrokerProcess) -> None:
    """1,000 failed logins, 50 connections at a time: every one answered, memory flat."""
    assert broker.proc is not None
    port = broker.listener_port("SASL_PLAINTEXT")

    def attempt_batch(count: int) -> int:
        socks = [socket.create_connection(("127.0.0.1", port), timeout=20) for _ in range(count)]
        failures = 0
        try:
            for sock in socks:
                client = RawClient.__new__(RawClient)
                client.sock, client.corr = sock, 0
                client.send(SaslHandshakeRequest(mechanism="PLAIN"), 1)
            for sock in socks:
                client = RawClient.__new__(RawClient)
                client.sock, client.corr = sock, 1
                client.receive(SaslHandshakeResponse, 1)
                client.send(SaslAuthenticateRequest(auth_bytes=b"\0alice\0" + os.urandom(8).hex().encode()), 2)
            for sock in socks:
                client = RawClient.__new__(RawClient)
                client.sock, client.corr = sock, 2
                reply = client.receive(SaslAuthenticateResponse, 2)
                failures += reply.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED  # type: ignore[attr-defined]
        finally:
            for sock in socks:
                sock.close()
        return failures

    assert attempt_batch(50) == 50  # warm up
    before = _rss_kib(broker.proc.pid)
    assert sum(attempt_batch(50) for _ in range(20)) == 1000
    grown = _rss_kib(broker.proc.pid) - before
    assert grown < 20 * 1024, f"RSS grew {grown} KiB over 1,000 failed logins"
    _served(broker)
