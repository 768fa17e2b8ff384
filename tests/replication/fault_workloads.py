"""Workloads of the network fault suite beside the librdkafka writers of
:class:`~tests.replication.fault_checker.Writer`, each in a thread (or a process) of its own and
each recording what its client reported, for the checks of :mod:`tests.replication.fault_invariants`:

- :class:`GroupMember`: a read_committed confluent-kafka consumer in a group, committing what it
  read every second; the acknowledged commits and the values it read are recorded.
- :class:`OffsetObserver`: asks the group's coordinator (found as a client finds it) for the
  committed offsets a few times a second; each answer is recorded with the node that gave it.
- :class:`TransactionalWriter`: a confluent-kafka transactional producer writing a few values per
  transaction over every partition, aborting a seeded share of them; records each transaction's
  values and outcome.
- :class:`JavaWriter`: an idempotent ``acks=all`` Java kafka-clients producer
  (``java/FaultWriter.java``, compiled on first use against the jars of ``compat_tests/java/lib``),
  its sends and acknowledgements recorded in the same :class:`~tests.replication.fault_checker.History`
  as the librdkafka writers'.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from broker.tools.client import ClientError, KafkaClient
from tests.replication.fault_checker import History, Outcome, Send, classify_error, client_logger
from tests.replication.fault_invariants import (
    OffsetCommit,
    OffsetObservation,
    Transaction,
    TxnOutcome,
)
from tests.shared import ROOT
from wire.generated.api_009_offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchResponse,
)
from wire.generated.api_010_find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse

#: How long one blocking transactional call may wait while the workload runs, and once it is
#: stopping: a stop must not wait out retries sized for riding out a nemesis's cut.
CALL_TIMEOUT_S = 30.0
STOPPING_CALL_TIMEOUT_S = 5.0

CLIENT_SETTINGS: dict[str, Any] = {
    "socket.connection.setup.timeout.ms": 3000,
    "reconnect.backoff.max.ms": 1000,
    "topic.metadata.refresh.interval.ms": 1000,
    "log_level": 2,
}


class GroupMember:
    """A read_committed member of ``group`` reading ``topics``; commits its position every
    ``commit_interval_s`` synchronously and records each partition the coordinator acknowledged."""

    def __init__(self, name: str, bootstrap: Sequence[str], group: str, topics: Sequence[str],
                 commit_interval_s: float = 1.0, debug: str | None = None, debug_log: Path | None = None) -> None:
        self.name = name
        self.topics = list(topics)
        self.commit_interval_s = commit_interval_s
        self.config: dict[str, Any] = {
            **CLIENT_SETTINGS,
            "bootstrap.servers": ",".join(bootstrap),
            "group.id": group,
            "client.id": f"fault-{name}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000,
            "max.poll.interval.ms": 120_000,
        }
        if debug and debug_log is not None:  # librdkafka's debug contexts (e.g. cgrp,consumer) to a file
            self.config |= {"debug": debug, "log_level": 7,
                            "logger": client_logger(f"fault.client.{name}", debug_log)}
        self.commits: list[OffsetCommit] = []
        self.commit_errors = 0
        #: Every value read (for the aborted-read check of the transactional topic).
        self.read: set[str] = set()
        self.records = 0
        #: When a record was last read and a commit last acknowledged (monotonic; for a member that hangs).
        self.last_read = self.last_commit = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)

    def start(self) -> GroupMember:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            now = time.monotonic()
            raise AssertionError(
                f"group member {self.name} did not stop within {timeout_s}s: last record read "
                f"{now - self.last_read:.0f}s ago, last acknowledged commit {now - self.last_commit:.0f}s ago, "
                f"{self.commit_errors} commit errors; its thread is at {where_thread_is(self._thread)}")

    def _run(self) -> None:
        from confluent_kafka import Consumer, KafkaException

        consumer = Consumer(self.config)
        consumer.subscribe(self.topics)
        next_commit = time.monotonic() + self.commit_interval_s
        try:
            while not self._stop.is_set():
                msg = consumer.poll(0.2)
                value = msg.value() if msg is not None and msg.error() is None else None
                if value is not None:
                    self.read.add(value.decode())
                    self.records += 1
                    self.last_read = time.monotonic()
                if time.monotonic() < next_commit:
                    continue
                next_commit = time.monotonic() + self.commit_interval_s
                sent_at = time.monotonic()
                try:
                    committed = consumer.commit(asynchronous=False)
                except KafkaException:  # nothing to commit, or the coordinator did not answer
                    self.commit_errors += 1
                    continue
                done_at = time.monotonic()
                self.last_commit = done_at
                for tp in committed or []:
                    if tp.error is None and tp.offset >= 0:
                        self.commits.append(OffsetCommit(self.name, tp.topic, tp.partition, tp.offset, sent_at,
                                                         done_at))
        finally:
            consumer.close()


def where_thread_is(thread: threading.Thread) -> str:
    """The innermost frames of a live thread's stack (what a hung worker is waiting in)."""
    frame = sys._current_frames().get(thread.ident or -1)
    if frame is None:
        return "?"
    return " <- ".join(f"{f.name} ({Path(f.filename).name}:{f.lineno}: {f.line})"
                       for f in reversed(traceback.extract_stack(frame)[-3:]))


