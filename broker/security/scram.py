"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), server side, as Kafka's ScramSaslServer.

Credentials are what Kafka keeps in its metadata log (UserScramCredentialRecord): salt,
StoredKey, ServerKey and the iteration count, never the password. A user without a
credential gets a challenge made up from a per-broker secret, so the exchange fails at the
same step, with the same message, as a wrong password does.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from broker.security.mechanism import AuthenticationFailed

#: Kafka's ScramMechanism: name -> (hash, type id in the metadata records and APIs).
MECHANISMS: Final = {"SCRAM-SHA-256": ("sha256", 1), "SCRAM-SHA-512": ("sha512", 2)}
MECHANISM_NAMES: Final = {type_id: name for name, (_, type_id) in MECHANISMS.items()}
MIN_ITERATIONS: Final = 4096
MAX_ITERATIONS: Final = 16384


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


CredentialLookup = Callable[[str, int], "ScramCredential | None"]


def _hmac(hash_name: str, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hash_name).digest()


def credential_from_salted_password(mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    hash_name = MECHANISMS[mechanism][0]
    client_key = _hmac(hash_name, salted, b"Client Key")
    return ScramCredential(salt, hashlib.new(hash_name, client_key).digest(),
                           _hmac(hash_name, salted, b"Server Key"), iterations)


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(MECHANISMS[mechanism][0], password.encode(), salt, iterations)


def new_credential(mechanism: str, password: str, iterations: int = MIN_ITERATIONS,
                   random_bytes: Callable[[int], bytes] = os.urandom) -> ScramCredential:
    salt = random_bytes(32)
    return credential_from_salted_password(mechanism, salted_password(mechanism, password, salt, iterations),
                                           salt, iterations)


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise AuthenticationFailed(f"invalid SCRAM attribute {part[:20]!r}")
        out.setdefault(part[0], part[2:])
    return out


def _sasl_name(name: str) -> str:
    # RFC 5802: ',' and '=' travel as =2C and =3D; any other '=' is invalid.
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise AuthenticationFailed("invalid SCRAM user name")
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """One SCRAM exchange: client-first -> server-first, client-final -> server-final."""

    def __init__(self, mechanism: str, lookup: CredentialLookup, unknown_user_key: bytes,
                 random_bytes: Callable[[int], bytes] = os.urandom) -> None:
        self.mechanism = mechanism
        self._hash, self._type = MECHANISMS[mechanism]
        self._lookup = lookup
        self._unknown_user_key = unknown_user_key
        self._random = random_bytes
        self._step = 0
        self._credential: ScramCredential | None = None
        self._known = False
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self.complete = False
        self.authorization_id = ""

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError as ex:
            raise AuthenticationFailed("SCRAM message is not UTF-8") from ex
        if self._step == 0:
            self._step = 1
            return self._client_first(text).encode()
        if self._step == 1:
            self._step = 2
            return self._client_final(text).encode()
        raise AuthenticationFailed("unexpected SCRAM message after the exchange")

    def _client_first(self, text: str) -> str:
        # gs2-header "n,," or "y,," (no channel binding), optionally "n,a=authzid,".
        parts = text.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y"):
            raise AuthenticationFailed("invalid SCRAM client-first message (channel binding is not supported)")
        self._gs2_header = f"{parts[0]},{parts[1]},"
        self._client_first_bare = parts[2]
        attributes = _attributes(parts[2])
        if "m" in attributes or "n" not in attributes or "r" not in attributes or not attributes["r"]:
            raise AuthenticationFailed("invalid SCRAM client-first message")
        user = _sasl_name(attributes["n"])
        authzid = parts[1][2:] if parts[1].startswith("a=") else ""
        if parts[1] and not parts[1].startswith("a="):
            raise AuthenticationFailed("invalid SCRAM authorization id")
        if authzid and _sasl_name(authzid) != user:
            raise AuthenticationFailed("authorization id differs from the user name")
        # Extensions (Kafka's tokenauth for delegation tokens) are not supported.
        if set(attributes) - {"n", "r"}:
            raise AuthenticationFailed("SCRAM extensions are not supported")
        credential = self._lookup(user, self._type) if user else None
        self._known = credential is not None
        self._credential = credential or self._made_up_credential(user)
        self.authorization_id = user
        # Alphanumeric, as Kafka's: some clients mishandle '+' and '/' in nonces.
        self._nonce = attributes["r"] + self._random(24).hex()
        self._server_first = (f"r={self._nonce},s={base64.b64encode(self._credential.salt).decode()},"
                              f"i={self._credential.iterations}")
        return self._server_first

    def _made_up_credential(self, user: str) -> ScramCredential:
        digest = _hmac(self._hash, self._unknown_user_key, user.encode())
        return ScramCredential(digest[:32], digest, digest, MIN_ITERATIONS)

    def _client_final(self, text: str) -> str:
        without_proof, separator, proof_text = text.rpartition(",p=")
        if not separator:
            raise AuthenticationFailed("invalid SCRAM client-final message")
        attributes = _attributes(without_proof)
        # As Kafka's ScramSaslServer: the nonce must end with ours (librdkafka before 2.1
        # sends the client nonce twice, and Kafka accepts it).
        if not attributes.get("r", "").endswith(self._nonce):
            raise AuthenticationFailed("SCRAM nonce mismatch")
        if attributes.get("c") != base64.b64encode(self._gs2_header.encode()).decode():
            raise AuthenticationFailed("SCRAM channel binding mismatch")
        try:
            proof = base64.b64decode(proof_text, validate=True)
        except ValueError as ex:
            raise AuthenticationFailed("invalid SCRAM proof") from ex
        credential = self._credential
        assert credential is not None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        client_signature = _hmac(self._hash, credential.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise AuthenticationFailed("invalid SCRAM proof")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        matches = hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), credential.stored_key)
        if not (matches and self._known):
            raise AuthenticationFailed("invalid credentials")
        self.complete = True
        server_signature = _hmac(self._hash, credential.server_key, auth_message)
        return f"v={base64.b64encode(server_signature).decode()}"


