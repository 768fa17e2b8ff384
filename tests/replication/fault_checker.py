"""The history checker of the replication fault suite.

Writers produce unique values (``writer:seq``) and record what the client said
about each send (:class:`Send`):

- ``ACKED``: the broker acknowledged it, at a partition and offset;
- ``FAILED``: the client gave up with an error that means it was not written;
- ``UNKNOWN``: anything else — request and delivery timeouts, disconnects,
  NOT_ENOUGH_REPLICAS_AFTER_APPEND (written to the leader, not known to be
  replicated). An unknown send may or may not be in the log; it is never
  counted as a failure.

After the faults, a fresh consumer reads every partition from the beginning to
its end offset (read_uncommitted; :func:`drain`), and :func:`check` compares the
two. What must hold:

- every acknowledged value is read, exactly once (lost = 0, duplicates = 0; an
  unknown value read twice is a duplicate too);
- each writer's values appear in a partition in the order it sent them;
- offsets of non-transactional partitions are contiguous from the log start to
  the end offset (no gaps, no repeats);
- an acknowledged value sits at the offset the acknowledgement named.

:func:`compare_replicas` checks the logs themselves: each replica's record
batches below the high watermark (base offset, last offset, record count, CRC),
read from the segment files of every node's data directory, must be identical.
:func:`failover_gaps` measures, around each fault, the time without a
successful produce.
"""

from __future__ import annotations

import bisect
import enum
import logging
import statistics
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.log.files import LOG_SUFFIX, offset_from_file_name
from wire.exceptions import CorruptRecordError
from wire.records import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    batch_size_at,
    compute_crc,
    read_batch_header,
)

#: Kafka error codes that tell a producer its records were not appended (the request failed
#: before the leader wrote them). Anything not listed is an unknown outcome.
NOT_WRITTEN_ERRORS = frozenset({
    2,   # CORRUPT_MESSAGE
    3,   # UNKNOWN_TOPIC_OR_PARTITION
    6,   # NOT_LEADER_OR_FOLLOWER
    10,  # MESSAGE_TOO_LARGE
    17,  # INVALID_TOPIC_EXCEPTION
    18,  # RECORD_LIST_TOO_LARGE
    19,  # NOT_ENOUGH_REPLICAS
    29,  # TOPIC_AUTHORIZATION_FAILED
    87,  # INVALID_RECORD
})
#: Written by the leader but not known to be replicated: unknown, not failed.
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20


class Outcome(enum.Enum):
    ACKED = "acked"
    FAILED = "failed"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Send:
    """One produce and what the client reported about it."""

    writer: str
    seq: int
    topic: str
    partition: int
    sent_at: float
    done_at: float
    outcome: Outcome
    #: Where the acknowledgement put it (ACKED only).
    offset: int | None = None
    error: str | None = None

    @property
    def value(self) -> str:
        return encode_value(self.writer, self.seq)


@dataclass(frozen=True, slots=True)
class Read:
    """One record the final drain read."""

    topic: str
    partition: int
    offset: int
    value: str


def encode_value(writer: str, seq: int) -> str:
    return f"{writer}:{seq}"


def decode_value(value: str) -> tuple[str, int] | None:
    writer, sep, seq = value.rpartition(":")
    if not sep or not seq.isdigit():
        return None
    return writer, int(seq)


@dataclass(frozen=True, slots=True)
class Fault:
    """A fault injected at ``at`` (monotonic); ``partitions`` are the ones it hit (the killed node led
    them), which the failover gap is measured on — empty: measured on every partition."""

    at: float
    what: str
    partitions: tuple[tuple[str, int], ...] = ()


