"""Idempotence and transactions over the raw protocol, against a real broker process.

- The same (producer id, epoch, sequence) batch sent twice: the second answer carries the
  first offset and the log holds one copy; gaps and stale epochs are refused.
- A delayed EndTxn (KAFKA-17754): a client whose EndTxn timed out retries it on a new
  connection and starts its next transaction; the first EndTxn, arriving late on the old
  connection, must not commit or abort that next transaction.
- DescribeProducers, DescribeTransactions and ListTransactions report that state.
- WriteTxnMarkers v2 (KIP-1228): a transactions-v2 marker at the producer's current epoch
  is a zombie's (INVALID_PRODUCER_EPOCH); v1 markers may carry it.
- Transactions v2 survive a coordinator reload: after a restart, a retried EndTxn v5 (its
  answer lost before the restart) is still recognised by the epoch bump it caused.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from tests.broker.broker_process import BrokerProcess
from tests.broker.raw_client import RawClient
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.generated.api_000_produce import (
    ProduceRequest,
    ProduceRequestPartitionProduceData,
    ProduceRequestTopicProduceData,
    ProduceResponse,
)
from wire.generated.api_001_fetch import (
    FetchRequest,
    FetchRequestFetchPartition,
    FetchRequestFetchTopic,
    FetchResponse,
)
from wire.generated.api_003_metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from wire.generated.api_010_find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from wire.generated.api_022_init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from wire.generated.api_024_add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnRequestAddPartitionsToTxnTopic,
    AddPartitionsToTxnResponse,
)
from wire.generated.api_026_end_txn import EndTxnRequest, EndTxnResponse
from wire.generated.api_027_write_txn_markers import (
    WriteTxnMarkersRequest,
    WriteTxnMarkersRequestWritableTxnMarker,
    WriteTxnMarkersRequestWritableTxnMarkerTopic,
    WriteTxnMarkersResponse,
)
from wire.generated.api_061_describe_producers import (
    DescribeProducersRequest,
    DescribeProducersRequestTopicRequest,
    DescribeProducersResponse,
)
from wire.generated.api_065_describe_transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
)
from wire.generated.api_066_list_transactions import (
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from wire.primitives import Message
from wire.records import NewRecord, iter_batch_headers, iter_records
from wire.regions import FileRegion

TOPIC = "eos-wire"
M = TypeVar("M", bound=Message)
RETRIABLE = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
             ErrorCode.NOT_COORDINATOR, ErrorCode.CONCURRENT_TRANSACTIONS}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("eos") / "data",
                      {"transaction.state.log.num.partitions": "3", "num.partitions": "3"}).start()
    client = RawClient(b.bootstrap)
    meta = client.call(MetadataRequest(topics=[MetadataRequestTopic(name=TOPIC)]), MetadataResponse, 9)
    assert isinstance(meta, MetadataResponse) and meta.topics[0].error_code == 0
    client.close()
    try:
        yield b
    finally:
        b.kill9()


def call(client: RawClient, body: Message, response_type: type[M], version: int) -> M:
    response = client.call(body, response_type, version)
    assert isinstance(response, response_type)
    return response


def retrying(attempt: Callable[[], tuple[int, M]]) -> M:
    """Repeat ``attempt`` while it answers a retriable coordinator error (bounded)."""
    deadline = time.monotonic() + 15
    while True:
        error, response = attempt()
        if error not in RETRIABLE or time.monotonic() > deadline:
            return response
        time.sleep(0.05)


def batch(pid: int, epoch: int, seq: int, values: list[bytes], *, txn: bool = False) -> bytes:
    now = int(time.time() * 1000)
    return build_batch([NewRecord(b"k", v, timestamp=now) for v in values],
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn)


def produce(client: RawClient, data: bytes, transactional_id: str | None = None,
            partition: int = 0) -> tuple[int, int]:
    request = ProduceRequest(transactional_id=transactional_id, acks=-1, timeout_ms=5000, topic_data=[
        ProduceRequestTopicProduceData(name=TOPIC, partition_data=[
            ProduceRequestPartitionProduceData(index=partition, records=data)])])
    p = call(client, request, ProduceResponse, 9).responses[0].partition_responses[0]
    return p.error_code, p.base_offset


def fetch(client: RawClient, partition: int, read_committed: bool) -> tuple[list[bytes], int, int]:
    """The record values (control records left out), the high watermark and the LSO."""
    request = FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=int(read_committed),
                           topics=[FetchRequestFetchTopic(topic=TOPIC, partitions=[FetchRequestFetchPartition(
                               partition=partition, fetch_offset=0, partition_max_bytes=1 << 20)])])
    pd = call(client, request, FetchResponse, 11).responses[0].partitions[0]
    records = pd.records
    data = records.read() if isinstance(records, FileRegion) else bytes(records or b"")
    # As a read_committed client does: a producer's records are skipped from the first offset
    # of an aborted transaction up to its ABORT marker.
    pending = sorted((t.first_offset, t.producer_id) for t in pd.aborted_transactions or [])
    skipping: set[int] = set()
    values: list[bytes] = []
    for pos, header in iter_batch_headers(data):
        while pending and pending[0][0] <= header.last_offset:
            skipping.add(pending.pop(0)[1])
        if header.is_control:
            marker = next(iter_records(data, pos))
            if marker.key is not None and marker.key[3] == 0:  # ABORT
                skipping.discard(header.producer_id)
            continue
        if read_committed and header.is_transactional and header.producer_id in skipping:
            continue
        values.extend(r.value or b"" for r in iter_records(data, pos))
    return values, pd.high_watermark, pd.last_stable_offset


def init_producer_id(client: RawClient, transactional_id: str | None) -> tuple[int, int]:
    def attempt() -> tuple[int, InitProducerIdResponse]:
        r = call(client, InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=60_000),
                 InitProducerIdResponse, 4)
        return r.error_code, r
    r = retrying(attempt)
    assert r.error_code == ErrorCode.NONE, ErrorCode(r.error_code).name
    return r.producer_id, r.producer_epoch


def add_partition(client: RawClient, transactional_id: str, pid: int, epoch: int, partition: int = 0) -> int:
    def attempt() -> tuple[int, AddPartitionsToTxnResponse]:
        r = call(client, AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=transactional_id, v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch, v3_and_below_topics=[
                AddPartitionsToTxnRequestAddPartitionsToTxnTopic(name=TOPIC, partitions=[partition])]),
            AddPartitionsToTxnResponse, 3)
        return r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code, r
    r = retrying(attempt)
    return r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code


def end_txn(client: RawClient, transactional_id: str, pid: int, epoch: int, commit: bool) -> int:
    r = call(client, EndTxnRequest(transactional_id=transactional_id, producer_id=pid, producer_epoch=epoch,
                                   committed=commit), EndTxnResponse, 3)
    return r.error_code


def describe(client: RawClient, transactional_id: str) -> tuple[int, str]:
    r = call(client, DescribeTransactionsRequest(transactional_ids=[transactional_id]),
             DescribeTransactionsResponse, 0)
    state = r.transaction_states[0]
    return state.error_code, state.transaction_state


def wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_the_same_batch_twice_gets_the_first_offset_and_is_stored_once(broker: BrokerProcess) -> None:
    client = RawClient(broker.bootstrap)
    try:
        pid, epoch = init_producer_id(client, None)
        assert epoch == 0
        first = batch(pid, epoch, 0, [b"a", b"b", b"c"])
        error, offset = produce(client, first, partition=1)
        assert error == ErrorCode.NONE
        assert produce(client, first, partition=1) == (ErrorCode.NONE, offset)
        assert produce(client, batch(pid, epoch, 3, [b"d"]), partition=1) == (ErrorCode.NONE, offset + 3)
        assert produce(client, first, partition=1) == (ErrorCode.NONE, offset)
        values, hw, _ = fetch(client, 1, read_committed=False)
        assert values == [b"a", b"b", b"c", b"d"] and hw == offset + 4

        assert produce(client, batch(pid, epoch, 9, [b"gap"]), partition=1)[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert produce(client, batch(pid, 1, 5, [b"new epoch"]), partition=1)[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert produce(client, batch(pid, 1, 0, [b"e"]), partition=1) == (ErrorCode.NONE, offset + 4)
        assert produce(client, batch(pid, 0, 4, [b"stale"]), partition=1)[0] == ErrorCode.INVALID_PRODUCER_EPOCH
        assert fetch(client, 1, read_committed=False)[0] == [b"a", b"b", b"c", b"d", b"e"]
        assert produce(client, batch(pid, 1, -1, [b"no sequence"]), partition=1)[0] == ErrorCode.INVALID_RECORD
        # Transactional records need a transactional id.
        assert produce(client, batch(pid, 1, 1, [b"t"], txn=True), partition=1)[0] == \
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

        r = call(client, DescribeProducersRequest(topics=[DescribeProducersRequestTopicRequest(
            name=TOPIC, partition_indexes=[1])]), DescribeProducersResponse, 0)
        producers = r.topics[0].partitions[0].active_producers
        assert [(p.producer_id, p.producer_epoch, p.last_sequence) for p in producers] == [(pid, 1, 0)]
    finally:
        client.close()


def test_a_late_end_txn_does_not_settle_the_next_transaction(broker: BrokerProcess) -> None:
    tid = f"late-end-txn-{time.monotonic_ns()}"
    old = RawClient(broker.bootstrap)
    r = call(old, FindCoordinatorRequest(key=tid, key_type=1), FindCoordinatorResponse, 3)
    assert r.error_code == ErrorCode.NONE
    pid, epoch = init_producer_id(old, tid)
    assert add_partition(old, tid, pid, epoch) == ErrorCode.NONE
    assert produce(old, batch(pid, epoch, 0, [b"t1-a", b"t1-b"], txn=True), tid)[0] == ErrorCode.NONE
    # The client's EndTxn on ``old`` is delayed; it times out, reconnects and retries it.
    new = RawClient(broker.bootstrap)
    try:
        assert end_txn(new, tid, pid, epoch, commit=False) == ErrorCode.NONE
        assert add_partition(new, tid, pid, epoch) == ErrorCode.NONE  # the next transaction
        assert produce(new, batch(pid, epoch, 2, [b"t2-a", b"t2-b", b"t2-c"], txn=True), tid)[0] == ErrorCode.NONE
        assert describe(new, tid) == (ErrorCode.NONE, "Ongoing")

        # Now the delayed EndTxn arrives on the old connection: it must not end this transaction.
        assert end_txn(old, tid, pid, epoch, commit=True) == ErrorCode.CONCURRENT_TRANSACTIONS
        assert end_txn(old, tid, pid, epoch, commit=False) == ErrorCode.CONCURRENT_TRANSACTIONS
        assert describe(new, tid) == (ErrorCode.NONE, "Ongoing")
        values, hw, lso = fetch(new, 0, read_committed=True)
        assert not any(v.startswith(b"t2") for v in values) and lso < hw

        assert end_txn(new, tid, pid, epoch, commit=True) == ErrorCode.NONE
        # A retry is fine: CONCURRENT_TRANSACTIONS while the markers are written (PrepareCommit, as
        # Kafka answers; clients retry it), then NONE.
        retried: list[int] = []
        wait_for(lambda: retried.append(end_txn(new, tid, pid, epoch, commit=True)) or retried[-1] == ErrorCode.NONE,
                 "the retried EndTxn to succeed")
        assert set(retried) <= {ErrorCode.NONE, ErrorCode.CONCURRENT_TRANSACTIONS}, retried
        wait_for(lambda: describe(new, tid)[1] == "CompleteCommit", "the commit to complete")
        wait_for(lambda: fetch(new, 0, read_committed=True)[2] == fetch(new, 0, read_committed=True)[1],
                 "the LSO to reach the high watermark")
        values = [v for v in fetch(new, 0, read_committed=True)[0] if v.startswith(b"t")]
        assert values == [b"t2-a", b"t2-b", b"t2-c"]
        everything = [v for v in fetch(new, 0, read_committed=False)[0] if v.startswith(b"t")]
        assert everything == [b"t1-a", b"t1-b", b"t2-a", b"t2-b", b"t2-c"]

        listed = call(new, ListTransactionsRequest(state_filters=["CompleteCommit"]), ListTransactionsResponse, 1)
        assert tid in {t.transactional_id for t in listed.transaction_states}
        assert listed.unknown_state_filters == []
        unknown = call(new, ListTransactionsRequest(state_filters=["Bogus"]), ListTransactionsResponse, 1)
        assert unknown.unknown_state_filters == ["Bogus"]
    finally:
        old.close()
        new.close()


def test_a_new_producer_with_the_same_transactional_id_fences_the_old_one(broker: BrokerProcess) -> None:
    tid = f"fence-{time.monotonic_ns()}"
    client = RawClient(broker.bootstrap)
    try:
        call(client, FindCoordinatorRequest(key=tid, key_type=1), FindCoordinatorResponse, 3)
        pid, epoch = init_producer_id(client, tid)
        assert add_partition(client, tid, pid, epoch, partition=2) == ErrorCode.NONE
        assert produce(client, batch(pid, epoch, 0, [b"zombie"], txn=True), tid, partition=2)[0] == ErrorCode.NONE
        # A second instance: its InitProducerId aborts the open transaction with a bumped epoch
        # (answering CONCURRENT_TRANSACTIONS), and its retry bumps it once more (as Kafka).
        pid2, epoch2 = init_producer_id(client, tid)
        assert (pid2, epoch2) == (pid, epoch + 2)
        assert end_txn(client, tid, pid, epoch, commit=True) == ErrorCode.PRODUCER_FENCED
        assert add_partition(client, tid, pid, epoch, partition=2) == ErrorCode.PRODUCER_FENCED
        assert produce(client, batch(pid, epoch, 1, [b"zombie2"], txn=True), tid, partition=2)[0] == \
            ErrorCode.INVALID_PRODUCER_EPOCH
        values, hw, lso = fetch(client, 2, read_committed=True)
        assert b"zombie" not in values and lso == hw
    finally:
        client.close()


def test_the_transactions_tool_lists_and_describes(broker: BrokerProcess) -> None:
    import io

    from broker.cli import build_parser
    from broker.tools.transactions import run_transactions

    tid = f"tool-{time.monotonic_ns()}"
    client = RawClient(broker.bootstrap)
    try:
        call(client, FindCoordinatorRequest(key=tid, key_type=1), FindCoordinatorResponse, 3)
        pid, epoch = init_producer_id(client, tid)
        assert add_partition(client, tid, pid, epoch, partition=1) == ErrorCode.NONE
    finally:
        client.close()

    def run(*argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        args = build_parser().parse_args(["transactions", "--bootstrap-server", broker.bootstrap, *argv])
        return run_transactions(args, out, err, now_ms=2_000_000_000_000), out.getvalue(), err.getvalue()

    code, out, _ = run("list")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    assert [tid, "1", str(pid), "Ongoing"] in [line.split() for line in lines[1:]]
    code, out, _ = run("describe", tid)
    assert code == 0
    header, row = (line.split("\t") for line in out.splitlines())
    described = dict(zip((h.strip() for h in header), (v.strip() for v in row), strict=False))
    assert described["TransactionalId"] == tid and described["TransactionState"] == "Ongoing"
    assert described["ProducerId"] == str(pid) and described["ProducerEpoch"] == str(epoch)
    assert described["TopicPartitions"] == f"{TOPIC}-1" and described["TransactionTimeoutMs"] == "60000"
    assert int(described["TransactionDurationMs"]) == 2_000_000_000_000 - int(described["CurrentTransactionStartTimeMs"])
    code, _, err = run("describe", "--transactional-id", "no-such-id")
    assert code == 1 and "Failed to describe transaction state of transactional-id `no-such-id`" in err


def test_timeouts_abort_transactions_and_idle_transactional_ids_expire(tmp_path_factory: pytest.TempPathFactory) -> None:
    b = BrokerProcess(tmp_path_factory.mktemp("eos-expiry") / "data", {
        "transaction.state.log.num.partitions": "1", "num.partitions": "1",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
        "transaction.remove.expired.transaction.cleanup.interval.ms": "200",
        "transactional.id.expiration.ms": "1500",
    }).start()
    client = RawClient(b.bootstrap)
    try:
        call(client, MetadataRequest(topics=[MetadataRequestTopic(name=TOPIC)]), MetadataResponse, 9)
        call(client, FindCoordinatorRequest(key="slow", key_type=1), FindCoordinatorResponse, 3)

        def attempt() -> tuple[int, InitProducerIdResponse]:
            r = call(client, InitProducerIdRequest(transactional_id="slow", transaction_timeout_ms=500),
                     InitProducerIdResponse, 4)
            return r.error_code, r
        r = retrying(attempt)
        pid, epoch = r.producer_id, r.producer_epoch
        assert add_partition(client, "slow", pid, epoch) == ErrorCode.NONE
        assert produce(client, batch(pid, epoch, 0, [b"slow"], txn=True), "slow")[0] == ErrorCode.NONE
        # The transaction outlives its timeout: aborted, with the epoch bumped to fence the producer.
        wait_for(lambda: describe(client, "slow")[1] == "CompleteAbort", "the timed-out transaction's abort")
        assert end_txn(client, "slow", pid, epoch, commit=True) == ErrorCode.PRODUCER_FENCED
        values, hw, lso = fetch(client, 0, read_committed=True)
        assert values == [] and lso == hw
        # Then, unused for transactional.id.expiration.ms, the id itself goes.
        wait_for(lambda: describe(client, "slow")[0] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
                 "the transactional id to expire")
    finally:
        client.close()
        b.kill9()


def test_idle_producers_expire_on_every_partition(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The periodic expiration (a slice of partitions per event-loop step) reaches every
    partition: an idempotent producer idle for ``producer.id.expiration.ms`` is no longer
    listed by DescribeProducers, a busy one still is."""
    partitions = 2_500
    b = BrokerProcess(tmp_path_factory.mktemp("producer-expiry") / "data", {
        "num.partitions": str(partitions), "producer.id.expiration.ms": "3000",
        "producer.id.expiration.check.interval.ms": "500",
    }).start()
    client = RawClient(b.bootstrap)
    try:
        call(client, MetadataRequest(topics=[MetadataRequestTopic(name=TOPIC)]), MetadataResponse, 9)
        idle_pid, _ = init_producer_id(client, None)
        busy_pid, _ = init_producer_id(client, None)
        last = partitions - 1
        # The auto-created topic's 2,500 replicas may still be being made.
        created_by = time.monotonic() + 60
        while (code := produce(client, batch(idle_pid, 0, 0, [b"idle"]), partition=last)[0]) in (
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER) \
                and time.monotonic() < created_by:
            time.sleep(0.2)
        assert code == ErrorCode.NONE, ErrorCode(code).name

        def active(partition: int) -> set[int]:
            r = call(client, DescribeProducersRequest(topics=[DescribeProducersRequestTopicRequest(
                name=TOPIC, partition_indexes=[partition])]), DescribeProducersResponse, 0)
            return {p.producer_id for p in r.topics[0].partitions[0].active_producers}

        assert active(last) == {idle_pid}
        seq = 0
        deadline = time.monotonic() + 30
        while idle_pid in active(last):
            assert time.monotonic() < deadline, "the idle producer never expired"
            assert produce(client, batch(busy_pid, 0, seq, [b"busy"]), partition=last)[0] == ErrorCode.NONE
            seq += 1
            time.sleep(0.2)
        assert active(last) == {busy_pid}
    finally:
        client.close()
        b.kill9()


