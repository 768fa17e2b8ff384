"""What every SASL mechanism's server side offers; PLAIN, the simplest of them."""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import Protocol


class AuthenticationFailed(Exception):
    """The client's credentials or messages are wrong; the reason is logged, never sent."""


class MechanismServer(Protocol):
    mechanism: str
    complete: bool
    #: The authenticated user name, once ``complete``.
    authorization_id: str

    def evaluate(self, token: bytes) -> bytes:
        """The answer to one client token; raises :class:`AuthenticationFailed`."""
        ...


class PlainServer:
    """RFC 4616 PLAIN against the users of Kafka's PlainLoginModule (``user_<name>="password"``)."""

    mechanism = "PLAIN"

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self.complete = False
        self.authorization_id = ""

    def evaluate(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("invalid PLAIN message: expected authzid NUL user NUL password")
        try:
            authzid, user, password = (part.decode("utf-8") for part in parts)
        except UnicodeDecodeError as ex:
            raise AuthenticationFailed("PLAIN message is not UTF-8") from ex
        if not user or not password:
            raise AuthenticationFailed("empty user name or password")
        if authzid and authzid != user:
            raise AuthenticationFailed("authorization id differs from the user name")
        expected = self._users.get(user)
        # Compared even for unknown users so both take the same time.
        ok = hmac.compare_digest((expected or "\0" + password).encode(), password.encode())
        if expected is None or not ok:
            raise AuthenticationFailed("invalid credentials")
        self.complete = True
        self.authorization_id = user
        return b""
