"""``cormorant configs`` for client quotas, with kafka-configs.sh's options.

``--entity-type users|clients|ips`` (``--entity-type users --entity-type clients`` for a
user and client id), ``--entity-name NAME`` or ``--entity-default`` for each type given,
then ``--describe`` or ``--alter`` with ``--add-config k=v,k=v`` and ``--delete-config
k,k``. Descriptions print kafka-configs.sh's line per entity: ``Quota configs for user-principal
'alice' are producer_byte_rate=1024.0``. Topic and broker configs are ``cormorant topics``'
business; this command handles quota entities only. A refused change prints one line on
stderr and exits 1.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from broker.tools.client import ClientError, KafkaClient
from broker.tools.common import P, add_bootstrap_argument
from wire.errors import ErrorCode
from wire.generated.api_048_describe_client_quotas import (
    DescribeClientQuotasRequest,
    DescribeClientQuotasRequestComponentData,
    DescribeClientQuotasResponse,
)
from wire.generated.api_049_alter_client_quotas import (
    AlterClientQuotasRequest,
    AlterClientQuotasRequestEntityData,
    AlterClientQuotasRequestEntryData,
    AlterClientQuotasRequestOpData,
    AlterClientQuotasResponse,
)

EXIT_FAILURE = 1
#: kafka-configs.sh entity types and the quota entity types they stand for.
ENTITY_TYPES = {"users": "user", "clients": "client-id", "ips": "ip"}
#: How kafka-configs.sh names an entity type in its output.
OUTPUT_NAMES = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}
MATCH_EXACT, MATCH_DEFAULT = 0, 1


class ToolError(Exception):
    """A failure to report on one line."""


def add_parser(sub: argparse._SubParsersAction[P]) -> P:
    configs = sub.add_parser("configs", help="describe and alter client quotas (kafka-configs.sh's options)")
    action = configs.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="show the quotas of the entity")
    action.add_argument("--alter", action="store_true", help="change the quotas of the entity")
    configs.add_argument("--entity-type", action="append", required=True, choices=sorted(ENTITY_TYPES),
                         help="users, clients or ips (users and clients together for a user's client id)")
    configs.add_argument("--entity-name", action="append", default=[], help="the entity's name, per type")
    configs.add_argument("--entity-default", action="store_true", help="the default entity of the (last) type")
    configs.add_argument("--add-config", default="", metavar="K=V,K=V", help="quotas to set")
    configs.add_argument("--delete-config", default="", metavar="K,K", help="quotas to remove")
    add_bootstrap_argument(configs)
    return configs


def _entity(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    types = [ENTITY_TYPES[t] for t in args.entity_type]
    names: list[str | None] = list(args.entity_name)
    if args.entity_default:
        names.append(None)
    if len(names) != len(types):
        raise ToolError("give an --entity-name or --entity-default for each --entity-type")
    return list(zip(types, names, strict=True))


def _ops(args: argparse.Namespace) -> list[AlterClientQuotasRequestOpData]:
    ops = []
    for item in filter(None, (p.strip() for p in args.add_config.split(","))):
        key, eq, value = item.partition("=")
        if not eq:
            raise ToolError(f"--add-config entries are key=value, got {item}")
        try:
            ops.append(AlterClientQuotasRequestOpData(key=key.strip(), value=float(value)))
        except ValueError:
            raise ToolError(f"{key.strip()}: {value} is not a number") from None
    for key in filter(None, (k.strip() for k in args.delete_config.split(","))):
        ops.append(AlterClientQuotasRequestOpData(key=key, remove=True))
    if not ops:
        raise ToolError("--alter needs --add-config or --delete-config")
    return ops


def _describe_text(entity: list[tuple[str, str | None]]) -> str:
    return ", ".join(f"the default {OUTPUT_NAMES[t]}" if n is None else f"{OUTPUT_NAMES[t]} '{n}'"
                     for t, n in entity)


def run_client_quotas(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        entity = _entity(args)
        with KafkaClient.connect(args.bootstrap_server) as client:
            if args.alter:
                response = client.send(AlterClientQuotasRequest(entries=[AlterClientQuotasRequestEntryData(
                    entity=[AlterClientQuotasRequestEntityData(entity_type=t, entity_name=n) for t, n in entity],
                    ops=_ops(args))]), AlterClientQuotasResponse)
                result = response.entries[0]
                if result.error_code != ErrorCode.NONE:
                    raise ToolError(result.error_message or ErrorCode(result.error_code).name)
                print(f"Completed updating config for {_describe_text(entity)}.", file=out)
                return 0
            described = client.send(DescribeClientQuotasRequest(strict=True, components=[
                DescribeClientQuotasRequestComponentData(entity_type=t, match_type=MATCH_DEFAULT if n is None
                                                         else MATCH_EXACT, match=n) for t, n in entity]),
                DescribeClientQuotasResponse)
            if described.error_code != ErrorCode.NONE:
                raise ToolError(described.error_message or ErrorCode(described.error_code).name)
            for e in described.entries or []:
                values = ",".join(f"{v.key}={v.value}" for v in e.values)
                print(f"Quota configs for {_describe_text([(x.entity_type, x.entity_name) for x in e.entity])} "
                      f"are {values}", file=out)
    except (ClientError, ToolError) as ex:
        print(f"cormorant configs: {ex}", file=err)
        return EXIT_FAILURE
    return 0
