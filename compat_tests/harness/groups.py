"""Consumer-group members as processes, for the group scenarios (test_groups.py).

A member is one client consumer subscribed to a topic in a group, running in its own
process so a test can stop it gracefully (it leaves the group) or SIGKILL it (it does
not). Every client reports the same events, one JSON object per stdout line:

    {"event": "assigned", "partitions": [0, 2]}    partitions added to its assignment
    {"event": "revoked", "partitions": [0, 2]}     partitions taken away (or lost)
    {"event": "records", "records": [[p, o], ...]} records handed to the application
    {"event": "committed", "offsets": {"p": o}}    a synchronous commit succeeded
    {"event": "closed"}                            it left (or, static, just closed)

Eager clients revoke everything and then get their full new assignment; cooperative
ones only report what changes. Members commit synchronously after every batch they
process, so a graceful handover never re-delivers a record (kcat commits every 100 ms
on its own and may re-deliver a few).

The Python clients run this module itself (``python -m compat_tests.harness.groups
CLIENT JSON``); Java and kafkajs run their drivers' ``group_member`` op; kcat runs
``kcat -G`` and its rebalance lines on stderr become the same events. A member stops
gracefully when its stdin closes (kcat: SIGTERM).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

MEMBER_EXIT_TIMEOUT_S = 30.0
_KCAT_REBALANCE = re.compile(r"rebalanced \(memberid [^)]*\): (assigned|revoked): (.*)$")
_PARTITION = re.compile(r"\[(\d+)\]")


@dataclass(frozen=True, slots=True)
class GroupOptions:
    """What a member is configured with (Kafka's consumer config names in comments)."""

    session_timeout_ms: int = 6000  # session.timeout.ms
    heartbeat_interval_ms: int = 500  # heartbeat.interval.ms
    rebalance_timeout_ms: int = 15_000  # max.poll.interval.ms (the JoinGroup rebalance timeout)
    assignor: str | None = None  # partition.assignment.strategy: range, roundrobin, cooperative-sticky
    instance_id: str | None = None  # group.instance.id (static membership)
    client_id: str = "compat-member"
    #: group.protocol: None (the client's default, classic) or "consumer" (KIP-848); with
    #: "consumer" the broker owns the session and heartbeat settings, and ``assignor`` names
    #: a server-side assignor (group.remote.assignor: uniform, range).
    group_protocol: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class MemberEvent:
    kind: str
    partitions: tuple[int, ...] = ()
    records: tuple[tuple[int, int], ...] = ()
    offsets: tuple[tuple[int, int], ...] = ()
    at: float = 0.0
    message: str = ""  # what an "error" event says


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    client_id: str
    host: str
    instance_id: str | None
    partitions: frozenset[tuple[str, int]]


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    members: tuple[MemberDescription, ...] = ()


def parse_event(line: str) -> MemberEvent | None:
    """One stdout line of a member (None for anything that is not an event)."""
    if not line.startswith('{"event"'):
        return None
    doc = json.loads(line)
    kind = doc["event"]
    now = time.monotonic()
    if kind in ("assigned", "revoked"):
        return MemberEvent(kind, tuple(sorted(int(p) for p in doc.get("partitions", []))), at=now)
    if kind == "records":
        return MemberEvent(kind, records=tuple((int(p), int(o)) for p, o in doc["records"]), at=now)
    if kind == "committed":
        return MemberEvent(kind, offsets=tuple(sorted((int(p), int(o)) for p, o in doc["offsets"].items())), at=now)
    return MemberEvent(kind, at=now, message=str(doc.get("message", "")))


def parse_kcat_stderr(line: str) -> MemberEvent | None:
    m = _KCAT_REBALANCE.search(line)
    if m is None:
        return None
    return MemberEvent(m.group(1), tuple(sorted(int(p) for p in _PARTITION.findall(m.group(2)))),
                       at=time.monotonic())


def parse_kcat_stdout(line: str) -> MemberEvent | None:
    fields = line.split()
    if len(fields) != 2 or not all(f.isdigit() for f in fields):
        return None
    return MemberEvent("records", records=((int(fields[0]), int(fields[1])),), at=time.monotonic())


class GroupMember:
    """A member process and what it has reported so far."""

    def __init__(
        self,
        client: str,
        cmd: Sequence[str],
        *,
        cwd: str | None = None,
        parse_stdout: Callable[[str], MemberEvent | None] = parse_event,
        parse_stderr: Callable[[str], MemberEvent | None] | None = None,
        stop_with_sigterm: bool = False,
        log_dir: Path | None = None,
    ) -> None:
        self.client = client
        self._stop_with_sigterm = stop_with_sigterm
        self._events: list[MemberEvent] = []
        self._stderr: list[str] = []
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(
            list(cmd), cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True)
        self._threads = [
            threading.Thread(target=self._read, args=(self.proc.stdout, parse_stdout, False), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, parse_stderr, True), daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _read(self, stream: Any, parse: Callable[[str], MemberEvent | None] | None, is_stderr: bool) -> None:
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            event = parse(line) if parse is not None else None
            with self._cond:
                if is_stderr:
                    self._stderr.append(line)
                    del self._stderr[:-200]
                if event is not None:
                    self._events.append(event)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    # ------------------------------------------------------------ what happened

    def events(self) -> list[MemberEvent]:
        with self._cond:
            return list(self._events)

    def assignment(self) -> frozenset[int]:
        current: set[int] = set()
        for e in self.events():
            if e.kind == "assigned":
                current |= set(e.partitions)
            elif e.kind == "revoked":
                current -= set(e.partitions)
        return frozenset(current)

    def consumed(self) -> list[tuple[int, int]]:
        return [r for e in self.events() if e.kind == "records" for r in e.records]

    def committed(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for e in self.events():
            if e.kind == "committed":
                out.update(e.offsets)
        return out

    def rebalance_events(self) -> list[MemberEvent]:
        return [e for e in self.events() if e.kind in ("assigned", "revoked")]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def describe(self) -> str:
        with self._cond:
            events = [(e.kind, e.partitions or len(e.records) or e.offsets) for e in self._events[-30:]]
            stderr = "\n".join(self._stderr[-40:])
        return f"[{self.client} pid {self.proc.pid} rc={self.proc.poll()}] events: {events}\nstderr tail:\n{stderr}"

    def wait_until(self, check: Callable[[GroupMember], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                self._cond.release()
                try:
                    if check(self):
                        return
                finally:
                    self._cond.acquire()
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.2))
        raise AssertionError(f"{what}: not within {timeout_s} s\n{self.describe()}")

    # ------------------------------------------------------------ ending

    def stop(self, timeout_s: float = MEMBER_EXIT_TIMEOUT_S) -> None:
        """Graceful: the client closes its consumer (dynamic members leave the group)."""
        if self.proc.poll() is None:
            if self._stop_with_sigterm:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.send_signal(signal.SIGTERM)
            elif self.proc.stdin is not None:
                with contextlib.suppress(OSError):
                    self.proc.stdin.close()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"member did not exit within {timeout_s} s\n{self.describe()}") from None
        self._join_readers()

    def kill(self) -> None:
        """SIGKILL: no LeaveGroup, no commit; the coordinator finds out by the session timeout."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self._join_readers()

    def _join_readers(self) -> None:
        for t in self._threads:
            t.join(5)
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()

    def wait_exit(self, timeout_s: float) -> int:
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"member did not finish within {timeout_s} s\n{self.describe()}") from None
        self._join_readers()
        return code


def python_member_command(client: str, bootstrap: str, topic: str, group: str, options: GroupOptions,
                          count: int | None) -> list[str]:
    doc = {"bootstrap": bootstrap, "topic": topic, "group": group, "options": options.to_json(), "count": count}
    return [sys.executable, "-m", "compat_tests.harness.groups", client, json.dumps(doc)]


# ======================================================================== the Python runner
# Runs in the member process: ``python -m compat_tests.harness.groups CLIENT JSON``.


class _Runner:
    def __init__(self, doc: dict[str, Any]) -> None:
        self.bootstrap: str = doc["bootstrap"]
        self.topic: str = doc["topic"]
        self.group: str = doc["group"]
        self.options = GroupOptions(**doc["options"])
        self.count: int | None = doc.get("count")
        self.seen = 0
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        threading.Thread(target=self._watch_stdin, daemon=True).start()

    def _watch_stdin(self) -> None:
        while sys.stdin.buffer.read(4096):
            pass
        self.stopping.set()

    def emit(self, event: str, **fields: Any) -> None:
        with self._lock:
            sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
            sys.stdout.flush()

    def done(self) -> bool:
        return self.stopping.is_set() or (self.count is not None and self.seen >= self.count)

    def records(self, records: list[tuple[int, int]]) -> None:
        if records:
            self.seen += len(records)
            self.emit("records", records=records)

    def committed(self, records: list[tuple[int, int]]) -> None:
        offsets: dict[str, int] = {}
        for p, o in records:
            offsets[str(p)] = max(offsets.get(str(p), 0), o + 1)
        if offsets:
            self.emit("committed", offsets=offsets)


def _run_kafka_python(r: _Runner) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

    assignors = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
                 "sticky": StickyPartitionAssignor}
    o = r.options
    config: dict[str, Any] = {
        "bootstrap_servers": r.bootstrap, "group_id": r.group, "client_id": o.client_id,
        "session_timeout_ms": o.session_timeout_ms, "heartbeat_interval_ms": o.heartbeat_interval_ms,
        "max_poll_interval_ms": o.rebalance_timeout_ms, "enable_auto_commit": False,
        "auto_offset_reset": "earliest", "fetch_max_wait_ms": 200, "request_timeout_ms": 20_000,
    }
    if o.assignor:
        config["partition_assignment_strategy"] = [assignors[o.assignor]]
    if o.instance_id:
        config["group_instance_id"] = o.instance_id

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            r.emit("revoked", partitions=sorted(tp.partition for tp in revoked))

        def on_partitions_assigned(self, assigned: Any) -> None:
            r.emit("assigned", partitions=sorted(tp.partition for tp in assigned))

    consumer = KafkaConsumer(**config)
    consumer.subscribe([r.topic], listener=Listener())
    # Learn the topic's partitions after subscribing, before the first poll. kafka-python
    # notes the subscribed topics' partitions when metadata arrives; a leader that assigned
    # before it had them rejoins once they land, and 3.0.12 loses a rejoin that only this
    # triggered if poll() times out during its SyncGroup (the leader never takes its new
    # assignment, stops heartbeating and is expired by the coordinator). Asked before
    # subscribing, the answer lands with nothing subscribed and changes nothing.
    consumer.partitions_for_topic(r.topic)
    try:
        while not r.done():
            batch = consumer.poll(timeout_ms=200)
            got = [(tp.partition, m.offset) for tp, ms in batch.items() for m in ms]
            r.records(got)
            if got:
                consumer.commit()
                r.committed(got)
    finally:
        consumer.close(autocommit=False)
    r.emit("closed")


def _run_aiokafka(r: _Runner) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

    assignors = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
                 "sticky": StickyPartitionAssignor}
    o = r.options

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        async def on_partitions_revoked(self, revoked: Any) -> None:
            r.emit("revoked", partitions=sorted(tp.partition for tp in revoked))

        async def on_partitions_assigned(self, assigned: Any) -> None:
            r.emit("assigned", partitions=sorted(tp.partition for tp in assigned))

    async def main() -> None:
        kwargs: dict[str, Any] = {}
        if o.assignor:
            kwargs["partition_assignment_strategy"] = (assignors[o.assignor],)
        if o.instance_id:
            kwargs["group_instance_id"] = o.instance_id
        consumer = AIOKafkaConsumer(
            bootstrap_servers=r.bootstrap, group_id=r.group, client_id=o.client_id,
            session_timeout_ms=o.session_timeout_ms, heartbeat_interval_ms=o.heartbeat_interval_ms,
            max_poll_interval_ms=o.rebalance_timeout_ms, rebalance_timeout_ms=o.rebalance_timeout_ms,
            enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=200,
            request_timeout_ms=20_000, **kwargs)
        consumer.subscribe([r.topic], listener=Listener())
        await consumer.start()
        try:
            while not r.done():
                batch = await consumer.getmany(timeout_ms=200)
                got = [(tp.partition, m.offset) for tp, ms in batch.items() for m in ms]
                r.records(got)
                if got:
                    await consumer.commit()
                    r.committed(got)
        finally:
            await consumer.stop()

    asyncio.run(main())
    r.emit("closed")


def _run_confluent(r: _Runner) -> None:
    from confluent_kafka import Consumer, KafkaError

    o = r.options
    config: dict[str, Any] = {
        "bootstrap.servers": r.bootstrap, "group.id": r.group, "client.id": o.client_id,
        "session.timeout.ms": o.session_timeout_ms, "heartbeat.interval.ms": o.heartbeat_interval_ms,
        "max.poll.interval.ms": o.rebalance_timeout_ms, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "fetch.wait.max.ms": 200, "enable.partition.eof": False,
    }
    if o.group_protocol == "consumer":
        config["group.protocol"] = "consumer"
        del config["session.timeout.ms"], config["heartbeat.interval.ms"]
        if o.assignor:
            config["group.remote.assignor"] = o.assignor
    elif o.assignor:
        config["partition.assignment.strategy"] = o.assignor
    if o.instance_id:
        config["group.instance.id"] = o.instance_id
    consumer = Consumer(config)

    def on_assign(_: Any, parts: Any) -> None:
        r.emit("assigned", partitions=sorted(p.partition for p in parts))

    def on_revoke(_: Any, parts: Any) -> None:
        r.emit("revoked", partitions=sorted(p.partition for p in parts))

    consumer.subscribe([r.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
    try:
        while not r.done():
            messages = consumer.consume(num_messages=500, timeout=0.2)
            got = []
            for m in messages:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    r.emit("error", message=str(err))
                    continue
                got.append((m.partition(), m.offset()))
            r.records(got)
            if got:
                consumer.commit(asynchronous=False)
                r.committed(got)
    finally:
        consumer.close()
    r.emit("closed")


RUNNERS: dict[str, Callable[[_Runner], None]] = {
    "kafka-python": _run_kafka_python,
    "aiokafka": _run_aiokafka,
    "confluent-kafka": _run_confluent,
}


def main(argv: list[str]) -> int:
    client, doc = argv[0], json.loads(argv[1])
    runner = _Runner(doc)
    try:
        RUNNERS[client](runner)
    except Exception as exc:  # the test sees it in the events and the exit code
        runner.emit("error", message=f"{type(exc).__name__}: {exc}")
        raise
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
