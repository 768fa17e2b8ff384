"""What every ``cormorant`` tool's command line shares: the parser class (help shows each
option's default), ``--bootstrap-server`` accepted before or after a subcommand (as
kafka-topics.sh accepts it anywhere), and the one-line error prefix."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import TextIO

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


class ToolParser(argparse.ArgumentParser):
    """An ArgumentParser whose help lists defaults; its subparsers are ToolParsers too."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", argparse.ArgumentDefaultsHelpFormatter)
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
