"""``cormorant share-groups``: list, describe, delete share groups (KIP-932) and reset
their start offsets, like kafka-share-groups.sh.

Everything goes through the Kafka protocol (:class:`broker.tools.client.KafkaClient`):
ListGroups (type ``share``) on every broker; FindCoordinator, then
ShareGroupDescribe, DescribeShareGroupOffsets, AlterShareGroupOffsets and
DeleteGroups at the group's coordinator. Failures print one line on stderr and
exit with status 1.

- ``list [--state]``;
- ``describe GROUP [--members]``: per partition the start offset (first record not
  yet acknowledged or archived) and the lag to the high watermark; with
  ``--members`` the members, their client ids, hosts and assignments;
- ``delete GROUP``: only a group without members can go;
- ``reset-offsets --group G --topic T[:P,...] --to-earliest|--to-latest|--to-offset N``:
  prints the plan; ``--execute`` applies it (the group must have no members).
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from broker.tools.client import ClientError
from broker.tools.common import P, add_bootstrap_argument, fail, subcommand_parsers
from broker.tools.groups import (
    EARLIEST,
    EXIT_FAILURE,
    LATEST,
    Cluster,
    ToolError,
    _cluster,
    _parse_topic,
    _table,
)
from wire.errors import ErrorCode
from wire.generated.api_016_list_groups import ListGroupsRequest, ListGroupsResponse
from wire.generated.api_042_delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from wire.generated.api_077_share_group_describe import (
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
)
from wire.generated.api_090_describe_share_group_offsets import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
    DescribeShareGroupOffsetsResponse,
)
from wire.generated.api_091_alter_share_group_offsets import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsRequestPartition,
    AlterShareGroupOffsetsRequestTopic,
    AlterShareGroupOffsetsResponse,
)


def run_share_groups(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    actions = {"list": _list, "describe": _describe, "delete": _delete, "reset-offsets": _reset_offsets}
    try:
        with _cluster(args.bootstrap_server) as cluster:
            return actions[args.action](cluster, args, out, err)
    except (ClientError, ToolError) as ex:
        fail("share-groups", ex, err)
        return EXIT_FAILURE


def _list(cluster: Cluster, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    groups: dict[str, str] = {}
    for _, host, port in cluster.brokers():
        client = cluster.client(host, port)
        response = client.send(ListGroupsRequest(types_filter=["share"]), ListGroupsResponse,
                               min(client.version_for(ListGroupsRequest.API_KEY), 5))
        if response.error_code not in (ErrorCode.NONE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
            raise ToolError(f"listing groups failed: {ErrorCode.for_code(response.error_code).name}")
        for listed in response.groups:
            if listed.group_type == "share":
                groups[listed.group_id] = listed.group_state or "Unknown"
    if args.state:
        _table(out, ["GROUP", "STATE"], [[g, s] for g, s in sorted(groups.items())])
    else:
        for name in sorted(groups):
            print(name, file=out)
    return 0


def _describe(cluster: Cluster, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    group = args.group
    client, _, _ = cluster.coordinator(group)
    described = client.send(ShareGroupDescribeRequest(group_ids=[group]), ShareGroupDescribeResponse).groups[0]
    if described.error_code != ErrorCode.NONE:
        raise ToolError(f"Share group '{group}' does not exist."
                        if described.error_code == ErrorCode.GROUP_ID_NOT_FOUND else
                        f"describing group '{group}' failed: {ErrorCode.for_code(described.error_code).name}")
    if args.members:
        rows = [[group, m.member_id, m.client_id, m.client_host, str(m.member_epoch),
                 ",".join(f"{t.topic_name}:{','.join(map(str, sorted(t.partitions)))}"
                          for t in m.assignment.topic_partitions) or "-"]
                for m in sorted(described.members, key=lambda m: m.member_id)]
        _table(out, ["GROUP", "CONSUMER-ID", "CLIENT-ID", "HOST", "EPOCH", "ASSIGNMENT"], rows)
        return 0
    offsets = client.send(DescribeShareGroupOffsetsRequest(groups=[
        DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None)]), DescribeShareGroupOffsetsResponse)
    [g] = offsets.groups
    if g.error_code != ErrorCode.NONE:
        raise ToolError(f"describing offsets of '{group}' failed: {ErrorCode.for_code(g.error_code).name}")
    rows = [[group, t.topic_name, str(p.partition_index), str(p.start_offset) if p.start_offset >= 0 else "-",
             str(p.lag) if p.lag >= 0 else "-"]
            for t in g.topics for p in sorted(t.partitions, key=lambda p: p.partition_index)]
    print(f"Share group '{group}': {described.group_state}, {len(described.members)} member(s)", file=out)
    _table(out, ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"], rows)
    return 0


def _delete(cluster: Cluster, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    group = args.group
    client, _, _ = cluster.coordinator(group)
    [result] = client.send(DeleteGroupsRequest(groups_names=[group]), DeleteGroupsResponse).results
    error = ErrorCode.for_code(result.error_code)
    if error is ErrorCode.NONE:
        print(f"Deletion of requested share groups ('{group}') was successful.", file=out)
        return 0
    fail("share-groups", f"Group '{group}' could not be deleted due to: {error.name} ({error.description})", err)
    return EXIT_FAILURE


def _reset_offsets(cluster: Cluster, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    group = args.group
    partitions = [tp for spec in args.topic for tp in _parse_topic(spec, cluster)]
    client, _, _ = cluster.coordinator(group)
    earliest = cluster.log_end_offsets(partitions, EARLIEST)
    latest = cluster.log_end_offsets(partitions, LATEST)
    plan: dict[tuple[str, int], int] = {}
    for tp in partitions:
        if tp not in earliest or tp not in latest:
            raise ToolError(f"partition {tp[0]}-{tp[1]} has no leader or does not exist")
        plan[tp] = (earliest[tp] if args.to_earliest else latest[tp] if args.to_latest
                    else min(max(args.to_offset, earliest[tp]), latest[tp]))
    if args.execute:
        request = AlterShareGroupOffsetsRequest(group_id=group, topics=[
            AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=[
                AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=plan[(tt, p)])
                for tt, p in partitions if tt == t])
            for t in sorted({t for t, _ in partitions})])
        response = client.send(request, AlterShareGroupOffsetsResponse)
        if response.error_code != ErrorCode.NONE:
            raise ToolError(f"resetting offsets of '{group}' failed: "
                            f"{ErrorCode.for_code(response.error_code).name}")
        failed = [(t.topic_name, p.partition_index, ErrorCode.for_code(p.error_code))
                  for t in response.responses for p in t.partitions if p.error_code != ErrorCode.NONE]
        if failed:
            raise ToolError("resetting offsets failed: " + ", ".join(f"{t}-{p}: {e.name}" for t, p, e in failed))
    elif not args.dry_run:
        print("WARN: No action will be performed as the --execute option is missing. "
              "Add --execute to reset the offsets, or --dry-run to only show the plan.", file=err)
    _table(out, ["GROUP", "TOPIC", "PARTITION", "NEW-START-OFFSET"],
           [[group, t, str(p), str(o)] for (t, p), o in sorted(plan.items())])
    return 0


def add_parser(sub: argparse._SubParsersAction[P]) -> P:
    groups = sub.add_parser("share-groups", help="list, describe and delete share groups; reset their offsets")
    gsub = groups.add_subparsers(dest="action", required=True)
    lst = gsub.add_parser("list", help="list the share groups")
    lst.add_argument("--state", action="store_true", help="also show each group's state")
    describe = gsub.add_parser("describe", help="a share group's state, start offsets and members")
    describe.add_argument("group", help="the group id")
    describe.add_argument("--members", action="store_true", help="the members and their assignments")
    delete = gsub.add_parser("delete", help="delete a share group (it must have no members)")
    delete.add_argument("group", help="the group id")
    reset = gsub.add_parser("reset-offsets", help="move a share group's start offsets (a dry run unless --execute)")
    reset.add_argument("--group", required=True, help="the group id")
    reset.add_argument("--topic", action="append", required=True, metavar="TOPIC[:P,...]",
                       help="a topic, or some of its partitions (repeatable)")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="to each partition's log start offset")
    target.add_argument("--to-latest", action="store_true", help="to each partition's log end offset")
    target.add_argument("--to-offset", type=int, help="to this offset")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="reset the offsets")
    mode.add_argument("--dry-run", action="store_true", help="only show the plan")
    add_bootstrap_argument(groups, subcommand_parsers(groups))
    return groups
