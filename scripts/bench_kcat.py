"""The native producer of the load benchmark's throughput cases (``--producer kcat``).

The Python producer (confluent-kafka, one ``produce()`` call per record from a Python loop)
tops out near 300,000 records/s on a 2-core machine whichever broker it sends to, so at 100 B
the produce rows measured that loop, not the brokers. kcat is librdkafka's own command-line
producer: it reads records from its standard input, one per line, and produces them with no
interpreter in between. It runs on the same librdkafka as the Python producer (the one the
confluent-kafka wheel ships, put in front of the system's with ``LD_LIBRARY_PATH``) and gets
the same settings, so the two producers differ only in what drives librdkafka.

Values are text (a hexadecimal sequence number and word-like filler, no newline) so that a
line is a record; the read-back checks their count and checksum as for the Python producer.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import resource
import shutil
import subprocess
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_cases import CHECKSUM_MOD, MAX_BYTES_PER_RUN

#: Bytes of records written to kcat at a time (whole lines only).
CHUNK_BYTES = 1 << 20
#: Distinct chunks cycled through, so batches do not repeat one chunk's values.
DISTINCT_CHUNKS = 8
#: Pause after the first record, so connections and metadata are in place when the clock starts.
WARMUP_S = 1.0
EXIT_TIMEOUT_S = 60.0
INSTALL_HINT = "run scripts/install_test_deps.sh (kcat), or use --producer python"


class KcatUnavailable(Exception):
    """kcat, or a librdkafka it can run with, is missing: the reason and how to provide it."""


@dataclass(frozen=True)
class Kcat:
    """How to start kcat on the confluent-kafka wheel's librdkafka."""

    path: str
    env: dict[str, str]
    librdkafka: str


def find_kcat(work_dir: Path) -> Kcat:
    """kcat with the librdkafka the Python client uses (a symlink in ``work_dir`` named as
    the system's library, in front of it on ``LD_LIBRARY_PATH``)."""
    path = shutil.which("kcat")
    if path is None:
        raise KcatUnavailable(f"kcat is not installed; {INSTALL_HINT}")
    import confluent_kafka

    wanted = str(confluent_kafka.libversion()[0])
    env = dict(os.environ)
    libs = Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs"
    bundled = sorted(libs.glob("librdkafka*.so*")) if libs.is_dir() else []
    if bundled:
        (work_dir / "librdkafka.so.1").unlink(missing_ok=True)
        (work_dir / "librdkafka.so.1").symlink_to(bundled[0])
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (str(work_dir), env.get("LD_LIBRARY_PATH", "")) if p
        )
    version = subprocess.run([path, "-V"], capture_output=True, text=True, env=env, timeout=20)
    if f"librdkafka {wanted}" not in version.stdout + version.stderr:
        raise KcatUnavailable(
            f"kcat does not run on librdkafka {wanted} (the confluent-kafka client's); {INSTALL_HINT}"
        )
    return Kcat(path, env, wanted)


@dataclass
class Chunk:
    """Whole lines of records, and what they add to the tally."""

    data: bytes
    count: int
    nbytes: int
    checksum: int


