"""Kafka's JAAS configuration strings, as given in ``sasl.jaas.config`` settings.

``org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="secret";``:
a login module class, a control flag, options ``name=value`` (a value quoted with ``"`` may
hold anything, with backslash escapes; an unquoted one is a single token), then ``;``.
As Kafka's JaasConfig, a setting holds exactly one module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

_FLAGS: Final = ("required", "requisite", "sufficient", "optional")
_TOKEN: Final = re.compile(r'\s*(?:(?P<quoted>"(?:[^"\\]|\\.)*")|(?P<word>[^\s=;"]+)|(?P<punct>[=;]))', re.S)


class JaasError(ValueError):
    """A JAAS string that is not ``Module flag name="value" ...;``."""


@dataclass(frozen=True, slots=True)
class LoginModule:
    class_name: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    position = 0
    while position < len(text):
        if not text[position:].strip():
            break
        match = _TOKEN.match(text, position)
        if match is None:
            raise JaasError(f"unexpected text at {text[position:position + 20]!r}")
        position = match.end()
        if match.group("quoted") is not None:
            out.append(("value", re.sub(r"\\(.)", r"\1", match.group("quoted")[1:-1], flags=re.S)))
        elif match.group("word") is not None:
            out.append(("word", match.group("word")))
        else:
            out.append(("punct", match.group("punct")))
    return out


def parse_jaas_config(text: str) -> LoginModule:
    tokens = _tokens(text)
    if len(tokens) < 3 or tokens[0][0] != "word" or tokens[1][0] != "word":
        raise JaasError("expected: LoginModuleClass flag option=\"value\" ... ;")
    class_name, flag = tokens[0][1], tokens[1][1].lower()
    if flag not in _FLAGS:
        raise JaasError(f"invalid control flag {tokens[1][1]!r}: one of {', '.join(_FLAGS)}")
    options: dict[str, str] = {}
    index = 2
    while index < len(tokens) and tokens[index] != ("punct", ";"):
        name = tokens[index]
        if (name[0] != "word" or index + 2 >= len(tokens) or tokens[index + 1] != ("punct", "=")
                or tokens[index + 2][0] == "punct"):
            raise JaasError("options must be name=value or name=\"value\"")
        options[name[1]] = tokens[index + 2][1]
        index += 3
    if index >= len(tokens):
        raise JaasError("the login module must end with ';'")
    if index + 1 != len(tokens):
        raise JaasError("a sasl.jaas.config setting holds one login module")
    return LoginModule(class_name, flag, options)
