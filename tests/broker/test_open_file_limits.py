"""Limits hit on purpose against a real broker process: the open-file limit (``prlimit``)
and a full disk (a small tmpfs). The client gets an error naming the limit, the broker
stays up and serves the rest, creates what it could not once the limit is gone, and
restarts on its data."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker.broker_process import BrokerProcess
from tests.broker.raw_client import RawClient
from tests.broker.scale_clients import create_topics, produce_one_each, read_all
from wire.errors import ErrorCode
from wire.generated.api_019_create_topics import (
    CreateTopicsRequest,
    CreateTopicsRequestCreatableTopic,
    CreateTopicsResponse,
)


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _create_raw(client: RawClient, name: str, partitions: int) -> tuple[int, str | None]:
    response = client.call(
        CreateTopicsRequest(
            topics=[CreateTopicsRequestCreatableTopic(name=name, num_partitions=partitions, replication_factor=1)],
            timeout_ms=30_000,
        ),
        CreateTopicsResponse,
        5,
    )
    assert isinstance(response, CreateTopicsResponse)
    return response.topics[0].error_code, response.topics[0].error_message


def _wait_for(predicate: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_descriptors_used_up_by_connections(tmp_path: Path) -> None:
    """Connections take every descriptor: creating a topic still works (a new partition needs
    one file, whose descriptor comes out of the log files' budget: an idle one is closed for
    it), the broker serves on, and restarts on its data. (A creation that fails on a limit is
    test_full_disk's.)"""
    broker = BrokerProcess(tmp_path / "data", {"log.open.files.max": "16"},
                           wrapper=["prlimit", "--nofile=256:256"]).start()
    hogs: list[socket.socket] = []
    try:
        assert broker.proc is not None
        pid = broker.proc.pid
        assert create_topics(broker.bootstrap, ["before"], 4) == {"before": None}
        assert produce_one_each(broker.bootstrap, ["before"], 4, "first") == {}
        client = RawClient(broker.bootstrap)
        # Fill the broker's descriptor table with idle connections (accepted ones stay open).
        deadline = time.monotonic() + 30
        while _open_fds(pid) < 256 and time.monotonic() < deadline:
            try:
                hogs.append(socket.create_connection(("127.0.0.1", broker.port), timeout=5))
            except OSError:
                break
            if len(hogs) % 20 == 0:
                time.sleep(0.05)
        _wait_for(lambda: _open_fds(pid) >= 255, 20, "the descriptor table to fill")
        code, message = _create_raw(client, "during", 8)
        assert code == ErrorCode.NONE, (code, message)
        assert broker.proc.poll() is None
        assert _open_fds(pid) <= 256
        for hog in hogs:
            hog.close()
        hogs.clear()
        _wait_for(lambda: _open_fds(pid) < 200, 20, "the connections to close")
        assert produce_one_each(broker.bootstrap, ["before", "during"], 4, "second", timeout_s=60) == {}
        assert produce_one_each(broker.bootstrap, ["during"], 8, "third", timeout_s=60) == {}
        client.close()
        assert broker.stop() == 0
        broker.start()
        got = read_all(broker.bootstrap, ["before"], 4, expected=8)
        assert sum(len(v) for v in got.values()) == 8
        got = read_all(broker.bootstrap, ["during"], 8, expected=12)
        assert sum(len(v) for v in got.values()) == 12
    finally:
        for hog in hogs:
            hog.close()
        broker.kill9()


@contextlib.contextmanager
def _tmpfs(path: Path, size: str, inodes: int) -> Iterator[Path]:
    path.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},nr_inodes={inodes}", "tmpfs", str(path)],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_full_disk(tmp_path: Path) -> None:
    """A log directory out of inodes, then out of bytes: creation and produce fail with
    KAFKA_STORAGE_ERROR naming the full disk, the broker serves the partitions it has, finishes
    once there is room again, and restarts on its data."""
    with _tmpfs(tmp_path / "disk", "8m", 160) as disk:
        broker = BrokerProcess(disk / "data", {"log.segment.bytes": "1048576"})
        broker.stderr_path = tmp_path / "broker.log"  # not on the disk that fills up
        broker.start()
        try:
            assert broker.proc is not None
            filler = disk / "filler"
            fd = os.open(filler, os.O_WRONLY | os.O_CREAT)  # its inode, before they run out
            assert create_topics(broker.bootstrap, ["small"], 2) == {"small": None}
            assert produce_one_each(broker.bootstrap, ["small"], 2, "first") == {}
            # Each partition needs a directory and four files: 100 of them cannot fit 160 inodes.
            result = create_topics(broker.bootstrap, ["big"], 100)
            assert result["big"] is not None and "KAFKA_STORAGE_ERROR" in result["big"], result
            assert "no space left" in result["big"], result
            assert broker.proc.poll() is None
            assert produce_one_each(broker.bootstrap, ["small"], 2, "second") == {}
            # Fill the bytes: produce fails with KAFKA_STORAGE_ERROR, the broker stays up.
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * 4096)
            os.close(fd)
            errors = produce_one_each(broker.bootstrap, ["small"], 2, "x" * 200_000, timeout_s=10)
            assert errors and all("KAFKA_STORAGE_ERROR" in e or "Broker: Disk error" in e for e in errors.values()), errors
            assert broker.proc.poll() is None
            # Room again: the missing logs are created by the retry, everything takes records.
            filler.unlink()
            subprocess.run(["mount", "-o", "remount,size=64m,nr_inodes=4000", str(disk)], check=True)
            _wait_for(lambda: "partition_logs_created_after_retry" in broker.logs(), 30, "the retry")
            assert produce_one_each(broker.bootstrap, ["small"], 2, "third") == {}
            assert produce_one_each(broker.bootstrap, ["big"], 100, "big") == {}
            assert broker.stop() == 0
            broker.start()
            got = read_all(broker.bootstrap, ["small"], 2, expected=6)
            assert all(v.startswith(b"first") or v.startswith(b"second") or v.startswith(b"third")
                       for values in got.values() for v in values)
            assert sum(len(v) for v in got.values()) == 6
            assert sum(len(v) for v in read_all(broker.bootstrap, ["big"], 100, expected=100).values()) == 100
            broker.kill9()
            broker.start()
            assert sum(len(v) for v in read_all(broker.bootstrap, ["big"], 100, expected=100).values()) == 100
        finally:
            broker.kill9()


