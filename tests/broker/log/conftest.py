"""Fixtures for the log tests."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.log import LogConfig, PartitionLog

from .helpers import Clock

OpenLog = Callable[..., PartitionLog]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def open_log(tmp_path: Path, clock: Clock) -> Iterator[OpenLog]:
    """Open ``<tmp>/topic-0`` with LogConfig overrides; closes whatever is left open."""
    opened: list[PartitionLog] = []

    def opener(
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean: bool = False,
        name: str = "topic-0",
        **config: Any,
    ) -> PartitionLog:
        log = PartitionLog.open(
            tmp_path / name,
            LogConfig(**config),
            clock,
            recovery_point,
            log_start_offset=log_start_offset,
            had_clean_shutdown=clean,
        )
        opened.append(log)
        return log

    yield opener
    for log in opened:
        log.close_handles()


@pytest.fixture
def fsynced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths fsynced from now on, in order (``os.fsync`` still runs)."""
    paths: list[str] = []
    real_fsync = os.fsync

    def observed_fsync(fd: int) -> None:
        paths.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", observed_fsync)
    return paths