def find_coordinator(brokers: Callable[[], Sequence[tuple[int, str, int]]], group: str,
                     timeout_s: float = 2.0) -> tuple[int, str, int] | None:
    """(node id, host, port) of ``group``'s coordinator as the first broker that answers says."""
    for _, host, port in brokers():
        try:
            with KafkaClient(host, port, timeout_s=timeout_s) as client:
                reply = client.send(FindCoordinatorRequest(key=group, key_type=0), FindCoordinatorResponse, 3)
        except (ClientError, OSError):
            continue
        if reply.error_code == 0:
            return reply.node_id, reply.host, reply.port
    return None


def fetch_committed(coordinator: tuple[int, str, int], group: str, partitions: dict[str, list[int]],
                    timeout_s: float = 2.0) -> dict[tuple[str, int], int] | None:
    """The committed offsets ``coordinator`` answers for ``group`` (None: an error or no answer;
    partitions without a committed offset are left out)."""
    _, host, port = coordinator
    request = OffsetFetchRequest(group_id=group, topics=[OffsetFetchRequestTopic(name=t, partition_indexes=p)
                                                         for t, p in sorted(partitions.items())])
    try:
        with KafkaClient(host, port, timeout_s=timeout_s) as client:
            reply = client.send(request, OffsetFetchResponse, 7)
    except (ClientError, OSError):
        return None
    if reply.error_code != 0:
        return None
    out = {}
    for topic in reply.topics:
        for p in topic.partitions:
            if p.error_code != 0:
                return None
            if p.committed_offset >= 0:
                out[(topic.name, p.partition_index)] = p.committed_offset
    return out


class OffsetObserver:
    """Reads ``group``'s committed offsets from its coordinator every ``interval_s``."""

    def __init__(self, brokers: Callable[[], Sequence[tuple[int, str, int]]], group: str,
                 partitions: dict[str, list[int]], interval_s: float = 0.5) -> None:
        self.brokers = brokers
        self.group = group
        self.partitions = partitions
        self.interval_s = interval_s
        self.observations: list[OffsetObservation] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="offset-observer", daemon=True)

    def start(self) -> OffsetObserver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10.0)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            sent_at = time.monotonic()
            coordinator = find_coordinator(self.brokers, self.group)
            if coordinator is None:
                continue
            offsets = fetch_committed(coordinator, self.group, self.partitions)
            done_at = time.monotonic()
            for (topic, partition), offset in sorted((offsets or {}).items()):
                self.observations.append(OffsetObservation(coordinator[0], topic, partition, offset, sent_at,
                                                           done_at))

    def final(self, timeout_s: float = 60.0) -> dict[tuple[str, int], int]:
        """The committed offsets once the cluster healed (retried until a coordinator answers)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            coordinator = find_coordinator(self.brokers, self.group)
            offsets = fetch_committed(coordinator, self.group, self.partitions) if coordinator else None
            if offsets is not None:
                return offsets
            time.sleep(0.5)
        raise AssertionError(f"no coordinator of {self.group} answered OffsetFetch within {timeout_s}s")


def transactional_producer_config(bootstrap: Sequence[str], transactional_id: str) -> dict[str, Any]:
    """A librdkafka transactional producer's settings in the fault runs: retries short enough
    for the nemeses' cuts, timeouts long enough to ride them out."""
    return {
        **CLIENT_SETTINGS,
        "bootstrap.servers": ",".join(bootstrap),
        "transactional.id": transactional_id,
        "client.id": transactional_id,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "request.timeout.ms": 5000,
        "transaction.timeout.ms": 30_000,
        "message.timeout.ms": 25_000,
        "retry.backoff.ms": 100,
        "retry.backoff.max.ms": 1000,
    }


