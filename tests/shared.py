"""Where the reference material sits: ``../shared`` beside the project root, or the folder
named by ``CORMORANT_REFERENCE_DIR``. It holds Kafka's JSON message schemas
(``kafka-protocol/``) and frames captured from real clients (``kafka-captures/``); it is not
part of the repository, and the tests that read it skip without it (the run's last line
counts them)."""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("CORMORANT_REFERENCE_DIR") or ROOT.parent / "shared")

#: Every test broker runs with the slow-step watchdog armed: a task step that computes
#: for this long holds every other client up, and stops the broker so the test fails.
STALL_GUARD = {"event.loop.slow.step.ms": "100", "event.loop.stall.abort.ms": "500"}
#: Every test broker's scrape endpoint binds an ephemeral port (a test may set its own): the
#: default 127.0.0.1:9464 may be held by another process, and a broker that cannot bind it
#: logs an error the tests would see.
EPHEMERAL_METRICS = {"metrics.listener": "127.0.0.1:0"}
SCHEMAS = SHARED / "kafka-protocol"
CAPTURES = SHARED / "kafka-captures"


@dataclass(frozen=True)
class CapturedFrame:
    path: Path
    index: int
    direction: str  # "C" client -> broker, "S" broker -> client
    frame: bytes  # the Kafka frame, size prefix included
    meta: dict[str, Any]  # the .jsonl decode beside the capture


def capture_files() -> list[Path]:
    if not CAPTURES.is_dir():
        return []
    return sorted(CAPTURES.rglob("*.bin"))


def read_capture(path: Path) -> Iterator[CapturedFrame]:
    data = path.read_bytes()
    metas = {}
    jsonl = path.with_suffix(".jsonl")
    if jsonl.exists():
        lines = [ln for ln in jsonl.read_text().splitlines() if ln.strip()]
        for i, line in enumerate(lines):
            m = json.loads(line)
            metas[m.get("frame_index", i)] = m
    pos = 0
    index = 0
    while pos < len(data):
        direction = chr(data[pos])
        (n,) = struct.unpack_from(">I", data, pos + 1)
        frame = data[pos + 5 : pos + 5 + n]
        pos += 5 + n
        yield CapturedFrame(path, index, direction, frame, metas.get(index, {}))
        index += 1