class History:
    """Thread-safe record of sends and of the faults injected around them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sends: list[Send] = []
        self.faults: list[Fault] = []

    def add(self, send: Send) -> None:
        with self._lock:
            self.sends.append(send)

    def fault(self, what: str, at: float | None = None, partitions: Iterable[tuple[str, int]] = ()) -> float:
        when = time.monotonic() if at is None else at
        with self._lock:
            self.faults.append(Fault(when, what, tuple(partitions)))
        return when

    def snapshot(self) -> list[Send]:
        with self._lock:
            return list(self.sends)

    def count(self, outcome: Outcome) -> int:
        with self._lock:
            return sum(1 for s in self.sends if s.outcome is outcome)


def classify_error(code: int | None, *, retriable_timeout: bool = False) -> Outcome:
    """The outcome of a send the client reported as failed with Kafka error ``code``
    (None: a client-side timeout or disconnect)."""
    if code is None or retriable_timeout:
        return Outcome.UNKNOWN
    if code == NOT_ENOUGH_REPLICAS_AFTER_APPEND:
        return Outcome.UNKNOWN
    return Outcome.FAILED if code in NOT_WRITTEN_ERRORS else Outcome.UNKNOWN


@dataclass
class Report:
    """What :func:`check` found. ``problems`` lists each violation in words."""

    acknowledged: int = 0
    unknown: int = 0
    failed: int = 0
    read: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    reordered: list[str] = field(default_factory=list)
    offset_gaps: list[str] = field(default_factory=list)
    misplaced: list[str] = field(default_factory=list)
    #: Sends reported as definitively failed whose value is in the log anyway.
    failed_but_present: list[str] = field(default_factory=list)
    #: Unknown sends that did land (reported, not a violation).
    unknown_present: int = 0
    #: Acknowledgements that named no offset (the client got none back); checked for loss only.
    acked_without_offset: int = 0
    replica_divergence: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        out: list[str] = []
        for name in ("lost", "duplicated", "reordered", "offset_gaps", "misplaced", "failed_but_present",
                     "replica_divergence"):
            items: list[str] = getattr(self, name)
            if items:
                out.append(f"{name}: {len(items)} (first: {items[:5]})")
        return out

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        return (f"acknowledged={self.acknowledged} unknown={self.unknown} (landed {self.unknown_present}) "
                f"failed={self.failed} read={self.read} lost={len(self.lost)} duplicated={len(self.duplicated)} "
                f"reordered={len(self.reordered)} offset_gaps={len(self.offset_gaps)} "
                f"misplaced={len(self.misplaced)} (acked without offset {self.acked_without_offset}) "
                f"replica_divergence={len(self.replica_divergence)}")


def check(
    sends: Sequence[Send],
    reads: Sequence[Read],
    *,
    log_start_offsets: Mapping[tuple[str, int], int] | None = None,
    end_offsets: Mapping[tuple[str, int], int] | None = None,
    transactional_topics: Iterable[str] = (),
) -> Report:
    """Compare a history of sends with what the drain read.

    ``end_offsets`` (partition -> end offset the drain read up to) and
    ``log_start_offsets`` (default 0) bound the contiguity check of
    non-transactional partitions; without ``end_offsets`` only the gaps between
    records read are checked.
    """
    report = Report()
    transactional = set(transactional_topics)
    by_value: dict[str, Send] = {}
    for send in sends:
        by_value[send.value] = send
        if send.outcome is Outcome.ACKED:
            report.acknowledged += 1
        elif send.outcome is Outcome.UNKNOWN:
            report.unknown += 1
        else:
            report.failed += 1
    report.read = len(reads)

    seen = Counter(r.value for r in reads)
    where: dict[str, Read] = {}
    for r in reads:
        where.setdefault(r.value, r)
    for value, times in sorted(seen.items()):
        if times > 1:
            report.duplicated.append(f"{value} read {times} times")

    for send in sends:
        found = where.get(send.value)
        if send.outcome is Outcome.ACKED:
            if found is None:
                report.lost.append(f"{send.value} acked at {send.topic}-{send.partition}@{send.offset}")
            elif send.offset is None:  # acknowledged without an offset (e.g. a retried duplicate)
                report.acked_without_offset += 1
            elif (found.topic, found.partition, found.offset) != (send.topic, send.partition, send.offset):
                report.misplaced.append(f"{send.value} acked at {send.topic}-{send.partition}@{send.offset}, "
                                        f"read at {found.topic}-{found.partition}@{found.offset}")
        elif found is not None:
            if send.outcome is Outcome.UNKNOWN:
                report.unknown_present += 1
            else:
                report.failed_but_present.append(f"{send.value} failed ({send.error}) but read at "
                                                 f"{found.topic}-{found.partition}@{found.offset}")

    # Each writer's values in each partition, in offset order, must follow its send order.
    per_partition: dict[tuple[str, int], list[Read]] = defaultdict(list)
    for r in reads:
        per_partition[(r.topic, r.partition)].append(r)
    for (topic, partition), records in sorted(per_partition.items()):
        records.sort(key=lambda r: r.offset)
        last_seq: dict[str, tuple[int, int]] = {}
        for r in records:
            decoded = decode_value(r.value)
            if decoded is None:
                continue
            writer, seq = decoded
            previous = last_seq.get(writer)
            if previous is not None and seq <= previous[0]:
                report.reordered.append(f"{topic}-{partition}: {writer}:{seq}@{r.offset} after "
                                        f"{writer}:{previous[0]}@{previous[1]}")
            last_seq[writer] = (seq, r.offset)

        if topic in transactional:
            continue
        expected = (log_start_offsets or {}).get((topic, partition), records[0].offset if records else 0)
        for r in records:
            if r.offset != expected:
                kind = "repeat" if r.offset < expected else "gap"
                report.offset_gaps.append(f"{topic}-{partition}: {kind} at {r.offset}, expected {expected}")
            expected = r.offset + 1
        end = (end_offsets or {}).get((topic, partition))
        if end is not None and expected != end:
            report.offset_gaps.append(f"{topic}-{partition}: read up to {expected}, end offset {end}")
    if end_offsets:
        for (topic, partition), end in sorted(end_offsets.items()):
            start = (log_start_offsets or {}).get((topic, partition), 0)
            if (topic, partition) not in per_partition and end > start and topic not in transactional:
                report.offset_gaps.append(f"{topic}-{partition}: nothing read, end offset {end}")
    return report


# -- the drain ---------------------------------------------------------------------------------


def drain(bootstrap: Sequence[str], topics: Sequence[str], timeout_s: float = 60.0,
          isolation_level: str = "read_uncommitted") -> tuple[
        list[Read], dict[tuple[str, int], int], dict[tuple[str, int], int]]:
    """Read every partition of ``topics`` from the beginning to its end offset (read_uncommitted:
    the high watermark; read_committed: the last stable offset, aborted records skipped).

    Returns (records, log start offsets, end offsets). A fresh consumer, no group.
    """
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=list(bootstrap), group_id=None, enable_auto_commit=False,
                             isolation_level=isolation_level, auto_offset_reset="earliest",
                             request_timeout_ms=15_000, max_poll_records=2000, fetch_max_wait_ms=200)
    deadline = time.monotonic() + timeout_s
    try:
        parts: list[Any] = []
        for topic in topics:
            ids = None
            while not ids and time.monotonic() < deadline:
                ids = consumer.partitions_for_topic(topic)
                if not ids:
                    time.sleep(0.2)
            if not ids:
                raise AssertionError(f"drain: no partitions for {topic} within {timeout_s}s")
            parts += [TopicPartition(topic, p) for p in sorted(ids)]
        consumer.assign(parts)
        starts = {(tp.topic, tp.partition): o for tp, o in consumer.beginning_offsets(parts).items()}
        ends = {(tp.topic, tp.partition): o for tp, o in consumer.end_offsets(parts).items()}
        consumer.seek_to_beginning(*parts)
        reads: list[Read] = []
        pending = {tp for tp in parts if ends[(tp.topic, tp.partition)] > starts[(tp.topic, tp.partition)]}
        while pending:
            if time.monotonic() > deadline:
                positions = {f"{tp.topic}-{tp.partition}": (consumer.position(tp), ends[(tp.topic, tp.partition)])
                             for tp in pending}
                raise AssertionError(f"drain not finished within {timeout_s}s: {positions}")
            for tp, batch in consumer.poll(timeout_ms=500).items():
                for m in batch:
                    if m.offset < ends[(tp.topic, tp.partition)] and m.value is not None:
                        reads.append(Read(tp.topic, tp.partition, m.offset, m.value.decode()))
            for tp in list(pending):
                if consumer.position(tp) >= ends[(tp.topic, tp.partition)]:
                    pending.discard(tp)
        return reads, starts, ends
    finally:
        consumer.close()


# -- replicas ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BatchSummary:
    base_offset: int
    last_offset: int
    count: int
    crc: int
    crc_valid: bool


def segment_batches(partition_dir: Path) -> list[BatchSummary]:
    """Every whole record batch of a partition directory's ``.log`` segments, in offset order,
    read from the files with the wire codec's batch header reader (as ``cormorant dump-log`` does)."""
    out: list[BatchSummary] = []
    segments = sorted((p for p in partition_dir.iterdir() if p.name.endswith(LOG_SUFFIX)),
                      key=lambda p: offset_from_file_name(p.name))
    for path in segments:
        data = path.read_bytes()
        pos = 0
        while True:
            try:
                size = batch_size_at(data, pos)
            except CorruptRecordError:
                break
            if size is None or size < BATCH_HEADER_SIZE or size > len(data) - pos or len(data) - pos < LOG_OVERHEAD:
                break
            header = read_batch_header(data, pos)
            try:
                valid = compute_crc(data, pos, header) == header.crc
            except CorruptRecordError:
                valid = False
            out.append(BatchSummary(header.base_offset, header.last_offset, header.records_count, header.crc, valid))
            pos += size
    return out


