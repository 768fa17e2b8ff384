"""Log compaction on real files: what the cleaner keeps, when it runs, and how it
coordinates with the log's single writer. Crash injection is in
test_cleaner_crash.py, the model-based property in test_cleaner_property.py.

The helpers at the top are shared with those two modules.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import pytest
import trio
import trio.testing

from broker.log import LogConfig, LogManager, PartitionLog, TopicPartition
from broker.log.clean_records import OFFSET_MAP_ENTRY_BYTES, LastRecord
from broker.log.cleaner import (
    CLEANER_CHECKPOINT,
    CleanerConfig,
    CleanerStats,
    FaultHook,
    LogCleaner,
)
from broker.log.cleaner_worker import CleaningAbortedError, ThreadRunner, Throttler
from broker.log.files import CLEANED_SUFFIX, DELETED_SUFFIX, SWAP_SUFFIX
from broker.log.validation import RecordValidationError, TimestampPolicy, validate_produce
from wire.batch_builder import (
    RecordBatchBuilder,
    build_batch,
    build_control_batch,
    build_empty_batch,
)
from wire.compression import Compression
from wire.errors import ErrorCode
from wire.records import (
    ControlRecordType,
    NewRecord,
    Record,
    RecordBatchHeader,
    crc_is_valid,
    iter_records,
    read_batch_header,
    validate_batch,
)

from .helpers import Clock, ReadBatch, read_all

COMPACT = ("compact",)
TP = TopicPartition("t", 0)
KV = tuple[bytes | None, bytes | None]


def compact_config(**overrides: object) -> LogConfig:
    settings: dict[str, object] = {
        "cleanup_policy": COMPACT,
        "segment_bytes": 1024,
        "index_interval_bytes": 128,
        "min_cleanable_dirty_ratio": 0.01,
        "file_delete_delay_ms": 0,
    }
    settings.update(overrides)
    return LogConfig(**settings)  # type: ignore[arg-type]


class Compacted:
    """A log manager in ``root`` holding one compacted partition ``t-0``, and its cleaner.

    ``last_stable_offset`` None means the log end (everything is stable).
    """

    def __init__(
        self,
        root: Path,
        clock: Clock,
        config: LogConfig | None = None,
        *,
        cleaner_config: CleanerConfig | None = None,
        fault_hook: FaultHook | None = None,
        active_producers: Callable[[TopicPartition], Mapping[int, LastRecord] | None] | None = None,
    ) -> None:
        self.root = root
        self.clock = clock
        self.config = config or compact_config()
        self.cleaner_config = cleaner_config or CleanerConfig()
        self.fault_hook = fault_hook
        self.active_producers = active_producers
        self.last_stable_offset: int | None = None
        self.stats: list[CleanerStats] = []
        self._open()

    def _open(self) -> None:
        self.manager = LogManager([self.root], self.config, self.clock)
        self.log = self.manager.get_or_create(TP.topic, TP.partition, self.config)
        self.log.update_config(self.config)
        self.cleaner = LogCleaner(
            self.manager,
            self.cleaner_config,
            self.clock,
            last_stable_offset_of=self._lso,
            active_producers_of=self.active_producers,
            on_cleaned=self.stats.append,
            fault_hook=self.fault_hook,
        )

    def _lso(self, tp: TopicPartition) -> int | None:
        log = self.manager.logs.get(tp)
        if log is None:
            return None
        return log.log_end_offset if self.last_stable_offset is None else self.last_stable_offset

    def restart(self) -> None:
        self.manager.close()
        self._open()

    def close(self) -> None:
        self.manager.close()

    def put(
        self,
        *pairs: KV,
        compression: Compression = Compression.NONE,
        timestamp: int | None = None,
        **batch: int | bool,
    ) -> int:
        """Append one batch of ``(key, value)`` records; returns its base offset."""
        stamp = self.clock() if timestamp is None else timestamp
        data = build_batch(
            [NewRecord(key, value, timestamp=stamp) for key, value in pairs],
            compression=compression,
            **batch,  # type: ignore[arg-type]
        )
        return self.append(data)

    def append(self, data: bytes) -> int:
        return self.log.append_as_leader(bytearray(data), 0).first_offset

    def clean(self, *, in_thread: bool = False) -> CleanerStats | None:
        return trio.run(functools.partial(self.cleaner.clean_filthiest_log, in_thread=in_thread))

    def clean_until_idle(self, limit: int = 50) -> list[CleanerStats]:
        done: list[CleanerStats] = []
        for _ in range(limit):
            stats = self.clean()
            if stats is None:
                return done
            done.append(stats)
        raise AssertionError("the cleaner never ran out of work")

    def batches(self) -> list[ReadBatch]:
        return read_all(self.log, self.log.log_start_offset)

    def records(self) -> list[Record]:
        return records_of(self.batches())


def records_of(batches: Iterable[ReadBatch]) -> list[Record]:
    """The data records, as a consumer sees them (control batches are skipped)."""
    return [
        record
        for batch in batches
        if not batch.header.is_control
        for record in iter_records(batch.data)
    ]


def latest_values(records: Iterable[Record]) -> dict[bytes, bytes | None]:
    """Key -> value of its last record (None for a tombstone)."""
    latest: dict[bytes, bytes | None] = {}
    for record in records:
        if record.key is not None:
            latest[record.key] = record.value
    return latest


def live_values(records: Iterable[Record]) -> dict[bytes, bytes]:
    """What a consumer of the compacted topic ends up with: tombstones delete."""
    return {k: v for k, v in latest_values(records).items() if v is not None}


def assert_log_sound(log: PartitionLog) -> None:
    """Offsets only increase, every batch is CRC-valid and whole, and both indexes of
    every segment point at batch boundaries and agree with the data."""
    previous_last = -1
    previous_record = -1
    for batch in read_all(log, log.log_start_offset):
        header = batch.header
        assert crc_is_valid(batch.data)
        assert header.base_offset > previous_last, "batch offsets must increase"
        previous_last = header.last_offset
        for record in iter_records(batch.data):
            assert header.base_offset <= record.offset <= header.last_offset
            assert record.offset > previous_record, "record offsets must increase"
            previous_record = record.offset
    for segment in log.segments:
        segment.sanity_check()
        found = list(segment.iter_batches())
        boundaries = {position for position, _ in found}
        for position, header in found:
            translated = segment.translate_offset(header.base_offset)
            assert translated is not None and translated[0] == position
            assert segment.offset_index.lookup(header.last_offset).position in boundaries | {0}
        if found:
            assert segment.next_offset == found[-1][1].next_offset
            largest = max(h.max_timestamp for _, h in found)
            assert segment.max_timestamp_so_far.timestamp == max(largest, -1)
            if largest >= 0 and segment is not log.active_segment:
                assert segment.time_index.last_entry.timestamp == largest


def stray_files(log: PartitionLog, *, deleted: bool = True) -> list[str]:
    """Files of unfinished cleans (and, with ``deleted``, of removals not yet unlinked)."""
    suffixes = (CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX) if deleted else (CLEANED_SUFFIX, SWAP_SUFFIX)
    return sorted(p.name for p in log.dir.iterdir() if p.name.endswith(suffixes))


@pytest.fixture
def compacted(tmp_path: Path, clock: Clock) -> Iterable[Callable[..., Compacted]]:
    made: list[Compacted] = []

    def make(config: LogConfig | None = None, **kwargs: object) -> Compacted:
        harness = Compacted(tmp_path / f"data{len(made)}", clock, config, **kwargs)  # type: ignore[arg-type]
        made.append(harness)
        return harness

    yield make
    for harness in made:
        harness.manager.close()


Make = Callable[..., Compacted]


def key(i: int) -> bytes:
    return f"key-{i:03d}".encode()


def fill_updates(c: Compacted, keys: int, rounds: int, per_batch: int = 3) -> dict[bytes, tuple[int, bytes]]:
    """Write ``rounds`` updates of each key; returns key -> (offset, value) of its latest."""
    latest: dict[bytes, tuple[int, bytes]] = {}
    pending: list[KV] = []
    counter = 0
    for r in range(rounds):
        for k in range(keys):
            pending.append((key(k), f"value-{r}-{k}".encode()))
            if len(pending) == per_batch:
                base = c.put(*pending)
                for i, (kk, vv) in enumerate(pending):
                    assert kk is not None and vv is not None
                    latest[kk] = (base + i, vv)
                pending = []
            counter += 1
    if pending:
        base = c.put(*pending)
        for i, (kk, vv) in enumerate(pending):
            assert kk is not None and vv is not None
            latest[kk] = (base + i, vv)
    return latest


# -- shrinking to the latest value per key ------------------------------------------------------


def test_many_updates_per_key_shrink_to_one_record_per_key(compacted: Make) -> None:
    c = compacted()
    latest = fill_updates(c, keys=20, rounds=30)
    c.log.roll()
    log_end = c.log.log_end_offset
    log_start = c.log.log_start_offset
    size_before = c.log.size
    assert len(c.log.segments) > 10

    stats = c.clean()

    assert stats is not None and stats.completed
    assert stats.first_dirty_offset == 0 and stats.end_offset == log_end
    records = c.records()
    assert [(r.key, r.offset, r.value) for r in records] == sorted(
        ((k, off, v) for k, (off, v) in latest.items()), key=lambda t: t[1]
    )
    assert c.log.log_end_offset == log_end and c.log.log_start_offset == log_start
    assert c.log.size < size_before // 10
    assert_log_sound(c.log)
    assert c.cleaner.checkpointed_offset(TP) == log_end
    assert c.clean() is None, "nothing is dirty any more"

    # Old segments wait out file.delete.delay.ms, then retention unlinks them.
    c.log.apply_retention(c.clock(), log_end)
    assert stray_files(c.log) == []
    c.restart()
    assert [(r.key, r.offset, r.value) for r in c.records()] == [
        (r.key, r.offset, r.value) for r in records
    ]
    assert_log_sound(c.log)
    assert c.cleaner.checkpointed_offset(TP) == log_end


def test_cleaned_batches_keep_their_offsets_and_producer_fields(compacted: Make) -> None:
    c = compacted()
    # The last record of the first batch is overwritten later, the first is not.
    first = c.put((b"a", b"1"), (b"b", b"1"), (b"c", b"1"))
    c.put((b"c", b"2"), (b"d", b"2"))
    c.put((b"x", b"end"))
    c.log.roll()
    c.clean()
    batches = c.batches()
    kept = batches[0].header
    assert kept.base_offset == first and kept.last_offset == first + 2
    assert kept.records_count == 2
    assert [(r.offset, r.key) for r in iter_records(batches[0].data)] == [(0, b"a"), (1, b"b")]
    assert [b.header.base_offset for b in batches] == [0, 3, 5]


@pytest.mark.parametrize(
    "codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
)
def test_compressed_batches_are_rebuilt_with_their_codec(compacted: Make, codec: Compression) -> None:
    c = compacted()
    originals: dict[int, int] = {}
    for round_ in range(6):
        pairs: list[KV] = [(key(k), f"{round_}-{k}".encode() * 5) for k in range(4)]
        base = c.put(*pairs[round_ % 2 :], compression=codec)
        originals[base] = base + len(pairs[round_ % 2 :]) - 1
    c.put((b"tail", b"t"))
    c.log.roll()
    c.clean()
    for batch in c.batches():
        header = batch.header
        if header.base_offset in originals:
            assert header.compression is codec
            assert header.last_offset == originals[header.base_offset]
    assert live_values(c.records()) == {
        **{key(k): f"5-{k}".encode() * 5 for k in range(1, 4)},
        key(0): b"4-0" * 5,
        b"tail": b"t",
    }
    assert_log_sound(c.log)


def test_keyless_records_do_not_survive_compaction(compacted: Make) -> None:
    # A topic that turned compacted may hold records without keys; Kafka drops them.
    c = compacted()
    c.put((None, b"no key"), (b"k", b"v"))
    c.put((b"k", b"v2"))
    c.log.roll()
    stats = c.clean()
    assert stats is not None and stats.records_written == 1
    assert [(r.key, r.value) for r in c.records()] == [(b"k", b"v2")]


# -- what is never cleaned ---------------------------------------------------------------------------


def test_the_active_segment_is_never_cleaned(compacted: Make) -> None:
    c = compacted()
    for i in range(10):
        c.put((b"k", f"{i}".encode()))
    assert c.clean() is None, "everything is in the active segment"
    c.log.roll()
    for i in range(10, 20):
        c.put((b"k", f"{i}".encode()))
    active_before = c.log.active_segment
    active_bytes = active_before.log_path.read_bytes()
    c.clean()
    assert c.log.active_segment is active_before
    assert active_before.log_path.read_bytes() == active_bytes
    assert [r.offset for r in c.records()] == [9, *range(10, 20)]


def test_nothing_at_or_above_the_last_stable_offset_is_cleaned(compacted: Make) -> None:
    c = compacted(compact_config(segment_bytes=300))
    for i in range(40):
        c.put((b"k", f"{i:02d}".encode()))
    c.log.roll()
    c.last_stable_offset = 25
    holding_lso = next(s for s in reversed(c.log.segments) if s.base_offset <= 25)
    untouched = [s for s in c.log.segments if s.base_offset >= holding_lso.base_offset]
    contents = [s.log_path.read_bytes() for s in untouched]
    stats = c.clean()
    assert stats is not None and stats.end_offset == holding_lso.base_offset
    assert c.log.segments[-len(untouched) :] == tuple(untouched)
    assert [s.log_path.read_bytes() for s in untouched] == contents
    below = [r.offset for r in c.records() if r.offset < holding_lso.base_offset]
    assert below == [holding_lso.base_offset - 1], "below the LSO only the latest stays"


# -- when the cleaner runs ------------------------------------------------------------------------


def test_min_cleanable_dirty_ratio_gates_cleaning(compacted: Make) -> None:
    c = compacted(compact_config(min_cleanable_dirty_ratio=0.5))
    for i in range(40):
        c.put((key(i % 20), b"x" * 20))
    c.log.roll()
    first = c.clean()
    assert first is not None and first.dirty_ratio == 1.0
    # A little dirt on a big clean head stays below 50%.
    c.put((key(0), b"y" * 20))
    c.log.roll()
    assert c.clean() is None
    assert 0 < c.cleaner.max_dirty_ratio < 0.5
    c.log.update_config(compact_config(min_cleanable_dirty_ratio=0.01))
    second = c.clean()
    assert second is not None and second.completed


def test_min_compaction_lag_keeps_young_segments_dirty(compacted: Make, clock: Clock) -> None:
    c = compacted(compact_config(min_compaction_lag_ms=10_000))
    for i in range(10):
        c.put((b"k", f"{i}".encode()))
    c.log.roll()
    assert c.clean() is None, "every record is younger than the lag"
    clock.advance(10_001)
    stats = c.clean()
    assert stats is not None and stats.completed
    assert [r.value for r in c.records()] == [b"9"]


def test_max_compaction_lag_forces_a_clean_below_the_ratio(compacted: Make, clock: Clock) -> None:
    c = compacted(compact_config(min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=5_000))
    for i in range(20):
        c.put((key(i), b"v"))
    c.log.roll()
    assert c.clean() is not None  # a first clean: all of it is dirty
    c.put((key(0), b"w"))
    c.log.roll()
    assert c.clean() is None, "the dirty share is tiny and young"
    clock.advance(5_001)
    stats = c.clean()
    assert stats is not None and stats.completed
    assert live_values(c.records())[key(0)] == b"w"


def test_the_active_segment_rolls_by_max_compaction_lag(compacted: Make, clock: Clock) -> None:
    config = compact_config(segment_ms=1_000_000, max_compaction_lag_ms=5_000)
    assert config.max_segment_ms == 5_000
    assert compact_config(cleanup_policy=("delete",), max_compaction_lag_ms=5_000).max_segment_ms == 604_800_000
    c = compacted(config)
    c.put((b"k", b"1"))
    clock.advance(5_001)
    c.put((b"k", b"2"))
    assert len(c.log.segments) == 2


# -- tombstones ------------------------------------------------------------------------------------


def test_tombstones_get_a_delete_horizon_then_go_after_delete_retention(
    compacted: Make, clock: Clock
) -> None:
    c = compacted(compact_config(delete_retention_ms=1_000))
    c.put((b"a", b"1"), (b"b", b"1"))
    written_at = clock()
    tombstone_offset = c.put((b"a", None), timestamp=written_at)
    c.put((b"c", b"1"))
    c.log.roll()

    first_clean_at = clock()
    c.clean()
    tombstones = [b for b in c.batches() if any(r.value is None for r in iter_records(b.data))]
    assert len(tombstones) == 1
    header = tombstones[0].header
    assert header.has_delete_horizon and header.delete_horizon_ms == first_clean_at + 1_000
    (record,) = iter_records(tombstones[0].data)
    assert (record.offset, record.key, record.timestamp) == (tombstone_offset, b"a", written_at)
    assert latest_values(c.records()) == {b"a": None, b"b": b"1", b"c": b"1"}

    clock.advance(999)  # the horizon is not reached yet
    c.put((b"d", b"1"))
    c.log.roll()
    c.clean()
    assert latest_values(c.records())[b"a"] is None
    assert [b.header.delete_horizon_ms for b in c.batches() if b.header.has_delete_horizon] == [
        first_clean_at + 1_000
    ], "a horizon once set never moves"

    clock.advance(1)
    c.put((b"e", b"1"))
    c.log.roll()
    c.clean()
    assert latest_values(c.records()) == {b"b": b"1", b"c": b"1", b"d": b"1", b"e": b"1"}
    assert_log_sound(c.log)


def test_a_tombstone_past_the_key_map_still_gets_its_horizon(compacted: Make, clock: Clock) -> None:
    # Two keys fit the map; the tombstone lies beyond what it covers in the first round.
    tiny = CleanerConfig(dedupe_buffer_size=OFFSET_MAP_ENTRY_BYTES * 3, dedupe_buffer_load_factor=0.9)
    c = compacted(compact_config(delete_retention_ms=100), cleaner_config=tiny)
    c.put((b"a", b"1"), (b"b", b"1"), (b"c", b"1"))
    c.put((b"a", None))
    c.put((b"z", b"1"))
    c.log.roll()
    c.clean_until_idle()
    assert latest_values(c.records()) == {b"a": None, b"b": b"1", b"c": b"1", b"z": b"1"}
    clock.advance(101)
    c.put((b"y", b"1"))
    c.log.roll()
    c.clean_until_idle()
    assert latest_values(c.records()) == {b"b": b"1", b"c": b"1", b"z": b"1", b"y": b"1"}


# -- the key map's bound ---------------------------------------------------------------------------


def test_a_small_key_map_cleans_in_several_rounds(compacted: Make) -> None:
    tiny = CleanerConfig(dedupe_buffer_size=OFFSET_MAP_ENTRY_BYTES * 6, dedupe_buffer_load_factor=0.9)
    c = compacted(compact_config(segment_bytes=400), cleaner_config=tiny)
    latest = fill_updates(c, keys=25, rounds=4, per_batch=2)
    c.log.roll()
    log_end = c.log.log_end_offset
    rounds = c.clean_until_idle()
    assert len(rounds) > 3
    ends = [s.end_offset for s in rounds]
    assert ends == sorted(set(ends)) and ends[-1] == log_end, "every round makes progress"
    assert all(s.buffer_utilization <= 1.0 for s in rounds)
    assert {r.key: (r.offset, r.value) for r in c.records()} == latest
    assert len(c.records()) == 25
    assert_log_sound(c.log)


def test_the_key_map_needs_room_for_one_key() -> None:
    with pytest.raises(ValueError):
        CleanerConfig(dedupe_buffer_size=OFFSET_MAP_ENTRY_BYTES - 1)


# -- producers and transactions --------------------------------------------------------------------


def test_a_producers_last_batch_stays_as_an_empty_batch(compacted: Make) -> None:
    c = compacted()
    c.put((b"k1", b"a"), (b"k2", b"a"), producer_id=7, producer_epoch=3, base_sequence=0)
    last = c.put((b"k1", b"b"), (b"k2", b"b"), producer_id=7, producer_epoch=3, base_sequence=2)
    c.put((b"k1", b"c"), (b"k2", b"c"))
    c.put((b"tail", b"t"))
    c.log.roll()
    c.clean()
    headers = [b.header for b in c.batches()]
    (empty,) = [h for h in headers if h.producer_id == 7]
    assert (empty.base_offset, empty.last_offset, empty.records_count) == (last, last + 1, 0)
    assert (empty.producer_epoch, empty.base_sequence, empty.last_sequence) == (3, 2, 3)
    assert live_values(c.records()) == {b"k1": b"c", b"k2": b"c", b"tail": b"t"}
    assert_log_sound(c.log)


def test_an_expired_producers_batches_can_all_go(compacted: Make) -> None:
    c = compacted(active_producers=lambda tp: {})
    c.put((b"k1", b"a"), producer_id=7, producer_epoch=0, base_sequence=0)
    c.put((b"k1", b"b"))
    c.put((b"tail", b"t"))
    c.log.roll()
    c.clean()
    assert [h.producer_id for h in (b.header for b in c.batches())] == [-1, -1]


def _txn(c: Compacted, pid: int, *pairs: KV) -> int:
    return c.put(*pairs, producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True)


def _marker(c: Compacted, pid: int, kind: ControlRecordType) -> int:
    return c.append(build_control_batch(kind, pid, 0, coordinator_epoch=1, timestamp_ms=c.clock()))


def test_transactions_aborted_data_goes_and_markers_wait_for_their_data(
    compacted: Make, clock: Clock
) -> None:
    c = compacted(compact_config(delete_retention_ms=1_000), active_producers=lambda tp: {})
    committed_data = _txn(c, 9, (b"k1", b"committed"))
    commit = _marker(c, 9, ControlRecordType.COMMIT)
    aborted_data = _txn(c, 10, (b"k2", b"aborted"))
    abort = _marker(c, 10, ControlRecordType.ABORT)
    c.put((b"k3", b"plain"))
    c.log.roll()

    c.clean()
    offsets = [b.header.base_offset for b in c.batches()]
    assert aborted_data not in offsets, "aborted data goes at once"
    assert {committed_data, commit, abort} <= set(offsets)
    assert live_values(c.records()) == {b"k1": b"committed", b"k3": b"plain"}

    # The abort marker's transaction is now empty: it gets a delete horizon, then goes.
    c.put((b"k4", b"x"))
    c.log.roll()
    c.clean()
    (abort_batch,) = [b for b in c.batches() if b.header.base_offset == abort]
    assert abort_batch.header.delete_horizon_ms == clock() + 1_000
    clock.advance(1_000)
    c.put((b"k5", b"x"))
    c.log.roll()
    c.clean()
    offsets = [b.header.base_offset for b in c.batches()]
    assert abort not in offsets
    assert commit in offsets, "the commit marker stays while its transaction's data does"

    # Overwrite the committed data: then its marker follows the same path, one clean
    # to drop the data, one to stamp the marker's horizon, one after it to drop it.
    for value in (b"newer", b"x", b"y"):
        c.put((b"k1" if value == b"newer" else b"k6", value))
        c.log.roll()
        c.clean()
        offsets = [b.header.base_offset for b in c.batches()]
        assert committed_data not in offsets and commit in offsets
        clock.advance(500)
    clock.advance(500)
    c.put((b"k7", b"x"))
    c.log.roll()
    c.clean()
    assert commit not in [b.header.base_offset for b in c.batches()]
    assert live_values(c.records())[b"k1"] == b"newer"
    assert_log_sound(c.log)


def test_a_producers_last_marker_stays_while_it_is_active(compacted: Make, clock: Clock) -> None:
    # Without producer state every producer in the log counts as active (the default).
    # Kafka keeps the batch with its last data offset, emptied, and so the marker too.
    c = compacted(compact_config(delete_retention_ms=0))
    data = _txn(c, 10, (b"k", b"aborted"))
    abort = _marker(c, 10, ControlRecordType.ABORT)
    c.put((b"tail", b"t"))
    c.log.roll()
    for _ in range(3):
        clock.advance(10)
        c.put((b"more", b"x"))
        c.log.roll()
        c.clean()
    kept = [b.header for b in c.batches() if b.header.producer_id == 10]
    assert [(h.base_offset, h.records_count, h.is_control) for h in kept] == [
        (data, 0, False),
        (abort, 1, True),
    ]
    assert b"k" not in live_values(c.records())


def test_active_producers_from_producer_state_are_respected(compacted: Make) -> None:
    state = {7: LastRecord(last_data_offset=1, producer_epoch=0)}
    c = compacted(active_producers=lambda tp: state)
    c.put((b"k", b"a"), (b"k", b"b"), producer_id=7, producer_epoch=0, base_sequence=0)
    c.put((b"k", b"c"), producer_id=7, producer_epoch=0, base_sequence=2)
    c.put((b"k", b"d"))
    c.put((b"tail", b"t"))
    c.log.roll()
    c.clean()
    pids = [(b.header.base_offset, b.header.producer_id) for b in c.batches()]
    # The batch ending at offset 1 holds the producer's last sequence as its state says.
    assert (0, 7) in pids and (2, 7) not in pids


# -- checkpoints -------------------------------------------------------------------------------------


def test_the_checkpoint_survives_a_restart(compacted: Make) -> None:
    c = compacted()
    fill_updates(c, keys=5, rounds=5)
    c.log.roll()
    c.clean()
    end = c.log.log_end_offset
    text = (c.root / CLEANER_CHECKPOINT).read_text().split()
    assert text == ["0", "1", "t", "0", str(end)]
    c.restart()
    assert c.cleaner.checkpointed_offset(TP) == end
    assert c.clean() is None


def test_a_recreated_partition_does_not_inherit_the_checkpoint(compacted: Make) -> None:
    c = compacted()
    fill_updates(c, keys=5, rounds=5)
    c.log.roll()
    c.clean()
    c.manager.delete_partition("t", 0)
    assert c.cleaner.checkpointed_offset(TP) is None
    fresh = c.manager.get_or_create("t", 0, c.config)
    c.log = fresh
    for i in range(10):
        c.put((b"k", f"{i}".encode()))
    fresh.roll()
    stats = c.clean()
    assert stats is not None and stats.first_dirty_offset == 0
    assert [r.value for r in c.records()] == [b"9"]


def test_a_truncation_announced_to_the_cleaner_makes_only_what_follows_dirty(compacted: Make) -> None:
    c = compacted()
    fill_updates(c, keys=5, rounds=5)
    c.log.roll()
    c.clean()
    assert c.cleaner.checkpointed_offset(TP) == 25
    boundary = c.batches()[-1].header.base_offset  # truncating there keeps the batches before
    c.cleaner.maybe_truncate_checkpoint(TP, boundary)
    assert c.cleaner.checkpointed_offset(TP) == boundary
    assert (c.root / CLEANER_CHECKPOINT).read_text().split()[-1] == str(boundary)
    c.log.truncate_to(boundary)
    assert c.log.log_end_offset == boundary
    for i in range(6):
        c.put((key(i % 3), b"again"))
    c.log.roll()
    stats = c.clean()
    assert stats is not None and stats.first_dirty_offset == boundary
    assert live_values(c.records())[key(0)] == b"again"


def test_an_unannounced_truncation_makes_the_whole_log_dirty(compacted: Make) -> None:
    c = compacted()
    fill_updates(c, keys=5, rounds=5)
    c.log.roll()
    c.clean()
    c.log.truncate_to(c.batches()[-1].header.base_offset)
    for i in range(6):
        c.put((key(i % 3), b"again"))
    c.log.roll()
    stats = c.clean()
    assert stats is not None and stats.first_dirty_offset == 0
    assert live_values(c.records())[key(0)] == b"again"


# -- coordination with the writer --------------------------------------------------------------------


def test_a_truncation_during_a_clean_abandons_it(compacted: Make) -> None:
    def truncate(step: str, log: PartitionLog) -> None:
        if step == "cleaned":
            log.truncate_to(log.log_end_offset - 1)

    c = compacted(fault_hook=truncate)
    latest = fill_updates(c, keys=5, rounds=5)
    c.put((b"x", b"1"))
    c.log.roll()
    c.put((b"y", b"1"))
    stats = c.clean()
    assert stats is not None and not stats.completed
    assert stray_files(c.log) == []
    assert live_values(c.records()) == {**{k: v for k, (_, v) in latest.items()}, b"x": b"1"}
    assert c.cleaner.checkpointed_offset(TP) is None
    assert_log_sound(c.log)


def test_a_truncation_noticed_by_the_worker_abandons_the_clean(compacted: Make) -> None:
    # After the first group is swapped in, the log is truncated: the worker writing the
    # second group notices at its next batch, stops, and removes its partial file.
    def truncate(step: str, log: PartitionLog) -> None:
        if step == "swapped":
            log.truncate_to(last_batch)

    c = compacted(compact_config(segment_bytes=300), fault_hook=truncate)
    latest = fill_updates(c, keys=5, rounds=20)
    c.log.roll()
    c.put((b"x", b"1"))
    last_batch = c.put((b"y", b"1"))
    stats = c.clean()
    assert stats is not None and not stats.completed and stats.segments_replaced > 0
    assert stray_files(c.log, deleted=False) == []
    assert live_values(c.records()) == {**{k: v for k, (_, v) in latest.items()}, b"x": b"1"}
    assert_log_sound(c.log)
    assert c.clean() is not None, "the next round starts over"


def test_retention_during_a_clean_abandons_it(compacted: Make) -> None:
    def delete_records(step: str, log: PartitionLog) -> None:
        if step == "cleaned":
            log.delete_records_before(log.segments[1].base_offset, log.log_end_offset)

    c = compacted(compact_config(cleanup_policy=("compact", "delete")), fault_hook=delete_records)
    fill_updates(c, keys=5, rounds=20)
    c.log.roll()
    stats = c.clean()
    assert stats is not None and not stats.completed
    assert stray_files(c.log, deleted=False) == []
    assert_log_sound(c.log)


def test_appends_between_groups_are_kept(compacted: Make) -> None:
    appended: list[int] = []

    def append(step: str, log: PartitionLog) -> None:
        if step == "swapped":
            info = log.append_as_leader(bytearray(build_batch([NewRecord(b"late", b"1")])), 0)
            appended.append(info.first_offset)

    c = compacted(compact_config(segment_bytes=300), fault_hook=append)
    fill_updates(c, keys=5, rounds=20)
    c.log.roll()
    stats = c.clean()
    assert stats is not None and stats.completed and stats.segments_replaced > 2
    assert len(appended) > 1
    assert [r.offset for r in c.records() if r.key == b"late"] == appended
    assert_log_sound(c.log)


def test_a_failed_swap_leaves_the_partition_alone_until_restart(compacted: Make) -> None:
    class Boom(Exception):
        pass

    def fail(step: str, log: PartitionLog) -> None:
        if step == "retire":
            raise Boom

    c = compacted(fault_hook=fail)
    latest = fill_updates(c, keys=5, rounds=20)
    c.log.roll()
    stats = c.clean()
    assert stats is not None and not stats.completed
    expected = {k: v for k, (_, v) in latest.items()}
    assert live_values(c.records()) == expected, "the log in memory still reads right"
    c.put((b"k", b"more"))
    c.log.roll()
    assert c.clean() is None, "not cleaned again before a restart"
    c.fault_hook = None
    c.restart()
    assert live_values(c.records()) == {**expected, b"k": b"more"}
    assert stray_files(c.log) == []
    assert_log_sound(c.log)
    assert c.clean() is not None


def test_a_failure_before_the_swap_removes_the_cleaned_files(compacted: Make) -> None:
    def fail(step: str, log: PartitionLog) -> None:
        if step == "cleaned":
            raise OSError("disk full")

    c = compacted(fault_hook=fail)
    fill_updates(c, keys=5, rounds=5)
    c.log.roll()
    stats = c.clean()
    assert stats is not None and not stats.completed
    assert stray_files(c.log) == []


def test_cleaning_in_a_worker_thread(compacted: Make) -> None:
    c = compacted()
    latest = fill_updates(c, keys=10, rounds=10)
    c.log.roll()
    stats = c.clean(in_thread=True)
    assert stats is not None and stats.completed
    assert {r.key: (r.offset, r.value) for r in c.records()} == latest


def test_the_cleaner_loop_cleans_and_reports(compacted: Make) -> None:
    c = compacted()
    fill_updates(c, keys=10, rounds=10)
    c.log.roll()
    log_end = c.log.log_end_offset

    async def main() -> None:
        done = trio.Event()
        cleaner = LogCleaner(
            c.manager,
            CleanerConfig(backoff_ms=10),
            c.clock,
            last_stable_offset_of=lambda tp: c.log.log_end_offset,
            on_cleaned=lambda stats: done.set(),
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cleaner.run)
            with trio.fail_after(30):
                await done.wait()
            nursery.cancel_scope.cancel()
        assert cleaner.checkpointed_offset(TP) == log_end

    trio.run(main)
    assert len(c.records()) == 10


def test_a_disabled_cleaner_returns_at_once(compacted: Make) -> None:
    c = compacted()
    cleaner = LogCleaner(
        c.manager, CleanerConfig(enable=False), c.clock, last_stable_offset_of=lambda tp: 0
    )
    trio.run(cleaner.run)


def test_cancelling_the_cleaner_stops_its_worker_first() -> None:
    stop = threading.Event()
    finished: list[str] = []

    def work() -> str:
        # Bounded: the test fails rather than hangs if the stop never comes.
        finished.append("stopped" if stop.wait(timeout=30) else "timed out")
        return "done"

    async def main() -> None:
        started = trio.Event()

        async def run() -> None:
            started.set()
            await ThreadRunner(stop)(work)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            await started.wait()
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
        # The nursery returned only after the worker did.
        assert finished == ["stopped"]

    trio.run(main)


class _RecordingStop(threading.Event):
    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        assert timeout is not None
        self.waits.append(round(timeout, 6))
        return self.is_set()


def test_the_throttler_paces_io_to_the_configured_rate() -> None:
    now = [0.0]
    stop = _RecordingStop()
    throttler = Throttler(1_000.0, stop, lambda: now[0])
    throttler.maybe_throttle(500)  # checked only once 300 ms have passed
    now[0] = 0.4
    throttler.maybe_throttle(500)  # 1000 bytes in 0.4 s: wait until 1 s
    assert stop.waits == [0.6]
    now[0] = 1.0
    throttler.maybe_throttle(100)
    now[0] = 1.5
    throttler.maybe_throttle(100)  # 200 bytes in 0.5 s: under the rate
    assert stop.waits == [0.6]
    stop.set()
    now[0] = 1.5
    throttler.maybe_throttle(10_000)
    now[0] = 2.0
    with pytest.raises(CleaningAbortedError):
        throttler.maybe_throttle(10_000)
    unlimited = Throttler(CleanerConfig().io_max_bytes_per_second, _RecordingStop(), lambda: 0.0)
    unlimited.maybe_throttle(10**12)


# -- the produce path refuses keyless records on compacted topics ------------------------------------


def _validate(records: bytes, config: LogConfig) -> None:
    validate_produce(records, 9, config, 0, TimestampPolicy(), topic_partition="t-0")


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD])
def test_keyless_records_to_a_compacted_topic_are_invalid(codec: Compression) -> None:
    batch = build_batch(
        [NewRecord(b"k", b"v", timestamp=0), NewRecord(None, b"v", timestamp=0), NewRecord(None, b"w", timestamp=0)],
        compression=codec,
    )
    with pytest.raises(RecordValidationError) as raised:
        _validate(batch, compact_config())
    error = raised.value
    assert error.code is ErrorCode.INVALID_RECORD
    message = "Compacted topic cannot accept message without key in topic partition t-0."
    assert error.record_errors == [(1, message), (2, message)]
    assert error.message.startswith("One or more records have been rejected due to 2 record errors")
    _validate(batch, LogConfig())  # a delete topic takes them
    _validate(build_batch([NewRecord(b"k", b"v", timestamp=0)], compression=codec), compact_config())


# -- the wire additions compaction needs ---------------------------------------------------------


def test_a_batch_can_end_after_its_last_record() -> None:
    builder = RecordBatchBuilder(base_offset=100, producer_id=5, producer_epoch=1, base_sequence=10)
    builder.append(b"v", key=b"k", timestamp=1_000)
    builder.override_last_offset(104)
    batch = builder.build()
    header = validate_batch(batch)
    assert (header.last_offset, header.records_count, header.last_sequence) == (104, 1, 14)
    assert [r.offset for r in iter_records(batch)] == [100]
    with pytest.raises(ValueError):
        RecordBatchBuilder(base_offset=100).override_last_offset(99)
    late = RecordBatchBuilder(base_offset=0)
    late.append(b"v", offset_delta=5, timestamp=0)
    late.override_last_offset(3)
    with pytest.raises(ValueError):
        late.build()


def test_a_delete_horizon_keeps_record_timestamps() -> None:
    builder = RecordBatchBuilder(delete_horizon_ms=5_000)
    builder.append(None, key=b"k", timestamp=7_000)
    builder.append(b"v", key=b"j", timestamp=6_000)
    batch = builder.build()
    header = validate_batch(batch)
    assert header.has_delete_horizon and header.delete_horizon_ms == 5_000
    assert header.max_timestamp == 7_000
    assert [r.timestamp for r in iter_records(batch)] == [7_000, 6_000]


def test_an_empty_batch_keeps_the_header_fields() -> None:
    source = build_batch(
        [NewRecord(b"k", b"v", timestamp=123), NewRecord(b"j", b"w", timestamp=456)],
        base_offset=40,
        compression=Compression.GZIP,
        producer_id=3,
        producer_epoch=2,
        base_sequence=8,
        is_transactional=True,
        partition_leader_epoch=6,
    )
    original = read_batch_header(source)
    empty = build_empty_batch(original)
    header: RecordBatchHeader = validate_batch(empty)
    assert (header.base_offset, header.last_offset, header.records_count) == (40, 41, 0)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (3, 2, 8)
    assert header.is_transactional and not header.is_control
    assert header.compression is Compression.NONE
    assert (header.base_timestamp, header.max_timestamp) == (-1, 456)
    assert header.partition_leader_epoch == 6
    assert list(iter_records(empty)) == []


def test_log_config_checks_the_compaction_settings() -> None:
    for bad in (
        {"delete_retention_ms": -1},
        {"min_cleanable_dirty_ratio": 1.5},
        {"min_compaction_lag_ms": -1},
        {"max_compaction_lag_ms": 0},
        {"min_compaction_lag_ms": 10, "max_compaction_lag_ms": 5},
    ):
        with pytest.raises(ValueError):
            LogConfig(**bad)
