"""``cormorant users``: SCRAM credentials, as ``kafka-configs.sh --entity-type users`` manages them.

- ``add NAME --password P [--mechanism SCRAM-SHA-256|SCRAM-SHA-512] [--iterations N]``: the
  password is salted and hashed here; the broker receives the salted password only
  (AlterUserScramCredentials, as Kafka's tools send it);
- ``delete NAME [--mechanism ...]``;
- ``list [NAME ...]``: users and the mechanisms and iterations of their credentials.

Use ``--command-config`` to reach a secured listener. A failure prints one line on stderr
and exits 1.
"""

from __future__ import annotations

import argparse
import os
import sys

from broker.security.scram import (
    MAX_ITERATIONS,
    MECHANISM_NAMES,
    MECHANISMS,
    MIN_ITERATIONS,
    salted_password,
)
from broker.tools.client import ClientError, KafkaClient
from broker.tools.common import P, add_bootstrap_argument, subcommand_parsers
from wire.errors import ErrorCode
from wire.generated.api_050_describe_user_scram_credentials import (
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsRequestUserName,
    DescribeUserScramCredentialsResponse,
)
from wire.generated.api_051_alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsRequestScramCredentialDeletion,
    AlterUserScramCredentialsRequestScramCredentialUpsertion,
    AlterUserScramCredentialsResponse,
)

EXIT_FAILURE = 1


def add_parser(sub: argparse._SubParsersAction[P]) -> None:
    users = sub.add_parser("users", help="add, list and delete SCRAM credentials")
    usub = users.add_subparsers(dest="action", required=True)
    add = usub.add_parser("add", help="create or replace a user's SCRAM credential")
    add.add_argument("name", help="the user name")
    add.add_argument("--password", required=True, help="the user's password")
    add.add_argument("--mechanism", choices=tuple(MECHANISMS), default="SCRAM-SHA-256",
                     help="the SCRAM mechanism of the credential")
    add.add_argument("--iterations", type=int, default=MIN_ITERATIONS, help="PBKDF2 iterations (4096 or more)")
    delete = usub.add_parser("delete", help="delete a user's SCRAM credential")
    delete.add_argument("name", help="the user name")
    delete.add_argument("--mechanism", choices=tuple(MECHANISMS), default="SCRAM-SHA-256",
                        help="the SCRAM mechanism of the credential")
    lst = usub.add_parser("list", help="users with SCRAM credentials")
    lst.add_argument("names", nargs="*", help="only these users (all when none is named)")
    add_bootstrap_argument(users, subcommand_parsers(users))
    users.set_defaults(func=run_users)


def _alter(client: KafkaClient, request: AlterUserScramCredentialsRequest) -> int:
    response = client.send(request, AlterUserScramCredentialsResponse)
    failed = [r for r in response.results if r.error_code != ErrorCode.NONE]
    for result in failed:
        print(f"cormorant users: {result.user}: {ErrorCode(result.error_code).name}: {result.error_message or ''}",
              file=sys.stderr)
    return EXIT_FAILURE if failed else 0


def run_users(args: argparse.Namespace) -> int:
    try:
        with KafkaClient.connect(args.bootstrap_server) as client:
            if args.action == "add":
                if not MIN_ITERATIONS <= args.iterations <= MAX_ITERATIONS:
                    print(f"cormorant users: --iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}", file=sys.stderr)
                    return EXIT_FAILURE
                salt = os.urandom(32)
                upsertion = AlterUserScramCredentialsRequestScramCredentialUpsertion(
                    name=args.name, mechanism=MECHANISMS[args.mechanism][1], iterations=args.iterations, salt=salt,
                    salted_password=salted_password(args.mechanism, args.password, salt, args.iterations))
                return _alter(client, AlterUserScramCredentialsRequest(upsertions=[upsertion]))
            if args.action == "delete":
                deletion = AlterUserScramCredentialsRequestScramCredentialDeletion(
                    name=args.name, mechanism=MECHANISMS[args.mechanism][1])
                return _alter(client, AlterUserScramCredentialsRequest(deletions=[deletion]))
            names = [DescribeUserScramCredentialsRequestUserName(name=n) for n in args.names]
            described = client.send(DescribeUserScramCredentialsRequest(users=names or None),
                                    DescribeUserScramCredentialsResponse)
            status = 0
            for result in described.results:
                if result.error_code != ErrorCode.NONE:
                    print(f"cormorant users: {result.user}: {result.error_message}", file=sys.stderr)
                    status = EXIT_FAILURE
                    continue
                infos = ", ".join(f"{MECHANISM_NAMES.get(i.mechanism, i.mechanism)} (iterations={i.iterations})"
                                  for i in result.credential_infos)
                print(f"{result.user}\t{infos}")
            return status
    except ClientError as ex:
        print(f"cormorant users: {ex}", file=sys.stderr)
        return EXIT_FAILURE
