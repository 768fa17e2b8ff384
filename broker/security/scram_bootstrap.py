"""The first SCRAM credentials, written before the broker serves (``serve --add-scram``).

Kafka creates them when formatting storage (``kafka-storage format --add-scram
'SCRAM-SHA-256=[name=admin,password=admin-secret]'``); Cormorant formats storage on first
start, so ``cormorant serve --add-scram`` takes the same argument. A user that already has a
credential for the mechanism keeps it: the option only ever creates the first one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from broker.security.scram import MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS, salted_password
from wire.generated.api_051_alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsRequestScramCredentialUpsertion,
)

_ARGUMENT: Final = re.compile(r"^\s*(SCRAM-SHA-256|SCRAM-SHA-512)\s*=\s*\[(.*)\]\s*$", re.S)


class ScramArgumentError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class InitialCredential:
    mechanism: str
    name: str
    password: str
    iterations: int


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def parse_add_scram(text: str) -> InitialCredential:
    """``SCRAM-SHA-256=[name=alice,password=alice-secret,iterations=8192]``, as kafka-storage reads it."""
    match = _ARGUMENT.match(text)
    if match is None:
        raise ScramArgumentError(f"expected SCRAM-SHA-256=[name=...,password=...] or SCRAM-SHA-512=[...], got {text!r}")
    fields: dict[str, str] = {}
    for part in match.group(2).split(","):
        key, separator, value = part.partition("=")
        if not separator:
            raise ScramArgumentError(f"expected key=value, got {part!r}")
        fields[key.strip()] = _unquote(value)
    unknown = set(fields) - {"name", "password", "iterations"}
    if unknown:
        raise ScramArgumentError(f"unsupported field(s) {', '.join(sorted(unknown))}: use name, password, iterations")
    if not fields.get("name") or not fields.get("password"):
        raise ScramArgumentError("name and password are required")
    try:
        iterations = int(fields.get("iterations", str(MIN_ITERATIONS)))
    except ValueError as ex:
        raise ScramArgumentError("iterations must be a number") from ex
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ScramArgumentError(f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}")
    return InitialCredential(match.group(1), fields["name"], fields["password"], iterations)


def upsertion_request(
    credentials: Sequence[InitialCredential], existing: Callable[[str, int], bool],
    random_bytes: Callable[[int], bytes] = os.urandom,
) -> AlterUserScramCredentialsRequest | None:
    """The AlterUserScramCredentials request creating the credentials not there yet; None if none is missing."""
    upsertions = []
    for credential in credentials:
        type_id = MECHANISMS[credential.mechanism][1]
        if existing(credential.name, type_id):
            continue
        salt = random_bytes(32)
        upsertions.append(AlterUserScramCredentialsRequestScramCredentialUpsertion(
            name=credential.name, mechanism=type_id, iterations=credential.iterations, salt=salt,
            salted_password=salted_password(credential.mechanism, credential.password, salt, credential.iterations)))
    return AlterUserScramCredentialsRequest(upsertions=upsertions) if upsertions else None