def test_3000_partitions_under_an_open_file_limit_of_1024(tmp_path: Path) -> None:
    """Three files a partition would need 9,000 descriptors: the broker creates 3,000 partitions
    within 1,024, takes a record on each, serves them all, and reads every record back after a
    graceful restart and after kill -9."""
    topics = [f"scale-{i}" for i in range(30)]
    broker = BrokerProcess(tmp_path / "data", wrapper=["prlimit", "--nofile=1024:1024"]).start()
    try:
        assert broker.proc is not None
        for i in range(0, len(topics), 10):
            assert create_topics(broker.bootstrap, topics[i:i + 10], 100) == dict.fromkeys(topics[i:i + 10])
        assert produce_one_each(broker.bootstrap, topics, 100, "first") == {}
        assert _open_fds(broker.proc.pid) < 1024
        got = read_all(broker.bootstrap, topics, 100, expected=3000)
        assert len(got) == 3000 and all(len(v) == 1 for v in got.values())
        assert broker.stop() == 0
        broker.start(timeout=120)
        assert produce_one_each(broker.bootstrap, topics, 100, "second") == {}
        got = read_all(broker.bootstrap, topics, 100, expected=6000)
        assert len(got) == 3000
        assert all([m.split()[0] for m in v] == [b"first", b"second"] for v in got.values())
        broker.kill9()
        broker.start(timeout=120)
        got = read_all(broker.bootstrap, topics, 100, expected=6000)
        assert len(got) == 3000
        assert all([m.split()[0] for m in v] == [b"first", b"second"] for v in got.values())
        assert _open_fds(broker.proc.pid) < 1024
        logs = broker.logs()
        assert "open_file_limit" in logs and "Too many open files" not in logs
    finally:
        broker.kill9()
