"""``cormorant acls``: add, list and remove ACLs, like kafka-acls.sh.

Options are kafka-acls.sh's: ``--add``, ``--remove`` or ``--list``; resources
``--topic``, ``--group``, ``--transactional-id`` (each repeatable) and ``--cluster``;
``--resource-pattern-type`` (literal or prefixed to add; any, match, literal or prefixed
to list or remove; literal by default for add and remove, any for list);
``--allow-principal``/``--deny-principal`` with ``--allow-host``/``--deny-host`` (``*`` by
default); ``--operation`` (Read, Write, Create, Delete, Alter, Describe, ClusterAction,
DescribeConfigs, AlterConfigs, IdempotentWrite, All; repeatable); ``--principal`` to filter a
listing; and the shortcuts ``--producer`` (WRITE, DESCRIBE, CREATE on the topics; WRITE and
DESCRIBE on the transactional ids; ``--idempotent`` adds IDEMPOTENT_WRITE on the cluster) and
``--consumer`` (READ, DESCRIBE on the topics, READ on the groups). Output is Kafka's:
``Adding ACLs for resource `ResourcePattern(...)`:`` then one ``(principal=…, host=…,
operation=…, permissionType=…)`` per line, then the resource's current ACLs. A refused change
prints one line on stderr and exits 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from typing import TextIO

from broker.tools.client import ClientError, KafkaClient
from broker.tools.common import P, add_bootstrap_argument
from controller.acls import (
    CLUSTER_NAME,
    WILDCARD,
    AclFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
)
from wire.errors import ErrorCode
from wire.generated.api_029_describe_acls import DescribeAclsRequest, DescribeAclsResponse
from wire.generated.api_030_create_acls import (
    CreateAclsRequest,
    CreateAclsRequestAclCreation,
    CreateAclsResponse,
)
from wire.generated.api_031_delete_acls import (
    DeleteAclsRequest,
    DeleteAclsRequestDeleteAclsFilter,
    DeleteAclsResponse,
)

EXIT_FAILURE = 1
Resource = tuple[ResourceType, str]


class ToolError(Exception):
    """A failure to report on one line."""


def add_parser(sub: argparse._SubParsersAction[P]) -> P:
    acls = sub.add_parser("acls", help="add, list and remove ACLs (kafka-acls.sh's options)")
    action = acls.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs")
    action.add_argument("--list", action="store_true", help="list ACLs")
    acls.add_argument("--topic", action="append", default=[], help="a topic (repeatable; * for every topic)")
    acls.add_argument("--group", action="append", default=[], help="a consumer group (repeatable)")
    acls.add_argument("--transactional-id", action="append", default=[], help="a transactional id (repeatable)")
    acls.add_argument("--cluster", action="store_true", help="the cluster resource")
    acls.add_argument("--resource-pattern-type", default=None,
                      choices=("literal", "prefixed", "any", "match", "LITERAL", "PREFIXED", "ANY", "MATCH"),
                      help="literal or prefixed names (any and match filter --list and --remove; "
                           "default: literal, any for --list)")
    acls.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME",
                      help="a principal to allow (repeatable)")
    acls.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME",
                      help="a principal to deny (repeatable)")
    acls.add_argument("--allow-host", action="append", default=[], help="a host to allow from (default: *)")
    acls.add_argument("--deny-host", action="append", default=[], help="a host to deny from (default: *)")
    acls.add_argument("--principal", action="append", default=[], metavar="TYPE:NAME",
                      help="list only the ACLs of this principal (repeatable)")
    acls.add_argument("--operation", action="append", default=[],
                      help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                           "AlterConfigs, IdempotentWrite or All (repeatable; default: All)")
    acls.add_argument("--producer", action="store_true", help="the ACLs of a producer of the topics")
    acls.add_argument("--consumer", action="store_true", help="the ACLs of a consumer of the topics and groups")
    acls.add_argument("--idempotent", action="store_true", help="with --producer: IDEMPOTENT_WRITE on the cluster")
    acls.add_argument("--force", action="store_true", help="remove without asking (Cormorant never asks)")
    add_bootstrap_argument(acls)
    return acls


def parse_operation(name: str) -> AclOperation:
    """Kafka's SecurityUtils.operation: CamelCase or UPPER_SNAKE names, case-insensitively."""
    wanted = name.replace("_", "").replace("-", "").lower()
    for op in AclOperation:
        if op not in (AclOperation.UNKNOWN, AclOperation.ANY) and op.name.replace("_", "").lower() == wanted:
            return op
    raise ToolError(f"Invalid operation: {name}")


