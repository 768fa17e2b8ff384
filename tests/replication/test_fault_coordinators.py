"""A consumer group member keeps working while its group coordinator is SIGKILLed and restarted,
and a transactional producer while its transaction coordinator is: ``__consumer_offsets`` and
``__transaction_state`` are replicated (RF=3), so their state moves with the leadership.

Checks: the member consumes every acknowledged input value (at least once), keeps consuming and
committing after the fault, and what it last committed is still stored; transactions commit after
the fault; read_committed shows every committed transactional value exactly once and no aborted
one; the input topic's history checks out.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.replication.fault_checker import History, Outcome, Send, check, drain, encode_value
from tests.replication.fault_cluster import (
    FaultCluster,
    start_writers,
    stop_writers,
)

pytestmark = [pytest.mark.timeout(300)]

GROUP = "fault-group"
TXN_ID = "fault-tx"
INPUT = "input"
TXN_TOPIC = "txn-out"
TXN_SIZE = 5


class Member:
    """A confluent-kafka group member that commits synchronously about every second."""

    def __init__(self, bootstrap: list[str], group_protocol: str = "classic") -> None:
        self.bootstrap = bootstrap
        self.group_protocol = group_protocol
        self.consumed: list[tuple[float, str]] = []
        self.commit_errors: list[str] = []
        self.commits = 0
        #: Partition -> the offset the last successful commit stored.
        self.last_committed: dict[int, int] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        from confluent_kafka import Consumer, KafkaException

        config: dict[str, Any] = {
            "bootstrap.servers": ",".join(self.bootstrap), "group.id": GROUP, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "topic.metadata.refresh.interval.ms": 1000,
            "reconnect.backoff.max.ms": 1000, "log_level": 2}
        if self.group_protocol == "consumer":  # KIP-848: the coordinator owns session and heartbeat
            config["group.protocol"] = "consumer"
        else:
            config.update({"session.timeout.ms": 10_000, "heartbeat.interval.ms": 1000})
        consumer = Consumer(config)
        consumer.subscribe([INPUT])
        last_commit = time.monotonic()
        try:
            while not self.stop.is_set():
                msg = consumer.poll(0.2)
                value = msg.value() if msg is not None and msg.error() is None else None
                if value is not None:
                    self.consumed.append((time.monotonic(), value.decode()))
                if time.monotonic() - last_commit >= 1.0:
                    last_commit = time.monotonic()
                    try:
                        done = consumer.commit(asynchronous=False) or []
                        self.commits += 1
                        for tp in done:
                            if tp.error is None and tp.offset >= 0:
                                self.last_committed[tp.partition] = tp.offset
                    except KafkaException as ex:
                        self.commit_errors.append(str(ex))
        finally:
            consumer.close()


class TransactionalWriter:
    """Transactions of TXN_SIZE values each; committed ones are ACKED, aborted ones FAILED."""

    def __init__(self, bootstrap: list[str], history: History) -> None:
        self.bootstrap = bootstrap
        self.history = history
        self.committed_at: list[float] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def _producer(self) -> Any:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": ",".join(self.bootstrap), "transactional.id": TXN_ID,
                             "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                             "transaction.timeout.ms": 30_000, "request.timeout.ms": 5000,
                             "topic.metadata.refresh.interval.ms": 1000, "reconnect.backoff.max.ms": 1000,
                             "log_level": 2})
        producer.init_transactions(60)
        return producer

    def run(self) -> None:
        from confluent_kafka import KafkaException

        seq = 0
        producer = None
        while not self.stop.is_set():
            first = seq
            started = time.monotonic()
            offsets: dict[int, int] = {}
            try:
                if producer is None:
                    producer = self._producer()
                producer.begin_transaction()
                for _ in range(TXN_SIZE):
                    producer.produce(TXN_TOPIC, value=encode_value("tx", seq).encode(), partition=0,
                                     on_delivery=self._delivered(offsets, seq))
                    seq += 1
                self._commit(producer)
                done = time.monotonic()
                for s in range(first, seq):
                    self.history.add(Send("tx", s, TXN_TOPIC, 0, started, done, Outcome.ACKED, offsets.get(s)))
                self.committed_at.append(done)
                time.sleep(0.2)
            except KafkaException as ex:
                err = ex.args[0]
                self.errors.append(str(err))
                done = time.monotonic()
                outcome = Outcome.UNKNOWN
                if producer is not None and not err.fatal() and err.txn_requires_abort():
                    try:
                        producer.abort_transaction(30)
                        outcome = Outcome.FAILED
                    except KafkaException as abort_error:
                        self.errors.append(f"abort: {abort_error}")
                        producer = None
                else:  # fatal, or a state this client cannot leave: a new producer fences this one
                    producer = None
                for s in range(first, seq):
                    self.history.add(Send("tx", s, TXN_TOPIC, 0, started, done, outcome, error=err.name()))
                time.sleep(0.5)

    @staticmethod
    def _delivered(offsets: dict[int, int], seq: int) -> Any:
        def callback(err: Any, msg: Any) -> None:
            if err is None:
                offsets[seq] = msg.offset()
        return callback

    @staticmethod
    def _commit(producer: Any) -> None:
        from confluent_kafka import KafkaException

        for _ in range(10):
            try:
                producer.commit_transaction(30)
                return
            except KafkaException as ex:
                if not ex.args[0].retriable():
                    raise
                time.sleep(0.5)
        producer.commit_transaction(30)


def kill_coordinator(cluster: FaultCluster, key: str, key_type: int, topics: list[str]) -> None:
    """SIGKILL the coordinator of ``key`` (group: 0, transactional id: 1), restart it, wait for a full ISR."""
    coordinator = cluster.find_coordinator(key, key_type)
    cluster.kill(coordinator, f"SIGKILL node {coordinator.node_id}, coordinator of {key}")
    time.sleep(2.0)
    cluster.restart(coordinator)
    cluster.wait_in_sync(topics, 60.0)


def consuming(member: Member, since: float) -> bool:
    consumed = sum(1 for t, _ in member.consumed if t > since)
    assert consumed > 20 and member.commits > 0, (f"consumed {consumed}, commits {member.commits}; "
                                                   f"commit errors {member.commit_errors[-3:]}")
    return True


def committing(txn: TransactionalWriter, since: float) -> bool:
    committed = sum(1 for t in txn.committed_at if t > since)
    assert committed > 3, f"transactions committed {committed}; errors {txn.errors[-3:]}"
    return True


def committed_offsets(bootstrap: list[str], partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": ",".join(bootstrap), "group.id": GROUP, "log_level": 2})
    try:
        found = consumer.committed([TopicPartition(INPUT, p) for p in range(partitions)], timeout=20)
        return {tp.partition: tp.offset for tp in found}
    finally:
        consumer.close()


@pytest.mark.parametrize("group_protocol", ["classic", "consumer"])
def test_group_member_survives_group_coordinator_failover(tmp_path: Path, group_protocol: str) -> None:
    """Both group protocols; with the consumer protocol (KIP-848) the new coordinator loads
    the member, its epoch and its assignment from __consumer_offsets and the member goes on."""
    with FaultCluster(tmp_path) as cluster:
        cluster.create_topic(INPUT, 3)
        bootstrap = cluster.bootstrap()
        writers = start_writers(cluster, INPUT, 3, 1, rate=30.0)
        member = Member(bootstrap, group_protocol)
        member.thread.start()
        try:
            try:
                cluster.quorum.wait_for(lambda: consuming(member, 0.0), 60.0, "the member consuming")
                topics = [INPUT, "__consumer_offsets"]
                cluster.wait_in_sync(topics, 60.0)
                kill_coordinator(cluster, GROUP, 0, topics)
                recovered_at = time.monotonic()
                commits_before = member.commits
                cluster.quorum.wait_for(lambda: consuming(member, recovered_at) and member.commits > commits_before,
                                        60.0, "the member consuming and committing after the failover")
            finally:
                stop_writers(writers)
            acked = {s.value for s in cluster.history.snapshot() if s.outcome is Outcome.ACKED}

            def caught_up() -> bool:
                missing = acked - {v for _, v in member.consumed}
                assert not missing, f"{len(missing)} acknowledged values not consumed yet"
                return True

            cluster.quorum.wait_for(caught_up, 60.0, "the member consuming every acknowledged value")
        finally:
            member.stop.set()
            member.thread.join(30)
        assert not member.thread.is_alive()
        # What the member last committed survived the coordinator moving: the new coordinator
        # serves it from the replicated __consumer_offsets.
        assert member.last_committed, "the member never committed"
        stored = committed_offsets(bootstrap, 3)
        for partition, offset in member.last_committed.items():
            assert stored.get(partition, -1) >= offset, (partition, stored, member.last_committed)
        report = cluster.verify([INPUT])
        print(report.summary(), "| commits", member.commits, "| commit errors", len(member.commit_errors))
        assert report.ok, report.problems


def test_transactional_producer_survives_transaction_coordinator_failover(tmp_path: Path) -> None:
    with FaultCluster(tmp_path) as cluster:
        cluster.create_topic(TXN_TOPIC, 1)
        bootstrap = cluster.bootstrap()
        txn_history = History()
        txn = TransactionalWriter(bootstrap, txn_history)
        txn.thread.start()
        try:
            cluster.quorum.wait_for(lambda: committing(txn, 0.0), 60.0, "transactions committing")
            topics = [TXN_TOPIC, "__transaction_state"]
            cluster.wait_in_sync(topics, 60.0)
            kill_coordinator(cluster, TXN_ID, 1, topics)
            recovered_at = time.monotonic()
            cluster.quorum.wait_for(lambda: committing(txn, recovered_at), 60.0,
                                    "transactions committing after the failover")
        finally:
            txn.stop.set()
            txn.thread.join(120)
        assert not txn.thread.is_alive()
        reads, starts, ends = drain(bootstrap, [TXN_TOPIC], isolation_level="read_committed")
        report = check(txn_history.snapshot(), reads, log_start_offsets=starts, end_offsets=ends,
                       transactional_topics=[TXN_TOPIC])
        print(report.summary(), "| errors", txn.errors[:5])
        assert report.ok, report.problems
        assert report.acknowledged >= 8 * TXN_SIZE
