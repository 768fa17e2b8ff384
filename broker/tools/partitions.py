"""``cormorant partitions``: move partitions between brokers and elect their leaders.

    cormorant partitions reassign orders:0=2,3 orders:1=3,1     # targets, TOPIC:PARTITION=BROKERS
    cormorant partitions reassign --file plan.json              # kafka-reassign-partitions' JSON
    cormorant partitions reassign --wait orders:0=2,3           # and show progress until done
    cormorant partitions reassign --cancel orders:0
    cormorant partitions status [--topic orders]                # ongoing reassignments, progress
    cormorant partitions elect-leaders [--unclean] [orders:0 ...]

The plan file is the one Kafka's tool reads:
``{"version": 1, "partitions": [{"topic": "orders", "partition": 0, "replicas": [2, 3]}]}``.
Each command prints one line per partition and exits 1 if any partition failed. A
reassignment's progress is which of its new replicas have caught up (joined the ISR) and
which are still copying; the old replicas are removed once all have.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from broker.tools.client import ClientError, KafkaClient
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
POLL_INTERVAL_S = 0.5
PROGRESS_INTERVAL_S = 5.0


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


def reassignment_progress(
    replicas: Sequence[int], adding: Sequence[int], removing: Sequence[int], isr: Sequence[int]
) -> str:
    """What is done and what is left of one partition's reassignment."""
    caught_up = [r for r in adding if r in isr]
    copying = [r for r in adding if r not in isr]
    text = (f"replicas {_ids(replicas)}: {len(caught_up)} of {len(adding)} new replicas in sync "
            f"{_ids(caught_up)}")
    if copying:
        text += f", waiting for {_ids(copying)} to catch up"
    if removing:
        text += f"; then removing {_ids(removing)}"
    return text


def ongoing(client: KafkaClient, topics: Sequence[str] | None) -> dict[tuple[str, int], str]:
    """(topic, partition) -> progress of each ongoing reassignment (of ``topics``, or all)."""
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
    isr: dict[tuple[str, int], list[int]] = {}
    for name in sorted({t.name for t in reply.topics}):
        for t in topic_metadata(client, name):
            isr.update({(name, p.partition_index): list(p.isr_nodes) for p in t.partitions})
    return {
        (t.name, p.partition_index): reassignment_progress(
            p.replicas, p.adding_replicas, p.removing_replicas, isr.get((t.name, p.partition_index), []))
        for t in reply.topics for p in t.partitions
    }


def status(client: KafkaClient, topics: Sequence[str] | None, out: TextIO) -> None:
    progress = ongoing(client, topics)
    lines = [f"{t}-{p}: {text}" for (t, p), text in sorted(progress.items())]
    print("\n".join(lines) if lines else "No partition is being reassigned.", file=out)


def wait_for_reassignments(
    client: KafkaClient,
    partitions: Sequence[tuple[str, int]],
    timeout_s: float,
    out: TextIO,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Until none of ``partitions`` is being reassigned, a progress line every
    PROGRESS_INTERVAL_S; False when ``timeout_s`` passed first."""
    wanted = set(partitions)
    topics = sorted({t for t, _ in wanted})
    deadline = clock() + timeout_s
    next_report = clock()
    while True:
        left = {tp: text for tp, text in ongoing(client, topics).items() if tp in wanted}
        if not left:
            print(f"reassignment complete: {len(wanted)} partition(s)", file=out, flush=True)
            return True
        now = clock()
        if now >= deadline:
            print(f"still reassigning after {timeout_s:.0f} s: {len(left)} of {len(wanted)} partition(s)",
                  file=out, flush=True)
            return False
        if now >= next_report:
            done = len(wanted) - len(left)
            print(f"waiting: {done} of {len(wanted)} partition(s) done", file=out, flush=True)
            for (t, p), text in sorted(left.items()):
                print(f"  {t}-{p}: {text}", file=out, flush=True)
            next_report = now + PROGRESS_INTERVAL_S
        sleep(POLL_INTERVAL_S)


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
                if not reassign(client, targets, out):
                    return EXIT_FAILURE
                if args.wait and not args.cancel:
                    moved = [(t, p) for t, p, _ in targets]
                    return 0 if wait_for_reassignments(client, moved, args.timeout, out) else EXIT_FAILURE
                return 0
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
    reassign_p.add_argument("--wait", action="store_true",
                            help="show progress until the reassignments complete")
    reassign_p.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                            help="with --wait: give up (exit 1) after this long")
    status_p = psub.add_parser("status", help="ongoing reassignments")
    status_p.add_argument("--topic", action="append", help="only this topic (repeatable)")
    elect_p = psub.add_parser("elect-leaders", help="preferred (default) or unclean leader election")
    elect_p.add_argument("partitions", nargs="*", metavar="TOPIC:PARTITION",
                         help="the partitions (default: every partition)")
    elect_p.add_argument("--unclean", action="store_true",
                         help="elect an out-of-sync replica when no in-sync one is alive (may lose data)")
    add_bootstrap_argument(parser, subcommand_parsers(parser))
    return parser
