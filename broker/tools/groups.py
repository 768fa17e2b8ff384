"""``cormorant groups``: list, describe, delete consumer groups and reset their offsets,
like kafka-consumer-groups.sh.

Every action speaks the Kafka protocol through :class:`broker.tools.client.KafkaClient`:
FindCoordinator for the group, then ConsumerGroupDescribe (consumer-protocol groups) or
DescribeGroups / OffsetFetch / DeleteGroups / OffsetCommit at the coordinator, Metadata and ListOffsets at partition leaders. So
it works against any Kafka-compatible cluster. Output follows
kafka-consumer-groups.sh; failures print one line on stderr and exit with status 1.

- ``list [--state] [--type [TYPE...]]``: the groups of every broker, with their state and
  type (classic or consumer), optionally only those of some types;
- ``describe GROUP [--offsets|--members|--state]``: per partition the committed
  offset, the log end offset (the high watermark), the lag and the member that owns
  it; then the members with their client ids, hosts and assignments;
- ``delete GROUP``: only an empty group can go;
- ``reset-offsets --group G --topic T[:P,...] --to-earliest|--to-latest|--to-offset N``:
  prints the plan; ``--execute`` commits it (the group must be inactive).
"""

from __future__ import annotations

import argparse
import struct
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TextIO

from broker.tools.client import ClientError, KafkaClient, parse_bootstrap
from broker.tools.common import P, add_bootstrap_argument, subcommand_parsers
from wire.errors import ErrorCode
from wire.exceptions import DecodeError
from wire.generated.api_002_list_offsets import (
    ListOffsetsRequest,
    ListOffsetsRequestListOffsetsPartition,
    ListOffsetsRequestListOffsetsTopic,
    ListOffsetsResponse,
)
from wire.generated.api_003_metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from wire.generated.api_008_offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)
from wire.generated.api_009_offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchResponse,
)
from wire.generated.api_010_find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from wire.generated.api_015_describe_groups import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeGroupsResponseDescribedGroup,
)
from wire.generated.api_016_list_groups import ListGroupsRequest, ListGroupsResponse
from wire.generated.api_042_delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from wire.generated.api_069_consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from wire.generated.data.consumer_protocol_assignment import ConsumerProtocolAssignment

EXIT_FAILURE = 1
LATEST = -1
EARLIEST = -2
#: How long to wait for a coordinator that is being created or is loading.
COORDINATOR_WAIT_S = 15.0
_RETRY_S = 0.2
_RETRIABLE = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
              ErrorCode.NOT_COORDINATOR}


class ToolError(Exception):
    """A failure to report on one line."""


@dataclass(frozen=True, slots=True)
class PartitionRow:
    topic: str
    partition: int
    current_offset: int | None
    log_end_offset: int | None
    consumer_id: str
    host: str
    client_id: str

    @property
    def lag(self) -> int | None:
        if self.current_offset is None or self.log_end_offset is None:
            return None
        return max(self.log_end_offset - self.current_offset, 0)


