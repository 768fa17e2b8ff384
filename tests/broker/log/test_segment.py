"""LogSegment: appends, reads of whole batches, index cadence, timestamps, recovery, truncation."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from broker.log.errors import CorruptIndexError
from broker.log.segment import LogSegment, TimestampAndOffset
from wire.compression import Compression
from wire.records import read_batch_header

from .helpers import Clock, batches_in, make_batch

BASE = 100
T0 = 1_700_000_000_000


def new_segment(directory: Path, interval: int = 200, max_index_bytes: int = 1 << 20) -> LogSegment:
    return LogSegment.create(
        directory,
        BASE,
        index_interval_bytes=interval,
        max_index_bytes=max_index_bytes,
        clock_ms=Clock(),
    )


def reopen(directory: Path, interval: int = 200) -> LogSegment:
    return LogSegment.open(
        directory, BASE, index_interval_bytes=interval, max_index_bytes=1 << 20, clock_ms=Clock()
    )


def fill(
    segment: LogSegment, batches: int, records: int = 3, value_size: int = 40
) -> list[tuple[int, int, int]]:
    """Append batches; returns (base offset, position, size) of each."""
    layout = []
    offset = segment.next_offset
    for i in range(batches):
        batch = make_batch(
            records,
            base_offset=offset,
            timestamp=T0 + 10 * i,
            value_size=value_size,
            leader_epoch=3,
        )
        last = offset + records - 1
        layout.append((offset, segment.size, len(batch)))
        segment.append(last, T0 + 10 * i + records - 1, last, batch)
        offset = last + 1
    return layout


def test_files_are_named_by_base_offset(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    # A new segment creates its .log; its indexes are created when first written or flushed.
    assert sorted(os.listdir(tmp_path)) == ["00000000000000000100.log"]
    segment.flush()
    assert sorted(os.listdir(tmp_path)) == [
        "00000000000000000100.index",
        "00000000000000000100.log",
        "00000000000000000100.timeindex",
    ]
    segment.close()


def test_log_file_holds_the_batches_verbatim(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    batch = make_batch(2, base_offset=BASE)
    segment.append(BASE + 1, T0 + 1, BASE + 1, batch)
    segment.close()
    assert (tmp_path / "00000000000000000100.log").read_bytes() == bytes(batch)


def test_read_from_every_offset(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    layout = fill(segment, 30)
    for base, position, _ in layout:
        for offset in range(base, base + 3):
            found = segment.read(offset, 10_000)
            assert found is not None and found.region is not None
            assert found.first_offset == base
            assert found.region.position == position
            assert found.region.length == segment.size - position
    assert segment.read(segment.next_offset, 10_000) is None
    segment.close()


def test_read_returns_whole_batches_within_max_size(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    layout = fill(segment, 30)
    size = layout[0][2]
    for max_size in (0, size - 1, size, size + 1, 3 * size + 5, 10 * size):
        found = segment.read(BASE, max_size)
        assert found is not None
        whole = max_size // size
        if whole == 0:
            assert found.region is None
        else:
            assert found.region is not None
            assert len(batches_in(found.region.read())) == whole
    # min_one_batch returns the first batch even when it is larger than max_size.
    found = segment.read(BASE + 4, 1, min_one_batch=True)
    assert found is not None and found.region is not None
    assert found.region.length == size and found.first_offset == layout[1][0]
    segment.close()


def test_read_stops_at_max_position(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    layout = fill(segment, 10)
    limit = layout[4][1]
    found = segment.read(BASE, 10_000, max_position=limit)
    assert found is not None and found.region is not None
    assert found.region.length == limit
    found = segment.read(layout[4][0], 10_000, max_position=limit, min_one_batch=True)
    assert found is not None and found.region is None
    segment.close()


def test_index_cadence_and_lookups(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, interval=200)
    layout = fill(segment, 40)
    # After more than 200 bytes, the next append adds (its last offset, its first byte).
    expected = []
    since = 0
    for base, position, size in layout:
        if since > 200:
            expected.append((base + 2, position))
            since = 0
        since += size
    index = segment.offset_index
    assert index.entries == len(expected) > 0
    assert [tuple(index.lookup(offset)) for offset, _ in expected] == expected
    for base, position, _ in layout:
        found = segment.translate_offset(base + 1)
        assert found is not None and found[0] == position
    segment.close()


def test_find_offset_by_timestamp_looks_inside_batches(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, interval=0)
    # Out-of-order timestamps inside a batch: the first record reaching the target wins.
    batches = [
        make_batch(3, base_offset=BASE, timestamps=[10, 30, 20]),
        make_batch(3, base_offset=BASE + 3, timestamps=[25, 40, 35], compression=Compression.GZIP),
        make_batch(2, base_offset=BASE + 6, timestamps=[50, 45]),
    ]
    for batch in batches:
        header = read_batch_header(batch)
        segment.append(header.last_offset, header.max_timestamp, header.last_offset, batch)
    expect = {
        5: (10, BASE),
        10: (10, BASE),
        11: (30, BASE + 1),
        21: (30, BASE + 1),
        31: (40, BASE + 4),
        36: (40, BASE + 4),
        41: (50, BASE + 6),
        50: (50, BASE + 6),
    }
    for target, (timestamp, offset) in expect.items():
        assert segment.find_offset_by_timestamp(target, BASE) == TimestampAndOffset(
            timestamp, offset, None
        )
    assert segment.find_offset_by_timestamp(51, BASE) is None
    # The starting offset excludes earlier records.
    assert segment.find_offset_by_timestamp(5, BASE + 2) == TimestampAndOffset(20, BASE + 2, None)
    assert segment.max_timestamp_record() == TimestampAndOffset(50, BASE + 6, None)
    assert segment.largest_record_timestamp == 50
    segment.close()
    reopened = reopen(tmp_path)
    assert reopened.max_timestamp_so_far.timestamp == 50
    assert reopened.find_offset_by_timestamp(31, BASE) == TimestampAndOffset(40, BASE + 4, None)
    reopened.close()


def test_truncate_to_removes_whole_batches(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, interval=100)
    layout = fill(segment, 20)
    removed = segment.truncate_to(layout[10][0] + 1)  # inside batch 10: it goes entirely
    assert removed == sum(size for _, _, size in layout[10:])
    assert segment.next_offset == layout[10][0]
    assert segment.size == layout[10][1]
    assert segment.max_timestamp_so_far.timestamp == T0 + 10 * 9 + 2
    assert segment.offset_index.last_entry.offset < layout[10][0]
    assert segment.truncate_to(10**6) == 0
    segment.truncate_to(BASE)
    assert segment.size == 0 and segment.next_offset == BASE
    segment.close()


# -- recovery ---------------------------------------------------------------------------


def damaged_segment(tmp_path: Path, damage: str) -> tuple[list[tuple[int, int, int]], int]:
    """A 20-batch segment with ``damage`` applied to its file; returns the layout and the expected valid size."""
    segment = new_segment(tmp_path, interval=150)
    layout = fill(segment, 20)
    segment.close()
    path = tmp_path / "00000000000000000100.log"
    data = bytearray(path.read_bytes())
    full = len(data)
    if damage == "torn_tail":
        cut = layout[-1][1] + layout[-1][2] // 2
        path.write_bytes(data[:cut])
        return layout, layout[-1][1]
    if damage == "torn_header":
        path.write_bytes(data[: layout[-1][1] + 30])
        return layout, layout[-1][1]
    if damage == "garbage":
        path.write_bytes(data + os.urandom(333))
        return layout, full
    if damage == "zeroed_tail":
        path.write_bytes(data + bytes(4096))
        return layout, full
    if damage == "zeroed_last_batches":
        start = layout[15][1]
        path.write_bytes(data[:start] + bytes(full - start))
        return layout, start
    if damage == "bit_flip":
        position = layout[7][1] + layout[7][2] - 5  # inside batch 7's records: the CRC catches it
        data[position] ^= 0x10
        path.write_bytes(data)
        return layout, layout[7][1]
    if damage == "huge_length":
        position = layout[12][1]
        data[position + 8 : position + 12] = (2**31 - 1).to_bytes(4, "big")
        path.write_bytes(data)
        return layout, position
    if damage == "offsets_go_back":
        position = layout[5][1]
        data[position : position + 8] = BASE.to_bytes(8, "big")  # not CRC-covered
        path.write_bytes(data)
        return layout, position
    raise AssertionError(damage)


DAMAGES = [
    "torn_tail",
    "torn_header",
    "garbage",
    "zeroed_tail",
    "zeroed_last_batches",
    "bit_flip",
    "huge_length",
    "offsets_go_back",
]


@pytest.mark.parametrize("damage", DAMAGES)
def test_recover_truncates_at_first_bad_batch(tmp_path: Path, damage: str) -> None:
    layout, valid = damaged_segment(tmp_path, damage)
    segment = reopen(tmp_path, interval=150)
    size_before = segment.size
    epochs: list[int] = []
    truncated = segment.recover(on_batch=lambda h: epochs.append(h.partition_leader_epoch))
    assert truncated == size_before - valid
    assert segment.size == valid == (tmp_path / "00000000000000000100.log").stat().st_size
    kept = [entry for entry in layout if entry[1] < valid]
    assert len(epochs) == len(kept)
    expected_next = kept[-1][0] + 3 if kept else BASE
    assert segment.next_offset == expected_next
    # Every kept batch is readable from the rebuilt index; nothing past the cut is.
    for base, position, _ in kept:
        found = segment.translate_offset(base + 1)
        assert found is not None and found[0] == position
    assert segment.translate_offset(expected_next) is None
    segment.close()
    # The rebuilt indexes pass the checks on the next open.
    again = reopen(tmp_path, interval=150)
    again.sanity_check()
    again.load_indexes()
    assert again.next_offset == expected_next
    assert again.max_timestamp_so_far.timestamp == T0 + 10 * (len(kept) - 1) + 2
    again.close()


def test_recover_rejects_batches_larger_than_allowed(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    layout = fill(segment, 3)
    big = make_batch(1, base_offset=segment.next_offset, value_size=5000)
    segment.append(segment.next_offset, T0, segment.next_offset, big)
    assert segment.recover(max_batch_size=len(big) - 1) == len(big)
    assert segment.size == sum(size for _, _, size in layout)
    segment.close()


def test_recover_with_a_smaller_index_limit(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, interval=0)
    layout = fill(segment, 20)
    segment.close()
    # segment.index.bytes was lowered: the rebuilt index keeps what fits and stays correct.
    small = LogSegment.open(
        tmp_path, BASE, index_interval_bytes=0, max_index_bytes=8 * 3, clock_ms=Clock()
    )
    assert small.recover() == 0
    assert 0 < small.offset_index.entries <= 3
    for base, position, _ in layout:
        found = small.translate_offset(base)
        assert found is not None and found[0] == position
    small.close()


def test_missing_index_files_are_reported(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    fill(segment, 10)
    segment.close()
    (tmp_path / "00000000000000000100.index").unlink()
    reopened = reopen(tmp_path)
    with pytest.raises(CorruptIndexError):
        reopened.sanity_check()
    reopened.recover()
    reopened.sanity_check()
    reopened.close()


def test_corrupt_index_found_on_load_is_rebuilt(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, interval=100)
    layout = fill(segment, 20)
    entries = segment.offset_index.entries
    segment.close()
    path = tmp_path / "00000000000000000100.index"
    data = bytearray(path.read_bytes())
    data[8:12] = (10**6).to_bytes(4, "big")  # the second entry jumps past later ones
    path.write_bytes(data)
    reopened = reopen(tmp_path, interval=100)
    reopened.sanity_check()  # the cheap check cannot see it
    found = reopened.translate_offset(layout[12][0])  # first use loads, detects, rebuilds
    assert found is not None and found[0] == layout[12][1]
    assert reopened.offset_index.entries == entries
    reopened.close()


def test_delete_and_rename(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    fill(segment, 2)
    region = segment.read(100, 1 << 20)
    assert region is not None and region.region is not None
    segment.rename_to_deleted()
    assert sorted(os.listdir(tmp_path)) == [
        "00000000000000000100.index.deleted",
        "00000000000000000100.log.deleted",
        "00000000000000000100.timeindex.deleted",
    ]
    assert len(region.region.read()) == region.region.length  # still readable
    segment.delete()
    assert os.listdir(tmp_path) == []
    assert len(region.region.read()) == region.region.length  # pinned past the unlink


@pytest.mark.parametrize("seed", range(4))
def test_reads_after_the_last_append_start_there_and_find_what_the_index_finds(tmp_path: Path, seed: int) -> None:
    """A read at or after the last append's first offset scans from that append instead of
    the index entry before it. Appends of several batches, reads at every offset, truncations
    in the middle of an append and at its start: each read finds the batch a linear scan of
    what was appended finds."""
    rng = random.Random(seed)
    segment = new_segment(tmp_path, interval=rng.choice([64, 200, 4096]))
    layout: list[tuple[int, int, int]] = []  # (base offset, last offset, position) of each batch
    for step in range(40):
        offset, group = segment.next_offset, bytearray()
        first, start, largest = offset, segment.size, T0
        for i in range(rng.randint(1, 4)):
            records = rng.randint(1, 5)
            batch = make_batch(records, base_offset=offset, timestamp=T0 + 100 * step + 10 * i,
                               value_size=rng.randint(1, 90))
            largest = read_batch_header(batch, 0).max_timestamp
            layout.append((offset, offset + records - 1, start + len(group)))
            group += batch
            offset += records
        segment.append(offset - 1, largest, offset - 1, group, first)
        if rng.random() < 0.2:
            cut = rng.randint(first, offset - 1)  # within the append just made, or at its start
            segment.truncate_to(cut)
            layout = [b for b in layout if b[1] < cut]
        for wanted in range(BASE, segment.next_offset + 1):
            expected = next(((b[2], b[0]) for b in layout if b[1] >= wanted), None)
            found = segment.translate_offset(wanted)
            assert (None if found is None else (found[0], found[1].base_offset)) == expected, (step, wanted)
            read = segment.read(wanted, 1 << 20)
            assert (None if read is None else read.first_offset) == (None if expected is None else expected[1])
    segment.close()
