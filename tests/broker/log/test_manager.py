"""LogManager: loading log directories, placement, deletion, checkpoints and the clean shutdown marker."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from broker.log import LogConfig, LogDirLockedError, LogManager, TopicPartition
from broker.log.checkpoint import OffsetCheckpointFile
from broker.log.files import parse_partition_dir_name

from .helpers import Clock, make_batch, read_all, record_offsets

CONFIG = LogConfig(segment_bytes=1024, index_interval_bytes=128, file_delete_delay_ms=1000)


def manager(tmp_path: Path, clock: Clock, dirs: int = 2) -> LogManager:
    return LogManager([tmp_path / f"d{i}" for i in range(dirs)], CONFIG, clock)


def fill(mgr: LogManager, topic: str, partition: int, batches: int) -> None:
    log = mgr.get_or_create(topic, partition)
    for _ in range(batches):
        log.append_as_leader(make_batch(2), 0)


@pytest.mark.parametrize(
    ("name", "topic", "partition"),
    [
        ("orders-0", "orders", 0),
        ("my-topic-12", "my-topic", 12),
        ("a.b_c-d-3", "a.b_c-d", 3),
        ("x-1.0123456789abcdef0123456789abcdef-delete", "x", 1),
        ("t-2.abc-future", "t", 2),
    ],
)
def test_partition_dir_names(name: str, topic: str, partition: int) -> None:
    assert parse_partition_dir_name(name) == TopicPartition(topic, partition)


@pytest.mark.parametrize(
    "name", ["orders", "orders-", "-0", "orders-x", "x-1-delete", "lost+found"]
)
def test_bad_partition_dir_names(name: str) -> None:
    with pytest.raises(ValueError):
        parse_partition_dir_name(name)


def test_new_partitions_go_to_the_emptiest_dir(tmp_path: Path, clock: Clock) -> None:
    mgr = manager(tmp_path, clock, dirs=3)
    placed = [mgr.get_or_create("t", p).dir.parent.name for p in range(7)]
    assert placed == ["d0", "d1", "d2", "d0", "d1", "d2", "d0"]
    assert mgr.get_or_create("t", 0) is mgr.get("t", 0)
    assert (tmp_path / "d1" / "t-1").is_dir()
    mgr.close()


def test_restart_after_clean_shutdown(tmp_path: Path, clock: Clock) -> None:
    mgr = manager(tmp_path, clock)
    fill(mgr, "my-topic", 0, 40)
    fill(mgr, "other.topic", 3, 5)
    mgr.close(broker_epoch=17)
    marker = tmp_path / "d0" / ".kafka_cleanshutdown"
    assert json.loads(marker.read_text()) == {"version": 0, "brokerEpoch": 17}
    recovery = OffsetCheckpointFile(tmp_path / "d0" / "recovery-point-offset-checkpoint").read()
    assert recovery == {TopicPartition("my-topic", 0): 80}

    again = manager(tmp_path, clock)
    assert again.had_clean_shutdown
    assert not marker.exists()  # removed once loaded, so a crash from now on is noticed
    log = again.get("my-topic", 0)
    assert log is not None and log.log_end_offset == 80 and log.recovery_point == 80
    assert sorted(again.logs) == [TopicPartition("my-topic", 0), TopicPartition("other.topic", 3)]
    again.close()


def test_restart_after_a_crash_recovers_past_the_recovery_point(
    tmp_path: Path, clock: Clock
) -> None:
    mgr = manager(tmp_path, clock, dirs=1)
    fill(mgr, "t", 0, 40)
    log = mgr.get("t", 0)
    assert log is not None
    log.flush(30)
    mgr.checkpoint_all()
    active = log.active_segment
    log.close_handles()
    mgr._release_locks()  # the process died: the kernel drops its locks
    with active.log_path.open("r+b") as f:
        f.truncate(active.size - 10)
    again = manager(tmp_path, clock, dirs=1)
    assert not again.had_clean_shutdown
    recovered = again.get("t", 0)
    assert recovered is not None
    assert recovered.log_end_offset == 78 and recovered.recovery_point == 30
    assert record_offsets(read_all(recovered)) == list(range(78))
    again.close()


def test_log_start_offsets_are_checkpointed(tmp_path: Path, clock: Clock) -> None:
    mgr = manager(tmp_path, clock, dirs=1)
    fill(mgr, "t", 0, 40)
    log = mgr.get_or_create("t", 0)
    log.delete_records_before(33, high_watermark=80)
    mgr.close()
    starts = OffsetCheckpointFile(tmp_path / "d0" / "log-start-offset-checkpoint").read()
    assert starts == {TopicPartition("t", 0): 33}
    again = manager(tmp_path, clock, dirs=1)
    assert again.get_or_create("t", 0).log_start_offset == 33
    again.close()


def test_high_watermarks_come_from_their_owner(tmp_path: Path, clock: Clock) -> None:
    mgr = manager(tmp_path, clock)
    fill(mgr, "t", 0, 1)
    fill(mgr, "t", 1, 1)
    mgr.write_high_watermarks(
        {TopicPartition("t", 0): 2, TopicPartition("t", 1): 1, TopicPartition("gone", 0): 5}
    )
    assert OffsetCheckpointFile(tmp_path / "d0" / "replication-offset-checkpoint").read() == {
        TopicPartition("t", 0): 2
    }
    assert mgr.read_high_watermarks() == {("t", 0): 2, ("t", 1): 1}
    mgr.close()


def test_delete_partition(tmp_path: Path, clock: Clock) -> None:
    mgr = manager(tmp_path, clock, dirs=1)
    fill(mgr, "doomed-topic", 0, 10)
    log = mgr.get("doomed-topic", 0)
    assert log is not None
    region = log.read(0, 10_000).region
    assert region is not None
    data = region.read()
    assert mgr.delete_partition("doomed-topic", 0)
    assert not mgr.delete_partition("doomed-topic", 0)
    assert mgr.get("doomed-topic", 0) is None
    (renamed,) = [p for p in (tmp_path / "d0").iterdir() if p.is_dir()]
    assert renamed.name.startswith("doomed-topic-0.") and renamed.name.endswith("-delete")
    assert region.read() == data  # still readable until the delay passes
    mgr.apply_retention(clock.now_ms, lambda tp: None)
    assert renamed.exists()
    clock.advance(1000)
    mgr.apply_retention(clock.now_ms, lambda tp: None)
    assert not renamed.exists()
    assert OffsetCheckpointFile(tmp_path / "d0" / "recovery-point-offset-checkpoint").read() == {}
    mgr.close()


def test_delete_with_a_checkpoint_task_leaves_the_disk_waits_to_it(tmp_path: Path, clock: Clock) -> None:
    """With ``request_checkpoint`` (the broker's), deleting asks for a checkpoint round instead
    of fsyncing and rewriting the checkpoints on the caller's (the event loop's) time."""
    mgr = manager(tmp_path, clock, dirs=1)
    fill(mgr, "kept", 0, 3)
    fill(mgr, "doomed", 0, 3)
    mgr.checkpoint_all()
    checkpoint = tmp_path / "d0" / "recovery-point-offset-checkpoint"
    assert set(OffsetCheckpointFile(checkpoint).read()) == {TopicPartition("kept", 0), TopicPartition("doomed", 0)}
    requests: list[int] = []
    mgr.request_checkpoint = lambda: requests.append(1)
    assert mgr.delete_partitions([TopicPartition("doomed", 0), TopicPartition("absent", 0)]) == 1
    assert requests == [1]
    assert TopicPartition("doomed", 0) in OffsetCheckpointFile(checkpoint).read()  # not rewritten yet
    mgr.checkpoint_all()  # the checkpoint task's round
    assert set(OffsetCheckpointFile(checkpoint).read()) == {TopicPartition("kept", 0)}
    assert mgr.delete_partitions([TopicPartition("absent", 0)]) == 0
    assert requests == [1]  # nothing deleted, nothing to write
    mgr.close()


def test_leftover_delete_dirs_are_removed_and_strays_ignored(tmp_path: Path, clock: Clock) -> None:
    d0 = tmp_path / "d0"
    (d0 / "old-0.0123456789abcdef0123456789abcdef-delete").mkdir(parents=True)
    (d0 / "t-0.0123456789abcdef0123456789abcdef-future").mkdir()
    (d0 / "__cluster_metadata-0").mkdir()
    (d0 / "lost+found").mkdir()
    (d0 / "meta.properties").write_text("node.id=1\n")
    mgr = manager(tmp_path, clock, dirs=1)
    assert not (d0 / "old-0.0123456789abcdef0123456789abcdef-delete").exists()
    assert dict(mgr.logs) == {}
    assert (d0 / "__cluster_metadata-0").exists() and (d0 / "meta.properties").exists()
    mgr.close()


def test_retention_through_the_manager(tmp_path: Path, clock: Clock) -> None:
    mgr = LogManager([tmp_path / "d0"], LogConfig(segment_bytes=1024, retention_ms=1000), clock)
    fill(mgr, "t", 0, 40)
    fill(mgr, "u", 0, 40)
    high_watermarks = {TopicPartition("t", 0): 80}
    deleted = mgr.apply_retention(clock.now_ms, high_watermarks.get)
    assert deleted > 0
    t, u = mgr.get("t", 0), mgr.get("u", 0)
    assert t is not None and u is not None
    assert t.log_start_offset == 80 and u.log_start_offset == 0  # no high watermark known for u
    mgr.close()


def test_truncate_through_the_manager_rewrites_recovery_points(
    tmp_path: Path, clock: Clock
) -> None:
    mgr = manager(tmp_path, clock, dirs=1)
    fill(mgr, "t", 0, 40)
    log = mgr.get_or_create("t", 0)
    log.flush()
    mgr.checkpoint_all()
    assert mgr.truncate_to("t", 0, 20)
    assert OffsetCheckpointFile(tmp_path / "d0" / "recovery-point-offset-checkpoint").read() == {
        TopicPartition("t", 0): 20
    }
    mgr.truncate_fully_and_start_at("t", 0, 500)
    assert OffsetCheckpointFile(tmp_path / "d0" / "recovery-point-offset-checkpoint").read() == {
        TopicPartition("t", 0): 500
    }
    mgr.close()


def test_truncation_with_a_checkpoint_task_leaves_the_fsyncs_to_it(
    tmp_path: Path, clock: Clock, fsynced: list[str]
) -> None:
    """With ``request_checkpoint`` (the broker's), a follower's truncation fsyncs nothing on
    the caller's (the event loop's) time; the next round makes it durable: the leader epoch
    file, the partition directory and the recovery points, lowered to the new log end."""
    mgr = manager(tmp_path, clock, dirs=1)
    log = mgr.get_or_create("t", 0)
    for epoch in range(4):
        for _ in range(10):
            log.append_as_leader(make_batch(2), epoch)
    log.flush()
    mgr.checkpoint_all()
    checkpoint = tmp_path / "d0" / "recovery-point-offset-checkpoint"
    epochs_file = log.dir / "leader-epoch-checkpoint"
    assert OffsetCheckpointFile(checkpoint).read() == {TopicPartition("t", 0): 80}
    fsynced.clear()  # from here on
    requests: list[int] = []
    mgr.request_checkpoint = lambda: requests.append(1)
    assert mgr.truncate_to("t", 0, 30)
    assert requests == [1] and fsynced == []
    # Written (a crashed process finds it), not yet fsynced nor checkpointed.
    assert epochs_file.read_text().split("\n")[1:-1] == ["2", "0 0", "1 20"]
    assert OffsetCheckpointFile(checkpoint).read() == {TopicPartition("t", 0): 80}
    mgr.checkpoint_all()  # the checkpoint task's round
    assert OffsetCheckpointFile(checkpoint).read() == {TopicPartition("t", 0): 30}
    assert str(epochs_file) in fsynced and str(log.dir) in fsynced
    fsynced.clear()
    mgr.truncate_fully_and_start_at("t", 0, 500)
    assert requests == [1, 1] and fsynced == []
    mgr.checkpoint_all()
    assert OffsetCheckpointFile(checkpoint).read() == {TopicPartition("t", 0): 500}
    assert str(log.dir) in fsynced
    mgr.close()
    again = manager(tmp_path, clock, dirs=1)
    reopened = again.get("t", 0)
    assert reopened is not None and reopened.log_start_offset == reopened.log_end_offset == 500
    again.close()


def test_a_truncation_whose_fsync_failed_is_synced_by_the_next_round(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    mgr = manager(tmp_path, clock, dirs=1)
    fill(mgr, "t", 0, 10)
    mgr.request_checkpoint = lambda: None
    assert mgr.truncate_to("t", 0, 4)
    real_fsync = os.fsync

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError):
        mgr.checkpoint_all()
    synced: list[str] = []

    def observed_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", observed_fsync)
    mgr.checkpoint_all()
    log = mgr.get("t", 0)
    assert log is not None and str(log.dir) in synced  # the truncation was kept for this round
    mgr.close()


def test_a_locked_dir_cannot_be_opened_twice(tmp_path: Path, clock: Clock) -> None:
    mgr = manager(tmp_path, clock, dirs=1)
    with pytest.raises(LogDirLockedError):
        manager(tmp_path, clock, dirs=1)
    mgr.close()
    manager(tmp_path, clock, dirs=1).close()


def test_same_partition_in_two_dirs_is_refused(tmp_path: Path, clock: Clock) -> None:
    for d in ("d0", "d1"):
        (tmp_path / d / "t-0").mkdir(parents=True)
    with pytest.raises(Exception, match="both"):
        manager(tmp_path, clock)
    # The failed start released its locks.
    manager(tmp_path, clock, dirs=1).close()


def test_flush_dirty_logs(tmp_path: Path, clock: Clock) -> None:
    mgr = manager(tmp_path, clock, dirs=1)
    fill(mgr, "t", 0, 40)
    log = mgr.get_or_create("t", 0)
    assert log.recovery_point == 0
    mgr.flush_dirty_logs(clock.now_ms)
    assert log.recovery_point == log.active_segment.base_offset > 0
    mgr.close()
    assert os.path.exists(tmp_path / "d0" / ".kafka_cleanshutdown")


def test_new_logs_made_off_the_loop_are_placed_evenly_and_then_found(tmp_path: Path, clock: Clock) -> None:
    mgr = manager(tmp_path, clock, dirs=2)
    fill(mgr, "old", 0, 1)
    specs = [("many", p, CONFIG) for p in range(40)] + [("old", 0, CONFIG)]
    planned = mgr.plan_new_logs(specs)
    assert len(planned) == 40  # the existing log is not planned again
    assert not any((tmp_path / f"d{i}" / "many-0").exists() for i in range(2))  # planning creates nothing
    created = mgr.open_new_logs(planned)  # what a worker thread runs
    assert mgr.get("many", 0) is None  # not the manager's until adopted
    mgr.adopt_new_logs(created)
    placed = [sum(1 for p in (tmp_path / f"d{i}").iterdir() if p.name.startswith("many-")) for i in range(2)]
    assert sorted(placed) == [20, 20]
    for p in range(40):
        log = mgr.get("many", p)
        assert log is not None and mgr.get_or_create("many", p) is log
        log.append_as_leader(make_batch(2), 0)
    mgr.close()
    reopened = manager(tmp_path, clock, dirs=2)
    assert all(record_offsets(read_all(reopened.logs[TopicPartition("many", p)])) == [0, 1] for p in range(40))
    reopened.close()


def test_deleting_many_partitions_rewrites_the_checkpoints_once(tmp_path: Path, clock: Clock) -> None:
    mgr = manager(tmp_path, clock, dirs=1)
    for p in range(5):
        fill(mgr, "gone", p, 1)
    fill(mgr, "kept", 0, 1)
    checkpoint = tmp_path / "d0" / "recovery-point-offset-checkpoint"
    assert mgr.delete_partitions([TopicPartition("gone", p) for p in range(5)] + [TopicPartition("none", 0)]) == 5
    assert set(OffsetCheckpointFile(checkpoint).read()) == {TopicPartition("kept", 0)}
    assert sorted(p.name.startswith("gone-") and p.name.endswith("-delete")
                  for p in (tmp_path / "d0").iterdir() if p.is_dir()) == [False] + [True] * 5
    mgr.close()
