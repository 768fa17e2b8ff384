"""The console's own users: a file of ``name:scrypt$n$r$p$salt$hash`` lines (hashlib's scrypt).

A login is required whenever the console listens on anything but loopback;
``cormorant console --users FILE --add-user NAME`` adds or replaces a user,
reading the password from standard input.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import os
from pathlib import Path

SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
SALT_BYTES = 16
MIN_PASSWORD_CHARS = 8


class UsersError(Exception):
    pass


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def hash_password(password: str, salt: bytes | None = None) -> str:
    salt = salt if salt is not None else os.urandom(SALT_BYTES)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P)
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${_b64(salt)}${_b64(digest)}"


def verify_password(password: str, encoded: str) -> bool:
    try:
        scheme, n, r, p, salt, digest = encoded.split("$")
        if scheme != "scrypt":
            return False
        computed = hashlib.scrypt(password.encode(), salt=base64.b64decode(salt), n=int(n), r=int(r), p=int(p))
    except ValueError:
        return False
    return hmac.compare_digest(computed, base64.b64decode(digest))


def load_users(path: Path) -> dict[str, str]:
    users: dict[str, str] = {}
    if not path.exists():
        return users
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, encoded = line.partition(":")
        if not sep or not name or not encoded.startswith("scrypt$"):
            raise UsersError(f"{path}:{number}: expected name:scrypt$...")
        users[name] = encoded
    return users


def add_user(path: Path, name: str, password: str) -> None:
    if not name or ":" in name or name != name.strip():
        raise UsersError("a user name is non-empty, without ':' or surrounding spaces")
    if len(password) < MIN_PASSWORD_CHARS:
        raise UsersError(f"a password has at least {MIN_PASSWORD_CHARS} characters")
    users = load_users(path)
    users[name] = hash_password(password)
    path.write_text("".join(f"{n}:{h}\n" for n, h in sorted(users.items())))
    path.chmod(0o600)


class Authenticator:
    """Checks logins against the users file, read once at start."""

    def __init__(self, users: dict[str, str]) -> None:
        self._users = users
        # Unknown names cost one hash too, so timing does not tell which names exist.
        self._decoy = hash_password("decoy password", salt=b"\0" * SALT_BYTES)

    def check(self, name: str, password: str) -> bool:
        encoded = self._users.get(name)
        ok = verify_password(password, encoded or self._decoy)
        return ok and encoded is not None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
