"""Java properties files (``server.properties``) and ``--override key=value`` items.

Parsed as ``java.util.Properties.load`` parses them: comments, continuations,
separators and escapes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Final

from config.types import ConfigError

_PROPERTIES_WHITESPACE: Final = " \t\f"
_SIMPLE_ESCAPES: Final = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> Iterator[str]:
    # As java.util.Properties: leading blanks go, '#'/'!' lines are comments, and a
    # line ending in an odd number of backslashes continues on the next line (whose
    # leading blanks go too). A continued line is never a comment.
    natural = re.split(r"\r\n|\r|\n", text)
    index = 0
    while index < len(natural):
        line = natural[index].lstrip(_PROPERTIES_WHITESPACE)
        index += 1
        if not line or line[0] in "#!":
            continue
        pieces: list[str] = []
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1:
            pieces.append(line[:-1])
            if index >= len(natural):
                line = ""
                break
            line = natural[index].lstrip(_PROPERTIES_WHITESPACE)
            index += 1
        pieces.append(line)
        yield "".join(pieces)


def _unescape(text: str, line: str) -> str:
    out: list[str] = []
    position = 0
    while position < len(text):
        char = text[position]
        position += 1
        if char != "\\":
            out.append(char)
            continue
        if position >= len(text):
            break
        escaped = text[position]
        position += 1
        if escaped == "u":
            digits = text[position : position + 4]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise ConfigError(line, f"Malformed \\uxxxx encoding in properties line: {line!r}")
            out.append(chr(int(digits, 16)))
            position += 4
        else:
            out.append(_SIMPLE_ESCAPES.get(escaped, escaped))
    return "".join(out)


def _split_key_value(line: str) -> tuple[str, str]:
    # The key ends at the first unescaped '=', ':' or blank; then blanks and at most
    # one '=' or ':' separate it from the value, whose trailing blanks are kept.
    key_end = len(line)
    value_start = len(line)
    has_separator = False
    preceding_backslash = False
    for position, char in enumerate(line):
        if char in "=:" and not preceding_backslash:
            key_end, value_start, has_separator = position, position + 1, True
            break
        if char in _PROPERTIES_WHITESPACE and not preceding_backslash:
            key_end, value_start = position, position + 1
            break
        preceding_backslash = (not preceding_backslash) if char == "\\" else False
    while value_start < len(line):
        char = line[value_start]
        if char not in _PROPERTIES_WHITESPACE:
            if not has_separator and char in "=:":
                has_separator = True
            else:
                break
        value_start += 1
    return _unescape(line[:key_end], line), _unescape(line[value_start:], line)


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java properties-file text; a key given twice keeps its last value."""
    result: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split_key_value(line)
        result[key] = value
    return result


def read_properties_file(path: Path) -> dict[str, str]:
    """Read and parse a properties file.

    Java reads these files as ISO-8859-1; Cormorant reads UTF-8 so non-ASCII
    values mean what they say, and falls back to ISO-8859-1 for files that are not
    UTF-8 (which then read exactly as Java reads them).
    """
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("iso-8859-1")
    return parse_properties(text.removeprefix("\ufeff"))


def parse_overrides(overrides: Iterable[str]) -> dict[str, str]:
    """Parse ``--override`` items: ``key=value`` (split at the first '='); ``key`` alone is empty."""
    result: dict[str, str] = {}
    for item in overrides:
        key, _, value = item.partition("=")
        if not key:
            raise ConfigError(item, f"Invalid --override {item!r}: expected key=value")
        result[key] = value
    return result