def compare_replicas(replicas: Mapping[int, Sequence[BatchSummary]], high_watermark: int,
                     label: str = "") -> list[str]:
    """Differences between the replicas' batches below ``high_watermark``; empty if identical."""
    problems: list[str] = []
    below = {node: [b for b in batches if b.base_offset < high_watermark] for node, batches in replicas.items()}
    for node, batches in sorted(below.items()):
        end = batches[-1].last_offset + 1 if batches else None
        if high_watermark > 0 and (end is None or end < high_watermark):
            problems.append(f"{label} node {node}: log ends at {end}, below the high watermark {high_watermark}")
        bad = [b for b in batches if not b.crc_valid]
        if bad:
            problems.append(f"{label} node {node}: {len(bad)} batches with a bad CRC, first at {bad[0].base_offset}")
    nodes = sorted(below)
    for node in nodes[1:]:
        ref, other = below[nodes[0]], below[node]
        keyed_ref = [(b.base_offset, b.last_offset, b.count, b.crc) for b in ref]
        keyed_other = [(b.base_offset, b.last_offset, b.count, b.crc) for b in other]
        if keyed_ref != keyed_other:
            first = next((i for i, (a, b) in enumerate(zip(keyed_ref, keyed_other, strict=False)) if a != b),
                         min(len(keyed_ref), len(keyed_other)))
            a = keyed_ref[first] if first < len(keyed_ref) else None
            b = keyed_other[first] if first < len(keyed_other) else None
            problems.append(f"{label} node {nodes[0]} and node {node} differ at batch {first}: "
                            f"(base, last, count, crc) {a} vs {b}")
    return problems


