"""The ``cormorant`` command.

``cormorant serve [server.properties] [--override key=value ...]`` runs a node;
``cormorant topics ...`` administers topics over the Kafka protocol;
``cormorant groups ...`` lists, describes and deletes consumer groups and resets their offsets;
``cormorant share-groups ...`` does the same for share groups;
``cormorant partitions reassign|status|elect-leaders`` moves partitions and elects leaders;
``cormorant transactions ...`` lists and describes transactional ids;
``cormorant features describe|upgrade|downgrade|disable`` shows and changes cluster features;
``cormorant acls --add|--list|--remove ...`` manages ACLs with kafka-acls.sh's options;
``cormorant configs --entity-type users|clients|ips ...`` describes and alters client quotas;
``cormorant dump-log FILE`` prints a segment's batches like Kafka's dump-log tool;
``cormorant console`` serves a web console for the cluster;
``cormorant top`` shows a broker's metrics endpoint live in the terminal;
``cormorant cluster up|down|status --dir D`` runs a local multi-node cluster;
``cormorant metadata quorum|image --bootstrap-server H:P`` shows the metadata quorum and image;
``cormorant pipeline demo`` runs the reference Spark pipeline and checks its totals;
``cormorant archive`` / ``cormorant replay`` export a topic range to Parquet and back (PySpark).
Configuration errors print one line naming the key and exit with status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from config import ConfigError

EXIT_CONFIG = 2
EXIT_BROKEN_PIPE = 1
_E = TypeVar("_E", bound=BaseException)


def package_version() -> str:
    try:
        return version("cormorant")
    except PackageNotFoundError:
        return "0.0.0+unknown"


def _serve(args: argparse.Namespace) -> int:
    import trio

    from broker.observability.logging_setup import configure_logging
    from config import ConfigError, load_config

    try:
        config, warnings = load_config(Path(args.properties) if args.properties else None, args.override or [])
    except ConfigError as ex:
        print(f"cormorant: invalid configuration: {describe_config_error(ex)}", file=sys.stderr)
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
    from broker.security.scram_bootstrap import ScramArgumentError, parse_add_scram

    try:
        credentials = [parse_add_scram(text) for text in args.add_scram or []]
    except ScramArgumentError as ex:
        print(f"cormorant: invalid --add-scram: {ex}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        trio.run(serve, config, credentials)
    except (ConfigError, BaseExceptionGroup) as ex:
        # Trio's nurseries wrap a start-up failure in exception groups: a setting the node
        # cannot use (a port in use, a log dir that is a file) is still one line.
        error = first_of(ex, ConfigError)
        if error is None:
            raise
        print(f"cormorant: cannot start: {describe_config_error(error)}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        pass
    return 0


def first_of(ex: BaseException, kind: type[_E]) -> _E | None:
    """``ex`` itself or the first exception of ``kind`` inside its (nested) groups."""
    if isinstance(ex, kind):
        return ex
    if isinstance(ex, BaseExceptionGroup):
        for inner in ex.exceptions:
            found = first_of(inner, kind)
            if found is not None:
                return found
    return None


def describe_config_error(error: ConfigError) -> str:
    """The message, prefixed by the setting's name unless it already names it."""
    text = str(error)
    return text if error.key in text else f"{error.key}: {text}"


def _dump_log(args: argparse.Namespace) -> int:
    from broker.tools.dump_log import dump_log

    return dump_log(Path(args.file), deep=args.deep_iteration, out=sys.stdout)


def _groups(args: argparse.Namespace) -> int:
    from broker.tools.groups import run_groups

    return run_groups(args)


def _share_groups(args: argparse.Namespace) -> int:
    from broker.tools.share_groups import run_share_groups

    return run_share_groups(args)


def _transactions(args: argparse.Namespace) -> int:
    from broker.tools.transactions import run_transactions

    return run_transactions(args)


def _features(args: argparse.Namespace) -> int:
    from broker.tools.features import run_features

    return run_features(args)


def _acls(args: argparse.Namespace) -> int:
    from broker.tools.acls import run_acls

    return run_acls(args)


def _configs(args: argparse.Namespace) -> int:
    from broker.tools.client_quotas import run_client_quotas

    return run_client_quotas(args)


def _topics(args: argparse.Namespace) -> int:
    from broker.tools.topics import run_topics

    return run_topics(args)


def _cluster(args: argparse.Namespace) -> int:
    from broker.tools.cluster import run_cluster

    return run_cluster(args)


def _partitions(args: argparse.Namespace) -> int:
    from broker.tools.partitions import run_partitions

    return run_partitions(args)


def _metadata(args: argparse.Namespace) -> int:
    from broker.tools.metadata import run_metadata

    return run_metadata(args)


