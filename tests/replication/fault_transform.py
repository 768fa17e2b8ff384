"""The transactional consume-transform-produce workload of the network fault suite, and its checks.

:class:`Transformer` is what a Kafka Streams or an exactly-once confluent-kafka application does: a
``read_committed`` consumer in a group reads the writers' topic; for each batch it read, a
transactional producer writes one output record per input record (``ctp-NAME:TXN:<input value>``,
to the same partition of the output topic) and commits the consumer's position in the same
transaction (``send_offsets_to_transaction``, KIP-447's group metadata). A seeded share of the
transactions is aborted on purpose, after which the consumer goes back to the committed offsets.

:func:`transform_problems` checks, against the input topic's log, the output topic's
``read_committed`` drain and the group's committed offsets after the heal:

- every input record below the committed offset of its partition has exactly one output in
  committed output (not 0: lost; not 2: duplicated), and none at or above it has any;
- no output of a transaction the transformer aborted (or the coordinator aborted for it) is read,
  by the drain or by the read_committed group members while the faults ran;
- the offsets the group committed, in real-time order, never go backwards, and the committed
  offsets after the heal are at least the highest a committed transaction wrote.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.replication.fault_invariants import (
    GroupOffsetReport,
    OffsetCommit,
    TxnOutcome,
    group_offset_problems,
)
from tests.replication.fault_workloads import (
    CALL_TIMEOUT_S,
    CLIENT_SETTINGS,
    STOPPING_CALL_TIMEOUT_S,
    transactional_producer_config,
    where_thread_is,
)

OUTPUT_PREFIX = "ctp-"


def output_value(name: str, txn: int, input_value: str) -> str:
    return f"{OUTPUT_PREFIX}{name}:{txn}:{input_value}"


def input_of(output: str) -> str:
    """The input value an output record was made from."""
    return output.split(":", 2)[2]


@dataclass(frozen=True, slots=True)
class TransformTxn:
    """One transaction of the transformer: the outputs it wrote, the offsets it committed with them
    (partition -> next offset to read), and how it ended."""

    outputs: tuple[str, ...]
    offsets: tuple[tuple[int, int], ...]
    outcome: TxnOutcome
    sent_at: float
    done_at: float


class Transformer:
    """Reads ``source`` (read_committed, group ``group``) and writes each record, transformed, to
    ``sink`` in a transaction that also commits the group's offsets; ``abort_share`` of the
    transactions (seeded) are aborted on purpose."""

    def __init__(self, name: str, bootstrap: Sequence[str], group: str, source: str, sink: str, seed: int,
                 abort_share: float = 0.2, batch: int = 500) -> None:
        self.name = name
        self.group = group
        self.source = source
        self.sink = sink
        self.rng = random.Random(seed)
        self.abort_share = abort_share
        self.batch = batch
        common = {**CLIENT_SETTINGS, "bootstrap.servers": ",".join(bootstrap)}
        self.consumer_config: dict[str, Any] = {
            **common,
            "group.id": group,
            "client.id": f"fault-ctp-{name}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000,
            "max.poll.interval.ms": 120_000,
        }
        self.producer_config = {
            **transactional_producer_config(bootstrap, f"fault-ctp-{name}"),
            # librdkafka 2.16 sends a TxnOffsetCommit whose group coordinator it cached was dropped
            # from Metadata (a fenced broker is, in Kafka's answer too) only once some broker's state
            # changes: send_offsets_to_transaction() then waits past its timeout (librdkafka issues
            # 5456 and 5511). Closing idle connections makes such a change within seconds.
            "connections.max.idle.ms": 5000,
        }
        self.transactions: list[TransformTxn] = []
        self.errors: list[str] = []
        self.sessions = 0
        #: Where the transformer was when it stopped catching up (for the report).
        self.stall = ""
        self._txn = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"ctp-{name}", daemon=True)

    def start(self) -> Transformer:
        self._thread.start()
        return self

    @property
    def committed_offsets(self) -> dict[int, int]:
        """Partition -> the highest offset a committed transaction committed."""
        out: dict[int, int] = {}
        for t in list(self.transactions):
            if t.outcome is TxnOutcome.COMMITTED:
                for partition, offset in t.offsets:
                    out[partition] = max(out.get(partition, -1), offset)
        return out

    def catch_up(self, end_offsets: Mapping[int, int], timeout_s: float, stall_s: float = 60.0) -> bool:
        """Wait until committed transactions have consumed the source up to ``end_offsets``: at most
        ``timeout_s``, and at most ``stall_s`` without a committed transaction moving an offset (a
        transformer that fell behind on a loaded machine is slow, not stuck, and is given the time)."""
        started = progressed = time.monotonic()
        seen = self.committed_offsets
        while time.monotonic() - started < timeout_s and time.monotonic() - progressed < stall_s:
            done = self.committed_offsets
            if all(done.get(p, 0) >= end for p, end in end_offsets.items()):
                return True
            if done != seen:
                seen, progressed = done, time.monotonic()
            time.sleep(0.5)
        self.stall = (f"no committed transaction for {time.monotonic() - progressed:.0f}s, thread at "
                      f"{where_thread_is(self._thread)}, last errors {self.errors[-3:]}")
        return False

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise AssertionError(f"transformer {self.name} did not stop within {timeout_s}s: "
                                 f"{len(self.transactions)} transactions in {self.sessions} sessions, "
                                 f"last errors {self.errors[-3:]}; its thread is at {where_thread_is(self._thread)}"
                                 + (f"; it stopped catching up: {self.stall}" if self.stall else ""))

    def _timeout(self) -> float:
        return STOPPING_CALL_TIMEOUT_S if self._stop.is_set() else CALL_TIMEOUT_S

    def commits(self) -> list[OffsetCommit]:
        """The offsets of committed transactions, as acknowledged group commits."""
        return [OffsetCommit(f"transformer {self.name}", self.source, p, offset, t.sent_at, t.done_at)
                for t in self.transactions if t.outcome is TxnOutcome.COMMITTED for p, offset in t.offsets]

    def _run(self) -> None:
        from confluent_kafka import KafkaException

        while not self._stop.is_set():
            try:
                self._session()
            except KafkaException as ex:  # fatal, or an outcome never learnt: new clients, from the committed offsets
                self.errors.append(str(ex))
                self._stop.wait(1.0)

    def _session(self) -> None:
        from confluent_kafka import Consumer, KafkaException, Producer

        self.sessions += 1
        consumer = Consumer(self.consumer_config)
        producer: Any = None
        try:
            # A new producer of the transactional id fences the previous one; the coordinator
            # completes or aborts whatever transaction that one left open.
            producer = Producer({**self.producer_config, "error_cb": lambda e: self.errors.append(str(e))})
            producer.init_transactions(self._timeout())
            consumer.subscribe([self.source])
            while not self._stop.is_set():
                msgs = [m for m in consumer.consume(num_messages=self.batch, timeout=0.5) if m.error() is None]
                if msgs:
                    self._transform(consumer, producer, msgs)
        finally:
            try:
                consumer.close()
            except KafkaException as ex:
                self.errors.append(f"close: {ex}")
            if producer is not None:  # closed in this thread, not whenever the garbage collector frees it
                producer.close()

    def _transform(self, consumer: Any, producer: Any, msgs: list[Any]) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        self._txn += 1
        abort = self.rng.random() < self.abort_share
        outputs = [output_value(self.name, self._txn, m.value().decode()) for m in msgs]
        offsets: dict[int, int] = {}
        for m in msgs:
            offsets[m.partition()] = max(offsets.get(m.partition(), 0), m.offset() + 1)
        outcome = TxnOutcome.UNKNOWN
        sent_at = time.monotonic()
        try:
            producer.begin_transaction()
            for m, value in zip(msgs, outputs, strict=True):
                producer.produce(self.sink, value=value.encode(), partition=m.partition())
            producer.send_offsets_to_transaction([TopicPartition(self.source, p, o) for p, o in sorted(offsets.items())],
                                                 consumer.consumer_group_metadata(), self._timeout())
            if abort:
                producer.abort_transaction(self._timeout())
                outcome = TxnOutcome.ABORTED
            else:
                self._commit(producer)
                outcome = TxnOutcome.COMMITTED
        except KafkaException as ex:
            error = ex.args[0]
            self.errors.append(str(error))
            if error.fatal() or not error.txn_requires_abort():
                raise  # the outcome stays unknown; the next session starts from the committed offsets
            producer.abort_transaction(self._timeout())  # raises (ending the session) if even that fails
            outcome = TxnOutcome.ABORTED
        finally:
            self.transactions.append(TransformTxn(tuple(outputs), tuple(sorted(offsets.items())), outcome, sent_at,
                                                  time.monotonic()))
        if outcome is TxnOutcome.ABORTED:
            self._rewind(consumer)

    def _commit(self, producer: Any) -> None:
        """commit_transaction, retried while the error is retriable (the commit may have gone through)."""
        from confluent_kafka import KafkaException

        for attempt in range(3):
            try:
                producer.commit_transaction(self._timeout())
                return
            except KafkaException as ex:
                error = ex.args[0]
                if not error.retriable() or attempt == 2:
                    raise
                self.errors.append(str(error))

    def _rewind(self, consumer: Any) -> None:
        """Back to the committed offsets, so the aborted records are read and transformed again."""
        from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

        assignment = consumer.assignment()
        committed = consumer.committed(assignment, timeout=self._timeout())
        for tp in committed:
            if tp.error is not None:
                raise KafkaException(tp.error)
            consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))


@dataclass
class TransformReport:
    transactions: Counter[str] = field(default_factory=Counter)
    #: Input records below the committed offsets: each must have exactly one output.
    inputs: int = 0
    outputs: int = 0
    missing: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    #: Outputs of input records at or beyond the committed offset, or of no input record at all.
    unexpected: list[str] = field(default_factory=list)
    aborted_read: list[str] = field(default_factory=list)
    not_caught_up: bool = False
    #: Where the transformers were when they stopped catching up.
    stall: str = ""
    offsets: GroupOffsetReport = field(default_factory=GroupOffsetReport)

    @property
    def problems(self) -> list[str]:
        out = []
        for label, found in (("transform missing", self.missing), ("transform duplicated", self.duplicated),
                             ("transform output of an unconsumed input", self.unexpected),
                             ("transform aborted output read", self.aborted_read)):
            if found:
                out.append(f"{label}: {len(found)} (first: {found[:3]})")
        if self.not_caught_up:
            out.append("transformer did not catch up with its input" + (f" ({self.stall})" if self.stall else ""))
        return out + [f"transformer {p}" for p in self.offsets.problems]

    def summary(self) -> str:
        t = self.transactions
        return (f"ctp_txns_committed={t['committed']} ctp_txns_aborted={t['aborted']} ctp_txns_unknown={t['unknown']} "
                f"ctp_inputs={self.inputs} ctp_outputs={self.outputs} ctp_missing={len(self.missing)} "
                f"ctp_duplicated={len(self.duplicated)} ctp_unexpected={len(self.unexpected)} "
                f"ctp_aborted_read={len(self.aborted_read)} ctp_commits={self.offsets.commits} "
                f"ctp_offsets_back={len(self.offsets.went_back)} ctp_commits_lost={len(self.offsets.lost_commits)}")


def transform_problems(source: str, transactions: Iterable[TransformTxn], commits: Iterable[OffsetCommit],
                       inputs: Mapping[tuple[int, int], str], outputs: Sequence[str], final: Mapping[int, int],
                       high_watermarks: Mapping[int, int], read_by_members: Iterable[str] = (),
                       caught_up: bool = True) -> TransformReport:
    """``inputs``: (partition, offset) -> value of the source topic's log; ``outputs``: the values of
    the sink's read_committed drain; ``final``: partition -> the group's committed offset after the
    heal; ``read_by_members``: what read_committed group members read of the sink."""
    report = TransformReport(not_caught_up=not caught_up)
    aborted: set[str] = set()
    for t in transactions:
        report.transactions[t.outcome.value] += 1
        if t.outcome is TxnOutcome.ABORTED:
            aborted.update(t.outputs)
    # An input value can be in the log more than once (a writer that resent it under a new producer
    # epoch): each copy is an input record of its own and must have one output.
    consumed = Counter(value for (partition, offset), value in inputs.items() if offset < final.get(partition, 0))
    report.inputs = sum(consumed.values())
    report.outputs = len(outputs)
    made = Counter(input_of(o) for o in outputs)
    report.missing = sorted(value for value, n in consumed.items() if made[value] < n)
    report.duplicated = sorted(f"{value} x{n} (in the input x{consumed[value]})" for value, n in made.items()
                               if consumed[value] and n > consumed[value])
    report.unexpected = sorted(value for value in made if not consumed[value])
    report.aborted_read = sorted({o for o in [*outputs, *read_by_members] if o in aborted})
    report.offsets = group_offset_problems(commits, [], {(source, p): o for p, o in final.items()},
                                           {(source, p): o for p, o in high_watermarks.items()})
    return report
