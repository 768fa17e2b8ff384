"""``cormorant partitions``: move partitions between brokers and elect their leaders.

    cormorant partitions reassign orders:0=2,3 orders:1=3,1     # targets, TOPIC:PARTITION=BROKERS
    cormorant partitions reassign --file plan.json              # kafka-reassign-partitions' JSON
    cormorant partitions reassign --cancel orders:0
    cormorant partitions status [--topic orders]                # ongoing reassignments
    cormorant partitions elect-leaders [--unclean] [orders:0 ...]

The plan file is the one Kafka's tool reads:
``{"version": 1, "partitions": [{"topic": "orders", "partition": 0, "replicas": [2, 3]}]}``.
Each command prints one line per partition and exits 1 if any partition failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from broker.client import ClientError, KafkaClient
from broker.tools.common import P, add_bootstrap_argument, subcommand_parsers
from broker.tools.topics import topic_metadata
from wire.errors import ErrorCode
from wire.generated.api_043_elect_leaders import (
    ElectLeadersRequest,
    ElectLeadersRequestTopicPartitions,
    ElectLeadersResponse,
)
from wire.generated.api_045_alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsRequestReassignablePartition,
    AlterPartitionReassignmentsRequestReassignableTopic,
    AlterPartitionReassignmentsResponse,
)
from wire.generated.api_046_list_partition_reassignments import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsRequestListPartitionReassignmentsTopics,
    ListPartitionReassignmentsResponse,
)

EXIT_FAILURE = 1
TIMEOUT_MS = 30_000


class ToolError(Exception):
    pass


def parse_partition(text: str) -> tuple[str, int]:
    topic, sep, index = text.rpartition(":")
    if not sep or not topic or not index.isdigit():
        raise ToolError(f"expected TOPIC:PARTITION, got {text!r}")
    return topic, int(index)


def parse_target(text: str) -> tuple[str, int, list[int]]:
    where, sep, brokers = text.partition("=")
    if not sep:
        raise ToolError(f"expected TOPIC:PARTITION=BROKER,BROKER,..., got {text!r}")
    topic, index = parse_partition(where)
    try:
        replicas = [int(b) for b in brokers.split(",") if b.strip()]
    except ValueError:
        raise ToolError(f"broker ids must be integers: {text!r}") from None
    return topic, index, replicas


def read_plan(path: Path) -> list[tuple[str, int, list[int]]]:
    try:
        doc = json.loads(path.read_text())
        return [(str(p["topic"]), int(p["partition"]), [int(b) for b in p["replicas"]]) for p in doc["partitions"]]
    except (OSError, ValueError, KeyError, TypeError) as ex:
        raise ToolError(f"{path}: not a reassignment plan ({ex})") from None


def reassign(client: KafkaClient, targets: Sequence[tuple[str, int, list[int] | None]], out: TextIO) -> bool:
    topics: dict[str, AlterPartitionReassignmentsRequestReassignableTopic] = {}
    for topic, index, replicas in targets:
        t = topics.setdefault(topic, AlterPartitionReassignmentsRequestReassignableTopic(name=topic))
        t.partitions.append(AlterPartitionReassignmentsRequestReassignablePartition(
            partition_index=index, replicas=replicas))
    reply = client.send(AlterPartitionReassignmentsRequest(timeout_ms=TIMEOUT_MS, topics=list(topics.values())),
                        AlterPartitionReassignmentsResponse)
    if reply.error_code != ErrorCode.NONE:
        raise ToolError(f"{ErrorCode.for_code(reply.error_code).name}: {reply.error_message or ''}".rstrip(": "))
    ok = True
    for result in reply.responses:
        for r in result.partitions:
            if r.error_code == ErrorCode.NONE:
                print(f"{result.name}-{r.partition_index}: reassignment started", file=out)
            else:
                ok = False
                print(f"{result.name}-{r.partition_index}: {ErrorCode.for_code(r.error_code).name}"
                      f"{': ' + r.error_message if r.error_message else ''}", file=out)
    return ok


def status(client: KafkaClient, topics: Sequence[str] | None, out: TextIO) -> None:
    request = ListPartitionReassignmentsRequest(timeout_ms=TIMEOUT_MS, topics=None)
    if topics:
        # A topic named without partitions: ask for all of them (the broker skips unknown ones).
        request.topics = [
            ListPartitionReassignmentsRequestListPartitionReassignmentsTopics(
                name=t.name or "", partition_indexes=[p.partition_index for p in t.partitions])
            for name in topics for t in topic_metadata(client, name)
        ]
    reply = client.send(request, ListPartitionReassignmentsResponse)
    if reply.error_code != ErrorCode.NONE:
        raise ToolError(ErrorCode.for_code(reply.error_code).name)
    lines = [
        f"{t.name}-{p.partition_index}: replicas {_ids(p.replicas)} adding {_ids(p.adding_replicas)} "
        f"removing {_ids(p.removing_replicas)}"
        for t in reply.topics for p in t.partitions
    ]
    print("\n".join(lines) if lines else "No partition is being reassigned.", file=out)


def elect(client: KafkaClient, unclean: bool, partitions: Sequence[tuple[str, int]], out: TextIO) -> bool:
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    request = ElectLeadersRequest(
        election_type=1 if unclean else 0, timeout_ms=TIMEOUT_MS,
        topic_partitions=[ElectLeadersRequestTopicPartitions(topic=t, partitions=ps) for t, ps in by_topic.items()]
        if partitions else None)
    reply = client.send(request, ElectLeadersResponse)
    if reply.error_code != ErrorCode.NONE:
        raise ToolError(ErrorCode.for_code(reply.error_code).name)
    ok = True
    lines = []
    for t in reply.replica_election_results:
        for p in t.partition_result:
            code = ErrorCode.for_code(p.error_code)
            if code == ErrorCode.NONE:
                lines.append(f"{t.topic}-{p.partition_id}: leader elected")
            elif code == ErrorCode.ELECTION_NOT_NEEDED:
                lines.append(f"{t.topic}-{p.partition_id}: election not needed")
            else:
                ok = False
                lines.append(f"{t.topic}-{p.partition_id}: {code.name}")
    print("\n".join(lines) if lines else "No partition needed an election.", file=out)
    return ok


def _ids(ids: Sequence[int]) -> str:
    return "[" + ",".join(str(i) for i in ids) + "]"


def run_partitions(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        with KafkaClient.connect(args.bootstrap_server, timeout_s=40.0) as client:
            if args.action == "reassign":
                targets: list[tuple[str, int, list[int] | None]]
                if args.cancel:
                    targets = [(*parse_partition(p), None) for p in args.partitions]
                else:
                    targets = [parse_target(t) for t in args.partitions]
                    if args.file:
                        targets += read_plan(Path(args.file))
                if not targets:
                    raise ToolError("nothing to reassign: name TOPIC:PARTITION=BROKERS or --file")
                return 0 if reassign(client, targets, out) else EXIT_FAILURE
            if args.action == "status":
                status(client, args.topic, out)
                return 0
            partitions = [parse_partition(p) for p in args.partitions]
            return 0 if elect(client, args.unclean, partitions, out) else EXIT_FAILURE
    except (ClientError, ToolError) as ex:
        print(f"cormorant partitions: {ex}", file=err)
        return EXIT_FAILURE


def add_parser(sub: argparse._SubParsersAction[P]) -> P:
    parser = sub.add_parser("partitions", help="reassign partitions between brokers, elect leaders")
    psub = parser.add_subparsers(dest="action", required=True)
    reassign_p = psub.add_parser("reassign", help="move partitions onto new replicas (or --cancel)")
    reassign_p.add_argument("partitions", nargs="*", metavar="TOPIC:PARTITION=BROKER,...",
                            help="a partition and its new replicas, preferred leader first")
    reassign_p.add_argument("--file", metavar="PLAN.json", help="a kafka-reassign-partitions JSON plan")
    reassign_p.add_argument("--cancel", action="store_true", help="cancel the named partitions' reassignments")
    status_p = psub.add_parser("status", help="ongoing reassignments")
    status_p.add_argument("--topic", action="append", help="only this topic (repeatable)")
    elect_p = psub.add_parser("elect-leaders", help="preferred (default) or unclean leader election")
    elect_p.add_argument("partitions", nargs="*", metavar="TOPIC:PARTITION",
                         help="the partitions (default: every partition)")
    elect_p.add_argument("--unclean", action="store_true",
                         help="elect an out-of-sync replica when no in-sync one is alive (may lose data)")
    add_bootstrap_argument(parser, subcommand_parsers(parser))
    return parser
