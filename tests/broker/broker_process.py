"""A real broker process for tests: started as a user starts it, on an ephemeral port."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.shared import EPHEMERAL_METRICS, ROOT, STALL_GUARD

#: A ``slow_task_step`` log line and the CPU time (ms) its step computed.
SLOW_STEP = re.compile(r"slow_task_step\s.*?cpu_ms=([\d.]+)")
READY = re.compile(r"^cormorant ready listeners=\S*PLAINTEXT://([\d.]+):(\d+)")


class BrokerProcess:
    def __init__(
        self,
        data_dir: Path,
        overrides: dict[str, str] | None = None,
        port: int = 0,
        wrapper: list[str] | None = None,
    ) -> None:
        """``wrapper`` runs the broker under a command such as ``prlimit --nofile=1024``."""
        self.data_dir = data_dir
        self.wrapper = list(wrapper or [])
        self.overrides = {**STALL_GUARD, **EPHEMERAL_METRICS, **(overrides or {})}
        self.port = port
        self.proc: subprocess.Popen[str] | None = None
        self.ready_line = ""
        self.stderr_path = data_dir.parent / f"{data_dir.name}-broker.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> BrokerProcess:
        args = [
            *self.wrapper,
            sys.executable, "-m", "broker", "serve",
            "--override", f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
            "--override", f"log.dirs={self.data_dir}",
        ]
        for key, value in self.overrides.items():
            args += ["--override", f"{key}={value}"]
        with open(self.stderr_path, "a") as err:
            self.proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        os.set_blocking(self.proc.stdout.fileno(), False)
        buf = ""
        while time.monotonic() < deadline:
            chunk = self.proc.stdout.readline()
            if chunk:
                buf += chunk
                m = READY.match(chunk)
                if m:
                    self.port = int(m.group(2))
                    self.ready_line = chunk
                    return self
            elif self.proc.poll() is not None:
                break
            else:
                time.sleep(0.02)
        self.kill9()
        raise RuntimeError(f"broker did not become ready:\n{buf}\n{self.stderr_path.read_text()[-3000:]}")

    def listener_port(self, name: str) -> int:
        """The port the listener ``name`` bound, from the ready line."""
        match = re.search(rf"[=,]{re.escape(name)}://[\d.]+:(\d+)", self.ready_line)
        assert match is not None, f"no listener {name} in {self.ready_line!r}"
        return int(match.group(1))

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, wait; returns the exit status (SIGKILL after ``timeout``)."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()

    def logs(self) -> str:
        return self.stderr_path.read_text() if self.stderr_path.exists() else ""