def test_a_transactions_v2_end_txn_retry_is_recognised_after_a_restart(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    b = BrokerProcess(tmp_path_factory.mktemp("eos-tv2") / "data", {
        "transaction.state.log.num.partitions": "1", "num.partitions": "1"}).start()
    try:
        client = RawClient(b.bootstrap)
        call(client, MetadataRequest(topics=[MetadataRequestTopic(name=TOPIC)]), MetadataResponse, 9)
        call(client, FindCoordinatorRequest(key="tv2", key_type=1), FindCoordinatorResponse, 3)

        def init() -> tuple[int, InitProducerIdResponse]:
            r = call(client, InitProducerIdRequest(transactional_id="tv2", transaction_timeout_ms=60_000),
                     InitProducerIdResponse, 5)
            return r.error_code, r
        r = retrying(init)
        pid, epoch = r.producer_id, r.producer_epoch
        # Transactions v2: Produce v12 adds the partition, EndTxn v5 bumps the epoch.
        request = ProduceRequest(transactional_id="tv2", acks=-1, timeout_ms=5000, topic_data=[
            ProduceRequestTopicProduceData(name=TOPIC, partition_data=[
                ProduceRequestPartitionProduceData(index=0, records=batch(pid, epoch, 0, [b"v2"], txn=True))])])
        assert call(client, request, ProduceResponse, 12).responses[0].partition_responses[0].error_code == 0
        ended = call(client, EndTxnRequest(transactional_id="tv2", producer_id=pid, producer_epoch=epoch,
                                           committed=True), EndTxnResponse, 5)
        assert (ended.error_code, ended.producer_epoch) == (ErrorCode.NONE, epoch + 1)
        wait_for(lambda: describe(client, "tv2")[1] == "CompleteCommit", "the commit to complete")
        client.close()
        b.restart()
        client = RawClient(b.bootstrap)
        call(client, FindCoordinatorRequest(key="tv2", key_type=1), FindCoordinatorResponse, 3)

        def retry() -> tuple[int, EndTxnResponse]:
            r = call(client, EndTxnRequest(transactional_id="tv2", producer_id=pid, producer_epoch=epoch,
                                           committed=True), EndTxnResponse, 5)
            return r.error_code, r
        again = retrying(retry)
        # Read as a transactions v1 id (the client version lost), the old epoch would be fenced.
        assert (again.error_code, again.producer_id, again.producer_epoch) == (ErrorCode.NONE, pid, epoch + 1)
        client.close()
    finally:
        b.kill9()


def test_a_transactions_v2_marker_needs_a_bumped_epoch(broker: BrokerProcess) -> None:
    client = RawClient(broker.bootstrap)
    try:
        pid, epoch = init_producer_id(client, "kip-1228")
        assert add_partition(client, "kip-1228", pid, epoch, partition=1) == ErrorCode.NONE
        assert produce(client, batch(pid, epoch, 0, [b"m"], txn=True), "kip-1228", partition=1)[0] == ErrorCode.NONE

        def marker(marker_epoch: int, transaction_version: int, version: int = 2) -> int:
            request = WriteTxnMarkersRequest(markers=[WriteTxnMarkersRequestWritableTxnMarker(
                producer_id=pid, producer_epoch=marker_epoch, transaction_result=False, coordinator_epoch=0,
                transaction_version=transaction_version if version >= 2 else 0,
                topics=[WriteTxnMarkersRequestWritableTxnMarkerTopic(name=TOPIC, partition_indexes=[1])])])
            r = call(client, request, WriteTxnMarkersResponse, version)
            return r.markers[0].topics[0].partitions[0].error_code

        assert marker(epoch, 2) == ErrorCode.INVALID_PRODUCER_EPOCH
        assert marker(epoch - 1, 1) == ErrorCode.INVALID_PRODUCER_EPOCH
        assert marker(epoch, 1, version=1) == ErrorCode.NONE  # transactions v1: the same epoch
        assert marker(epoch + 1, 2) == ErrorCode.NONE
    finally:
        client.close()
