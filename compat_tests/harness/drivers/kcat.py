"""kcat 1.7.1 with librdkafka 2.0.2 (Debian bookworm's ``kcat`` package), as a subprocess.

What kcat can express shapes the data it is given (see its Capabilities):

* produce: one kcat run per record, so each record can carry its own key and headers. The
  value comes from a file (``kcat -P FILE``: the whole file is one message, byte-exact); a
  null or empty value comes from stdin as ``KEY<0x1f>\\n`` (``-K`` delimiter, ``-Z`` turns the
  empty value into NULL), which needs a key. Keys and header values pass through argv, so
  they cannot hold NUL. There is no way to set a record's timestamp. ``-vvv`` prints each
  delivery report ("Message delivered to partition P (offset O)").
* consume: ``-f '%p %o %T %K %S\\n%k%s\\n'`` gives byte-exact keys and values with their
  lengths; a second run with ``-J`` gives the headers (JSON strings: non-UTF-8 header bytes
  come back as U+FFFD, so header values must be valid UTF-8).
* list offsets: ``-Q -t topic:partition:ts`` (ts -2 = earliest, -1 = latest).
* metadata: ``-L -J``. No admin API.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from .. import settings
from ..groups import GroupMember, GroupOptions, parse_kcat_stderr, parse_kcat_stdout
from .base import (
    Capabilities,
    ClientError,
    ClusterMetadata,
    Codec,
    ConsumedRecord,
    Delivery,
    Driver,
    DriverUnavailable,
    OffsetSpec,
    Record,
    Unsupported,
    sort_consumed,
)

KEY_DELIMITER = "\x1f"
CLIENT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
_DELIVERED = re.compile(r"Message delivered to partition (-?\d+) \(offset (-?\d+)\)")
# librdkafka's rd_kafka_err2str() texts for the broker errors the suite looks for.
_BROKER_ERRORS = {
    "Broker: Message size too large": 10,
    "Broker: Unknown topic or partition": 3,
    "Broker: Leader not available": 5,
    "Broker: Not leader for partition": 6,
    "Broker: Request timed out": 7,
    "Broker: Invalid required acks": 21,
    "Broker: Corrupt message": 2,
    "Broker: Invalid record": 87,
}


class KcatDriver(Driver):
    name = "kcat"

    def __init__(self, bootstrap: str) -> None:
        super().__init__(bootstrap)
        self.capabilities = Capabilities(
            codecs=frozenset({"none", "gzip", "snappy", "lz4", "zstd"}),
            admin=False,
            explicit_timestamps=False,
            binary_keys=False,
            binary_header_values=False,
        )

    @classmethod
    def check_available(cls) -> None:
        if shutil.which("kcat") is None:
            raise DriverUnavailable(
                f"kcat is not installed (apt-get install kcat; or {settings.INSTALL_HINT})"
            )

    def _base(self, *mode: str) -> list[str]:
        return [
            "kcat",
            *mode,
            "-b",
            self.bootstrap,
            "-m",
            str(settings.REQUEST_TIMEOUT_MS // 1000),
            "-X",
            "client.id=compat-kcat",
            "-X",
            f"socket.timeout.ms={settings.REQUEST_TIMEOUT_MS}",
        ]

    def _run(
        self,
        cmd: Sequence[str],
        *,
        stdin: bytes | None = None,
        timeout_s: float = settings.SUBPROCESS_TIMEOUT_S,
        allow_timeout: bool = False,
    ) -> subprocess.CompletedProcess[bytes]:
        try:
            return subprocess.run(
                list(cmd),
                input=stdin if stdin is not None else b"",
                capture_output=True,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            if not allow_timeout:
                raise ClientError(self.name, f"timed out after {timeout_s} s: {cmd}") from exc
            # subprocess.run killed the kcat it started; keep what it printed.
            return subprocess.CompletedProcess(list(cmd), -9, exc.stdout or b"", exc.stderr or b"")

    def _failure(self, proc: subprocess.CompletedProcess[bytes]) -> ClientError:
        text = proc.stderr.decode("utf-8", "replace").strip()
        code = None
        for message, value in _BROKER_ERRORS.items():
            if message in text:
                code = value
                break
        return ClientError(self.name, f"exit {proc.returncode}: {text[-2000:]}", code=code)

    # -- data ------------------------------------------------------------------------------

    def produce(
        self,
        topic: str,
        records: Sequence[Record],
        *,
        acks: int = -1,
        compression: Codec = "none",
    ) -> list[Delivery]:
        deliveries = []
        with tempfile.TemporaryDirectory(prefix="kcat-") as tmp:
            for index, record in enumerate(records):
                deliveries.append(
                    self._produce_one(topic, record, acks, compression, Path(tmp), index)
                )
        return deliveries

    def _produce_one(
        self, topic: str, r: Record, acks: int, compression: Codec, tmp: Path, index: int
    ) -> Delivery:
        if r.timestamp_ms is not None:
            raise Unsupported("kcat cannot set a record's timestamp")
        cmd = self._base("-P", "-vvv")
        cmd += ["-t", topic, "-X", f"acks={acks}", "-X", f"compression.codec={compression}"]
        cmd += ["-X", f"message.max.bytes={CLIENT_MAX_MESSAGE_BYTES}"]
        cmd += ["-X", f"message.timeout.ms={settings.DELIVERY_TIMEOUT_MS}"]
        cmd += ["-X", f"request.timeout.ms={settings.REQUEST_TIMEOUT_MS}"]
        if r.partition is not None:
            cmd += ["-p", str(r.partition)]
        for name, value in r.headers:
            if b"\x00" in value:
                raise Unsupported("kcat takes header values from argv: no NUL bytes")
            cmd += ["-H", f"{name}={value.decode('utf-8', 'surrogateescape')}"]
        stdin = None
        if r.value:
            if r.key is not None:
                cmd += ["-k", self._argv_key(r.key)]
            path = tmp / f"value-{index}"
            path.write_bytes(r.value)
            cmd.append(str(path))
        else:
            # Null or empty value: one "KEY<delim>" line on stdin.
            if r.key is None:
                raise Unsupported("kcat cannot send a null or empty value without a key")
            if KEY_DELIMITER.encode() in r.key or b"\n" in r.key:
                raise Unsupported("key holds kcat's delimiters")
            cmd += ["-K", "\\x1f"]
            if r.value is None:
                cmd.append("-Z")
            stdin = r.key + KEY_DELIMITER.encode() + b"\n"
        proc = self._run(cmd, stdin=stdin)
        stderr = proc.stderr.decode("utf-8", "replace")
        match = _DELIVERED.search(stderr)
        if proc.returncode != 0 or match is None or "Delivery failed" in stderr:
            raise self._failure(proc)
        offset = int(match.group(2))
        return Delivery(int(match.group(1)), offset if acks != 0 and offset >= 0 else None)

    @staticmethod
    def _argv_key(key: bytes) -> str:
        if b"\x00" in key:
            raise Unsupported("kcat takes the key from argv: no NUL bytes")
        return key.decode("utf-8", "surrogateescape")

    def consume(
        self,
        topic: str,
        partitions: Sequence[int],
        *,
        count: int,
        start: int | Literal["beginning"] = "beginning",
        timeout_s: float = 20.0,
    ) -> list[ConsumedRecord]:
        # One kcat per partition (-p takes one), each stopping at the end of its partition
        # (-e). Records still on their way (acks=0) make the whole read run again, from the
        # same start, until ``count`` arrived or ``timeout_s`` ran out.
        deadline = time.monotonic() + timeout_s
        while True:
            out: list[ConsumedRecord] = []
            for partition in partitions:
                remaining = max(deadline - time.monotonic(), 1.0)
                out.extend(self._consume_partition(topic, partition, count, start, remaining))
            if len(out) >= count or time.monotonic() >= deadline:
                return sort_consumed(out)
            time.sleep(0.2)

    def _consume_cmd(self, topic: str, partition: int, count: int, start: Any) -> list[str]:
        cmd = self._base("-C", "-q", "-u")
        cmd += ["-t", topic, "-p", str(partition), "-c", str(count), "-e"]
        cmd += ["-o", "beginning" if start == "beginning" else str(start)]
        cmd += ["-X", "fetch.wait.max.ms=200"]
        return cmd

    def _consume_partition(
        self, topic: str, partition: int, count: int, start: Any, timeout_s: float
    ) -> list[ConsumedRecord]:
        base = self._consume_cmd(topic, partition, count, start)
        raw = self._run(
            [*base, "-f", "%p %o %T %K %S\\n%k%s\\n"], timeout_s=timeout_s, allow_timeout=True
        )
        if raw.returncode not in (0, -9):
            raise self._failure(raw)
        envelope = self._run([*base, "-J"], timeout_s=timeout_s, allow_timeout=True)
        if envelope.returncode not in (0, -9):
            raise self._failure(envelope)
        headers: dict[int, tuple[tuple[str, bytes | None], ...]] = {}
        for line in envelope.stdout.decode("utf-8", "replace").splitlines():
            if not line.strip():
                continue
            doc = json.loads(line)
            flat = doc.get("headers") or []
            headers[doc["offset"]] = tuple(
                (flat[i], None if flat[i + 1] is None else flat[i + 1].encode("utf-8"))
                for i in range(0, len(flat), 2)
            )
        out = []
        for p, offset, ts, key, value in _parse_formatted(raw.stdout):
            out.append(
                ConsumedRecord(
                    partition=p,
                    offset=offset,
                    key=key,
                    value=value,
                    headers=headers.get(offset, ()),
                    timestamp_ms=ts,
                )
            )
        return out

    def list_offsets(self, topic: str, partition: int, spec: OffsetSpec) -> int:
        ts = {"earliest": -2, "latest": -1}.get(spec, spec) if isinstance(spec, str) else spec
        proc = self._run([*self._base("-Q"), "-t", f"{topic}:{partition}:{ts}", "-J"])
        if proc.returncode != 0:
            raise self._failure(proc)
        doc = json.loads(proc.stdout.decode("utf-8", "replace"))
        entry = doc[topic][str(partition)]
        if "error" in entry:
            raise ClientError(self.name, str(entry["error"]))
        return int(entry["offset"])

    def start_member(
        self, topic: str, group: str, options: GroupOptions, *, count: int | None = None
    ) -> GroupMember:
        return _kcat_member(self, topic, group, options, count)

    def metadata(self) -> ClusterMetadata:
        proc = self._run([*self._base("-L"), "-J"])
        if proc.returncode != 0:
            raise self._failure(proc)
        doc = json.loads(proc.stdout.decode("utf-8", "replace"))
        brokers = set()
        for b in doc["brokers"]:
            host, _, port = b["name"].rpartition(":")
            brokers.add((int(b["id"]), host, int(port)))
        return ClusterMetadata(
            brokers=frozenset(brokers),
            topics={t["topic"]: len(t["partitions"]) for t in doc["topics"] if "error" not in t},
        )


def _parse_formatted(data: bytes) -> list[tuple[int, int, int, bytes | None, bytes | None]]:
    """Parse ``%p %o %T %K %S\\n%k%s\\n`` records (lengths make it byte-exact)."""
    out = []
    pos = 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        if end < 0:
            break  # a partial line from a killed run
        fields = data[pos:end].split(b" ")
        if len(fields) != 5:
            raise ClientError("kcat", f"unexpected output line {data[pos:end][:200]!r}")
        p, offset, ts, klen, vlen = (int(f) for f in fields)
        pos = end + 1
        key = None if klen < 0 else data[pos : pos + klen]
        pos += max(klen, 0)
        value = None if vlen < 0 else data[pos : pos + vlen]
        pos += max(vlen, 0)
        if pos >= len(data):
            break  # truncated by a killed run
        pos += 1  # the record's closing newline
        out.append((p, offset, ts, key, value))
    return out


def _kcat_member(driver: KcatDriver, topic: str, group: str, options: GroupOptions,
                 count: int | None) -> GroupMember:
    """``kcat -G``: librdkafka auto-commits every 100 ms and on close; rebalances show on stderr."""
    cmd = driver._base("-G", group, "-u", "-v")
    settings_ = {
        "session.timeout.ms": options.session_timeout_ms,
        "heartbeat.interval.ms": options.heartbeat_interval_ms,
        "max.poll.interval.ms": options.rebalance_timeout_ms,
        "auto.offset.reset": "earliest",
        "auto.commit.interval.ms": 100,
        "fetch.wait.max.ms": 200,
    }
    if options.assignor:
        settings_["partition.assignment.strategy"] = options.assignor
    if options.instance_id:
        settings_["group.instance.id"] = options.instance_id
    for key, value in settings_.items():
        cmd += ["-X", f"{key}={value}"]
    if count is not None:
        cmd += ["-c", str(count)]
    cmd += ["-f", "%p %o\\n", topic]
    return GroupMember(driver.name, cmd, parse_stdout=parse_kcat_stdout, parse_stderr=parse_kcat_stderr,
                       stop_with_sigterm=True)