@dataclass
class TextValues:
    """Newline-free values of ``size`` bytes: a hexadecimal sequence number, then filler."""

    size: int
    pool: bytes
    chunks: list[Chunk] = field(default_factory=list)

    def value(self, seq: int) -> bytes:
        head = b"%016x " % seq
        if self.size < len(head):
            raise ValueError(f"record size {self.size} is below the {len(head)}-byte header")
        filler = self.size - len(head)
        start = (seq * 4099) % (len(self.pool) - filler)
        return head + self.pool[start : start + filler]

    def chunk(self, index: int) -> Chunk:
        """The ``index``-th chunk (chunks repeat after DISTINCT_CHUNKS)."""
        while len(self.chunks) < DISTINCT_CHUNKS:
            per_chunk = max(1, CHUNK_BYTES // (self.size + 1))
            first = len(self.chunks) * per_chunk
            values = [self.value(seq) for seq in range(first, first + per_chunk)]
            checksum = sum(zlib.crc32(v) for v in values) % CHECKSUM_MOD
            self.chunks.append(
                Chunk(b"\n".join(values) + b"\n", len(values), len(values) * self.size, checksum)
            )
        return self.chunks[index % DISTINCT_CHUNKS]


#: Settings kcat is not given: it counts delivered records from every delivery report, and
#: with reports of errors only it produced at less than half its rate at 1 KiB.
KCAT_LEAVES_OUT = frozenset({"delivery.report.only.error"})


def kcat_argv(kcat: Kcat, spec: dict[str, Any], settings: dict[str, Any]) -> list[str]:
    argv = [kcat.path, "-P", "-b", spec["bootstrap"], "-t", spec["topic"]]
    for key, value in settings.items():
        if key not in KCAT_LEAVES_OUT:
            argv += ["-X", f"{key}={str(value).lower() if isinstance(value, bool) else value}"]
    return argv


@dataclass
class Produced:
    """The timed part of a kcat run: records, bytes and seconds (first line to kcat's exit,
    which is after every record is acknowledged)."""

    count: int
    nbytes: int
    seconds: float
    #: ``broker_cpu()`` when the timed part started.
    broker_cpu_before: float | None
    #: kcat's own CPU time (every thread), the untimed first record's second included.
    client_cpu_s: float


def produce_kcat(
    kcat: Kcat,
    spec: dict[str, Any],
    settings: dict[str, Any],
    values: TextValues,
    tally: Any,
    seconds: float,
    broker_cpu: Callable[[], float | None] = lambda: None,
) -> Produced:
    """Produces ``values`` through kcat for ``seconds`` (or MAX_BYTES_PER_RUN), adding every
    record to ``tally`` (the timed ones and one before the clock starts); raises RuntimeError
    with kcat's words if it failed or a delivery failed."""
    children_before = _children_cpu()
    with tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen(
            kcat_argv(kcat, spec, settings),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=kcat.env,
        )
        assert proc.stdin is not None
        # A pipe holds 64 KiB by default: each time it runs dry or full one side sleeps and is
        # woken. Room for a whole chunk lets each side run on (a few per cent at 100 B-1 KiB).
        with contextlib.suppress(OSError, AttributeError):
            fcntl.fcntl(proc.stdin.fileno(), fcntl.F_SETPIPE_SZ, CHUNK_BYTES)
        count = nbytes = 0
        cpu_before = broker_cpu()
        start = time.perf_counter()
        stopped_reading = False
        try:
            try:
                warm = values.value(2**60)
                proc.stdin.write(warm + b"\n")
                proc.stdin.flush()
                tally.add(warm)
                time.sleep(WARMUP_S)
                cpu_before = broker_cpu()
                start = time.perf_counter()
                for chunk in _chunks(values, start + seconds):
                    proc.stdin.write(chunk.data)
                    count += chunk.count
                    nbytes += chunk.nbytes
                    tally.count += chunk.count
                    tally.nbytes += chunk.nbytes
                    tally.checksum = (tally.checksum + chunk.checksum) % CHECKSUM_MOD
                proc.stdin.close()
            except BrokenPipeError:  # kcat is gone: its exit status and words say why
                stopped_reading = True
            code = proc.wait(timeout=EXIT_TIMEOUT_S)
            elapsed = time.perf_counter() - start
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        stderr.seek(0)
        problems = [
            line
            for line in stderr.read().decode("utf-8", "replace").splitlines()
            if "Delivery failed" in line or "% ERROR" in line
        ]
    if code != 0 or problems or stopped_reading:
        raise RuntimeError(f"kcat exited with {code}: {problems[:3]}")
    return Produced(count, nbytes, elapsed, cpu_before, _children_cpu() - children_before)


def _children_cpu() -> float:
    """CPU time of this process's children that have ended and been waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _chunks(values: TextValues, deadline: float) -> Iterator[Chunk]:
    written = 0
    index = 0
    while time.perf_counter() < deadline and written < MAX_BYTES_PER_RUN:
        chunk = values.chunk(index)
        yield chunk
        written += chunk.nbytes
        index += 1
