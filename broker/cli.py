"""The ``cormorant`` command.

``cormorant serve [server.properties] [--override key=value ...]`` runs a node;
``cormorant topics ...`` administers topics over the Kafka protocol;
``cormorant groups ...`` lists, describes and deletes consumer groups and resets their offsets;
``cormorant share-groups ...`` does the same for share groups;
``cormorant partitions reassign|status|elect-leaders`` moves partitions and elects leaders;
``cormorant transactions ...`` lists and describes transactional ids;
``cormorant dump-log FILE`` prints a segment's batches like Kafka's dump-log tool;
``cormorant top`` shows a broker's metrics endpoint live in the terminal;
``cormorant cluster up|down|status --dir D`` runs a local multi-node cluster;
``cormorant metadata quorum|image --bootstrap-server H:P`` shows the metadata quorum and image;
``cormorant pipeline demo`` runs the reference Spark pipeline and checks its totals;
``cormorant archive`` / ``cormorant replay`` export a topic range to Parquet and back (PySpark).
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


def _groups(args: argparse.Namespace) -> int:
    from broker.tools.groups import run_groups

    return run_groups(args)


def _share_groups(args: argparse.Namespace) -> int:
    from broker.tools.share_groups import run_share_groups

    return run_share_groups(args)


def _transactions(args: argparse.Namespace) -> int:
    from broker.tools.transactions import run_transactions

    return run_transactions(args)


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
    return run_top(args.metrics_url, args.interval, args.once)


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

    from broker.tools.groups import add_parser as add_groups_parser

    add_groups_parser(sub).set_defaults(func=_groups)

    from broker.tools.share_groups import add_parser as add_share_groups_parser

    add_share_groups_parser(sub).set_defaults(func=_share_groups)

    from broker.tools.partitions import add_parser as add_partitions_parser

    add_partitions_parser(sub).set_defaults(func=_partitions)

    from broker.tools.transactions import add_parser as add_transactions_parser

    add_transactions_parser(sub).set_defaults(func=_transactions)

    top = sub.add_parser("top", help="live view of a broker's metrics endpoint")
    top.add_argument("--metrics-url", default="http://127.0.0.1:9464/metrics", help="the broker's /metrics URL")
    top.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes")
    top.add_argument("--once", action="store_true", help="print one frame and exit")
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
    cluster_down.add_argument("--dir", required=True)
    cluster_down.add_argument("--timeout", type=float, default=30.0, help="seconds before SIGKILL")
    cluster_status = csub.add_parser("status", help="which nodes of --dir are running")
    cluster_status.add_argument("--dir", required=True)
    cluster.set_defaults(func=_cluster)

    metadata = sub.add_parser("metadata", help="the metadata quorum and image, asked of any broker")
    metadata.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    metadata.add_argument("--json", action="store_true", help="print one JSON object")
    metadata.add_argument("action", choices=("quorum", "image"))
    metadata.set_defaults(func=_metadata)

    from broker.tools.archive import add_archive_arguments, add_replay_arguments
    from broker.tools.pipeline import add_arguments as add_pipeline_arguments

    pipeline = sub.add_parser("pipeline", help="the reference Spark Structured Streaming pipeline")
    add_pipeline_arguments(pipeline)
    pipeline.set_defaults(func=_pipeline)
    archive = sub.add_parser("archive", help="export a topic (or a time range of it) to Parquet with PySpark")
    add_archive_arguments(archive)
    archive.set_defaults(func=_archive)
    replay = sub.add_parser("replay", help="write an archive back to a topic, in order, timestamps kept")
    add_replay_arguments(replay)
    replay.set_defaults(func=_replay)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
