"""Property: compaction never changes what a compacted log means.

Random keyed writes and tombstones (some compressed, some from idempotent
producers), rolls, and cleans at random times, random last stable offsets and
random settings, against a model that is just a dict of each key's latest
value. After every clean: a consumer reading the log from the start ends with
the model's values; every record left is one that was written, at the offset
it was written at; offsets only increase; every batch is CRC-valid; the log
end offset did not move; nothing from the segment holding the last stable
offset on was touched; each producer's last batch is still there. After a
restart, the same.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.log.clean_records import OFFSET_MAP_ENTRY_BYTES
from broker.log.cleaner import CleanerConfig
from broker.log.config import LONG_MAX
from wire.compression import Compression

from .helpers import Clock, read_all
from .test_cleaner import TP, Compacted, assert_log_sound, compact_config, live_values, records_of

KEYS = [b"a", b"b", b"c", b"d", b"e", b"f", b"g"]
CODECS = [Compression.NONE, Compression.NONE, Compression.GZIP, Compression.ZSTD]


@dataclass(frozen=True)
class Put:
    records: list[tuple[bytes, bytes | None]]
    codec: Compression
    producer_id: int


@dataclass(frozen=True)
class Roll:
    pass


@dataclass(frozen=True)
class Clean:
    advance_ms: int
    #: Where the last stable offset sits, as a share of the log end (1.0: the log end).
    stable_share: float


puts = st.builds(
    Put,
    st.lists(
        st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.binary(max_size=12))),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from(CODECS),
    st.sampled_from([-1, -1, 1, 2]),
)
ops = st.lists(
    st.one_of(
        puts,
        puts,
        puts,
        st.just(Roll()),
        st.builds(
            Clean,
            st.integers(0, 3_000),
            st.one_of(st.just(1.0), st.floats(0.0, 1.0)),
        ),
    ),
    min_size=1,
    max_size=45,
)


@st.composite
def settings_(draw: st.DrawFn) -> tuple[dict[str, object], int]:
    config: dict[str, object] = {
        "segment_bytes": draw(st.sampled_from([250, 500, 2_000])),
        "delete_retention_ms": draw(st.integers(0, 2_000)),
        "min_cleanable_dirty_ratio": draw(st.sampled_from([0.0, 0.01, 0.3, 0.6])),
        "min_compaction_lag_ms": draw(st.sampled_from([0, 0, 700])),
        "max_compaction_lag_ms": draw(st.sampled_from([LONG_MAX, 1_500])),
        "index_interval_bytes": draw(st.sampled_from([0, 64, 4_096])),
    }
    map_keys = draw(st.sampled_from([2, 4, 1_000]))
    return config, map_keys


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(settings_(), ops)
def test_compaction_keeps_the_latest_value_of_every_key(
    drawn: tuple[dict[str, object], int], steps: list[Put | Roll | Clean]
) -> None:
    config_overrides, map_keys = drawn
    config = compact_config(**config_overrides)
    cleaner_config = CleanerConfig(
        dedupe_buffer_size=OFFSET_MAP_ENTRY_BYTES * map_keys * 10 // 9 + OFFSET_MAP_ENTRY_BYTES
    )
    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp:
        c = Compacted(Path(tmp), clock, config, cleaner_config=cleaner_config)
        try:
            run(c, clock, steps)
        finally:
            c.close()


def run(c: Compacted, clock: Clock, steps: list[Put | Roll | Clean]) -> None:
    model: dict[bytes, bytes] = {}
    written: dict[int, tuple[bytes | None, bytes | None]] = {}
    sequences: dict[int, int] = {}
    last_batch: dict[int, tuple[int, int, int]] = {}  # producer -> base, last, base sequence
    for step in steps:
        if isinstance(step, Put):
            extra: dict[str, int] = {}
            if step.producer_id >= 0:
                sequence = sequences.get(step.producer_id, 0)
                extra = {"producer_id": step.producer_id, "producer_epoch": 0, "base_sequence": sequence}
                sequences[step.producer_id] = sequence + len(step.records)
            base = c.put(*step.records, compression=step.codec, **extra)
            for i, (key, value) in enumerate(step.records):
                written[base + i] = (key, value)
                if value is None:
                    model.pop(key, None)
                else:
                    model[key] = value
            if step.producer_id >= 0:
                last_batch[step.producer_id] = (base, base + len(step.records) - 1, extra["base_sequence"])
            clock.advance(1)
        elif isinstance(step, Roll):
            c.log.roll()
        else:
            clock.advance(step.advance_ms)
            clean_and_check(c, step, model, written, last_batch)
    clean_and_check(c, Clean(0, 1.0), model, written, last_batch)
    before = [(r.offset, r.key, r.value) for r in c.records()]
    c.restart()
    assert [(r.offset, r.key, r.value) for r in c.records()] == before
    assert_log_sound(c.log)


def clean_and_check(
    c: Compacted,
    step: Clean,
    model: dict[bytes, bytes],
    written: dict[int, tuple[bytes | None, bytes | None]],
    last_batch: dict[int, tuple[int, int, int]],
) -> None:
    log = c.log
    log_end, log_start = log.log_end_offset, log.log_start_offset
    stable = int(log_end * step.stable_share)
    c.last_stable_offset = stable
    segments = log.segments
    holding = max((s for s in segments if s.base_offset <= stable), key=lambda s: s.base_offset, default=segments[0])
    untouched = {
        b.header.base_offset: b.data
        for b in read_all(log, log_start)
        if b.header.base_offset >= holding.base_offset
    }

    stats = c.clean()

    assert stats is None or stats.completed
    assert (log.log_end_offset, log.log_start_offset) == (log_end, log_start)
    batches = read_all(log, log_start)
    after = {b.header.base_offset: b.data for b in batches}
    for base, data in untouched.items():
        assert after.get(base) == data, f"batch {base} at or above the LSO changed"
    records = records_of(batches)
    assert live_values(records) == model
    for record in records:
        assert written[record.offset] == (record.key, record.value)
    headers = {b.header.base_offset: b.header for b in batches}
    for producer, (base, last, sequence) in last_batch.items():
        header = headers.get(base)
        assert header is not None, f"producer {producer}'s last batch went"
        assert (header.last_offset, header.base_sequence, header.producer_id) == (last, sequence, producer)
    assert_log_sound(log)
    assert TP == log.topic_partition