class TransactionalWriter:
    """Transactions of 2 to 6 values (``tx-NAME:SEQ``) spread over ``partitions`` of ``topic``, one
    every ``interval_s``; ``abort_share`` of them (seeded) are aborted on purpose."""

    def __init__(self, name: str, bootstrap: Sequence[str], topic: str, partitions: int, seed: int,
                 interval_s: float = 0.25, abort_share: float = 0.25) -> None:
        self.name = name
        self.topic = topic
        self.partitions = partitions
        self.rng = random.Random(seed)
        self.interval_s = interval_s
        self.abort_share = abort_share
        self.config = transactional_producer_config(bootstrap, f"fault-tx-{name}")
        self.transactions: list[Transaction] = []
        self.errors: list[str] = []
        self.producers = 0
        self._seq = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"txn-{name}", daemon=True)

    def start(self) -> TransactionalWriter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise AssertionError(f"transactional writer {self.name} did not stop within {timeout_s}s: "
                                 f"{len(self.transactions)} transactions, {self.producers} producers, "
                                 f"last errors {self.errors[-3:]}; its thread is at {where_thread_is(self._thread)}")

    def _timeout(self) -> float:
        return STOPPING_CALL_TIMEOUT_S if self._stop.is_set() else CALL_TIMEOUT_S

    def _run(self) -> None:
        from confluent_kafka import KafkaException

        broken = False
        while not self._stop.is_set():
            try:
                self._session()
                broken = False
            except KafkaException as ex:  # fatal, or init_transactions never got through: a new producer
                self.errors.append(str(ex))
                broken = True
                self._stop.wait(1.0)
        if broken:
            self._fence()

    def _fence(self) -> None:
        """A producer that failed may have left a transaction open, holding every read_committed
        reader below it until the transaction times out: a new producer of the same transactional
        id fences it, and the coordinator aborts the open transaction."""
        from confluent_kafka import KafkaException, Producer

        for _ in range(3):
            producer = Producer(self.config)
            try:
                producer.init_transactions(self._timeout())
                return
            except KafkaException as ex:
                self.errors.append(f"fencing: {ex}")
            finally:
                producer.close()

    def _session(self) -> None:
        from confluent_kafka import KafkaException, Producer

        producer = Producer({**self.config, "error_cb": lambda e: self.errors.append(str(e))})
        self.producers += 1
        try:
            producer.init_transactions(self._timeout())
            while not self._stop.is_set():
                values = [f"tx-{self.name}:{self._seq + i}" for i in range(self.rng.randint(2, 6))]
                self._seq += len(values)
                abort = self.rng.random() < self.abort_share
                started = time.monotonic()
                producer.begin_transaction()
                outcome = TxnOutcome.UNKNOWN
                try:
                    for i, value in enumerate(values):
                        producer.produce(self.topic, value=value.encode(), partition=i % self.partitions)
                    if abort:
                        producer.abort_transaction(self._timeout())
                        outcome = TxnOutcome.ABORTED
                    else:
                        producer.commit_transaction(self._timeout())
                        outcome = TxnOutcome.COMMITTED
                except KafkaException as ex:
                    error = ex.args[0]
                    self.errors.append(str(error))
                    if error.fatal():
                        raise
                    if error.txn_requires_abort():
                        try:  # the coordinator aborts it: nothing of it may be read
                            producer.abort_transaction(self._timeout())
                            outcome = TxnOutcome.ABORTED
                        except KafkaException as abort_error:
                            self.errors.append(str(abort_error))
                            raise
                    else:
                        raise  # a retriable commit error: the outcome stays unknown, start over
                finally:
                    self.transactions.append(Transaction(self.name, tuple(values), outcome, started, time.monotonic()))
                self._stop.wait(self.interval_s)
        finally:
            # Closed here, in this thread: a producer left to the garbage collector (a raised
            # error's traceback holds this frame) would be destroyed whenever that runs.
            producer.close()


JAVA_SOURCE = Path(__file__).parent / "java" / "FaultWriter.java"
JAVA_LIB = ROOT / "compat_tests" / "java" / "lib"


