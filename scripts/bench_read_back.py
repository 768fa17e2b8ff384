"""The Java read-back of the load benchmark's throughput cases (``--reader java``).

At 100 B the Python read-back (one confluent-kafka consumer and a Python loop over every
record) spends more CPU per record than either broker, so it, not the broker, set the consume
figure. This one is ``bench_reader/BenchReader.java`` on Apache kafka-clients 4.x: the same
reading (assign every partition from offset 0, read until the expected count, the same
checksum), with the per-record work in the JVM. The jars are the ones the Java compatibility
tests use (``compat_tests/java/lib4`` and ``lib``, installed by scripts/install_test_deps.sh);
the program is compiled once per benchmark run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = Path(__file__).resolve().parent / "bench_reader" / "BenchReader.java"
MAIN_CLASS = "BenchReader"
JAVA_DIR = ROOT / "compat_tests" / "java"
LIB4_DIR = JAVA_DIR / "lib4"
LIB_DIR = JAVA_DIR / "lib"
# kafka-clients' own dependencies: the codecs and the logging API (no logging backend: the
# client logs nothing, and costs nothing for it).
DEPENDENCY_JARS = ("slf4j-api-*.jar", "lz4-java-*.jar", "snappy-java-*.jar", "zstd-jni-*.jar")
INSTALL_HINT = "run scripts/install_test_deps.sh, or use --reader python"
COMPILE_TIMEOUT_S = 180.0
# The JVM's start-up and its consumer's close come on top of the read's own time bound.
JVM_GRACE_S = 30.0
# The client compiler only: a read of one or two million records is over before the
# optimising compiler's work (on another core, counted in the reader's CPU) pays for itself;
# measured, the client compiler alone used about 40 % less CPU per record at 100 B.
JVM_OPTIONS = ("-Xms256m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")


class ReaderUnavailable(Exception):
    pass


@dataclass
class JavaReadBack:
    """What the reader read: count, value bytes and checksum, time and CPU of the read."""

    count: int
    nbytes: int
    checksum: int
    seconds: float
    cpu_seconds: float | None
    #: The consumer thread's share of cpu_seconds (the rest: JIT compiler, garbage collector).
    thread_cpu_seconds: float | None
    errors: list[str]


def classpath_jars() -> list[Path]:
    kafka = sorted(LIB4_DIR.glob("kafka-clients-4.*.jar"))
    if not kafka:
        raise ReaderUnavailable(f"kafka-clients 4.x jar missing in {LIB4_DIR} ({INSTALL_HINT})")
    jars = [kafka[-1]]
    for pattern in DEPENDENCY_JARS:
        found = sorted(LIB_DIR.glob(pattern))
        if not found:
            raise ReaderUnavailable(f"{pattern} missing in {LIB_DIR} ({INSTALL_HINT})")
        jars.append(found[-1])
    return jars


def compile_reader(out: Path) -> list[str]:
    """Compile the reader into ``out``; the command line that runs it (arguments to append)."""
    java, javac = shutil.which("java"), shutil.which("javac")
    if java is None or javac is None:
        raise ReaderUnavailable(f"a JDK (java and javac) is needed ({INSTALL_HINT})")
    jars = os.pathsep.join(str(j) for j in classpath_jars())
    out.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [javac, "-encoding", "UTF-8", "-nowarn", "-d", str(out), "-cp", jars, str(SOURCE)],
        capture_output=True,
        text=True,
        timeout=COMPILE_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise ReaderUnavailable(f"javac {SOURCE.name} failed: {done.stderr.strip()[-800:]}")
    return [java, *JVM_OPTIONS, "-cp", os.pathsep.join([str(out), jars]), MAIN_CLASS]


def read_back(
    command: list[str],
    bootstrap: str,
    topic: str,
    partitions: int,
    expected_count: int,
    timeout_s: float,
    fetch_wait_ms: int,
) -> JavaReadBack:
    args = [bootstrap, topic, str(partitions), str(expected_count), f"{timeout_s:.3f}"]
    try:
        done = subprocess.run(
            [*command, *args, str(fetch_wait_ms)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s + JVM_GRACE_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ReaderUnavailable(
            f"the Java reader did not finish in {timeout_s + JVM_GRACE_S:.0f} s"
        ) from exc
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise ReaderUnavailable(
            f"the Java reader exited with {done.returncode}: {done.stderr.strip()[-800:]}"
        )
    raw = json.loads(lines[-1])
    cpu, thread_cpu = raw.get("cpu_seconds"), raw.get("thread_cpu_seconds")
    return JavaReadBack(
        count=int(raw["count"]),
        nbytes=int(raw["bytes"]),
        checksum=int(raw["checksum"]),
        seconds=float(raw["seconds"]),
        cpu_seconds=float(cpu) if cpu is not None else None,
        thread_cpu_seconds=float(thread_cpu) if thread_cpu is not None else None,
        errors=[str(e) for e in raw.get("errors", [])],
    )