def _dash(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def parse_assignment(data: bytes) -> list[tuple[str, int]]:
    """The partitions of a consumer-protocol assignment (any version: v0 is their prefix)."""
    if len(data) < 2:
        return []
    (_version,) = struct.unpack_from(">h", data)
    try:
        assignment = ConsumerProtocolAssignment.decode(data[2:], 0)
    except (DecodeError, ValueError):
        return []
    return [(tp.topic, p) for tp in assignment.assigned_partitions for p in tp.partitions]


class Cluster:
    """Connections by broker, opened as needed from the bootstrap server's Metadata."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = KafkaClient.connect(bootstrap)
        self._host_port = parse_bootstrap(bootstrap)
        self._clients: dict[tuple[str, int], KafkaClient] = {self._host_port: self.bootstrap}

    def close(self) -> None:
        for client in self._clients.values():
            client.close()

    def client(self, host: str, port: int) -> KafkaClient:
        key = (host, port)
        if key not in self._clients:
            self._clients[key] = KafkaClient(host, port)
        return self._clients[key]

    def metadata(self, topics: list[str] | None) -> MetadataResponse:
        request = MetadataRequest(
            topics=None if topics is None else [MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False)
        return self.bootstrap.send(request, MetadataResponse)

    def brokers(self) -> list[tuple[int, str, int]]:
        return sorted((b.node_id, b.host, b.port) for b in self.metadata([]).brokers)

    def coordinator(self, group: str) -> tuple[KafkaClient, int, str]:
        """The coordinator's client, node id and ``host:port`` (waiting while it is created or loads)."""
        deadline = time.monotonic() + COORDINATOR_WAIT_S
        while True:
            version = self.bootstrap.version_for(FindCoordinatorRequest.API_KEY)
            if version >= 4:
                r = self.bootstrap.send(FindCoordinatorRequest(key_type=0, coordinator_keys=[group]),
                                        FindCoordinatorResponse, version)
                c = r.coordinators[0]
                error, node_id, host, port = ErrorCode.for_code(c.error_code), c.node_id, c.host, c.port
            else:
                r = self.bootstrap.send(FindCoordinatorRequest(key=group, key_type=0), FindCoordinatorResponse,
                                        version)
                error, node_id, host, port = ErrorCode.for_code(r.error_code), r.node_id, r.host, r.port
            if error is ErrorCode.NONE:
                return self.client(host, port), node_id, f"{host}:{port}"
            if error not in _RETRIABLE or time.monotonic() > deadline:
                raise ToolError(f"cannot find the coordinator of group '{group}': {error.name}")
            time.sleep(_RETRY_S)

    def log_end_offsets(self, partitions: list[tuple[str, int]], timestamp: int = LATEST) -> dict[tuple[str, int], int]:
        """Offsets from the partition leaders: LATEST is the high watermark, EARLIEST the log start."""
        if not partitions:
            return {}
        topics = sorted({t for t, _ in partitions})
        md = self.metadata(topics)
        brokers = {b.node_id: (b.host, b.port) for b in md.brokers}
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for topic in md.topics:
            for p in topic.partitions:
                tp = (topic.name or "", p.partition_index)
                if tp in partitions and p.leader_id in brokers:
                    by_leader.setdefault(p.leader_id, []).append(tp)
        out: dict[tuple[str, int], int] = {}
        for leader, tps in by_leader.items():
            request = ListOffsetsRequest(replica_id=-1, topics=[
                ListOffsetsRequestListOffsetsTopic(name=t, partitions=[
                    ListOffsetsRequestListOffsetsPartition(partition_index=p, timestamp=timestamp)
                    for tt, p in tps if tt == t])
                for t in sorted({t for t, _ in tps})])
            response = self.client(*brokers[leader]).send(request, ListOffsetsResponse)
            for rt in response.topics:
                for rp in rt.partitions:
                    if rp.error_code == ErrorCode.NONE:
                        out[(rt.name, rp.partition_index)] = rp.offset
        return out


@contextmanager
def _cluster(bootstrap: str) -> Iterator[Cluster]:
    cluster = Cluster(bootstrap)
    try:
        yield cluster
    finally:
        cluster.close()


def run_groups(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    actions = {"list": _list, "describe": _describe, "delete": _delete, "reset-offsets": _reset_offsets}
    try:
        with _cluster(args.bootstrap_server) as cluster:
            return actions[args.action](cluster, args, out, err)
    except (ClientError, ToolError) as ex:
        print(f"cormorant groups: {ex}", file=err)
        return EXIT_FAILURE


# ---------------------------------------------------------------- list


def _list(cluster: Cluster, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    groups: dict[str, str] = {}
    types: dict[str, str] = {}
    type_filter = [t for t in (args.type or []) if t]
    for _, host, port in cluster.brokers():
        response = cluster.client(host, port).send(ListGroupsRequest(types_filter=type_filter), ListGroupsResponse)
        if response.error_code not in (ErrorCode.NONE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
            raise ToolError(f"listing groups failed: {ErrorCode.for_code(response.error_code).name}")
        for listed in response.groups:
            groups[listed.group_id] = listed.group_state or "Unknown"
            types[listed.group_id] = listed.group_type or "Unknown"
    show_type = args.type is not None
    if args.state or show_type:
        width = max([len("GROUP")] + [len(name) for name in groups])
        columns = (["STATE"] if args.state else []) + (["TYPE"] if show_type else [])
        print(f"{'GROUP':<{width}} {' '.join(columns)}", file=out)
        state_width = max([len("STATE")] + [len(v) for v in groups.values()])
        for name in sorted(groups):
            cells = ([f"{groups[name]:<{state_width}}"] if args.state and show_type else
                     [groups[name]] if args.state else []) + ([types[name]] if show_type else [])
            print(f"{name:<{width}} {' '.join(cells)}", file=out)
    else:
        for name in sorted(groups):
            print(name, file=out)
    return 0


# ---------------------------------------------------------------- describe


def _describe_group(client: KafkaClient, group: str) -> DescribeGroupsResponseDescribedGroup:
    response = client.send(DescribeGroupsRequest(groups=[group]), DescribeGroupsResponse)
    described = response.groups[0]
    if described.error_code != ErrorCode.NONE:
        raise ToolError(f"describing group '{group}' failed: {ErrorCode.for_code(described.error_code).name}")
    return described


def _committed(client: KafkaClient, group: str) -> dict[tuple[str, int], int]:
    version = client.version_for(OffsetFetchRequest.API_KEY)
    if version >= 8:
        response = client.send(OffsetFetchRequest(groups=[OffsetFetchRequestGroup(group_id=group, topics=None)]),
                               OffsetFetchResponse, version)
        [g] = response.groups
        error = g.error_code
        rows = [(t.name, p.partition_index, p.committed_offset, p.error_code) for t in g.topics for p in t.partitions]
    else:
        response = client.send(OffsetFetchRequest(group_id=group, topics=None), OffsetFetchResponse, version)
        error = response.error_code
        rows = [(t.name, p.partition_index, p.committed_offset, p.error_code)
                for t in response.topics for p in t.partitions]
    if error != ErrorCode.NONE:
        raise ToolError(f"fetching offsets of group '{group}' failed: {ErrorCode.for_code(error).name}")
    return {(t, p): o for t, p, o, e in rows if e == ErrorCode.NONE and o >= 0}


def _table(out: TextIO, header: list[str], rows: list[list[str]], fixed: dict[int, int] | None = None) -> None:
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    for i, w in (fixed or {}).items():
        widths[i] = max(widths[i], w)
    print(file=out)
    for row in [header, *rows]:
        print(" ".join(f"{cell:<{widths[i]}}" if i < len(row) - 1 else cell for i, cell in enumerate(row)),
              file=out)


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    instance_id: str | None
    host: str
    client_id: str
    partitions: list[tuple[str, int]]


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    state: str
    strategy: str
    members: list[DescribedMember]


def _describe_consumer_group(client: KafkaClient, group: str) -> DescribedGroup | None:
    """A consumer-protocol group through ConsumerGroupDescribe; None for a classic group
    (GROUP_ID_NOT_FOUND) or a broker without the API."""
    if ConsumerGroupDescribeRequest.API_KEY not in client.api_versions:
        return None
    response = client.send(ConsumerGroupDescribeRequest(group_ids=[group]), ConsumerGroupDescribeResponse)
    described = response.groups[0]
    if described.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
        return None
    if described.error_code != ErrorCode.NONE:
        raise ToolError(f"describing group '{group}' failed: {ErrorCode.for_code(described.error_code).name}")
    return DescribedGroup(described.group_state, described.assignor_name, [
        DescribedMember(m.member_id, m.instance_id, m.client_host, m.client_id,
                        [(tp.topic_name, p) for tp in m.assignment.topic_partitions for p in tp.partitions])
        for m in described.members])


def _describe_classic_group(client: KafkaClient, group: str) -> DescribedGroup:
    described = _describe_group(client, group)
    consumer = described.protocol_type == "consumer"
    return DescribedGroup(described.group_state, described.protocol_data or "", [
        DescribedMember(m.member_id, m.group_instance_id, m.client_host, m.client_id,
                        parse_assignment(m.member_assignment) if consumer else [])
        for m in described.members])


def _describe(cluster: Cluster, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    group = args.group
    client, node_id, address = cluster.coordinator(group)
    described = _describe_consumer_group(client, group) or _describe_classic_group(client, group)
    state = described.state
    if state == "Dead":
        print(f"cormorant groups: Consumer group '{group}' does not exist.", file=err)
        return EXIT_FAILURE
    show_all = not (args.offsets or args.members or args.state)
    if args.state or show_all:
        strategy = described.strategy
        _table(out, ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
               [[group, f"{address} ({node_id})", _dash(strategy), state, str(len(described.members))]])
    if state in ("Empty",) and (args.offsets or args.members or show_all):
        print(f"\nConsumer group '{group}' has no active members.", file=out)
    elif (state in ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling")
          and (args.offsets or args.members or show_all)):
        print(f"\nWarning: Consumer group '{group}' is rebalancing.", file=out)
    owners: dict[tuple[str, int], tuple[str, str, str]] = {}
    member_rows = []
    for m in sorted(described.members, key=lambda m: m.member_id):
        parts = m.partitions
        for tp in parts:
            owners[tp] = (m.member_id, m.host, m.client_id)
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(parts):
            by_topic.setdefault(t, []).append(p)
        assignment = ",".join(f"{t}({','.join(map(str, ps))})" for t, ps in sorted(by_topic.items())) or "-"
        member_rows.append([group, m.member_id, _dash(m.instance_id), m.host, m.client_id,
                            str(len(parts)), assignment])
    if args.offsets or show_all:
        committed = _committed(client, group)
        partitions = sorted(set(committed) | set(owners))
        ends = cluster.log_end_offsets(partitions)
        rows = []
        for tp in partitions:
            member, host, client_id = owners.get(tp, ("", "", ""))
            row = PartitionRow(tp[0], tp[1], committed.get(tp), ends.get(tp), member, host, client_id)
            rows.append([group, row.topic, str(row.partition), _dash(row.current_offset),
                         _dash(row.log_end_offset), _dash(row.lag), _dash(row.consumer_id), _dash(row.host),
                         _dash(row.client_id)])
        _table(out, ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                     "HOST", "CLIENT-ID"], rows, {2: 10, 3: 15, 4: 15, 5: 15})
    if args.members or show_all:
        _table(out, ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                     "ASSIGNMENT"], member_rows)
    return 0


# ---------------------------------------------------------------- delete


def _delete(cluster: Cluster, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    group = args.group
    client, _, _ = cluster.coordinator(group)
    response = client.send(DeleteGroupsRequest(groups_names=[group]), DeleteGroupsResponse)
    [result] = response.results
    error = ErrorCode.for_code(result.error_code)
    if error is ErrorCode.NONE:
        print(f"Deletion of requested consumer groups ('{group}') was successful.", file=out)
        return 0
    print("cormorant groups: Deletion of some consumer groups failed:", file=err)
    print(f"* Group '{group}' could not be deleted due to: {error.name} ({error.description})", file=err)
    return EXIT_FAILURE


# ---------------------------------------------------------------- reset offsets


def _parse_topic(spec: str, cluster: Cluster) -> list[tuple[str, int]]:
    topic, _, parts = spec.partition(":")
    if parts:
        try:
            return [(topic, int(p)) for p in parts.split(",") if p.strip()]
        except ValueError as ex:
            raise ToolError(f"invalid partitions in --topic {spec!r}") from ex
    md = cluster.metadata([topic])
    for t in md.topics:
        if t.name == topic and t.error_code == ErrorCode.NONE:
            return [(topic, p.partition_index) for p in sorted(t.partitions, key=lambda p: p.partition_index)]
    raise ToolError(f"Topic '{topic}' does not exist")


def _reset_offsets(cluster: Cluster, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    group = args.group
    partitions = [tp for spec in args.topic for tp in _parse_topic(spec, cluster)]
    client, _, _ = cluster.coordinator(group)
    state = _describe_group(client, group).group_state
    if state not in ("Empty", "Dead"):
        raise ToolError(f"Assignments can only be reset if the group '{group}' is inactive, "
                        f"but the current state is {state}.")
    earliest = cluster.log_end_offsets(partitions, EARLIEST)
    latest = cluster.log_end_offsets(partitions, LATEST)
    plan: dict[tuple[str, int], int] = {}
    for tp in partitions:
        if tp not in earliest or tp not in latest:
            raise ToolError(f"partition {tp[0]}-{tp[1]} has no leader or does not exist")
        if args.to_earliest:
            plan[tp] = earliest[tp]
        elif args.to_latest:
            plan[tp] = latest[tp]
        else:
            # Out of range targets are clamped to the log, as kafka-consumer-groups.sh does.
            plan[tp] = min(max(args.to_offset, earliest[tp]), latest[tp])
    if args.execute:
        request = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
            OffsetCommitRequestTopic(name=t, partitions=[
                OffsetCommitRequestPartition(partition_index=p, committed_offset=plan[(tt, p)], committed_metadata="")
                for tt, p in partitions if tt == t])
            for t in sorted({t for t, _ in partitions})])
        response = client.send(request, OffsetCommitResponse)
        failed = [(t.name, p.partition_index, ErrorCode.for_code(p.error_code))
                  for t in response.topics for p in t.partitions if p.error_code != ErrorCode.NONE]
        if failed:
            raise ToolError("resetting offsets failed: " + ", ".join(f"{t}-{p}: {e.name}" for t, p, e in failed))
    elif not args.dry_run:
        print("WARN: No action will be performed as the --execute option is missing. "
              "Add --execute to reset the offsets, or --dry-run to only show the plan.", file=err)
    print(file=out)
    print(f"{'GROUP':<30} {'TOPIC':<30} {'PARTITION':<10} {'NEW-OFFSET':<15}", file=out)
    for (t, p), offset in sorted(plan.items()):
        print(f"{group:<30} {t:<30} {p:<10} {offset:<15}", file=out)
    return 0


def add_parser(sub: argparse._SubParsersAction[P]) -> P:
    groups = sub.add_parser("groups", help="list, describe and delete consumer groups; reset their offsets")
    gsub = groups.add_subparsers(dest="action", required=True)
    lst = gsub.add_parser("list", help="list the consumer groups")
    lst.add_argument("--state", action="store_true", help="also show each group's state")
    lst.add_argument("--type", nargs="*", metavar="TYPE",
                     help="also show each group's type (classic, consumer); with types, only groups of those")
    describe = gsub.add_parser("describe", help="a group's members, offsets and lag")
    describe.add_argument("group", help="the group id")
    describe.add_argument("--offsets", action="store_true", help="only the per-partition offsets and lag")
    describe.add_argument("--members", action="store_true", help="only the members and their assignments")
    describe.add_argument("--state", action="store_true", help="only the group's state")
    delete = gsub.add_parser("delete", help="delete an empty group")
    delete.add_argument("group", help="the group id")
    reset = gsub.add_parser("reset-offsets", help="set a group's committed offsets (the group must be empty)")
    reset.add_argument("--group", required=True, help="the group id")
    reset.add_argument("--topic", action="append", required=True, metavar="TOPIC[:P,...]",
                       help="a topic, or some of its partitions (repeatable)")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="to each partition's log start offset")
    target.add_argument("--to-latest", action="store_true", help="to each partition's end offset")
    target.add_argument("--to-offset", type=int, metavar="OFFSET", help="to this offset")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    mode.add_argument("--dry-run", action="store_true", help="only show the plan (what runs without --execute)")
    add_bootstrap_argument(groups, subcommand_parsers(groups))
    return groups
