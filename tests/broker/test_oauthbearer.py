"""SASL/OAUTHBEARER's server side: Kafka's unsecured validator, JWKS validation, RFC 7628 messages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from broker.security.mechanism import AuthenticationFailed
from broker.security.oauthbearer import (
    InvalidToken,
    JwksValidator,
    OAuthBearerServer,
    UnsecuredValidator,
)

NOW = 1_800_000_000.0


def unsecured(claims: dict[str, Any]) -> str:
    return jwt.encode(claims, key="", algorithm="none")


def message(token: str, authzid: str = "") -> bytes:
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01\x01".encode()


def test_unsecured_validator() -> None:
    validator = UnsecuredValidator(required_scopes=["write"], clock=lambda: NOW)
    valid = validator.validate(unsecured({"sub": "alice", "exp": NOW + 60, "scope": "read write"}))
    assert valid.principal == "alice" and valid.expires_at_s == NOW + 60
    for claims in ({"sub": "alice", "exp": NOW - 1, "scope": "write"}, {"exp": NOW + 60, "scope": "write"},
                   {"sub": "alice", "scope": "write"}, {"sub": "alice", "exp": NOW + 60, "scope": "read"},
                   {"sub": "alice", "exp": NOW + 60, "iat": NOW + 100, "scope": "write"}):
        with pytest.raises(InvalidToken):
            validator.validate(unsecured(claims))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    signed = jwt.encode({"sub": "alice", "exp": NOW + 60, "scope": "write"}, key, algorithm="RS256")
    with pytest.raises(InvalidToken, match="unsigned"):
        validator.validate(signed)


@pytest.fixture(scope="module")
def signing_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _jwks(path: Path, key: rsa.RSAPrivateKey, kid: str) -> str:
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    path.write_text(json.dumps({"keys": [{**public, "kid": kid, "use": "sig", "alg": "RS256"}]}))
    return path.as_uri()


def test_jwks_validator(tmp_path: Path, signing_key: rsa.RSAPrivateKey) -> None:
    url = _jwks(tmp_path / "jwks.json", signing_key, "k1")
    validator = JwksValidator(url, audiences=["kafka"], issuer="https://issuer.example", skew_s=0,
                              clock=lambda: NOW)
    claims = {"sub": "alice", "exp": NOW + 60, "aud": "kafka", "iss": "https://issuer.example"}

    def sign(changes: dict[str, Any], kid: str = "k1", key: rsa.RSAPrivateKey = signing_key) -> str:
        return jwt.encode({**claims, **changes}, key, algorithm="RS256", headers={"kid": kid})

    assert validator.validate(sign({})).principal == "alice"
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    for token in (sign({"aud": "other"}), sign({"iss": "https://evil.example"}), sign({"exp": NOW - 5}),
                  sign({}, kid="k2"), sign({}, key=other), unsecured(claims), sign({"sub": None})):
        with pytest.raises(InvalidToken):
            validator.validate(token)
    # A rotated key is picked up when the JWKS file changes.
    _jwks(tmp_path / "jwks.json", other, "k2")
    assert validator.validate(sign({}, kid="k2", key=other)).principal == "alice"


def test_server_exchange_and_error_challenge() -> None:
    validator = UnsecuredValidator(clock=lambda: NOW)
    server = OAuthBearerServer(validator)
    assert server.evaluate(message(unsecured({"sub": "alice", "exp": NOW + 60}), authzid="alice")) == b""
    assert server.complete and server.authorization_id == "alice" and server.credential_expires_at_s == NOW + 60

    refused = OAuthBearerServer(validator)
    assert json.loads(refused.evaluate(message(unsecured({"sub": "alice", "exp": NOW - 60})))) == {
        "status": "invalid_token"}
    assert not refused.complete
    with pytest.raises(AuthenticationFailed, match="expired"):
        refused.evaluate(b"\x01")

    for bad in (b"garbage", b"n,,\x01auth=Bearer\x01\x01", b"n,,\x01auth=Basic abc\x01\x01",
                b"p=x,,\x01auth=Bearer t\x01\x01", message("t")[:-1],
                message(unsecured({"sub": "alice", "exp": NOW + 60}), authzid="bob")):
        with pytest.raises(AuthenticationFailed):
            OAuthBearerServer(validator).evaluate(bad)


# -- the client's side: Kafka's login handlers (tools' --command-config) -----------------------

def test_unsecured_login_token_is_accepted_by_the_unsecured_validator() -> None:
    from broker.security.oauthbearer_login import OAuthBearerClient, OAuthBearerLogin

    login = OAuthBearerLogin({"unsecuredLoginStringClaim_sub": "alice", "unsecuredLoginLifetimeSeconds": "120",
                              "unsecuredLoginListClaim_scope": ",read,write",
                              "unsecuredLoginNumberClaim_level": "3",
                              "unsecuredLoginExtension_traceId": "t-1"}, clock=lambda: NOW)
    token = login.token()
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims == {"sub": "alice", "scope": ["read", "write"], "level": 3, "iat": NOW, "exp": NOW + 120}
    assert jwt.get_unverified_header(token) == {"alg": "none"} and token.endswith(".")
    first = OAuthBearerClient(login).first()
    assert first == f"n,,\x01auth=Bearer {token}\x01traceId=t-1\x01\x01".encode()
    server = OAuthBearerServer(UnsecuredValidator(required_scopes=["write"], clock=lambda: NOW + 60))
    assert server.evaluate(first) == b"" and server.authorization_id == "alice"
    # Past its lifetime, the same token is refused; the client answers the error challenge with \x01.
    late = OAuthBearerServer(UnsecuredValidator(clock=lambda: NOW + 121))
    client = OAuthBearerClient(login)
    challenge = late.evaluate(client.first())
    assert client.next(challenge) == b"\x01"
    with pytest.raises(AuthenticationFailed, match="expired"):
        late.evaluate(b"\x01")


def test_client_security_takes_oauthbearer_from_command_config(tmp_path: Path) -> None:
    from broker.security.client_config import client_security
    from config import ConfigError

    module = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required"
    security = client_security({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                                "sasl.jaas.config": f'{module} unsecuredLoginStringClaim_sub="bob";'})
    assert security.mechanism == "OAUTHBEARER" and security.oauthbearer is not None
    assert jwt.decode(security.oauthbearer.token(), options={"verify_signature": False})["sub"] == "bob"
    with pytest.raises(ConfigError, match="unsecuredLoginStringClaim_sub"):
        client_security({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                         "sasl.jaas.config": f"{module};"})
    # A file: token endpoint names a file holding the token, read when connecting.
    token_file = tmp_path / "token.jwt"
    token_file.write_text(unsecured({"sub": "carol", "exp": NOW + 600}) + "\n")
    from_file = client_security({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                                 "sasl.oauthbearer.token.endpoint.url": token_file.as_uri(),
                                 "sasl.jaas.config": f"{module};"})
    assert from_file.oauthbearer is not None
    assert from_file.oauthbearer.token() == token_file.read_text().strip()


def test_token_endpoint_client_credentials_grant(signing_key: rsa.RSAPrivateKey) -> None:
    """A real HTTP token endpoint on 127.0.0.1: Basic credentials, the grant, the scope; the
    token is kept until shortly before its exp."""
    import base64
    import threading
    import urllib.parse
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from broker.security.oauthbearer_login import OAuthBearerLogin

    requests: list[tuple[str, dict[str, list[str]]]] = []

    class TokenEndpoint(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            form = urllib.parse.parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
            requests.append((self.headers["Authorization"], form))
            ok = self.headers["Authorization"] == "Basic " + base64.b64encode(b"tool:tool-secret").decode()
            body = json.dumps({"access_token": jwt.encode({"sub": "tool", "exp": NOW + 600}, signing_key,
                                                          algorithm="RS256"), "token_type": "Bearer"}
                              if ok else {"error": "invalid_client"}).encode()
            self.send_response(200 if ok else 401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), TokenEndpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/token"
        now = [NOW]
        login = OAuthBearerLogin({"clientId": "tool", "clientSecret": "tool-secret", "scope": "kafka"}, url,
                                 clock=lambda: now[0])
        token = login.token()
        assert jwt.decode(token, signing_key.public_key(), algorithms=["RS256"],
                          options={"verify_exp": False})["sub"] == "tool"
        assert requests[0][1] == {"grant_type": ["client_credentials"], "scope": ["kafka"]}
        assert login.token() == token and len(requests) == 1  # cached
        now[0] = NOW + 590  # within a minute of exp: fetched again
        login.token()
        assert len(requests) == 2
        from config import ConfigError

        with pytest.raises(ConfigError, match="HTTP 401"):
            OAuthBearerLogin({"clientId": "tool", "clientSecret": "wrong"}, url).token()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


PEER_SETTINGS = {
    "node.id": "1", "process.roles": "broker,controller",
    "controller.quorum.voters": "1@127.0.0.1:9095", "controller.listener.names": "CONTROLLER",
    "listeners": "INTERNAL://127.0.0.1:9094,CONTROLLER://127.0.0.1:9095",
    "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL", "controller.quorum.secret": "s",
    "sasl.enabled.mechanisms": "OAUTHBEARER",
    "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER", "sasl.mechanism.controller.protocol": "OAUTHBEARER",
}
LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required"


def test_broker_logs_in_to_peers_with_the_listeners_oauthbearer_jaas(tmp_path: Path) -> None:
    from broker.security.peer import controller_security, inter_broker_security
    from config import ConfigError, build_config

    token_file = tmp_path / "token"
    config, _ = build_config({
        **PEER_SETTINGS,
        "listener.name.internal.oauthbearer.sasl.jaas.config": f'{LOGIN_MODULE} unsecuredLoginStringClaim_sub="broker";',
        "listener.name.controller.oauthbearer.sasl.jaas.config": f"{LOGIN_MODULE};",
        "listener.name.controller.sasl.oauthbearer.token.endpoint.url": token_file.as_uri()})
    internal = inter_broker_security(config)
    assert internal is not None and internal.mechanism == "OAUTHBEARER" and internal.oauthbearer is not None
    assert internal.oauthbearer.token_endpoint_url is None
    assert jwt.decode(internal.oauthbearer.token(), options={"verify_signature": False})["sub"] == "broker"
    controller = controller_security(config)
    assert controller is not None and controller.oauthbearer is not None
    assert controller.oauthbearer.token_endpoint_url == token_file.as_uri()

    # An unsecured login without its principal claim is a startup error, not a failed fetch later.
    bad, _ = build_config({**PEER_SETTINGS, "listener.name.internal.oauthbearer.sasl.jaas.config": f"{LOGIN_MODULE};"})
    with pytest.raises(ConfigError, match="unsecuredLoginStringClaim_sub"):
        inter_broker_security(bad)


def test_peer_token_that_cannot_be_had_fails_the_authentication(tmp_path: Path) -> None:
    """A token endpoint that cannot be read is an AuthenticationFailed for the connection
    (retried by its caller), not an error that ends the broker's task."""
    import trio

    from broker.security.peer import authenticate, controller_security
    from config import build_config
    from wire.generated.api_017_sasl_handshake import SaslHandshakeResponse

    config, _ = build_config({
        **PEER_SETTINGS,
        "listener.name.internal.oauthbearer.sasl.jaas.config": f'{LOGIN_MODULE} unsecuredLoginStringClaim_sub="b";',
        "listener.name.controller.oauthbearer.sasl.jaas.config": f"{LOGIN_MODULE};",
        "listener.name.controller.sasl.oauthbearer.token.endpoint.url": (tmp_path / "missing").as_uri()})
    security = controller_security(config)
    assert security is not None
    sent: list[Any] = []

    async def exchange(message: Any, version: int, response_type: Any) -> Any:
        sent.append(message)
        return SaslHandshakeResponse(error_code=0, mechanisms=["OAUTHBEARER"])

    with pytest.raises(AuthenticationFailed, match="cannot read"):
        trio.run(authenticate, security, exchange)
    assert [type(m).__name__ for m in sent] == ["SaslHandshakeRequest"]