def _resources(args: argparse.Namespace) -> list[Resource]:
    out: list[Resource] = [(ResourceType.TOPIC, t) for t in args.topic]
    out += [(ResourceType.GROUP, g) for g in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return out


def _pattern(args: argparse.Namespace) -> PatternType:
    default = "any" if args.list else "literal"
    pattern = PatternType[(args.resource_pattern_type or default).upper()]
    if args.add and pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise ToolError("A '--resource-pattern-type' value of 'any' or 'match' is not valid when adding acls.")
    return pattern


def _operations_by_resource(args: argparse.Namespace) -> dict[Resource, set[AclOperation]]:
    """What each resource gets: --operation, or the --producer / --consumer shortcuts (as AclCommand)."""
    resources = _resources(args)
    if not (args.producer or args.consumer):
        if not resources:
            raise ToolError("You must provide at least one resource: --topic <topic> or --cluster or "
                            "--group <group> or --transactional-id <id>")
        ops = {parse_operation(o) for o in args.operation} or {AclOperation.ALL}
        return {r: set(ops) for r in resources}
    out: dict[Resource, set[AclOperation]] = {}
    topics = [r for r in resources if r[0] == ResourceType.TOPIC]
    if not topics:
        raise ToolError("With --producer or --consumer you must specify a --topic")
    if args.producer:
        for r in topics:
            out.setdefault(r, set()).update({AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE})
        for r in resources:
            if r[0] == ResourceType.TRANSACTIONAL_ID:
                out.setdefault(r, set()).update({AclOperation.WRITE, AclOperation.DESCRIBE})
        if args.idempotent:
            out.setdefault((ResourceType.CLUSTER, CLUSTER_NAME), set()).add(AclOperation.IDEMPOTENT_WRITE)
    if args.consumer:
        groups = [r for r in resources if r[0] == ResourceType.GROUP]
        if not groups:
            raise ToolError("With --consumer you must specify a --group")
        for r in topics:
            out.setdefault(r, set()).update({AclOperation.READ, AclOperation.DESCRIBE})
        for r in groups:
            out.setdefault(r, set()).add(AclOperation.READ)
    return out


def _entries(args: argparse.Namespace) -> list[tuple[str, str, AclPermissionType]]:
    allow_hosts = args.allow_host or [WILDCARD]
    deny_hosts = args.deny_host or [WILDCARD]
    out = [(p, h, AclPermissionType.ALLOW) for p in args.allow_principal for h in allow_hosts]
    out += [(p, h, AclPermissionType.DENY) for p in args.deny_principal for h in deny_hosts]
    return out


def _pattern_text(rt: int, name: str, pattern: int) -> str:
    return (f"ResourcePattern(resourceType={ResourceType(rt).name}, name={name}, "
            f"patternType={PatternType(pattern).name})")


def _entry_text(principal: str, host: str, op: int, perm: int) -> str:
    return (f"(principal={principal}, host={host}, operation={AclOperation(op).name}, "
            f"permissionType={AclPermissionType(perm).name})")


def run_acls(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        with KafkaClient.connect(args.bootstrap_server) as client:
            if args.add:
                _add(client, args, out)
            elif args.remove:
                _remove(client, args, out)
            else:
                _list(client, _list_filters(args), out)
    except (ClientError, ToolError, KeyError) as ex:
        print(f"cormorant acls: {ex}", file=err)
        return EXIT_FAILURE
    return 0


def _add(client: KafkaClient, args: argparse.Namespace, out: TextIO) -> None:
    pattern = _pattern(args)
    entries = _entries(args)
    if not entries:
        raise ToolError("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")
    plan = _operations_by_resource(args)
    for (rt, name), ops in plan.items():
        acls = [StandardAcl(rt, name, pattern, principal, host, op, perm)
                for principal, host, perm in entries for op in sorted(ops)]
        print(f"Adding ACLs for resource `{_pattern_text(rt, name, pattern)}`: ", file=out)
        for a in acls:
            print(f" \t{_entry_text(a.principal, a.host, a.operation, a.permission)} ", file=out)
        print(file=out)
        response = client.send(CreateAclsRequest(creations=[CreateAclsRequestAclCreation(
            resource_type=a.resource_type, resource_name=a.resource_name, resource_pattern_type=a.pattern_type,
            principal=a.principal, host=a.host, operation=a.operation, permission_type=a.permission)
            for a in acls]), CreateAclsResponse)
        for result in response.results:
            if result.error_code != ErrorCode.NONE:
                raise ToolError(f"Error while adding ACLs: {result.error_message or ErrorCode(result.error_code).name}")
    _list(client, [AclFilter(rt, name, pattern) for rt, name in plan], out)


def _remove(client: KafkaClient, args: argparse.Namespace, out: TextIO) -> None:
    pattern = _pattern(args)
    resources = _resources(args)
    if not resources:
        raise ToolError("You must provide at least one resource: --topic <topic> or --cluster or "
                        "--group <group> or --transactional-id <id>")
    filters: list[AclFilter] = []
    entries = _entries(args)
    if not entries:  # every ACL of the resources
        filters = [AclFilter(rt, name, pattern) for rt, name in resources]
    else:
        for (rt, name), ops in _operations_by_resource(args).items():
            filters += [AclFilter(rt, name, pattern, principal, host, op, perm)
                        for principal, host, perm in entries for op in sorted(ops)]
    for rt, name in resources:
        print(f"Removing ACLs from resource `{_pattern_text(rt, name, pattern)}`", file=out)
    response = client.send(DeleteAclsRequest(filters=[DeleteAclsRequestDeleteAclsFilter(
        resource_type_filter=f.resource_type, resource_name_filter=f.resource_name, pattern_type_filter=f.pattern_type,
        principal_filter=f.principal, host_filter=f.host, operation=f.operation, permission_type=f.permission)
        for f in filters]), DeleteAclsResponse)
    for result in response.filter_results:
        if result.error_code != ErrorCode.NONE:
            raise ToolError(f"Error while removing ACLs: {result.error_message or ErrorCode(result.error_code).name}")
    _list(client, [AclFilter(rt, name, pattern) for rt, name in resources], out)


def _list_filters(args: argparse.Namespace) -> list[AclFilter]:
    pattern = _pattern(args)
    resources: Sequence[tuple[ResourceType, str | None]] = _resources(args) or [(ResourceType.ANY, None)]
    principals: Iterable[str | None] = args.principal or [None]
    return [AclFilter(rt, name, pattern, principal) for rt, name in resources for principal in principals]


def _list(client: KafkaClient, filters: Sequence[AclFilter], out: TextIO) -> None:
    for f in filters:
        response = client.send(DescribeAclsRequest(
            resource_type_filter=f.resource_type, resource_name_filter=f.resource_name,
            pattern_type_filter=f.pattern_type, principal_filter=f.principal, host_filter=f.host,
            operation=f.operation, permission_type=f.permission), DescribeAclsResponse)
        if response.error_code != ErrorCode.NONE:
            raise ToolError(f"Error while listing ACLs: {response.error_message or ErrorCode(response.error_code).name}")
        for resource in response.resources:
            text = _pattern_text(resource.resource_type, resource.resource_name, resource.pattern_type)
            print(f"Current ACLs for resource `{text}`: ", file=out)
            for a in resource.acls:
                print(f" \t{_entry_text(a.principal, a.host, a.operation, a.permission_type)} ", file=out)
            print(file=out)
