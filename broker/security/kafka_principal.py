"""KafkaPrincipal: who sent a request, as Kafka's ``org.apache.kafka.common.security.auth.KafkaPrincipal``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

USER_TYPE: Final = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``Type:name`` (Kafka's SecurityUtils.parseKafkaPrincipal)."""
        principal_type, colon, name = text.partition(":")
        if not colon or not principal_type or not name:
            raise ValueError(f"expected a string in format principalType:principalName but got {text}")
        return cls(principal_type, name)


#: What Kafka gives every client of a PLAINTEXT listener (and of SSL without a client certificate).
ANONYMOUS: Final = KafkaPrincipal(USER_TYPE, "ANONYMOUS")