def java_classes() -> Path:
    """The compiled FaultWriter (compiled once per source version into the temporary directory);
    raises FileNotFoundError where there is no JDK or no kafka-clients jar."""
    if shutil.which("javac") is None or shutil.which("java") is None:
        raise FileNotFoundError("no javac/java on PATH")
    if not any(JAVA_LIB.glob("kafka-clients-*.jar")):
        raise FileNotFoundError(f"no kafka-clients jar in {JAVA_LIB} (scripts/install_test_deps.sh)")
    digest = hashlib.sha256(JAVA_SOURCE.read_bytes()).hexdigest()[:12]
    out = Path(tempfile.gettempdir()) / f"cormorant-faultwriter-{digest}"
    if (out / "FaultWriter.class").exists():
        return out
    work = Path(tempfile.mkdtemp(prefix="cormorant-faultwriter-build-"))
    subprocess.run(["javac", "-encoding", "UTF-8", "-nowarn", "-d", str(work), "-cp", f"{JAVA_LIB}/*",
                    str(JAVA_SOURCE)], check=True, capture_output=True, timeout=180)
    try:
        os.rename(work, out)
    except OSError:  # another run compiled it first
        shutil.rmtree(work, ignore_errors=True)
    return out


class JavaWriter:
    """An idempotent ``acks=all`` Java producer (``java/FaultWriter.java``) writing ``NAME:SEQ``
    round-robin over ``partitions`` at ``rate`` a second, started with ``exec_prefix`` (the clients'
    namespace). Its lines — ``S seq partition`` when sent, ``A seq partition offset`` when
    acknowledged, ``E seq partition code exception`` when failed — go into ``history``; sends
    without an answer when it stops count unknown. Closing its stdin stops it."""

    def __init__(self, name: str, bootstrap: Sequence[str], topic: str, partitions: int, history: History,
                 rate: float, log_path: Path, exec_prefix: Sequence[str] = (),
                 delivery_timeout_ms: int = 30_000) -> None:
        self.name = name
        self.topic = topic
        self.history = history
        self.delivery_timeout_ms = delivery_timeout_ms
        classes = java_classes()
        self.args = [*exec_prefix, "java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                     f"-Dlog4j2.configurationFile={ROOT / 'compat_tests' / 'java' / 'log4j2.properties'}",
                     "-cp", f"{classes}:{JAVA_LIB}/*", "FaultWriter", ",".join(bootstrap), topic, str(partitions),
                     str(rate), name, str(delivery_timeout_ms)]
        self.log_path = log_path
        self.proc: subprocess.Popen[str] | None = None
        self.pending: dict[int, tuple[int, float]] = {}
        self.sent = 0
        self.errors: list[str] = []
        self._reader = threading.Thread(target=self._read, name=f"java-{name}", daemon=True)
        self._log: IO[str] | None = None

    def start(self) -> JavaWriter:
        self._log = open(self.log_path, "a")  # closed in join()
        self.proc = subprocess.Popen(self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                     text=True, bufsize=1)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            parts = line.split()
            now = time.monotonic()
            if len(parts) < 3 or not parts[1].isdigit():
                continue
            kind, seq, partition = parts[0], int(parts[1]), int(parts[2])
            if kind == "S":
                self.pending[seq] = (partition, now)
                self.sent += 1
                continue
            _, sent_at = self.pending.pop(seq, (partition, now))
            if kind == "A":
                self.history.add(Send(self.name, seq, self.topic, partition, sent_at, now, Outcome.ACKED,
                                      int(parts[3])))
            elif kind == "E":
                code = int(parts[3])
                error = parts[4] if len(parts) > 4 else ""
                # -2: send() refused it (never sent); -1: a client-side error, e.g. the delivery timeout
                outcome = Outcome.FAILED if code == -2 else classify_error(code if code >= 0 else None)
                self.errors.append(error)
                self.history.add(Send(self.name, seq, self.topic, partition, sent_at, now, outcome, error=error))

    def stop(self) -> None:
        if self.proc is not None and self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass

    def join(self, timeout_s: float) -> None:
        assert self.proc is not None
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"Java writer {self.name} did not stop within {timeout_s}s") from None
        finally:
            self._reader.join(10.0)
            if self._log is not None:
                self._log.close()
            now = time.monotonic()
            for seq, (partition, sent_at) in sorted(self.pending.items()):
                self.history.add(Send(self.name, seq, self.topic, partition, sent_at, now, Outcome.UNKNOWN,
                                      error="no answer"))
            self.pending.clear()
        if self.proc.returncode != 0:
            raise AssertionError(f"Java writer {self.name} exited with {self.proc.returncode}; see {self.log_path}")

