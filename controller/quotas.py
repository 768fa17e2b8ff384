"""Client quotas: Kafka's quota entities and keys, their validation and the describe filters.

Pure. A quota entity is a set of (entity type, name) pairs: ``user``, ``client-id``,
``user`` + ``client-id``, or ``ip``; a None name is the type's default entity. Values are
kept as ClientQuotaRecords in the metadata log (the image's ``client_quotas``). The checks
and messages are those of Kafka's ClientQuotaControlManager and ClientQuotaImage.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

USER, CLIENT_ID, IP = "user", "client-id", "ip"
#: An entity as sorted (type, name) pairs; name None is the default entity of the type.
QuotaEntity = tuple[tuple[str, str | None], ...]

#: Quota keys per entity kind and whether their values must be whole numbers (Kafka's QuotaConfig).
CLIENT_KEYS: Final[Mapping[str, bool]] = {
    "producer_byte_rate": True,
    "consumer_byte_rate": True,
    "request_percentage": False,
    "controller_mutation_rate": False,
}
IP_KEYS: Final[Mapping[str, bool]] = {"connection_creation_rate": True}

#: DescribeClientQuotas match types.
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


class QuotaError(ValueError):
    """Refused with INVALID_REQUEST and Kafka's message."""


def entity_of(pairs: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    """Validates an entity (ClientQuotaControlManager.validateEntity) and returns it sorted."""
    seen: dict[str, str | None] = {}
    for entity_type, name in pairs:
        if entity_type in seen:
            raise QuotaError(f"Duplicate entity type {entity_type}")
        if entity_type not in (USER, CLIENT_ID, IP):
            raise QuotaError(f"Unhandled client quota entity type: {entity_type}")
        if name is not None and not name:
            raise QuotaError(f"Empty {entity_type} not supported")
        seen[entity_type] = name
    if not seen:
        raise QuotaError("Invalid empty client quota entity")
    if IP in seen:
        if len(seen) > 1:
            raise QuotaError("Invalid quota entity combination, IP entity should not be combined with "
                             "User or ClientId entities.")
        name = seen[IP]
        if name is not None:
            try:
                ipaddress.ip_address(name)
            except ValueError:
                raise QuotaError(f"{name} is not a valid IP or resolvable host.") from None
    return tuple(sorted(seen.items()))


def check_value(entity: QuotaEntity, key: str, value: float) -> None:
    """ClientQuotaControlManager.validateQuotaKeyValue."""
    keys = IP_KEYS if entity[0][0] == IP else CLIENT_KEYS
    whole = keys.get(key)
    if whole is None:
        raise QuotaError(f"Invalid configuration key {key}")
    if math.isnan(value) or math.isinf(value) or value <= 0:
        raise QuotaError(f"Illegal value {value} for quota {key}: it must be positive")
    if whole and value != math.floor(value):
        raise QuotaError(f"Configuration {key} must be a Long value")


@dataclass(frozen=True, slots=True)
class QuotaFilter:
    """One DescribeClientQuotas component."""

    entity_type: str
    match_type: int
    match: str | None


def check_filters(components: Sequence[QuotaFilter]) -> None:
    types = [c.entity_type for c in components]
    if len(set(types)) != len(types):
        raise QuotaError("Duplicate entity type in filter")
    for c in components:
        if c.entity_type not in (USER, CLIENT_ID, IP):
            raise QuotaError(f"Custom entity type '{c.entity_type}' not supported")
        if c.match_type == MATCH_EXACT and c.match is None:
            raise QuotaError("Exact match requires a name")
        if c.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            raise QuotaError(f"Unknown match type {c.match_type}")
    if IP in types and len(types) > 1:
        raise QuotaError("Invalid entity filter component combination, IP filter component should not be "
                         "used with user or clientId filter component.")


def matches(entity: QuotaEntity, components: Sequence[QuotaFilter], strict: bool) -> bool:
    """ClientQuotaImage.describe's matching: every component matches; strict forbids other types."""
    names = dict(entity)
    for c in components:
        if c.entity_type not in names:
            return False
        name = names[c.entity_type]
        if c.match_type == MATCH_EXACT and name != c.match:
            return False
        if c.match_type == MATCH_DEFAULT and name is not None:
            return False
        if c.match_type == MATCH_SPECIFIED and name is None:
            return False
    return not strict or len(names) == len(components)
