"""LeaderEpochCache: Kafka's LeaderEpochFileCache semantics and its checkpoint file."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.log.errors import CheckpointError
from broker.log.leader_epoch import EpochEntry, LeaderEpochCache


def cache_with(tmp_path: Path, *entries: tuple[int, int]) -> LeaderEpochCache:
    cache = LeaderEpochCache(tmp_path / "leader-epoch-checkpoint")
    for epoch, start in entries:
        cache.assign(epoch, start)
    return cache


def entries(cache: LeaderEpochCache) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in cache.entries]


def test_assign_persists_in_kafka_format(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (0, 0), (2, 10), (5, 30))
    # A new epoch is written by the log's next flush, not by each assignment.
    assert not (tmp_path / "leader-epoch-checkpoint").exists()
    cache.flush()
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n0 0\n2 10\n5 30\n"
    assert entries(LeaderEpochCache(tmp_path / "leader-epoch-checkpoint")) == [
        (0, 0),
        (2, 10),
        (5, 30),
    ]
    assert cache.latest_epoch == 5
    assert cache.earliest_entry == EpochEntry(0, 0)


def test_assign_same_epoch_later_offset_is_noop(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (1, 5), (1, 9))
    assert entries(cache) == [(1, 5)]


def test_assign_same_epoch_earlier_offset_replaces(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (1, 5), (1, 3))
    assert entries(cache) == [(1, 3)]


def test_assign_removes_conflicting_entries(tmp_path: Path) -> None:
    # A lower epoch, or a start offset at or below existing ones, drops those entries.
    cache = cache_with(tmp_path, (1, 0), (3, 10), (4, 20))
    cache.assign(2, 15)
    assert entries(cache) == [(1, 0), (2, 15)]
    cache.assign(6, 15)
    assert entries(cache) == [(1, 0), (6, 15)]


def test_assign_rejects_negative(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        cache_with(tmp_path, (-1, 0))


def test_end_offset_for(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (1, 0), (3, 10), (6, 25))
    leo = 40
    assert cache.end_offset_for(-1, leo) == (-1, -1)  # UNDEFINED
    assert cache.end_offset_for(6, leo) == (6, leo)  # latest: the log end
    assert cache.end_offset_for(3, leo) == (3, 25)  # known: start of the next
    assert cache.end_offset_for(1, leo) == (1, 10)
    assert cache.end_offset_for(4, leo) == (3, 25)  # unknown in between: previous epoch, next start
    assert cache.end_offset_for(0, leo) == (0, 0)  # older than all: first start offset
    assert cache.end_offset_for(7, leo) == (-1, -1)  # beyond the latest
    assert LeaderEpochCache(tmp_path / "other").end_offset_for(1, leo) == (-1, -1)


def test_epoch_for_offset(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (1, 5), (3, 10))
    assert cache.epoch_for_offset(4) is None
    assert cache.epoch_for_offset(5) == 1
    assert cache.epoch_for_offset(9) == 1
    assert cache.epoch_for_offset(10) == 3
    assert cache.epoch_for_offset(1000) == 3


def test_truncate_from_end(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (1, 0), (3, 10), (6, 25))
    cache.truncate_from_end(26)
    assert entries(cache) == [(1, 0), (3, 10), (6, 25)]
    cache.truncate_from_end(25)
    assert entries(cache) == [(1, 0), (3, 10)]
    cache.truncate_from_end(5)
    assert entries(LeaderEpochCache(cache.path)) == [(1, 0)]


def test_truncate_from_start(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (1, 0), (3, 10), (6, 25))
    cache.truncate_from_start(12)
    assert entries(cache) == [(3, 12), (6, 25)]
    cache.truncate_from_start(25)
    assert entries(cache) == [(6, 25)]
    cache.truncate_from_start(30)
    assert entries(LeaderEpochCache(cache.path)) == [(6, 30)]


def test_clear(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (1, 0))
    cache.clear()
    assert entries(LeaderEpochCache(cache.path)) == []


def test_loading_drops_non_monotonic_entries(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text("0\n3\n1 0\n4 20\n3 10\n")
    assert entries(LeaderEpochCache(path)) == [(1, 0), (3, 10)]


def test_malformed_file_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text("0\n1\n1 x\n")
    cache = LeaderEpochCache(path)  # read when first used
    with pytest.raises(CheckpointError):
        _ = cache.latest_epoch
