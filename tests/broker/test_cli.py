"""The ``cormorant`` command as a shell user meets it: pipes, missing things, --help."""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
from pathlib import Path

from tests.shared import ROOT


def cormorant(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "broker", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=60, check=False)


def fake_cluster(root: Path, nodes: int) -> None:
    """A cluster directory whose nodes are all stopped (status reads only its files)."""
    root.mkdir()
    state = {"cluster_id": "c", "nodes": [
        {"node_id": i, "roles": "broker", "port": 20000 + i, "controller_port": None} for i in range(1, nodes + 1)
    ]}
    (root / "cluster.json").write_text(json.dumps(state))


def test_output_into_a_closed_pipe_is_no_traceback(tmp_path: Path) -> None:
    """`cormorant cluster status | head -1`: the reader is gone before the output is flushed."""
    fake_cluster(tmp_path / "c", 2000)
    proc = subprocess.Popen([sys.executable, "-m", "broker", "cluster", "status", "--dir", str(tmp_path / "c")],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    try:
        stderr = proc.stderr.read().decode()
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert proc.returncode == 1


def test_cluster_down_of_a_directory_without_a_cluster_fails(tmp_path: Path) -> None:
    done = cormorant("cluster", "down", "--dir", str(tmp_path / "nosuch"))
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.strip() == f"cormorant cluster: no cluster in {tmp_path / 'nosuch'}"
    assert not (tmp_path / "nosuch").exists()


def test_every_option_has_help_and_bootstrap_goes_anywhere() -> None:
    from broker.cli import build_parser
    from broker.tools.common import subcommand_parsers

    undocumented = []
    pending = [build_parser()]
    while pending:
        parser = pending.pop()
        pending += subcommand_parsers(parser)
        for action in parser._actions:
            if not action.help and not isinstance(action, argparse._SubParsersAction):
                undocumented.append(f"{parser.prog} {'/'.join(action.option_strings) or action.dest}")
    assert undocumented == []
    parser = build_parser()
    before = parser.parse_args(["topics", "--bootstrap-server", "h:1", "list"])
    after = parser.parse_args(["topics", "list", "--bootstrap-server", "h:1"])
    default = parser.parse_args(["groups", "list"])
    assert before.bootstrap_server == after.bootstrap_server == "h:1"
    assert default.bootstrap_server == "127.0.0.1:9092"


def test_help_shows_defaults() -> None:
    done = cormorant("topics", "create", "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "a broker to connect to (default: 127.0.0.1:9092)" in text
    assert "(default: -1)" in text


def test_tool_errors_start_with_the_tool_name(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        nobody = f"127.0.0.1:{sock.getsockname()[1]}"
    for tool in (["topics", "list"], ["groups", "list"], ["transactions", "list"],
                 ["partitions", "status"], ["metadata", "quorum"]):
        done = cormorant(*tool, "--bootstrap-server", nobody)
        assert done.returncode == 1, (tool, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"cormorant {tool[0]}: "), (tool, done.stderr)
    missing = tmp_path / "00000000000000000000.log"
    done = cormorant("dump-log", str(missing))
    assert done.returncode == 1
    assert done.stderr.strip() == f"cormorant dump-log: {missing}: not found"