def partition_dirs(data_dirs: Mapping[int, Path], topic: str, partition: int) -> dict[int, Path]:
    """Node id -> that node's directory of ``topic-partition`` (nodes without one are left out)."""
    out = {}
    for node, data in data_dirs.items():
        path = data / f"{topic}-{partition}"
        if path.is_dir():
            out[node] = path
    return out


# -- failover gaps -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Gaps:
    per_fault: list[float]

    @property
    def max_s(self) -> float:
        return max(self.per_fault, default=0.0)

    @property
    def median_s(self) -> float:
        return statistics.median(self.per_fault) if self.per_fault else 0.0


def failover_gaps(sends: Iterable[Send], faults: Iterable[Fault | float]) -> Gaps:
    """For each fault, the longest stretch without an acknowledgement that contains it: the first
    ack after the fault minus the last ack before it, on each partition the fault hit (the worst
    of them), or on all partitions together for a fault that names none."""
    acked = [s for s in sends if s.outcome is Outcome.ACKED]
    every = sorted(s.done_at for s in acked)
    by_partition: dict[tuple[str, int], list[float]] = defaultdict(list)
    for s in acked:
        by_partition[(s.topic, s.partition)].append(s.done_at)
    for times in by_partition.values():
        times.sort()

    def gap(acks: list[float], t: float) -> float | None:
        i = bisect.bisect_left(acks, t)
        if i == 0 or i == len(acks):
            return None
        return acks[i] - acks[i - 1]

    out = []
    for fault in sorted(((f if isinstance(f, Fault) else Fault(f, "")) for f in faults), key=lambda f: f.at):
        found = [gap(by_partition.get(p, []), fault.at) for p in fault.partitions] if fault.partitions \
            else [gap(every, fault.at)]
        measured = [g for g in found if g is not None]
        if measured:
            out.append(max(measured))
    return Gaps(out)


# -- writers -----------------------------------------------------------------------------------


def client_logger(name: str, path: Path) -> logging.Logger:
    """A logger that writes a client's librdkafka log lines (its ``debug`` contexts) to ``path``,
    with wall-clock milliseconds to line them up with the nodes' logs."""
    logger = logging.getLogger(name)
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    if not logger.handlers:
        handler = logging.FileHandler(path)
        handler.setFormatter(logging.Formatter("%(asctime)s.%(msecs)03d %(message)s", "%H:%M:%S"))
        logger.addHandler(handler)
    return logger


