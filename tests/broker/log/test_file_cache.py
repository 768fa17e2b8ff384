"""The log files' descriptor budget: eviction, pinning, regions, and no leaks under races
between fetches, appends, rolls, retention, compaction and deletion."""

from __future__ import annotations

import functools
import gc
import os
import random
import threading
from pathlib import Path

import pytest
import trio
import trio.testing

from broker.eventloop.limits import run_periodically
from broker.log.config import LogConfig
from broker.log.file_cache import FileCache
from broker.log.partition_log import PartitionLog

from .helpers import Clock, make_batch


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_the_cache_keeps_at_most_its_capacity_open(tmp_path: Path) -> None:
    cache = FileCache(4)
    files = [cache.file(tmp_path / f"f{i}", os.O_RDWR | os.O_CREAT) for i in range(10)]
    before = open_fds()
    for f in files:
        with f.pinned() as fd:
            os.write(fd, b"x")
    assert cache.open_files == 4
    assert open_fds() - before == 4
    assert cache.evictions == 6
    # The least recently used went first: the last four are still open.
    assert [f.is_open for f in files] == [False] * 6 + [True] * 4
    for f in files:
        f.close()
    assert cache.open_files == 0 and open_fds() == before


def test_a_pinned_file_is_never_closed_under_its_user(tmp_path: Path) -> None:
    cache = FileCache(2)
    files = [cache.file(tmp_path / f"f{i}", os.O_RDWR | os.O_CREAT) for i in range(5)]
    with files[0].pinned() as fd:
        for f in files[1:]:
            with f.pinned():
                pass
        assert files[0].is_open
        os.fstat(fd)  # still ours
    files[0].close()
    with pytest.raises(ValueError):
        files[0].acquire()


def test_a_region_pins_its_file_until_dropped(tmp_path: Path) -> None:
    cache = FileCache(1)
    a = cache.file(tmp_path / "a", os.O_RDWR | os.O_CREAT)
    b = cache.file(tmp_path / "b", os.O_RDWR | os.O_CREAT)
    with a.pinned() as fd:
        os.write(fd, b"hello")
    region = a.region(0, 5)
    with b.pinned():
        pass  # over budget: a is pinned by the region, so b is the one closed
    assert a.is_open and not b.is_open
    a.close()  # deleting the segment: the region still reads
    (tmp_path / "a").unlink()
    assert region.read() == b"hello"
    del region
    gc.collect()
    assert not a.is_open and cache.open_files == 0


def _config() -> LogConfig:
    return LogConfig(segment_bytes=2048, index_interval_bytes=256, retention_ms=5, file_delete_delay_ms=0)


def test_races_between_reads_appends_rolls_retention_and_deletion(tmp_path: Path) -> None:
    """Seeded interleavings over 20 logs sharing a cache of 8: every read returns the bytes
    written, no read touches a closed descriptor, and nothing leaks once they are closed."""
    rng = random.Random(20)
    clock = Clock()
    before = open_fds()
    cache = FileCache(8)
    logs = [PartitionLog.open(tmp_path / f"t-{i}", _config(), clock, files=cache) for i in range(20)]
    regions = []
    for step in range(3000):
        plog = rng.choice(logs)
        action = rng.random()
        if action < 0.45:
            plog.append_as_leader(make_batch(rng.randint(1, 4), value_size=rng.randint(10, 200)), 0)
        elif action < 0.8 and plog.log_end_offset > plog.log_start_offset:
            offset = rng.randint(plog.log_start_offset, plog.log_end_offset - 1)
            data = plog.read(offset, 4096)
            if data.region is not None:
                region = data.region
                regions.append((region, region if isinstance(region, bytes) else region.read()))
        elif action < 0.85:
            clock.advance(10)
            plog.apply_retention(clock.now_ms, plog.log_end_offset)
        elif action < 0.9:
            plog.roll()
        elif action < 0.93:
            plog.flush()
        # Regions outlive evictions, retention and deletion: sent later, they read the same bytes.
        if len(regions) > 50 or step % 97 == 0:
            for region, expected in regions:
                assert (region if isinstance(region, bytes) else region.read()) == expected
            regions.clear()
        assert cache.open_files <= cache.capacity
    assert cache.evictions > 0 and cache.copied_regions > 0
    regions.clear()
    del data, region  # the last ones read still pin their files
    for plog in logs:
        plog.close()
    gc.collect()
    assert cache.open_files == 0
    assert open_fds() == before