def _top(args: argparse.Namespace) -> int:
    from broker.tools.top import run_top

    if args.interval <= 0:
        print("cormorant top: --interval must be positive", file=sys.stderr)
        return EXIT_CONFIG
    return run_top(args.metrics_url, args.interval, args.once, bootstrap=args.bootstrap_server)


def _console(args: argparse.Namespace) -> int:
    from broker.console.cli import run_console

    return run_console(args)


def _pipeline(args: argparse.Namespace) -> int:
    from broker.tools.pipeline import run_pipeline

    return run_pipeline(args)


def _archive(args: argparse.Namespace) -> int:
    from broker.tools.archive import run_archive

    return run_archive(args)


def _replay(args: argparse.Namespace) -> int:
    from broker.tools.archive import run_replay

    return run_replay(args)


def build_parser() -> argparse.ArgumentParser:
    from broker.tools.common import ToolParser, add_bootstrap_argument, subcommand_parsers

    parser = ToolParser(prog="cormorant", description="A broker that speaks the Kafka protocol.")
    parser.add_argument("--version", action="version", version=f"cormorant {package_version()}")
    parser.add_argument("--command-config", metavar="FILE",
                        help="Kafka client settings for the tools' connections (security.protocol, ssl.*, "
                             "sasl.mechanism, sasl.jaas.config); accepted anywhere on the command line")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run a broker node")
    serve.add_argument("properties", nargs="?", help="a server.properties file (Kafka's names)")
    serve.add_argument("--override", action="append", metavar="KEY=VALUE",
                       help="set or override a setting (repeatable)")
    serve.add_argument("--add-scram", action="append", metavar="MECHANISM=[name=...,password=...]",
                       help="create this SCRAM credential before serving unless the user already has one "
                            "(as kafka-storage format --add-scram), e.g. SCRAM-SHA-256=[name=admin,password=secret]")
    serve.set_defaults(func=_serve)

    dump = sub.add_parser("dump-log", help="print the record batches of a .log segment")
    dump.add_argument("file", help="a NNNNNNNNNNNNNNNNNNNN.log segment file")
    dump.add_argument("--deep-iteration", action="store_true", help="also print every record")
    dump.set_defaults(func=_dump_log)

    topics = sub.add_parser("topics", help="create, list, describe, delete and configure topics")
    tsub = topics.add_subparsers(dest="action", required=True)
    create = tsub.add_parser("create", help="create a topic")
    create.add_argument("topic", help="the topic's name")
    create.add_argument("--partitions", type=int, default=-1, help="-1: the broker's num.partitions")
    create.add_argument("--replication-factor", type=int, default=-1,
                        help="-1: the broker's default.replication.factor")
    create.add_argument("--config", action="append", metavar="KEY=VALUE", default=[],
                        help="a topic config (repeatable)")
    listing = tsub.add_parser("list", help="list the topics")
    describe = tsub.add_parser("describe", help="partitions, replicas and configs of one topic or all")
    describe.add_argument("topic", nargs="?", help="the topic (default: every topic)")
    for shown in (listing, describe):
        shown.add_argument("--exclude-internal", action="store_true",
                           help="leave out the internal topics (__consumer_offsets, __transaction_state, "
                                "__share_group_state)")
    delete = tsub.add_parser("delete", help="delete a topic")
    delete.add_argument("topic", help="the topic's name")
    alter = tsub.add_parser("alter-config", help="set or remove topic configs")
    alter.add_argument("topic", help="the topic's name")
    alter.add_argument("--set", action="append", metavar="KEY=VALUE", default=[],
                       help="set a config (repeatable)")
    alter.add_argument("--delete", action="append", metavar="KEY", default=[],
                       help="remove a config, back to the broker's default (repeatable)")
    add_bootstrap_argument(topics, subcommand_parsers(topics))
    topics.set_defaults(func=_topics)

    from broker.tools.groups import add_parser as add_groups_parser

    add_groups_parser(sub).set_defaults(func=_groups)

    from broker.tools.share_groups import add_parser as add_share_groups_parser

    add_share_groups_parser(sub).set_defaults(func=_share_groups)

    from broker.tools.partitions import add_parser as add_partitions_parser

    add_partitions_parser(sub).set_defaults(func=_partitions)

    from broker.tools.transactions import add_parser as add_transactions_parser

    add_transactions_parser(sub).set_defaults(func=_transactions)

    from broker.tools.features import add_parser as add_features_parser

    add_features_parser(sub).set_defaults(func=_features)

    from broker.console.cli import add_parser as add_console_parser

    add_console_parser(sub).set_defaults(func=_console)

    from broker.tools.acls import add_parser as add_acls_parser

    add_acls_parser(sub).set_defaults(func=_acls)

    from broker.tools.client_quotas import add_parser as add_configs_parser

    add_configs_parser(sub).set_defaults(func=_configs)

    top = sub.add_parser("top", help="live view of a broker's metrics endpoint")
    top.add_argument("--metrics-url", default="http://127.0.0.1:9464/metrics", help="the broker's /metrics URL")
    top.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes")
    top.add_argument("--once", action="store_true", help="print one frame and exit")
    top.add_argument(
        "--bootstrap-server", metavar="HOST:PORT", default=None,
        help="the broker whose metrics to show: top checks that the endpoint belongs to it "
        "(default: checked against 127.0.0.1:9092 when a broker answers there)",
    )
    top.set_defaults(func=_top)

    cluster = sub.add_parser("cluster", help="start and stop a local multi-node cluster")
    csub = cluster.add_subparsers(dest="action", required=True)
    cluster_up = csub.add_parser("up", help="start the cluster in --dir (create it first if needed)")
    cluster_up.add_argument("--dir", required=True, help="directory for the nodes' configs, data and logs")
    cluster_up.add_argument("--nodes", type=int, default=3, help="number of nodes (for a new cluster)")
    cluster_up.add_argument("--controllers", type=int, default=None,
                            help="how many nodes are also controllers (default: up to 3)")
    cluster_up.add_argument("--override", action="append", metavar="KEY=VALUE",
                            help="a setting for every node (for a new cluster)")
    cluster_down = csub.add_parser("down", help="stop every node of the cluster in --dir")
    cluster_down.add_argument("--dir", required=True, help="the cluster's directory")
    cluster_down.add_argument("--timeout", type=float, default=30.0, help="seconds before SIGKILL")
    cluster_status = csub.add_parser("status", help="which nodes of --dir are running")
    cluster_status.add_argument("--dir", required=True, help="the cluster's directory")
    cluster.set_defaults(func=_cluster)

    from broker.tools.tls_init import add_parser as add_tls_parser
    from broker.tools.users import add_parser as add_users_parser

    add_tls_parser(sub)
    add_users_parser(sub)

    metadata = sub.add_parser("metadata", help="the metadata quorum and image, asked of any broker")
    add_bootstrap_argument(metadata)
    metadata.add_argument("--json", action="store_true", help="print one JSON object")
    metadata.add_argument("action", choices=("quorum", "image"),
                          help="quorum: voters, leader and lag; image: brokers and topics")
    metadata.set_defaults(func=_metadata)

    from broker.tools.archive import add_archive_arguments, add_replay_arguments
    from broker.tools.pipeline import add_arguments as add_pipeline_arguments

    pipeline = sub.add_parser("pipeline", help="the reference Spark Structured Streaming pipeline")
    add_pipeline_arguments(pipeline)
    pipeline.set_defaults(func=_pipeline)
    from broker.tools.archive import ARCHIVE_DESCRIPTION, REPLAY_DESCRIPTION

    archive = sub.add_parser("archive", help="export a topic (or a time range of it) to Parquet with PySpark",
                             description=ARCHIVE_DESCRIPTION)
    add_archive_arguments(archive)
    archive.set_defaults(func=_archive)
    replay = sub.add_parser("replay", help="write an archive back to a topic, in order, timestamps kept",
                            description=REPLAY_DESCRIPTION)
    add_replay_arguments(replay)
    replay.set_defaults(func=_replay)
    return parser


def _command_config(argv: list[str]) -> tuple[list[str], str | None]:
    """``--command-config FILE`` (or ``=FILE``) taken out of ``argv`` wherever it stands, as
    every Kafka tool accepts it after its own name."""
    rest: list[str] = []
    path: str | None = None
    items = iter(argv)
    for item in items:
        if item == "--command-config":
            path = next(items, None)
            if path is None:
                raise SystemExit("cormorant: --command-config needs a file")
        elif item.startswith("--command-config="):
            path = item.split("=", 1)[1]
        else:
            rest.append(item)
    return rest, path


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    rest, command_config = _command_config(list(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(rest)
    if command_config is not None:
        # Tools that read more of the file than its security settings (the console) find it here.
        args.command_config = command_config
        from broker.security.client_config import load_client_security
        from broker.tools.client import set_default_security
        from config import ConfigError

        try:
            set_default_security(load_client_security(Path(command_config)))
        except ConfigError as ex:
            print(f"cormorant: invalid --command-config: {ex}", file=sys.stderr)
            return EXIT_CONFIG
    try:
        result: int = args.func(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`cormorant cluster status | head -1`): stop quietly, and keep
        # the interpreter's final flush from failing again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    return result


if __name__ == "__main__":
    raise SystemExit(main())
