"""SASL/OAUTHBEARER, client side, as Kafka's OAuthBearerLoginModule gets its token.

Two ways, chosen as Kafka's clients choose them:

- a token endpoint (``sasl.oauthbearer.token.endpoint.url``, Kafka's
  OAuthBearerLoginCallbackHandler): an OAuth ``client_credentials`` grant with the JAAS
  options ``clientId``, ``clientSecret`` and optional ``scope``; a ``file:`` URL names a file
  holding the token itself. The token is kept until shortly before its ``exp``.
- otherwise Kafka's unsecured login (OAuthBearerUnsecuredLoginCallbackHandler, for
  development): an unsigned JWS (``alg: none``) built from the JAAS options
  ``unsecuredLoginStringClaim_<name>``, ``unsecuredLoginNumberClaim_<name>``,
  ``unsecuredLoginListClaim_<name>`` (the first character separates the values),
  ``unsecuredLoginPrincipalClaimName`` (``sub``), ``unsecuredLoginLifetimeSeconds`` (3600).

SASL extensions come from ``unsecuredLoginExtension_<name>`` (unsecured) or
``extension_<name>`` (token endpoint) options. The exchange is RFC 7628's: the client's first
message carries the token; an error challenge from the broker is answered with ``\\x01`` and
the broker then fails the authentication.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from config import ConfigError

UNSECURED_PREFIX: Final = "unsecuredLogin"
TOKEN_ENDPOINT_TIMEOUT_S: Final = 30.0
#: A cached token is fetched again this long before it expires.
REFRESH_MARGIN_S: Final = 60.0
#: A token endpoint's answer larger than this is refused.
MAX_TOKEN_RESPONSE_BYTES: Final = 1024 * 1024
_SEPARATOR: Final = "\x01"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unverified_claims(token: str) -> dict[str, Any]:
    parts = token.split(".")
    if len(parts) != 3:
        raise ConfigError("sasl.oauthbearer.token.endpoint.url", "the token is not a JWS (header.claims.signature)")
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, UnicodeDecodeError) as ex:
        raise ConfigError("sasl.oauthbearer.token.endpoint.url", f"the token's claims are not JSON: {ex}") from ex
    if not isinstance(claims, dict):
        raise ConfigError("sasl.oauthbearer.token.endpoint.url", "the token's claims are not a JSON object")
    return claims


def unsecured_token(options: Mapping[str, str], now_s: float) -> str:
    """Kafka's OAuthBearerUnsecuredLoginCallbackHandler token: an unsigned JWS of the JAAS claims."""
    principal_claim = options.get(f"{UNSECURED_PREFIX}PrincipalClaimName", "sub")
    try:
        lifetime_s = float(options.get(f"{UNSECURED_PREFIX}LifetimeSeconds", "3600"))
    except ValueError:
        raise ConfigError("sasl.jaas.config", "unsecuredLoginLifetimeSeconds must be a number") from None
    claims: dict[str, Any] = {}
    for name, value in options.items():
        if name.startswith(f"{UNSECURED_PREFIX}StringClaim_"):
            claims[name.removeprefix(f"{UNSECURED_PREFIX}StringClaim_")] = value
        elif name.startswith(f"{UNSECURED_PREFIX}NumberClaim_"):
            try:
                number = float(value)
            except ValueError:
                raise ConfigError("sasl.jaas.config", f"{name} must be a number") from None
            claims[name.removeprefix(f"{UNSECURED_PREFIX}NumberClaim_")] = int(number) if number.is_integer() else number
        elif name.startswith(f"{UNSECURED_PREFIX}ListClaim_") and value:
            claims[name.removeprefix(f"{UNSECURED_PREFIX}ListClaim_")] = [v for v in value[1:].split(value[0]) if v]
    for reserved in ("iat", "exp"):
        if reserved in claims:
            raise ConfigError("sasl.jaas.config", f"the {reserved} claim is set by the login, not by an option")
    principal = claims.get(principal_claim)
    if not isinstance(principal, str) or not principal.strip():
        raise ConfigError("sasl.jaas.config",
                          f"the unsecured login needs unsecuredLoginStringClaim_{principal_claim}=\"<principal>\"")
    claims["iat"] = now_s
    claims["exp"] = now_s + lifetime_s
    header = _b64url(json.dumps({"alg": "none"}, separators=(",", ":")).encode())
    body = _b64url(json.dumps(claims, separators=(",", ":")).encode())
    return f"{header}.{body}."