def test_threads_share_the_cache_without_leaks(tmp_path: Path) -> None:
    cache = FileCache(3)
    files = [cache.file(tmp_path / f"f{i}", os.O_RDWR | os.O_CREAT) for i in range(12)]
    before = open_fds()
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(2000):
                f = rng.choice(files)
                with f.pinned() as fd:
                    os.pwrite(fd, b"y", 0)
                    assert os.pread(fd, 1, 0) == b"y"
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert cache.open_files <= 3
    cache.close_all_idle()
    assert open_fds() <= before


def test_a_failing_background_step_is_retried_with_back_off() -> None:
    calls: list[float] = []
    sleeps: list[float] = []

    def step() -> None:
        calls.append(trio.current_time())
        if len(calls) <= 3:
            raise OSError(24, "Too many open files")

    async def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)
        await trio.sleep(seconds)

    async def main() -> None:
        with trio.move_on_after(200):
            await run_periodically("test", 1.0, step, sleep=fake_sleep)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert len(calls) > 5  # never gave up
    assert sleeps[:5] == [1.0, 2.0, 4.0, 8.0, 1.0]  # backed off while failing, back to normal after



def test_regions_past_the_budget_are_read_into_memory(tmp_path: Path) -> None:
    cache = FileCache(2)
    files = [cache.file(tmp_path / f"f{i}", os.O_RDWR | os.O_CREAT) for i in range(4)]
    for i, f in enumerate(files):
        with f.pinned() as fd:
            os.write(fd, bytes([i]) * 8)
    regions = [f.region(0, 8) for f in files]
    assert [type(r).__name__ for r in regions] == ["FileRegion", "FileRegion", "bytes", "bytes"]
    assert regions[3] == bytes([3]) * 8
    assert cache.open_files == 2 and cache.copied_regions == 2


def test_compaction_races_reads_and_evictions(tmp_path: Path) -> None:
    """Compaction (in a worker thread) replaces segments of partitions whose files the cache
    keeps evicting, while earlier fetch regions are still unsent: they still read their bytes,
    the compacted logs read back, and no descriptor is left open."""
    from broker.log.cleaner import CleanerConfig, LogCleaner
    from broker.log.manager import LogManager
    from wire.batch_builder import build_batch
    from wire.records import NewRecord, iter_batch_headers, iter_records

    clock = Clock()
    before = open_fds()
    config = LogConfig(cleanup_policy=("compact",), segment_bytes=1024, index_interval_bytes=128,
                       min_cleanable_dirty_ratio=0.01, file_delete_delay_ms=0)
    manager = LogManager([tmp_path], config, clock, files=FileCache(6))
    logs = [manager.get_or_create(f"c{i}", 0, config) for i in range(4)]
    rng = random.Random(7)
    for _ in range(60):
        plog = rng.choice(logs)
        key = f"k{rng.randint(0, 5)}".encode()
        plog.append_as_leader(bytearray(build_batch([NewRecord(key, rng.randbytes(40), timestamp=clock())])), 0)
    regions = []
    for plog in logs:
        data = plog.read(0, 1 << 20)
        assert data.region is not None
        regions.append((data.region, data.region if isinstance(data.region, bytes) else data.region.read()))
    cleaner = LogCleaner(manager, CleanerConfig(), clock,
                         last_stable_offset_of=lambda tp: manager.logs[tp].log_end_offset)
    cleaned = 0
    for _ in range(10):
        stats = trio.run(functools.partial(cleaner.clean_filthiest_log, in_thread=True))
        if stats is None:
            break
        cleaned += stats.segments_replaced
        for plog in logs:  # reads between cleanings reopen evicted files
            plog.read(plog.log_start_offset, 4096)
    assert cleaned > 0 and manager.file_cache.evictions > 0
    for region, expected in regions:
        assert (region if isinstance(region, bytes) else region.read()) == expected
    for plog in logs:
        data = plog.read(plog.log_start_offset, 1 << 20)
        assert data.region is not None
        raw = data.region if isinstance(data.region, bytes) else data.region.read()
        keys = [record.key for pos, _ in iter_batch_headers(raw) for record in iter_records(raw, pos)]
        assert len(keys) == len(set(keys))  # the first segment, compacted: one record per key
    del regions, region, data
    clock.advance(1)
    manager.apply_retention(clock(), lambda tp: manager.logs[tp].log_end_offset)
    manager.close()
    gc.collect()
    assert manager.file_cache.open_files == 0
    assert open_fds() == before
