"""The soak: mixed load on three combined nodes for a long time, a partition leader SIGKILLed (and
restarted) every few minutes, and each broker's resources sampled, for ``scripts/soak``.

The load: idempotent acks=all writers on a topic the history checker checks at the end; a
transactional producer and two read_committed group members (committed offsets and transactions
checked as in the network runs); a keyed writer on a compacted topic (``cleanup.policy=compact``,
small segments, so the cleaner runs) and on a topic with a short ``retention.ms`` (so segments are
deleted). Every ``sample_s`` each broker's RSS, open file descriptors and threads are read from
``/proc/<pid>`` and its event loop's living tasks from its metrics endpoint
(``cormorant.eventloop.tasks``; a restarted broker is a new process: the samples say which pid). At
the end every node's log is scanned for error lines, reported by event for a human to explain.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.integration.quorum_cluster import Node
from tests.replication.fault_checker import drain
from tests.replication.fault_cluster import FaultCluster, start_writers, stop_writers
from tests.replication.fault_invariants import (
    GroupOffsetReport,
    TransactionReport,
    group_offset_problems,
    transaction_problems,
    unavailability_windows,
)
from tests.replication.fault_workloads import (
    CLIENT_SETTINGS,
    GroupMember,
    OffsetObserver,
    TransactionalWriter,
)


@dataclass(frozen=True, slots=True)
class ResourceSample:
    at: float  #: seconds since the soak started
    node: int
    pid: int
    rss_mb: float
    open_files: int
    threads: int
    #: Living tasks of the broker's event loop (``cormorant.eventloop.tasks``); None if the scrape failed.
    tasks: int | None = None


#: Settings the soak adds: the metrics endpoint on a free port of each node (the task count is read there).
SOAK_OVERRIDES = {"metrics.enabled": "true", "metrics.listener": "127.0.0.1:0"}
READY_LINE = b"cormorant ready "
METRICS_URL = re.compile(rb" metrics=(http://\S+/metrics)")
SCRAPE_TIMEOUT_S = 5.0


def scrape(url: str, timeout_s: float = SCRAPE_TIMEOUT_S) -> dict[str, float]:
    """A broker's metric samples by Prometheus name, summed over their labels; empty if the
    endpoint cannot be read."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            text = response.read().decode()
    except (OSError, ValueError):
        return {}
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[sample.name] = found.get(sample.name, 0.0) + sample.value
    return found


def living_tasks(url: str) -> int | None:
    """``cormorant_eventloop_tasks`` of the broker serving ``url``; None if it cannot be read."""
    tasks = scrape(url).get("cormorant_eventloop_tasks")
    return None if tasks is None else int(tasks)


class MetricsUrls:
    """The metrics URL of each node's current process, from the ready lines of its stdout: a restarted
    node prints a new one (a new port) after the previous process's, so a process that has not printed
    one yet has none — never its predecessor's."""

    def __init__(self) -> None:
        self._known: dict[int, tuple[int, str | None, int]] = {}  # node -> (pid, url, stdout offset after its line)

    def url(self, node: Node, pid: int) -> str | None:
        known = self._known.get(node.node_id)
        if known is not None and known[0] == pid:
            return known[1]
        offset = known[2] if known is not None else 0
        try:
            with open(node.out_path, "rb") as f:
                f.seek(offset)
                text = f.read()
        except OSError:
            return None
        at = text.rfind(READY_LINE)  # the last one: processes whose life fell between two samples are passed over
        end = text.find(b"\n", at) if at >= 0 else -1
        if end < 0:
            return None
        match = METRICS_URL.search(text[at:end])
        url = match.group(1).decode() if match else None
        self._known[node.node_id] = (pid, url, offset + end + 1)
        return url


