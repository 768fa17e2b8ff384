"""What every ``cormorant`` tool's command line shares: the parser class (help shows each
option's default), ``--bootstrap-server`` accepted before or after a subcommand (as
kafka-topics.sh accepts it anywhere), and the one-line error prefix."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import TextIO, TypeVar

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
#: The parser class of a tool's subcommands.
P = TypeVar("P", bound=argparse.ArgumentParser)


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Appends ``(default: X)`` to an option's help when X says something (not None, False,
    an empty list, or a default the help text already states)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or default is None
            or default is False
            or default == []
            or default is argparse.SUPPRESS
            or not action.option_strings
        ):
            return action.help
        return f"{text} (default: %(default)s)"


class ToolParser(argparse.ArgumentParser):
    """An ArgumentParser whose help shows defaults; its subparsers are ToolParsers too."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]


def add_bootstrap_argument(
    parser: argparse.ArgumentParser, subparsers: Iterable[argparse.ArgumentParser] = ()
) -> None:
    """``--bootstrap-server`` on ``parser`` and, without a default of their own (so the value
    given before the subcommand stays), on each of its subcommands' parsers."""
    parser.add_argument(
        "--bootstrap-server", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT",
        help="a broker to connect to",
    )
    for sub in subparsers:
        sub.add_argument(
            "--bootstrap-server", default=argparse.SUPPRESS, metavar="HOST:PORT",
            help=f"a broker to connect to (default: {DEFAULT_BOOTSTRAP})",
        )


def subcommand_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parsers of ``parser``'s subcommands (each once)."""
    found: list[argparse.ArgumentParser] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                if sub not in found:
                    found.append(sub)
    return found


def fail(tool: str, message: object, err: TextIO | None = None) -> None:
    """One line on stderr: ``cormorant TOOL: message``."""
    print(f"cormorant {tool}: {message}", file=err or sys.stderr)
