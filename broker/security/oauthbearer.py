"""SASL/OAUTHBEARER (RFC 7628), server side, with Kafka's two validators.

The client's message is ``n,[a=authzid],\\x01auth=Bearer <JWT>\\x01...\\x01\\x01``. A valid token
names the principal (its ``sub`` claim, or the configured one) and bounds the session by its
``exp``. An invalid one gets RFC 7628's error challenge ``{"status":"invalid_token"}``; the
client's ``\\x01`` answer then fails the exchange, as Kafka's OAuthBearerSaslServer does.

Validators:

- unsecured (Kafka's OAuthBearerUnsecuredValidatorCallbackHandler, the default): unsigned
  tokens (``alg: none``) with ``exp`` and a principal claim; JAAS options
  ``unsecuredValidatorPrincipalClaimName``, ``unsecuredValidatorScopeClaimName``,
  ``unsecuredValidatorRequiredScope``, ``unsecuredValidatorAllowableClockSkewMs``.
  Anyone can write such a token: for development only.
- JWKS (Kafka's OAuthBearerValidatorCallbackHandler, when
  ``sasl.oauthbearer.jwks.endpoint.url`` is set): the signature against the key the header's
  ``kid`` names, ``exp``, ``iss`` and ``aud`` when configured, and the subject claim. A
  ``file:`` JWKS is read again when the file changes; an ``https:`` one once per
  ``sasl.oauthbearer.jwks.endpoint.refresh.ms`` (one hour) at most, when a ``kid`` is unknown.
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import jwt

from broker.security.mechanism import AuthenticationFailed

_ERROR_CHALLENGE = json.dumps({"status": "invalid_token"}).encode()
JWKS_REFRESH_S = 3600.0
SIGNING_ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512")


class InvalidToken(Exception):
    """Why a token is refused (logged, never sent)."""


@dataclass(frozen=True, slots=True)
class ValidToken:
    principal: str
    expires_at_s: float


class TokenValidator(Protocol):
    def validate(self, token: str) -> ValidToken: ...


def _claims_check(claims: dict[str, Any], principal_claim: str, now_s: float, skew_s: float) -> ValidToken:
    exp = claims.get("exp")
    if not isinstance(exp, (int, float)) or isinstance(exp, bool):
        raise InvalidToken("no numeric exp claim")
    if exp <= now_s - skew_s:
        raise InvalidToken("token expired")
    iat = claims.get("iat")
    if isinstance(iat, (int, float)) and iat > now_s + skew_s:
        raise InvalidToken("token issued in the future")
    principal = claims.get(principal_claim)
    if not isinstance(principal, str) or not principal.strip():
        raise InvalidToken(f"no {principal_claim} claim")
    return ValidToken(principal, float(exp))


def _scopes(claims: dict[str, Any], claim: str) -> set[str]:
    value = claims.get(claim)
    if isinstance(value, str):
        return set(value.split())
    if isinstance(value, list):
        return {str(v) for v in value}
    return set()


class UnsecuredValidator:
    def __init__(self, principal_claim: str = "sub", scope_claim: str = "scope",
                 required_scopes: Sequence[str] = (), skew_s: float = 0.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.principal_claim = principal_claim
        self.scope_claim = scope_claim
        self.required_scopes = set(required_scopes)
        self.skew_s = skew_s
        self.clock = clock

    def validate(self, token: str) -> ValidToken:
        try:
            header = jwt.get_unverified_header(token)
            claims = jwt.decode(token, options={"verify_signature": False, "verify_exp": False,
                                                "verify_aud": False, "verify_iat": False, "verify_nbf": False})
        except jwt.PyJWTError as ex:
            raise InvalidToken(f"not a JWT: {ex}") from ex
        if header.get("alg") != "none" or not token.endswith("."):
            raise InvalidToken("the unsecured validator takes unsigned tokens (alg none) only")
        valid = _claims_check(claims, self.principal_claim, self.clock(), self.skew_s)
        missing = self.required_scopes - _scopes(claims, self.scope_claim)
        if missing:
            raise InvalidToken(f"missing scope(s) {sorted(missing)}")
        return valid


class JwksValidator:
    def __init__(self, url: str, audiences: Sequence[str] = (), issuer: str | None = None,
                 principal_claim: str = "sub", skew_s: float = 30.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.url = url
        self.audiences = list(audiences)
        self.issuer = issuer
        self.principal_claim = principal_claim
        self.skew_s = skew_s
        self.clock = clock
        self._keys: dict[str, jwt.PyJWK] = {}
        self._loaded_at = float("-inf")
        self._file_stamp: float | None = None
        self._load()

    def _load(self) -> None:
        parsed = urllib.parse.urlparse(self.url)
        if parsed.scheme == "file":
            path = urllib.request.url2pathname(parsed.path)
            stamp = os.stat(path).st_mtime
            if stamp == self._file_stamp:
                return
            with open(path, "rb") as source:
                document = json.load(source)
            self._file_stamp = stamp
        elif parsed.scheme == "https":
            with urllib.request.urlopen(self.url, timeout=10) as response:
                document = json.load(response)
        else:
            raise ValueError(f"sasl.oauthbearer.jwks.endpoint.url must be file: or https:, not {self.url}")
        keys = jwt.PyJWKSet.from_dict(document).keys
        self._keys = {key.key_id: key for key in keys if key.key_id}
        self._loaded_at = time.monotonic()

    def _key(self, kid: str | None) -> jwt.PyJWK:
        if kid not in self._keys:
            stale = self._file_stamp is not None or time.monotonic() - self._loaded_at > JWKS_REFRESH_S
            if stale:
                try:
                    self._load()
                except (OSError, ValueError, jwt.PyJWTError) as ex:
                    raise InvalidToken(f"cannot read the JWKS: {ex}") from ex
        key = self._keys.get(kid or "")
        if key is None:
            raise InvalidToken(f"no key {kid!r} in the JWKS")
        return key

    def validate(self, token: str) -> ValidToken:
        try:
            header = jwt.get_unverified_header(token)
            key = self._key(header.get("kid"))
            claims = jwt.decode(
                token, key, algorithms=list(SIGNING_ALGORITHMS), audience=self.audiences or None,
                issuer=self.issuer, leeway=self.skew_s,
                options={"verify_exp": False, "verify_iat": False, "verify_nbf": False,
                         "verify_aud": bool(self.audiences), "verify_iss": self.issuer is not None})
        except jwt.PyJWTError as ex:
            raise InvalidToken(str(ex)) from ex
        return _claims_check(claims, self.principal_claim, self.clock(), self.skew_s)


def _client_message(token: bytes) -> tuple[str, str]:
    """(authorization id, bearer token) of RFC 7628's client-first message."""
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError as ex:
        raise AuthenticationFailed("OAUTHBEARER message is not UTF-8") from ex
    header, separator, rest = text.partition("\x01")
    parts = header.split(",")
    if not separator or len(parts) != 3 or parts[0] not in ("n", "y") or parts[2] != "":
        raise AuthenticationFailed("invalid OAUTHBEARER GS2 header")
    authzid = parts[1][2:] if parts[1].startswith("a=") else ""
    if parts[1] and not parts[1].startswith("a="):
        raise AuthenticationFailed("invalid OAUTHBEARER authorization id")
    if not rest.endswith("\x01\x01"):
        raise AuthenticationFailed("OAUTHBEARER message must end with two \\x01")
    pairs = {}
    for item in rest[:-2].split("\x01"):
        key, equals, value = item.partition("=")
        if not equals:
            raise AuthenticationFailed("invalid OAUTHBEARER key/value pair")
        pairs[key] = value
    auth = pairs.get("auth", "")
    scheme, _, bearer = auth.partition(" ")
    if scheme.lower() != "bearer" or not bearer.strip():
        raise AuthenticationFailed("no Bearer token")
    return authzid, bearer.strip()


class OAuthBearerServer:
    mechanism = "OAUTHBEARER"

    def __init__(self, validator: TokenValidator) -> None:
        self._validator = validator
        self._error: str | None = None
        self.complete = False
        self.authorization_id = ""
        self.credential_expires_at_s: float | None = None

    def evaluate(self, token: bytes) -> bytes:
        if self._error is not None:
            # The client's answer (\x01) to our error challenge: the exchange fails.
            raise AuthenticationFailed(self._error)
        if self.complete:
            raise AuthenticationFailed("unexpected OAUTHBEARER message after the exchange")
        authzid, bearer = _client_message(token)
        try:
            valid = self._validator.validate(bearer)
        except InvalidToken as ex:
            self._error = f"invalid token: {ex}"
            return _ERROR_CHALLENGE
        if authzid and authzid != valid.principal:
            raise AuthenticationFailed("authorization id differs from the token's principal")
        self.complete = True
        self.authorization_id = valid.principal
        self.credential_expires_at_s = valid.expires_at_s
        return b""
