"""Principals of client certificates: Kafka's ``ssl.principal.mapping.rules``.

As Kafka's DefaultKafkaPrincipalBuilder with SslPrincipalMapper: the subject's distinguished
name in RFC 2253 form (``CN=alice,OU=eng,O=Example``) goes through the rules in order; the
first whose pattern matches the whole name gives the user name (``DEFAULT`` keeps the name
as it is). A name no rule matches fails the connection, as in Kafka.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

_RULE: Final = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:[^/\\]|\\.)*)/((?:[^/\\]|\\.)*)/([LU])?)\s*(?:,|$)")
_JAVA_GROUP: Final = re.compile(r"\$(\d)")


class PrincipalMappingError(ValueError):
    """``ssl.principal.mapping.rules`` cannot be parsed, or no rule matches a name."""


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str | None = None

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        result = self.pattern.sub(self.replacement, name)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result


class PrincipalMapper:
    def __init__(self, rules_text: str) -> None:
        self.rules = _parse(rules_text)

    def user_name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            mapped = rule.apply(distinguished_name)
            if mapped is not None:
                return mapped
        raise PrincipalMappingError(f"no rule of ssl.principal.mapping.rules applies to {distinguished_name}")


def _parse(text: str) -> tuple[_Rule, ...]:
    text = text.strip()
    if not text:
        return (_Rule(None),)
    rules: list[_Rule] = []
    position = 0
    while position < len(text):
        match = _RULE.match(text, position)
        if match is None or match.end() == position:
            raise PrincipalMappingError(f"Invalid rule: {text[position:]}")
        position = match.end()
        if match.group(1):
            rules.append(_Rule(None))
            continue
        try:
            pattern = re.compile(match.group(2))
        except re.error as ex:
            raise PrincipalMappingError(f"Invalid rule pattern {match.group(2)!r}: {ex}") from ex
        # Java writes group references as $1; Python as \g<1>.
        replacement = _JAVA_GROUP.sub(lambda m: f"\\g<{m.group(1)}>", match.group(3))
        rules.append(_Rule(pattern, replacement, match.group(4)))
    return tuple(rules)
