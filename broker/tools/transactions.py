"""``cormorant transactions``: list and describe transactional ids, like kafka-transactions.sh.

Every action speaks the Kafka protocol through :class:`broker.tools.client.KafkaClient`, so it
works against any Kafka-compatible cluster:

- ``list [--duration-filter MS]``: ListTransactions at every broker (Metadata names them);
  one row per transactional id with the broker coordinating it;
- ``describe TXID`` (or ``--transactional-id TXID``): FindCoordinator, then
  DescribeTransactions at the coordinator.

Output is kafka-transactions.sh's table: each value left-aligned in a column as wide as its
longest value, columns ended by a tab. A failure prints one line on stderr and exits 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import TextIO

from broker.tools.client import ClientError, KafkaClient
from broker.tools.common import P, add_bootstrap_argument, subcommand_parsers
from wire.errors import ErrorCode
from wire.generated.api_003_metadata import MetadataRequest, MetadataResponse
from wire.generated.api_010_find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from wire.generated.api_065_describe_transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
)
from wire.generated.api_066_list_transactions import (
    ListTransactionsRequest,
    ListTransactionsResponse,
)

EXIT_FAILURE = 1
KEY_TYPE_TRANSACTION = 1
LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADERS = (
    "CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions",
)


class ToolError(Exception):
    """A failure to report on one line."""


def add_parser(sub: argparse._SubParsersAction[P]) -> P:
    txns = sub.add_parser("transactions", help="list and describe transactional ids")
    tsub = txns.add_subparsers(dest="action", required=True)
    lst = tsub.add_parser("list", help="list transactions")
    lst.add_argument("--duration-filter", type=int, default=-1, metavar="MS",
                     help="only transactions running longer than this many ms")
    describe = tsub.add_parser("describe", help="describe the state of a transactional id")
    describe.add_argument("transactional_id", nargs="?", metavar="TXID", help="the transactional id")
    describe.add_argument("--transactional-id", dest="transactional_id_option", metavar="TXID",
                          help="the transactional id (as kafka-transactions.sh takes it)")
    add_bootstrap_argument(txns, subcommand_parsers(txns))
    return txns


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]], out: TextIO) -> None:
    """Kafka's ToolsUtils.prettyPrintTable."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    for row in (headers, *rows):
        print("".join(value.ljust(width) + "\t" for value, width in zip(row, widths, strict=True)), file=out)


def run_transactions(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None,
                     now_ms: int | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        if args.action == "list":
            _list(args.bootstrap_server, args.duration_filter, out)
        else:
            transactional_id = args.transactional_id_option or args.transactional_id
            if not transactional_id:
                raise ToolError("describe needs a transactional id")
            _describe(args.bootstrap_server, transactional_id, out,
                      now_ms if now_ms is not None else time.time_ns() // 1_000_000)
    except (ClientError, ToolError) as ex:
        print(f"cormorant transactions: {ex}", file=err)
        return EXIT_FAILURE
    return 0


def _brokers(client: KafkaClient) -> list[tuple[int, str, int]]:
    response = client.send(MetadataRequest(topics=[], allow_auto_topic_creation=False), MetadataResponse)
    return sorted((b.node_id, b.host, b.port) for b in response.brokers)


def _list(bootstrap: str, duration_ms: int, out: TextIO) -> None:
    rows: list[list[str]] = []
    try:
        with KafkaClient.connect(bootstrap) as client:
            brokers = _brokers(client)
        for node_id, host, port in brokers:
            with KafkaClient(host, port) as client:
                request = ListTransactionsRequest(duration_filter=duration_ms)
                version = None if duration_ms < 0 else 1  # the filter needs v1 (KIP-994)
                response = client.send(request, ListTransactionsResponse, version)
            if response.error_code != ErrorCode.NONE:
                raise ToolError(f"{ErrorCode(response.error_code).description}")
            rows.extend([t.transactional_id, str(node_id), str(t.producer_id), t.transaction_state]
                        for t in response.transaction_states)
    except (ClientError, ToolError) as ex:
        raise ToolError(f"Failed to list transactions: {ex}") from ex
    print_table(LIST_HEADERS, rows, out)


def _describe(bootstrap: str, transactional_id: str, out: TextIO, now_ms: int) -> None:
    failed = f"Failed to describe transaction state of transactional-id `{transactional_id}`"
    try:
        with KafkaClient.connect(bootstrap) as client:
            version = client.version_for(FindCoordinatorRequest.API_KEY)
            # v4+ (KIP-699) batch keys; earlier versions carry one.
            request = (FindCoordinatorRequest(key_type=KEY_TYPE_TRANSACTION, coordinator_keys=[transactional_id])
                       if version >= 4 else FindCoordinatorRequest(key=transactional_id, key_type=KEY_TYPE_TRANSACTION))
            found = client.send(request, FindCoordinatorResponse, version)
        if found.coordinators:
            c = found.coordinators[0]
            error, node_id, host, port = c.error_code, c.node_id, c.host, c.port
        else:
            error, node_id, host, port = found.error_code, found.node_id, found.host, found.port
        if error != ErrorCode.NONE:
            raise ToolError(ErrorCode(error).description)
        with KafkaClient(host, port) as client:
            response = client.send(DescribeTransactionsRequest(transactional_ids=[transactional_id]),
                                   DescribeTransactionsResponse)
    except (ClientError, ToolError) as ex:
        raise ToolError(f"{failed}: {ex}") from ex
    state = response.transaction_states[0]
    if state.error_code != ErrorCode.NONE:
        raise ToolError(f"{failed}: {ErrorCode(state.error_code).description}")
    started = state.transaction_start_time_ms
    partitions = ",".join(f"{t.topic}-{p}" for t in state.topics for p in t.partitions)
    print_table(DESCRIBE_HEADERS, [[
        str(node_id), transactional_id, str(state.producer_id), str(state.producer_epoch), state.transaction_state,
        str(state.transaction_timeout_ms),
        str(started) if started >= 0 else "None",
        str(now_ms - started) if started >= 0 else "None",
        partitions,
    ]], out)