class ScramClient:
    """The client side of one SCRAM exchange (the tools' ``--command-config``)."""

    def __init__(self, mechanism: str, user: str, password: str,
                 random_bytes: Callable[[int], bytes] = os.urandom) -> None:
        self.mechanism = mechanism
        self._hash = MECHANISMS[mechanism][0]
        self._password = password
        name = user.replace("=", "=3D").replace(",", "=2C")
        self._first_bare = f"n={name},r={random_bytes(24).hex()}"
        self._expected_server_signature = b""

    def first_message(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def final_message(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        fields = _attributes(text)
        nonce, salt, iterations = fields.get("r", ""), fields.get("s", ""), int(fields.get("i", "0"))
        if not nonce.startswith(self._first_bare.split("r=", 1)[1]) or iterations < MIN_ITERATIONS:
            raise AuthenticationFailed("invalid SCRAM server-first message")
        salted = salted_password(self.mechanism, self._password, base64.b64decode(salt), iterations)
        credential = credential_from_salted_password(self.mechanism, salted, b"", iterations)
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        client_key = _hmac(self._hash, salted, b"Client Key")
        signature = _hmac(self._hash, credential.stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._expected_server_signature = _hmac(self._hash, credential.server_key, auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def check_final(self, server_final: bytes) -> None:
        expected = b"v=" + base64.b64encode(self._expected_server_signature)
        if not hmac.compare_digest(server_final, expected):
            raise AuthenticationFailed("the broker's SCRAM signature is wrong")


class SaslClient:
    """The client's tokens of a PLAIN or SCRAM exchange, one server answer at a time."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self.mechanism = mechanism
        self._plain = f"\0{username}\0{password}".encode() if mechanism == "PLAIN" else None
        self._scram = None if mechanism == "PLAIN" else ScramClient(mechanism, username, password)
        self._step = 0

    def first(self) -> bytes:
        return self._plain if self._plain is not None else self._require_scram().first_message()

    def next(self, server_token: bytes) -> bytes | None:
        """The next token, or None when the exchange is done; raises AuthenticationFailed."""
        self._step += 1
        if self._plain is not None:
            return None
        scram = self._require_scram()
        if self._step == 1:
            return scram.final_message(server_token)
        scram.check_final(server_token)
        return None

    def _require_scram(self) -> ScramClient:
        assert self._scram is not None
        return self._scram