def sample_process(pid: int) -> tuple[float, int, int] | None:
    """(RSS in MB, open file descriptors, threads) of ``pid``; None if it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    rss_kb = int(fields.get("VmRSS", "0 kB").split()[0])
    return rss_kb / 1024, fds, int(fields.get("Threads", "0").strip())


class ResourceSampler:
    def __init__(self, cluster: FaultCluster, every_s: float) -> None:
        self.cluster = cluster
        self.every_s = every_s
        self.samples: list[ResourceSample] = []
        self.urls = MetricsUrls()
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="resource-sampler", daemon=True)

    def start(self) -> ResourceSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15.0)

    def _run(self) -> None:
        while True:
            at = time.monotonic() - self.started
            for node in self.cluster.brokers():
                proc = node.proc
                if proc is None or proc.poll() is not None:
                    continue
                found = sample_process(proc.pid)
                if found:
                    url = self.urls.url(node, proc.pid)
                    tasks = living_tasks(url) if url is not None else None
                    self.samples.append(ResourceSample(at, node.node_id, proc.pid, *found, tasks))
            if self._stop.wait(self.every_s):
                return


class KeyedWriter:
    """Plain acks=all writes of keys ``k0``..``k{keys-1}`` (values ``key:seq``) to each of ``topics``;
    remembers the last value acknowledged per topic and key."""

    def __init__(self, bootstrap: Sequence[str], topics: Sequence[str], rate: float, keys: int = 100) -> None:
        self.config = {**CLIENT_SETTINGS, "bootstrap.servers": ",".join(bootstrap), "acks": "all",
                       "enable.idempotence": True, "linger.ms": 20, "message.timeout.ms": 30_000}
        self.topics = list(topics)
        self.rate = rate
        self.keys = keys
        self.last_acked: dict[tuple[str, str], tuple[int, str]] = {}
        self.acked = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="keyed-writer", daemon=True)

    def start(self) -> KeyedWriter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60.0)

    def _run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(self.config)
        seq = 0

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                self.acked += 1
                key = msg.key().decode()
                value = msg.value().decode()
                known = self.last_acked.get((msg.topic(), key))
                n = int(value.rsplit(":", 1)[1])
                if known is None or known[0] < n:
                    self.last_acked[(msg.topic(), key)] = (n, value)

        while not self._stop.is_set():
            key = f"k{seq % self.keys}"
            for topic in self.topics:
                producer.produce(topic, key=key.encode(), value=f"{key}:{seq}".encode(), on_delivery=delivered)
            seq += 1
            producer.poll(0)
            self._stop.wait(1.0 / self.rate)
        producer.flush(40)


@dataclass
class SoakResult:
    minutes: float
    kills: int
    summary: str
    problems: list[str]
    samples: list[ResourceSample]
    error_lines: dict[str, int]
    compaction: dict[str, Any] = field(default_factory=dict)
    retention: dict[str, Any] = field(default_factory=dict)
    #: Per partition of the checked topic, each stretch over 1 s without an acknowledgement while a
    #: write waited: (partition, start, length in seconds), start in seconds since the soak started.
    unavailable: list[tuple[int, float, float]] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "samples": [asdict(s) for s in self.samples]}, indent=1)


def error_lines(cluster: FaultCluster) -> dict[str, int]:
    """Error-level lines of every node's log, counted by node and event."""
    counts: Counter[str] = Counter()
    for node in cluster.nodes.values():
        if not node.log_path.exists():
            continue
        for line in node.log_path.read_text(errors="replace").splitlines():
            if not line.startswith("{"):
                if "Traceback" in line:
                    counts[f"node {node.node_id}: traceback"] += 1
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if str(event.get("level", "")).lower() in ("error", "critical"):
                counts[f"node {node.node_id}: {event.get('event', '?')}"] += 1
    return dict(counts)


