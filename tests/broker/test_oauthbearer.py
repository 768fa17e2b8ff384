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
