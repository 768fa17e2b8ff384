"""Disk waits stay off the event loop: the periodic checkpoints and fsyncs, which take
seconds on a busy disk and once held every client up for 1.5 s, run in a worker thread."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import trio

from broker.node import BrokerNode
from config import load_config


def test_periodic_checkpoints_and_fsyncs_do_not_run_on_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, _ = load_config(None, [
        "listeners=PLAINTEXT://127.0.0.1:0", f"log.dirs={tmp_path / 'data'}", "metrics.listener=",
        "replica.high.watermark.checkpoint.interval.ms=50", "log.flush.offset.checkpoint.interval.ms=50",
        "num.partitions=4",
    ])
    node = BrokerNode(config)
    fsyncs: list[int] = []
    real_fsync = os.fsync
    loop_thread: list[int] = []
    watching = threading.Event()

    def observed_fsync(fd: int) -> None:
        if watching.is_set():
            fsyncs.append(threading.get_ident())
        real_fsync(fd)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(node.run)
            loop_thread.append(threading.get_ident())
            monkeypatch.setattr(os, "fsync", observed_fsync)
            watching.set()
            await trio.sleep(0.6)
            watching.clear()
            node.request_shutdown()

    trio.run(main)
    # Checkpoints ran (3 files, fsynced with their directory, every 50 ms)...
    assert len(fsyncs) >= 6
    # ...and none of their fsyncs on the event loop's thread.
    assert loop_thread[0] not in fsyncs
