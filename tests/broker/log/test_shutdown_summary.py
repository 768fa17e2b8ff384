"""The clean shutdown's summary: a clean start reads each partition's listing, segment sizes
and next offsets from one file instead of from every partition directory, and falls back to
the directories whenever the summary cannot speak for them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from broker.log import LogConfig, LogManager
from broker.log.manager import CLEAN_SHUTDOWN_FILE
from broker.log.shutdown_summary import SUMMARY_FILE

from .helpers import Clock, make_batch, read_all, record_offsets

CONFIG = LogConfig(segment_bytes=1024, index_interval_bytes=128)
PARTITIONS = 6


def build(log_dir: Path, clock: Clock) -> dict[int, list[int]]:
    """Partitions of 0..14 batches of 2 records (several segments for the larger ones), closed
    cleanly; the offsets each holds."""
    mgr = LogManager([log_dir], CONFIG, clock)
    for partition in range(PARTITIONS):
        log = mgr.get_or_create("t", partition)
        for _ in range(partition * 3):
            log.append_as_leader(make_batch(2, value_size=60), 1)
    assert len(mgr.get("t", PARTITIONS - 1).segments) > 1  # type: ignore[union-attr]
    offsets = {p: record_offsets(read_all(mgr.get("t", p))) for p in range(PARTITIONS)}  # type: ignore[arg-type]
    mgr.close()
    return offsets


def load(log_dir: Path, clock: Clock) -> tuple[LogManager, dict[str, Any]]:
    with capture_logs() as logs:
        mgr = LogManager([log_dir], CONFIG, clock)
    (loaded,) = [entry for entry in logs if entry["event"] == "log_dir_loaded"]
    return mgr, loaded


def check_served(mgr: LogManager, offsets: dict[int, list[int]]) -> None:
    """Every record is read back, and appends go on at the log end."""
    for partition, expected in offsets.items():
        log = mgr.get("t", partition)
        assert log is not None
        assert record_offsets(read_all(log)) == expected
        end = log.log_end_offset
        assert end == len(expected)
        assert log.append_as_leader(make_batch(2), 2).first_offset == end
        assert record_offsets(read_all(log)) == [*expected, end, end + 1]


def test_a_clean_start_reads_the_summary_and_removes_it(tmp_path: Path, clock: Clock) -> None:
    offsets = build(tmp_path, clock)
    summary = json.loads((tmp_path / SUMMARY_FILE).read_text())
    assert sorted(summary["partitions"]) == [f"t-{p}" for p in range(PARTITIONS)]
    mgr, loaded = load(tmp_path, clock)
    assert loaded["clean_shutdown"] and loaded["from_summary"] == PARTITIONS
    assert not (tmp_path / SUMMARY_FILE).exists()
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    check_served(mgr, offsets)
    mgr.close()
    # The appends above are in the next summary, and so in the next start.
    mgr, loaded = load(tmp_path, clock)
    assert loaded["from_summary"] == PARTITIONS
    assert [mgr.get("t", p).log_end_offset for p in range(PARTITIONS)] == [  # type: ignore[union-attr]
        len(offsets[p]) + 2 for p in range(PARTITIONS)
    ]
    mgr.close()


def test_a_crash_after_a_summarised_start_recovers_from_the_files(tmp_path: Path, clock: Clock) -> None:
    offsets = build(tmp_path, clock)
    mgr, _ = load(tmp_path, clock)
    for partition in range(PARTITIONS):
        mgr.get("t", partition).append_as_leader(make_batch(2), 2)  # type: ignore[union-attr]
        offsets[partition] += [len(offsets[partition]), len(offsets[partition]) + 1]
    for log in mgr.logs.values():
        log.close_handles()  # killed: no summary, no marker
    mgr._release_locks()
    mgr, loaded = load(tmp_path, clock)
    assert not loaded["clean_shutdown"] and loaded["from_summary"] == 0
    for partition, expected in offsets.items():
        assert record_offsets(read_all(mgr.get("t", partition))) == expected  # type: ignore[arg-type]
    mgr.close()


def test_a_summary_without_the_marker_is_not_used(tmp_path: Path, clock: Clock) -> None:
    """A crash between writing the summary and the marker: the directories are read."""
    offsets = build(tmp_path, clock)
    (tmp_path / CLEAN_SHUTDOWN_FILE).unlink()
    mgr, loaded = load(tmp_path, clock)
    assert not loaded["clean_shutdown"] and loaded["from_summary"] == 0
    assert not (tmp_path / SUMMARY_FILE).exists()
    check_served(mgr, offsets)
    mgr.close()


def test_a_corrupt_summary_is_ignored(tmp_path: Path, clock: Clock) -> None:
    offsets = build(tmp_path, clock)
    (tmp_path / SUMMARY_FILE).write_text('{"version": 1, "partitions": {"t-0": [')
    with capture_logs() as logs:
        mgr = LogManager([tmp_path], CONFIG, clock)
    assert any(entry["event"] == "clean_shutdown_summary_ignored" for entry in logs)
    check_served(mgr, offsets)
    mgr.close()


def test_an_entry_whose_segments_and_names_disagree_is_not_used(tmp_path: Path, clock: Clock) -> None:
    offsets = build(tmp_path, clock)
    path = tmp_path / SUMMARY_FILE
    summary = json.loads(path.read_text())
    names, segments = summary["partitions"]["t-5"]
    summary["partitions"]["t-5"] = [names, segments[1:]]  # a segment left out
    summary["partitions"]["t-4"][1][-1][2] = 999  # a wrong next offset: trusted, as the file is
    path.write_text(json.dumps(summary))
    mgr, loaded = load(tmp_path, clock)
    assert loaded["from_summary"] == PARTITIONS  # entries found; t-5's was not matched
    assert record_offsets(read_all(mgr.get("t", 5))) == offsets[5]  # type: ignore[arg-type]
    assert mgr.get("t", 4).log_end_offset == 999  # type: ignore[union-attr]
    for log in mgr.logs.values():
        log.close_handles()
    mgr._release_locks()


def test_a_partition_with_stray_files_is_listed_at_start(tmp_path: Path, clock: Clock) -> None:
    """Files a start must clean up keep a partition out of the summary."""
    mgr = LogManager([tmp_path], CONFIG, clock)
    for partition in range(2):
        mgr.get_or_create("t", partition).append_as_leader(make_batch(2), 1)
    mgr.close()
    stray = tmp_path / "t-1" / "00000000000000000042.log.deleted"
    stray.write_bytes(b"x")
    mgr, _ = load(tmp_path, clock)  # a clean start without the stray file in its summary
    mgr.close()
    assert stray.exists()  # the summary's listing did not hold it: not removed yet
    assert sorted(json.loads((tmp_path / SUMMARY_FILE).read_text())["partitions"]) == ["t-0"]
    mgr, loaded = load(tmp_path, clock)
    assert loaded["from_summary"] == 1
    assert not stray.exists()  # t-1 was listed, and its stray file removed
    assert [mgr.get("t", p).log_end_offset for p in range(2)] == [2, 2]  # type: ignore[union-attr]
    mgr.close()