def fetch_endpoint_token(url: str, options: Mapping[str, str], timeout_s: float = TOKEN_ENDPOINT_TIMEOUT_S) -> str:
    """A token from ``url``: a ``file:`` URL's contents, else a client_credentials grant."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        try:
            with open(urllib.request.url2pathname(parsed.path), encoding="utf-8") as source:
                return source.read().strip()
        except OSError as ex:
            raise ConfigError("sasl.oauthbearer.token.endpoint.url", f"cannot read {url}: {ex.strerror}") from ex
    if parsed.scheme not in ("http", "https"):
        raise ConfigError("sasl.oauthbearer.token.endpoint.url", f"must be file:, http: or https:, not {url}")
    client_id, secret = options.get("clientId"), options.get("clientSecret")
    if not client_id or not secret:
        raise ConfigError("sasl.jaas.config", "a token endpoint needs the JAAS options clientId and clientSecret")
    form = {"grant_type": "client_credentials"}
    if options.get("scope"):
        form["scope"] = options["scope"]
    basic = base64.b64encode(
        f"{urllib.parse.quote(client_id)}:{urllib.parse.quote(secret)}".encode()).decode()
    request = urllib.request.Request(url, data=urllib.parse.urlencode(form).encode(), method="POST", headers={
        "Authorization": f"Basic {basic}", "Content-Type": "application/x-www-form-urlencoded",
        "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            raw = response.read(MAX_TOKEN_RESPONSE_BYTES + 1)
    except urllib.error.HTTPError as ex:
        raise ConfigError("sasl.oauthbearer.token.endpoint.url", f"the token endpoint answered HTTP {ex.code}") from ex
    except OSError as ex:
        raise ConfigError("sasl.oauthbearer.token.endpoint.url", f"cannot reach {url}: {ex}") from ex
    if len(raw) > MAX_TOKEN_RESPONSE_BYTES:
        raise ConfigError("sasl.oauthbearer.token.endpoint.url", "the token endpoint's answer is too large")
    try:
        document = json.loads(raw)
    except ValueError as ex:
        raise ConfigError("sasl.oauthbearer.token.endpoint.url", "the token endpoint's answer is not JSON") from ex
    token = document.get("access_token") if isinstance(document, dict) else None
    if not isinstance(token, str) or not token:
        raise ConfigError("sasl.oauthbearer.token.endpoint.url", "the token endpoint's answer has no access_token")
    return token


@dataclass(slots=True)
class OAuthBearerLogin:
    """Where a client's OAUTHBEARER token comes from (see the module docstring)."""

    options: dict[str, str]
    token_endpoint_url: str | None = None
    clock: Callable[[], float] = time.time
    _cached: tuple[str, float] | None = field(default=None, repr=False)

    @classmethod
    def from_properties(cls, properties: Mapping[str, str], options: Mapping[str, str]) -> OAuthBearerLogin:
        url = properties.get("sasl.oauthbearer.token.endpoint.url", "").strip() or None
        login = cls(dict(options), url)
        if url is None:
            unsecured_token(login.options, 0.0)  # a configuration error shows before connecting
        return login

    def extensions(self) -> dict[str, str]:
        prefix = f"{UNSECURED_PREFIX}Extension_" if self.token_endpoint_url is None else "extension_"
        return {k.removeprefix(prefix): v for k, v in self.options.items() if k.startswith(prefix)}

    def token(self) -> str:
        now = self.clock()
        if self.token_endpoint_url is None:
            return unsecured_token(self.options, now)
        if self._cached is not None and self._cached[1] - REFRESH_MARGIN_S > now:
            return self._cached[0]
        token = fetch_endpoint_token(self.token_endpoint_url, self.options)
        exp = _unverified_claims(token).get("exp")
        expires = float(exp) if isinstance(exp, (int, float)) and not isinstance(exp, bool) else now
        self._cached = (token, expires)
        return token

    def initial_response(self) -> bytes:
        """RFC 7628's client-first message: ``n,,\\x01auth=Bearer <token>\\x01[k=v\\x01...]\\x01``."""
        parts = [f"auth=Bearer {self.token()}", *(f"{k}={v}" for k, v in sorted(self.extensions().items()))]
        return ("n,," + _SEPARATOR + _SEPARATOR.join(parts) + _SEPARATOR + _SEPARATOR).encode()


class OAuthBearerClient:
    """The client's side of one OAUTHBEARER exchange (the same shape as SaslClient)."""

    mechanism = "OAUTHBEARER"

    def __init__(self, login: OAuthBearerLogin) -> None:
        self._login = login
        self._answered_error = False

    def first(self) -> bytes:
        return self._login.initial_response()

    def next(self, server_token: bytes) -> bytes | None:
        """None when the broker accepted the token; ``\\x01`` answering its error challenge."""
        if not server_token or self._answered_error:
            return None
        self._answered_error = True
        return _SEPARATOR.encode()
