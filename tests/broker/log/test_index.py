"""OffsetIndex and TimeIndex: lookups against a linear-scan oracle, persistence, sanity checks."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.log.errors import CorruptIndexError
from broker.log.index import NO_TIMESTAMP, OffsetIndex, OffsetPosition, TimeIndex, TimestampOffset

BASE = 1_000


def offset_entries() -> st.SearchStrategy[list[tuple[int, int]]]:
    """Strictly increasing (offset, position) pairs."""
    return st.lists(st.tuples(st.integers(1, 50), st.integers(1, 5000)), max_size=60).map(
        _accumulate
    )


def _accumulate(steps: list[tuple[int, int]]) -> list[tuple[int, int]]:
    offset, position, out = BASE - 1, 0, []
    for offset_step, position_step in steps:
        offset += offset_step
        position += position_step
        out.append((offset, position))
    return out


def oracle_lookup(entries: list[tuple[int, int]], target: int) -> OffsetPosition:
    best = OffsetPosition(BASE, 0)
    for offset, position in entries:
        if offset <= target:
            best = OffsetPosition(offset, position)
    return best


@settings(max_examples=60, deadline=None)
@given(entries=offset_entries(), targets=st.lists(st.integers(BASE - 10, BASE + 3500), max_size=30))
def test_offset_lookup_matches_linear_scan(
    tmp_path_factory: pytest.TempPathFactory, entries: list[tuple[int, int]], targets: list[int]
) -> None:
    path = tmp_path_factory.mktemp("idx") / "a.index"
    index = OffsetIndex(path, BASE, 1 << 20)
    for offset, position in entries:
        index.append(offset, position)
    reopened = OffsetIndex(path, BASE, 1 << 20)
    for target in [*targets, *(o for o, _ in entries)]:
        expected = oracle_lookup(entries, target)
        assert index.lookup(target) == expected
        assert reopened.lookup(target) == expected
    for _, position in entries:
        # lookup_position agrees with a scan over positions.
        expected_pos = max((e for e in entries if e[1] <= position), default=(BASE, 0))
        assert tuple(reopened.lookup_position(position)) == expected_pos
    index.close()
    reopened.close()


@settings(max_examples=60, deadline=None)
@given(entries=offset_entries(), cut=st.integers(BASE - 5, BASE + 3500))
def test_offset_truncate_matches_filter(
    tmp_path_factory: pytest.TempPathFactory, entries: list[tuple[int, int]], cut: int
) -> None:
    path = tmp_path_factory.mktemp("idx") / "a.index"
    index = OffsetIndex(path, BASE, 1 << 20)
    for offset, position in entries:
        index.append(offset, position)
    index.truncate_to(cut)
    kept = [e for e in entries if e[0] < cut]
    assert index.entries == len(kept)
    assert path.stat().st_size == 8 * len(kept)
    index.close()
    reopened = OffsetIndex(path, BASE, 1 << 20)
    for target in range(BASE - 2, BASE + 3500, 97):
        assert reopened.lookup(target) == oracle_lookup(kept, target)
    reopened.close()


def test_offset_index_file_is_big_endian_relative(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    index = OffsetIndex(path, BASE, 1 << 20)
    index.append(BASE + 7, 4096)
    index.append(BASE + 300, 9000)
    index.close()
    assert path.read_bytes() == struct.pack(">iiii", 7, 4096, 300, 9000)


def test_offset_index_rejects_non_increasing_and_overflow(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "x.index", BASE, 1 << 20)
    index.append(BASE + 5, 100)
    with pytest.raises(ValueError):
        index.append(BASE + 5, 200)
    with pytest.raises(ValueError):
        index.append(BASE + 6, 100)
    with pytest.raises(ValueError):
        index.append(BASE + 2**31, 300)
    assert not index.can_append_offset(BASE - 1)
    assert index.can_append_offset(BASE + 2**31 - 1)
    index.close()


def test_offset_index_full(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "x.index", BASE, 8 * 3 + 5)  # rounds down to 3 entries
    for i in range(3):
        index.append(BASE + i + 1, (i + 1) * 10)
    assert index.is_full
    with pytest.raises(ValueError):
        index.append(BASE + 10, 100)
    index.close()


def test_empty_index_lookups(tmp_path: Path) -> None:
    offsets = OffsetIndex(tmp_path / "x.index", BASE, 1 << 20)
    times = TimeIndex(tmp_path / "x.timeindex", BASE, 1 << 20)
    assert offsets.lookup(BASE + 100) == OffsetPosition(BASE, 0)
    assert offsets.last_entry == OffsetPosition(BASE, 0)
    assert times.lookup(10**12) == TimestampOffset(NO_TIMESTAMP, BASE)
    assert times.last_entry == TimestampOffset(NO_TIMESTAMP, BASE)
    offsets.close()
    times.close()


@pytest.mark.parametrize(
    ("content", "log_size"),
    [
        (b"\x00" * 7, 100),  # not a multiple of the entry size
        (struct.pack(">iiii", 5, 10, 3, 20), 100),  # offsets go backwards
        (struct.pack(">ii", 5, 500), 100),  # position past the end of the log
        (struct.pack(">ii", -1, 0), 100),  # negative relative offset
    ],
)
def test_offset_sanity_check_rejects(tmp_path: Path, content: bytes, log_size: int) -> None:
    path = tmp_path / "x.index"
    path.write_bytes(content)
    index = OffsetIndex(path, BASE, 1 << 20)
    with pytest.raises(CorruptIndexError):
        index.sanity_check(log_size)
    index.close()


def test_offset_full_check_on_load_catches_middle_disorder(tmp_path: Path) -> None:
    # First and last entries look fine; only a full load sees the middle go backwards.
    path = tmp_path / "x.index"
    path.write_bytes(struct.pack(">iiiiii", 1, 10, 9, 20, 5, 30) + struct.pack(">ii", 20, 40))
    index = OffsetIndex(path, BASE, 1 << 20)
    index.sanity_check(100)
    with pytest.raises(CorruptIndexError):
        index.load()
    index.reset()  # reset never needs to read the corrupt file
    assert index.entries == 0
    index.flush()  # the file is cut when next flushed, written or closed cleanly
    assert path.stat().st_size == 0
    index.close()


def test_a_reset_index_file_is_cut_when_next_written_not_at_once(tmp_path: Path) -> None:
    """Recovery resets the index of every segment it re-validates: the file is cut by the
    next write (or flush, or clean close), not by the reset, and a crash before then leaves
    the old file, which the next recovery resets again."""
    old = struct.pack(">iiii", 1, 10, 2, 20)
    path = tmp_path / "x.index"
    path.write_bytes(old)
    index = OffsetIndex(path, BASE, 1 << 20)
    index.reset()
    index.close()  # killed: nothing written
    assert path.read_bytes() == old
    index = OffsetIndex(path, BASE, 1 << 20)
    index.reset()
    index.append(BASE + 5, 50)
    assert path.read_bytes() == struct.pack(">ii", 5, 50)
    assert index.entries == 1 and index.lookup(BASE + 6).position == 50
    index.close()
    index = OffsetIndex(path, BASE, 1 << 20)
    index.reset()
    index.cut()  # a clean close's
    index.close()
    assert path.read_bytes() == b""


def time_entries() -> st.SearchStrategy[list[tuple[int, int]]]:
    return st.lists(st.tuples(st.integers(0, 100), st.integers(0, 20)), max_size=60)


@settings(max_examples=60, deadline=None)
@given(steps=time_entries(), targets=st.lists(st.integers(-5, 7000), max_size=30))
def test_time_index_keeps_only_rising_timestamps(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[int, int]], targets: list[int]
) -> None:
    path = tmp_path_factory.mktemp("tidx") / "a.timeindex"
    index = TimeIndex(path, BASE, 1 << 20)
    timestamp, offset = -1, BASE
    kept: list[tuple[int, int]] = []
    for ts_step, offset_step in steps:
        timestamp += ts_step
        offset += offset_step
        index.maybe_append(timestamp, offset)
        if timestamp >= 0 and (not kept or timestamp > kept[-1][0]):
            kept.append((timestamp, offset))
    assert index.entries == len(kept)
    reopened = TimeIndex(path, BASE, 1 << 20)
    reopened.sanity_check()
    for target in targets:
        expected = max((e for e in kept if e[0] <= target), default=(NO_TIMESTAMP, BASE))
        assert tuple(index.lookup(target)) == expected
        assert tuple(reopened.lookup(target)) == expected
    index.close()
    reopened.close()


def test_time_index_rejects_going_back_and_truncates(tmp_path: Path) -> None:
    path = tmp_path / "x.timeindex"
    index = TimeIndex(path, BASE, 1 << 20)
    index.maybe_append(100, BASE + 1)
    index.maybe_append(200, BASE + 5)
    index.maybe_append(300, BASE + 9)
    with pytest.raises(ValueError):
        index.maybe_append(250, BASE + 10)
    with pytest.raises(ValueError):
        index.maybe_append(400, BASE + 3)
    index.truncate_to(BASE + 5)
    assert index.last_entry == TimestampOffset(100, BASE + 1)
    index.close()
    assert path.read_bytes() == struct.pack(">qi", 100, 1)


def test_time_index_skip_full_check(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "x.timeindex", BASE, 12)
    index.maybe_append(100, BASE + 1)
    assert index.is_full
    with pytest.raises(ValueError):
        index.maybe_append(200, BASE + 2)
    index.maybe_append(200, BASE + 2, skip_full_check=True)
    assert index.last_entry == TimestampOffset(200, BASE + 2)
    index.close()


def test_time_sanity_check_rejects(tmp_path: Path) -> None:
    path = tmp_path / "x.timeindex"
    path.write_bytes(struct.pack(">qiqi", 500, 1, 100, 2))
    index = TimeIndex(path, BASE, 1 << 20)
    with pytest.raises(CorruptIndexError):
        index.sanity_check()
    index.close()
