"""TxnOffsetCommit when the group's coordinator and the transaction coordinator are different
brokers of a 3-node cluster, over the raw protocol.

The group coordinator verifies that ``__consumer_offsets`` is in the producer's transaction by
asking the remote transaction coordinator (AddPartitionsToTxn v4, verify only) and maps its
answer as Kafka does: an added partition commits (visible to require_stable fetches once
EndTxn's marker lands), a fenced epoch is INVALID_PRODUCER_EPOCH, a group that was not added is
INVALID_TXN_STATE; a broker that does not coordinate the group answers NOT_COORDINATOR without
asking anyone. A member that left the group cannot commit in a transaction either (KIP-447).
(Real clients: compat_tests/test_cluster_mode.py.)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.coordinator.hashing import partition_for
from broker.tools.client import KafkaClient
from tests.broker.test_group_apis import join_member, sync
from tests.integration.quorum_cluster import Node
from tests.replication.fault_cluster import CLUSTER_OVERRIDES, FaultCluster
from wire.errors import ErrorCode
from wire.generated.api_009_offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopics,
    OffsetFetchResponse,
)
from wire.generated.api_013_leave_group import (
    LeaveGroupRequest,
    LeaveGroupRequestMemberIdentity,
    LeaveGroupResponse,
)
from wire.generated.api_022_init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from wire.generated.api_025_add_offsets_to_txn import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
)
from wire.generated.api_026_end_txn import EndTxnRequest, EndTxnResponse
from wire.generated.api_028_txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
    TxnOffsetCommitResponse,
)

pytestmark = [pytest.mark.timeout(300)]

GROUP, TRANSACTION = 0, 1
TOPIC = "txn-offsets"
NONE = ErrorCode.NONE


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultCluster]:
    base: Path = tmp_path_factory.mktemp("txn-offsets")
    with FaultCluster(base) as c:
        c.create_topic(TOPIC, partitions=2)
        yield c


def apart(cluster: FaultCluster, tag: str) -> tuple[str, Node, str, Node]:
    """A group id and a transactional id coordinated by different nodes."""
    txn_id = f"{tag}-txn"
    txn_node = cluster.find_coordinator(txn_id, TRANSACTION)
    for i in range(64):
        group_id = f"{tag}-group-{i}"
        group_node = cluster.find_coordinator(group_id, GROUP)
        if group_node.node_id != txn_node.node_id:
            return group_id, group_node, txn_id, txn_node
    raise AssertionError("no group coordinated apart from the transaction")


def retry(send: object, attempts_s: float = 20.0) -> int:
    """Retries a request while the coordinator is loading or busy; returns its final error code."""
    assert callable(send)
    deadline = time.monotonic() + attempts_s
    while True:
        code: int = send()
        retriable = code in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS,
                             ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if not retriable or time.monotonic() > deadline:
            return code
        time.sleep(0.2)


def begin(client: KafkaClient, txn_id: str, group_id: str) -> tuple[int, int]:
    """InitProducerId then AddOffsetsToTxn for ``group_id``: (producer id, epoch)."""
    deadline = time.monotonic() + 20
    while True:
        init = client.send(InitProducerIdRequest(transactional_id=txn_id, transaction_timeout_ms=60_000),
                           InitProducerIdResponse, 4)
        if init.error_code == NONE:
            break
        assert time.monotonic() < deadline, ErrorCode.for_code(init.error_code)
        time.sleep(0.2)
    pid, epoch = init.producer_id, init.producer_epoch
    code = retry(lambda: client.send(AddOffsetsToTxnRequest(transactional_id=txn_id, producer_id=pid,
                                                            producer_epoch=epoch, group_id=group_id),
                                     AddOffsetsToTxnResponse, 3).error_code)
    assert code == NONE, ErrorCode.for_code(code)
    return pid, epoch


def txn_commit(client: KafkaClient, txn_id: str, group_id: str, pid: int, epoch: int, offset: int,
               version: int = 3) -> int:
    request = TxnOffsetCommitRequest(
        transactional_id=txn_id, group_id=group_id, producer_id=pid, producer_epoch=epoch,
        topics=[TxnOffsetCommitRequestTopic(name=TOPIC, partitions=[
            TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=offset)])])

    def send() -> int:
        [topic] = client.send(request, TxnOffsetCommitResponse, version).topics
        return topic.partitions[0].error_code

    return retry(send)


def stable_offset(client: KafkaClient, group_id: str) -> int:
    r = client.send(OffsetFetchRequest(require_stable=True, groups=[OffsetFetchRequestGroup(
        group_id=group_id, topics=[OffsetFetchRequestTopics(name=TOPIC, partition_indexes=[0])])]),
        OffsetFetchResponse, 8)
    [group] = r.groups
    [topic] = group.topics
    return topic.partitions[0].committed_offset if topic.partitions[0].error_code == NONE else -2


@pytest.mark.parametrize("version", [0, 2, 3])
def test_offsets_commit_with_a_transaction_coordinated_elsewhere(cluster: FaultCluster, version: int) -> None:
    group_id, group_node, txn_id, txn_node = apart(cluster, f"apart-v{version}")
    with cluster.client(txn_node, 20) as txn_client, cluster.client(group_node, 20) as group_client:
        pid, epoch = begin(txn_client, txn_id, group_id)
        assert txn_commit(group_client, txn_id, group_id, pid, epoch, 42, version) == NONE
        code = retry(lambda: txn_client.send(EndTxnRequest(transactional_id=txn_id, producer_id=pid,
                                                           producer_epoch=epoch, committed=True),
                                             EndTxnResponse, 3).error_code)
        assert code == NONE, ErrorCode.for_code(code)
        deadline = time.monotonic() + 20
        while stable_offset(group_client, group_id) != 42:
            assert time.monotonic() < deadline, "the committed transaction's offset never became stable"
            time.sleep(0.2)


def test_the_remote_coordinators_refusals_are_mapped_as_kafka_does(cluster: FaultCluster) -> None:
    group_id, group_node, txn_id, txn_node = apart(cluster, "refused")
    with cluster.client(txn_node, 20) as txn_client, cluster.client(group_node, 20) as group_client:
        pid, epoch = begin(txn_client, txn_id, group_id)
        # A stale epoch: the coordinator says PRODUCER_FENCED, the client hears INVALID_PRODUCER_EPOCH.
        assert txn_commit(group_client, txn_id, group_id, pid, epoch - 1 if epoch else epoch + 1, 1) == \
            ErrorCode.INVALID_PRODUCER_EPOCH
        # A group whose __consumer_offsets partition the transaction never added.
        partitions = int(CLUSTER_OVERRIDES["offsets.topic.num.partitions"])
        other = next(g for g in (f"refused-other-{i}" for i in range(200))
                     if partition_for(g, partitions) != partition_for(group_id, partitions))
        with cluster.client(cluster.find_coordinator(other, GROUP), 20) as other_client:
            assert txn_commit(other_client, txn_id, other, pid, epoch, 1) == ErrorCode.INVALID_TXN_STATE
        # A broker that does not coordinate the group.
        elsewhere = next(n for n in cluster.brokers() if n.node_id != group_node.node_id)
        with cluster.client(elsewhere, 20) as wrong:
            assert txn_commit(wrong, txn_id, group_id, pid, epoch, 1) == ErrorCode.NOT_COORDINATOR
        assert txn_commit(group_client, txn_id, group_id, pid, epoch, 7) == NONE
        code = retry(lambda: txn_client.send(EndTxnRequest(transactional_id=txn_id, producer_id=pid,
                                                           producer_epoch=epoch, committed=False),
                                             EndTxnResponse, 3).error_code)
        assert code == NONE, ErrorCode.for_code(code)
        time.sleep(1.0)
        assert stable_offset(group_client, group_id) == -1  # aborted: nothing committed


def test_a_member_that_left_cannot_commit_in_a_transaction(cluster: FaultCluster) -> None:
    """KIP-447: TxnOffsetCommit v3 carries the member and generation, fenced as OffsetCommit is."""
    group_id, group_node, txn_id, txn_node = apart(cluster, "left-member")
    with cluster.client(txn_node, 20) as txn_client, cluster.client(group_node, 20) as group_client:
        member = join_member(group_client, group_id, topic=TOPIC)
        assert sync(group_client, group_id, member.generation_id, member.member_id).error_code == NONE
        pid, epoch = begin(txn_client, txn_id, group_id)

        def commit_as(member_id: str, generation: int) -> int:
            request = TxnOffsetCommitRequest(
                transactional_id=txn_id, group_id=group_id, producer_id=pid, producer_epoch=epoch,
                member_id=member_id, generation_id=generation,
                topics=[TxnOffsetCommitRequestTopic(name=TOPIC, partitions=[
                    TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=5)])])
            return retry(lambda: group_client.send(request, TxnOffsetCommitResponse, 3).topics[0]
                         .partitions[0].error_code)

        assert commit_as(member.member_id, member.generation_id + 1) == ErrorCode.ILLEGAL_GENERATION
        assert commit_as(member.member_id, member.generation_id) == NONE
        left = group_client.send(LeaveGroupRequest(group_id=group_id, members=[
            LeaveGroupRequestMemberIdentity(member_id=member.member_id)]), LeaveGroupResponse, 5)
        assert [m.error_code for m in left.members] == [NONE]
        assert commit_as(member.member_id, member.generation_id) == ErrorCode.UNKNOWN_MEMBER_ID
        code = retry(lambda: txn_client.send(EndTxnRequest(transactional_id=txn_id, producer_id=pid,
                                                           producer_epoch=epoch, committed=True),
                                             EndTxnResponse, 3).error_code)
        assert code == NONE, ErrorCode.for_code(code)
        deadline = time.monotonic() + 20
        while stable_offset(group_client, group_id) != 5:
            assert time.monotonic() < deadline, "the member's transactional commit never became stable"
            time.sleep(0.2)
