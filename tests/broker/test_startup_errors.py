"""A node that cannot start says why in one line naming the setting, and exits with status 2
(as a bad configuration value does): a listener port in use, a log dir that is a file or
cannot be created, a security protocol that is not supported."""

from __future__ import annotations

import select
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.shared import ROOT

EXIT_CONFIG = 2


def serve(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "broker", "serve",
            "--override", "metrics.listener=127.0.0.1:0",
            "--override", f"log.dirs={tmp_path / 'data'}"]
    for override in overrides:
        args += ["--override", override]
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)


def assert_one_line(proc: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert proc.returncode == EXIT_CONFIG, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("cormorant: cannot start: "), proc.stderr[-3000:]
    for fragment in fragments:
        assert fragment in last, last


def test_listener_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = serve(tmp_path, f"listeners=PLAINTEXT://127.0.0.1:{port}")
    assert_one_line(proc, "listeners", f"127.0.0.1:{port}", "in use")


@pytest.mark.parametrize("where", ["file", "under-a-file"])
def test_log_dir_that_cannot_be_used(tmp_path: Path, where: str) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    log_dir = a_file if where == "file" else a_file / "data"
    proc = serve(tmp_path, "listeners=PLAINTEXT://127.0.0.1:0", f"log.dirs={log_dir}")
    assert_one_line(proc, "log.dirs", str(log_dir))


def test_log_dir_served_by_another_broker(tmp_path: Path) -> None:
    first = subprocess.Popen(
        [sys.executable, "-m", "broker", "serve", "--override", "metrics.listener=127.0.0.1:0",
         "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={tmp_path / 'data'}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert first.stdout is not None
        deadline = time.monotonic() + 60
        while True:
            ready, _, _ = select.select([first.stdout], [], [], max(0.0, deadline - time.monotonic()))
            line = first.stdout.readline() if ready else ""
            if "cormorant ready" in line:
                break
            assert line and time.monotonic() < deadline, "the first broker never became ready"
        proc = serve(tmp_path, "listeners=PLAINTEXT://127.0.0.1:0")
        assert_one_line(proc, "log.dirs", "in use by another broker")
    finally:
        first.terminate()
        first.wait(30)


def test_tls_listener_without_a_keystore(tmp_path: Path) -> None:
    proc = serve(tmp_path, "listeners=SSL://127.0.0.1:0", "inter.broker.listener.name=SSL")
    assert_one_line(proc, "ssl.keystore.location", "SSL", "no keystore")