class Writer:
    """An idempotent acks=all confluent-kafka producer writing ``name:seq`` values round-robin over
    ``partitions`` of ``topic`` at about ``rate`` records a second, in a thread of its own."""

    def __init__(self, name: str, bootstrap: Sequence[str], topic: str, partitions: int, history: History,
                 rate: float = 50.0, delivery_timeout_ms: int = 30_000, extra: Mapping[str, Any] | None = None,
                 debug_log: Path | None = None) -> None:
        self.name = name
        self.topic = topic
        self.partitions = partitions
        self.history = history
        self.rate = rate
        self.delivery_timeout_ms = delivery_timeout_ms
        self.config: dict[str, Any] = {
            "bootstrap.servers": ",".join(bootstrap),
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "request.timeout.ms": 5_000,
            "delivery.timeout.ms": delivery_timeout_ms,
            "retry.backoff.ms": 100,
            "retry.backoff.max.ms": 1000,
            "reconnect.backoff.max.ms": 1000,
            "topic.metadata.refresh.interval.ms": 1000,
            "socket.connection.setup.timeout.ms": 3000,
            "client.id": f"fault-{name}",
            "log_level": 2,
            **(extra or {}),
        }
        #: librdkafka's ``debug`` contexts (e.g. ``eos,msg,protocol``) go to this file when set.
        self.debug_log = debug_log
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"writer-{name}", daemon=True)
        self.sent = 0
        self.errors: list[str] = []
        #: Fatal producer errors (each ended a producer; a new one carried on).
        self.fatal_errors: list[str] = []

    def start(self) -> Writer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise AssertionError(f"writer {self.name} did not stop within {timeout_s}s")

    def _run(self) -> None:
        # A producer that hits a fatal error (its idempotence state is gone) is abandoned, its
        # undelivered sends counted unknown, and a new one — a new producer, so a new writer
        # name for the order check — takes over.
        generation = 0
        while not self._stop.is_set():
            name = self.name if generation == 0 else f"{self.name}.{generation}"
            if not self._session(name):
                break
            generation += 1

    def _session(self, name: str) -> bool:
        """Writes with one producer until stopped (True: it failed fatally, start another)."""
        from confluent_kafka import KafkaError, KafkaException, Producer

        pending: dict[int, tuple[int, float]] = {}
        config: dict[str, Any] = {**self.config, "error_cb": lambda e: self.errors.append(str(e))}
        if self.debug_log is not None and "debug" in config:
            config["logger"] = client_logger(f"fault.client.{name}", self.debug_log)
            config["log_level"] = 7
        producer = Producer(config)

        def delivered(seq: int, partition: int, sent_at: float) -> Callable[[Any, Any], None]:
            def callback(err: Any, msg: Any) -> None:
                pending.pop(seq, None)
                now = time.monotonic()
                if err is None:
                    self.history.add(Send(name, seq, self.topic, msg.partition(), sent_at, now, Outcome.ACKED,
                                          msg.offset()))
                    return
                code = err.code()
                kafka_code = code if code >= 0 else None
                timeout = code in (KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT)
                self.history.add(Send(name, seq, self.topic, partition, sent_at, now,
                                      classify_error(kafka_code, retriable_timeout=timeout), error=err.name()))
            return callback

        seq = 0
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        fatal = False
        try:
            while not self._stop.is_set():
                partition = seq % self.partitions
                sent_at = time.monotonic()
                try:
                    producer.produce(self.topic, value=encode_value(name, seq).encode(), partition=partition,
                                     on_delivery=delivered(seq, partition, sent_at))
                    pending[seq] = (partition, sent_at)
                    seq += 1
                    self.sent += 1
                except BufferError:
                    producer.poll(0.05)
                    continue
                next_at += interval
                while not self._stop.is_set():
                    producer.poll(min(0.01, max(0.0, next_at - time.monotonic())))
                    if time.monotonic() >= next_at:
                        break
                if time.monotonic() - next_at > 1.0:
                    next_at = time.monotonic()  # do not burst after a stall
            producer.flush(self.delivery_timeout_ms / 1000 + 10)
        except (KafkaException, SystemError) as ex:  # a fatal error can surface inside a callback
            fatal = True
            self.fatal_errors.append(f"{name}: {ex}")
            try:
                producer.purge()
                producer.flush(5)
            except KafkaException:
                pass
        finally:
            now = time.monotonic()
            for s, (partition, sent_at) in sorted(pending.items()):
                self.history.add(Send(name, s, self.topic, partition, sent_at, now, Outcome.UNKNOWN,
                                      error="no delivery report"))
        return fatal