def soak(cluster: FaultCluster, minutes: float, kill_every_s: float = 180.0, sample_s: float = 10.0,
         seed: int = 18, log: Callable[[str], None] = lambda _: None) -> SoakResult:
    topic, tx_topic, compacted, retained = "soak", "soak-tx", "soak-compacted", "soak-retention"
    group = "soak-group"
    cluster.create_topic(topic, 3)
    cluster.create_topic(tx_topic, 3)
    cluster.create_topic(compacted, 3, configs={"cleanup.policy": "compact", "segment.ms": "20000",
                                                "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "1000"})
    cluster.create_topic(retained, 3, configs={"retention.ms": "60000", "segment.ms": "15000"})
    bootstrap = cluster.bootstrap()
    sampler = ResourceSampler(cluster, sample_s).start()
    writers = start_writers(cluster, topic, 3, 2, 40.0)
    txn = TransactionalWriter("t0", bootstrap, tx_topic, 3, seed).start()
    members = [GroupMember(f"m{i}", bootstrap, group, [topic, tx_topic]).start() for i in range(2)]
    observer = OffsetObserver(lambda: [(n.node_id, n.host, n.port) for n in cluster.reachable_brokers()], group,
                              {topic: [0, 1, 2], tx_topic: [0, 1, 2]}).start()
    keyed = KeyedWriter(bootstrap, [compacted, retained], rate=50.0).start()
    started = time.monotonic()
    deadline = started + minutes * 60
    kills = 0
    try:
        next_kill = started + kill_every_s
        while time.monotonic() < deadline:
            time.sleep(max(0.0, min(next_kill, deadline) - time.monotonic()))
            if time.monotonic() >= deadline:
                break
            partition = kills % 3
            victim = cluster.wait_leader(topic, partition, 30.0)
            cluster.kill(victim, f"SIGKILL node {victim.node_id}, leader of {topic}-{partition}", [topic])
            log(f"killed node {victim.node_id} (leader of {topic}-{partition}) at "
                f"{(time.monotonic() - started) / 60:.1f} min")
            kills += 1
            time.sleep(2.0)
            cluster.restart(victim)
            cluster.wait_in_sync([topic, tx_topic], 90.0)
            next_kill += kill_every_s
    finally:
        keyed.stop()
        workers: list[TransactionalWriter | GroupMember] = [txn, *members]
        for worker in workers:
            worker.stop()
        stop_writers(writers)
        for worker in workers:
            worker.join(60.0)
        observer.stop()
        sampler.stop()
    report = cluster.verify([topic], settle_s=90.0)
    _, _, high_watermarks = drain(cluster.bootstrap(), [topic, tx_topic], timeout_s=60.0)
    committed = drain(cluster.bootstrap(), [tx_topic], timeout_s=60.0, isolation_level="read_committed")[0]
    group_report: GroupOffsetReport = group_offset_problems([c for m in members for c in m.commits],
                                                            observer.observations, observer.final(),
                                                            high_watermarks)
    txn_report: TransactionReport = transaction_problems(txn.transactions, [r.value for r in committed],
                                                         [v for m in members for v in m.read if v.startswith("tx-")])
    # Compaction: the last record of every key (one partition per key) is its last acknowledged value
    # or a later one (a send whose outcome the writer never learnt may have landed after it).
    compact_reads, compact_starts, _ = drain(cluster.bootstrap(), [compacted], timeout_s=60.0)
    latest: dict[str, int] = {}
    for r in sorted(compact_reads, key=lambda r: (r.partition, r.offset)):
        key, _, seq = r.value.partition(":")
        latest[key] = int(seq)
    compaction_wrong = [f"{key}: last read {latest.get(key)}, last acknowledged {n}"
                        for (t, key), (n, _) in sorted(keyed.last_acked.items())
                        if t == compacted and latest.get(key, -1) < n]
    retention_reads, retention_starts, retention_ends = drain(cluster.bootstrap(), [retained], timeout_s=60.0)
    problems = report.problems + group_report.problems + txn_report.problems
    if compaction_wrong:
        problems.append(f"compaction: {len(compaction_wrong)} keys wrong (first: {compaction_wrong[:3]})")
    elapsed = (time.monotonic() - started) / 60
    windows = unavailability_windows(cluster.history.snapshot())
    summary = (f"soak minutes={elapsed:.1f} kills={kills} {report.summary()} group_commits={group_report.commits} "
               f"group_offsets_back={len(group_report.went_back)} txns_committed={txn_report.committed} "
               f"txns_aborted={txn_report.aborted} aborted_read={len(txn_report.aborted_read)} "
               f"compacted_records_read={len(compact_reads)} keyed_acked={keyed.acked} "
               f"retention_log_start={sum(retention_starts.values())} "
               f"retention_end={sum(retention_ends.values())} unavailable_windows={len(windows.windows)} "
               f"unavailable_median_s={windows.median_s:.1f} unavailable_max_s={windows.max_s:.1f}")
    return SoakResult(elapsed, kills, summary, problems, sampler.samples, error_lines(cluster),
                      {"records_read": len(compact_reads), "log_start": sum(compact_starts.values()),
                       "keys_wrong": len(compaction_wrong)},
                      {"log_start": sum(retention_starts.values()), "end": sum(retention_ends.values()),
                       "records_read": len(retention_reads)},
                      [(w.partition, round(w.start - started, 1), round(w.length_s, 1)) for w in windows.windows])
