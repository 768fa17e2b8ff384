"""The ``cormorant`` command.

``cormorant serve [server.properties] [--override key=value ...]`` runs a node;
``cormorant topics ...`` administers topics over the Kafka protocol;
``cormorant dump-log FILE`` prints a segment's batches like Kafka's dump-log tool.
Configuration errors print one line naming the key and exit with status 2.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

EXIT_CONFIG = 2


def package_version() -> str:
    try:
        return version("cormorant")
    except PackageNotFoundError:
        return "0.0.0+unknown"


def _serve(args: argparse.Namespace) -> int:
    import trio

    from broker.config import ConfigError, load_config
    from broker.logging_setup import configure_logging

    try:
        config, warnings = load_config(Path(args.properties) if args.properties else None, args.override or [])
    except ConfigError as ex:
        print(f"cormorant: invalid configuration: {ex}", file=sys.stderr)
        return EXIT_CONFIG
    except OSError as ex:
        print(f"cormorant: cannot read {args.properties}: {ex.strerror}", file=sys.stderr)
        return EXIT_CONFIG
    configure_logging(config.log_format)
    import structlog

    log = structlog.get_logger("cormorant")
    for warning in warnings:
        log.warning("config_not_implemented", detail=warning)

    from broker.node import serve

    try:
        trio.run(serve, config)
    except ConfigError as ex:
        print(f"cormorant: invalid configuration: {ex}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        pass
    return 0


def _dump_log(args: argparse.Namespace) -> int:
    from broker.tools.dump_log import dump_log

    return dump_log(Path(args.file), deep=args.deep_iteration, out=sys.stdout)


def _topics(args: argparse.Namespace) -> int:
    from broker.tools.topics import run_topics

    return run_topics(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cormorant", description="A broker that speaks the Kafka protocol.")
    parser.add_argument("--version", action="version", version=f"cormorant {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run a broker node")
    serve.add_argument("properties", nargs="?", help="a server.properties file")
    serve.add_argument("--override", action="append", metavar="KEY=VALUE", help="set or override a setting")
    serve.set_defaults(func=_serve)

    dump = sub.add_parser("dump-log", help="print the record batches of a .log segment")
    dump.add_argument("file")
    dump.add_argument("--deep-iteration", action="store_true", help="also print every record")
    dump.set_defaults(func=_dump_log)

    topics = sub.add_parser("topics", help="create, list, describe, delete and configure topics")
    topics.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    tsub = topics.add_subparsers(dest="action", required=True)
    create = tsub.add_parser("create")
    create.add_argument("topic")
    create.add_argument("--partitions", type=int, default=-1)
    create.add_argument("--replication-factor", type=int, default=-1)
    create.add_argument("--config", action="append", metavar="KEY=VALUE", default=[])
    tsub.add_parser("list")
    describe = tsub.add_parser("describe")
    describe.add_argument("topic", nargs="?")
    delete = tsub.add_parser("delete")
    delete.add_argument("topic")
    alter = tsub.add_parser("alter-config")
    alter.add_argument("topic")
    alter.add_argument("--set", action="append", metavar="KEY=VALUE", default=[])
    alter.add_argument("--delete", action="append", metavar="KEY", default=[])
    topics.set_defaults(func=_topics)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
