"""PartitionLog: offsets, appends, reads, rolls, retention, truncation, flushing and loading."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from broker.log import (
    OffsetOutOfRangeError,
    OffsetsOutOfOrderError,
    PartitionLog,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    TimestampAndOffset,
    UnexpectedAppendOffsetError,
)
from wire.exceptions import CorruptRecordError
from wire.records import (
    TimestampType,
    crc_is_valid,
    iter_records,
    read_batch_header,
    set_max_timestamp_and_type,
)

from .conftest import OpenLog
from .helpers import T0, Clock, ReadBatch, batches_in, make_batch, read_all, record_offsets

SMALL = {"segment_bytes": 1024, "index_interval_bytes": 128}


def append_many(
    log: PartitionLog, count: int, records: int = 3, epoch: int = 0, start_ts: int = T0
) -> None:
    for i in range(count):
        log.append_as_leader(
            make_batch(records, timestamp=start_ts + 10 * i, value_size=20 + i % 7), epoch
        )


def segment_bases(log: PartitionLog) -> list[int]:
    return [segment.base_offset for segment in log.segments]


# -- appends and reads -------------------------------------------------------------------


def test_round_trip_across_many_rolls(open_log: OpenLog) -> None:
    log = open_log(**SMALL)
    append_many(log, 200)
    assert log.log_end_offset == 600
    assert len(log.segments) > 20
    assert all(segment.size <= 1024 for segment in log.segments)
    batches = read_all(log)
    assert [b.header.base_offset for b in batches] == list(range(0, 600, 3))
    assert record_offsets(batches) == list(range(600))
    assert all(b.header.partition_leader_epoch == 0 for b in batches)
    log.close()
    reopened = open_log(clean=True, **SMALL)
    assert reopened.log_end_offset == 600
    assert [b.data for b in read_all(reopened)] == [b.data for b in batches]


def test_leader_append_rewrites_header_in_callers_buffer(open_log: OpenLog) -> None:
    log = open_log()
    log.append_as_leader(make_batch(5), 0)
    batch = make_batch(4, base_offset=0)
    crc_before = read_batch_header(batch).crc
    info = log.append_as_leader(batch, 7)
    header = read_batch_header(batch)
    assert (header.base_offset, header.partition_leader_epoch, header.crc) == (5, 7, crc_before)
    assert crc_is_valid(batch)
    assert (info.first_offset, info.last_offset, info.record_count, info.batch_count) == (
        5,
        8,
        4,
        1,
    )
    assert info.max_timestamp == T0 + 3 and info.offset_of_max_timestamp == 8
    assert info.log_append_time_ms == -1 and info.valid_bytes == len(batch)
    assert log.latest_epoch == 7
    assert log.leader_epoch_cache.entries[-1].start_offset == 5


def test_leader_append_of_several_batches_and_immutable_bytes(open_log: OpenLog) -> None:
    log = open_log()
    data = bytes(make_batch(2) + make_batch(3) + make_batch(1))
    info = log.append_as_leader(data, 1)
    assert (info.first_offset, info.last_offset, info.batch_count, info.record_count) == (
        0,
        5,
        3,
        6,
    )
    assert [b.header.base_offset for b in read_all(log)] == [0, 2, 5]


def test_log_append_time(open_log: OpenLog, clock: Clock) -> None:
    log = open_log(message_timestamp_type="LogAppendTime")
    info = log.append_as_leader(make_batch(3, timestamp=5), 2)
    assert info.log_append_time_ms == clock.now_ms == info.max_timestamp
    (batch,) = read_all(log)
    assert batch.header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert batch.header.max_timestamp == clock.now_ms
    assert {r.timestamp for r in iter_records(batch.data)} == {clock.now_ms}


@pytest.mark.parametrize("damage", ["crc", "trailing", "truncated"])
def test_corrupt_input_appends_nothing(open_log: OpenLog, damage: str) -> None:
    log = open_log()
    good = make_batch(2)
    bad = make_batch(2)
    if damage == "crc":
        bad[-1] ^= 1
    elif damage == "trailing":
        bad += b"\x00" * 5
    else:
        bad = bad[:-3]
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(good + bad, 0)
    assert log.log_end_offset == 0 and log.active_segment.size == 0


def test_size_limits(open_log: OpenLog) -> None:
    log = open_log(max_message_bytes=200, segment_bytes=400)
    with pytest.raises(RecordTooLargeError):
        log.append_as_leader(make_batch(1, value_size=300), 0)
    with pytest.raises(RecordBatchTooLargeError):
        log.append_as_follower(make_batch(1, value_size=500))
    # A follower takes what its leader accepted, max.message.bytes or not.
    log.append_as_follower(make_batch(1, value_size=300))
    assert log.log_end_offset == 1


def test_validated_headers_are_used_and_still_checked(open_log: OpenLog) -> None:
    """The produce path hands over the headers it validated: the log appends from them
    without reading them again, but still refuses headers that do not tile the data
    or batches over the size limits."""
    log = open_log(max_message_bytes=200)
    first, second = make_batch(2), make_batch(3)
    data = first + second
    headers = [(0, read_batch_header(data, 0)), (len(first), read_batch_header(data, len(first)))]
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(bytearray(data), 0, validated=True, headers=headers[:1])
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(bytearray(data), 0, validated=True, headers=headers[1:])
    big = make_batch(1, value_size=300)
    with pytest.raises(RecordTooLargeError):
        log.append_as_leader(big, 0, validated=True, headers=[(0, read_batch_header(big, 0))])
    assert log.log_end_offset == 0 and log.active_segment.size == 0
    info = log.append_as_leader(data, 0, validated=True, headers=headers)
    assert (info.first_offset, info.last_offset, info.batch_count, info.record_count) == (0, 4, 2, 5)
    assert [b.header.base_offset for b in read_all(log)] == [0, 2]


def test_empty_append(open_log: OpenLog) -> None:
    log = open_log()
    info = log.append_as_leader(bytearray(), 0)
    assert (info.first_offset, info.batch_count) == (-1, 0)
    assert log.log_end_offset == 0


def test_follower_append(open_log: OpenLog) -> None:
    log = open_log(**SMALL)
    log.append_as_follower(
        make_batch(2, base_offset=0, leader_epoch=1) + make_batch(3, base_offset=2, leader_epoch=1)
    )
    # Gaps are allowed (compacted leaders); epochs come from the batches.
    log.append_as_follower(make_batch(1, base_offset=10, leader_epoch=4))
    assert log.log_end_offset == 11
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries] == [(1, 0), (4, 10)]
    with pytest.raises(UnexpectedAppendOffsetError):
        log.append_as_follower(make_batch(1, base_offset=10))
    with pytest.raises(OffsetsOutOfOrderError):
        log.append_as_follower(make_batch(2, base_offset=11) + make_batch(1, base_offset=12))
    assert log.log_end_offset == 11
    assert [b.header.base_offset for b in read_all(log)] == [0, 2, 10]


def test_read_out_of_range_and_at_the_end(open_log: OpenLog) -> None:
    log = open_log()
    append_many(log, 3)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(10, 1000)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 1000)
    fetched = log.read(9, 1000)
    assert fetched.region is None and fetched.first_offset == 9


def test_read_stops_below_max_offset(open_log: OpenLog) -> None:
    log = open_log(**SMALL)
    append_many(log, 40)  # batches of 3: 0, 3, 6, ...
    for high_watermark in (0, 3, 30, 31, 32, 33, 60, 117, 120):
        batches = read_all_below(log, high_watermark)
        # Only batches wholly below the high watermark are visible, and all of those are.
        assert all(b.header.last_offset < high_watermark for b in batches)
        assert record_offsets(batches) == list(range(high_watermark // 3 * 3))
    assert log.read(30, 10_000, max_offset=30).region is None


def read_all_below(log: PartitionLog, max_offset: int) -> list[ReadBatch]:
    offset, out = 0, list[ReadBatch]()
    while True:
        fetched = log.read(offset, 300, max_offset=max_offset)
        if fetched.region is None:
            return out
        got = batches_in(fetched.region.read())
        out.extend(got)
        offset = got[-1].header.next_offset


def test_read_mid_batch_and_min_one_batch(open_log: OpenLog) -> None:
    log = open_log()
    append_many(log, 5)
    fetched = log.read(4, 10_000)
    assert fetched.first_offset == 3
    size = len(make_batch(3, value_size=21))
    too_small = log.read(4, size - 1, min_one_batch=False)
    assert too_small.region is None and too_small.first_offset == 4
    single = log.read(4, 1, min_one_batch=True)
    assert single.region is not None and len(batches_in(single.region.read())) == 1


def test_a_read_never_spans_segments(open_log: OpenLog) -> None:
    log = open_log(**SMALL)
    append_many(log, 30)
    second = log.segments[1]
    fetched = log.read(second.base_offset - 1, 100_000)
    assert fetched.region is not None
    assert os.path.samefile(f"/proc/self/fd/{fetched.region.fd}", log.segments[0].log_path)
    assert fetched.region.position + fetched.region.length == log.segments[0].size


def test_read_skips_a_gap_into_the_next_segment(open_log: OpenLog) -> None:
    log = open_log(segment_bytes=300)
    log.append_as_follower(make_batch(2, base_offset=0, value_size=80))
    log.append_as_follower(make_batch(2, base_offset=50, value_size=80))
    assert segment_bases(log) == [0, 50]
    fetched = log.read(2, 10_000)  # offsets 2..49 do not exist
    assert fetched.first_offset == 50


# -- rolling ---------------------------------------------------------------------------


def test_roll_on_segment_ms(open_log: OpenLog, clock: Clock) -> None:
    log = open_log(segment_ms=1000)
    log.append_as_leader(make_batch(1, timestamp=T0), 0)
    log.append_as_leader(make_batch(1, timestamp=T0 + 1000), 0)
    assert len(log.segments) == 1
    log.append_as_leader(make_batch(1, timestamp=T0 + 1001), 0)
    assert segment_bases(log) == [0, 2]


def test_roll_on_segment_ms_by_wall_clock_without_timestamps(
    open_log: OpenLog, clock: Clock
) -> None:
    log = open_log(segment_ms=1000)
    log.append_as_leader(make_batch(1, timestamps=[-1]), 0)
    clock.advance(1001)
    log.append_as_leader(make_batch(1, timestamps=[-1]), 0)
    assert segment_bases(log) == [0, 1]


def test_roll_when_index_is_full(open_log: OpenLog) -> None:
    log = open_log(index_interval_bytes=0, segment_index_bytes=8 * 4)
    append_many(log, 20, records=1)
    assert all(segment.offset_index.entries <= 4 for segment in log.segments)
    assert len(log.segments) > 1
    assert record_offsets(read_all(log)) == list(range(20))


def test_roll_on_offset_overflow(open_log: OpenLog) -> None:
    log = open_log()
    log.append_as_follower(make_batch(1, base_offset=0))
    far = 2**31 + 10
    log.append_as_follower(make_batch(1, base_offset=far))
    assert segment_bases(log) == [0, far]
    assert log.read(far, 1000).first_offset == far


def test_roll_requested_on_empty_active_replaces_it(open_log: OpenLog) -> None:
    log = open_log()
    log.roll()
    log.roll()
    assert segment_bases(log) == [0]


# -- retention --------------------------------------------------------------------------


def test_retention_by_time(open_log: OpenLog, clock: Clock, tmp_path: Path) -> None:
    log = open_log(retention_ms=10_000, file_delete_delay_ms=5_000, **SMALL)
    append_many(log, 30, start_ts=clock.now_ms - 100_000)  # old
    old_segments = len(log.segments)
    append_many(log, 30, start_ts=clock.now_ms)  # fresh
    # Nothing goes while the high watermark has not passed those segments.
    assert log.apply_retention(clock.now_ms, high_watermark=0) == 0
    deleted = log.apply_retention(clock.now_ms, high_watermark=log.log_end_offset)
    assert 0 < deleted < old_segments + 1
    assert log.log_start_offset == log.segments[0].base_offset
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    assert read_all(log)[-1].header.next_offset == log.log_end_offset
    assert any(name.endswith(".log.deleted") for name in os.listdir(tmp_path / "topic-0"))
    clock.advance(5_000)
    log.apply_retention(clock.now_ms, high_watermark=log.log_end_offset)
    assert not any(name.endswith(".deleted") for name in os.listdir(tmp_path / "topic-0"))


def test_retention_rolls_an_expired_active_segment(open_log: OpenLog, clock: Clock) -> None:
    log = open_log(retention_ms=1000)
    append_many(log, 3)  # timestamps T0: far in the past of the test clock
    assert log.apply_retention(clock.now_ms, high_watermark=9) == 1
    assert segment_bases(log) == [9]
    assert (log.log_start_offset, log.log_end_offset) == (9, 9)
    # The new, empty active segment is never deleted.
    assert log.apply_retention(clock.now_ms + 10**9, high_watermark=9) == 0


def test_retention_by_size(open_log: OpenLog, clock: Clock) -> None:
    log = open_log(retention_bytes=3000, retention_ms=-1, **SMALL)
    append_many(log, 100)
    total = log.size
    log.apply_retention(clock.now_ms, high_watermark=log.log_end_offset)
    # As Kafka: whole segments go while the rest still holds at least retention.bytes.
    assert 3000 <= log.size < 3000 + log.segments[0].size < total
    assert read_all(log)[-1].header.next_offset == 300


def test_no_retention_for_compacted_topics(open_log: OpenLog, clock: Clock) -> None:
    log = open_log(
        retention_ms=1, retention_bytes=1, cleanup_policy=("compact",), **SMALL
    )
    append_many(log, 50)
    assert log.apply_retention(clock.now_ms, log.log_end_offset) == 0


def test_deleted_segment_stays_readable_until_the_delay(open_log: OpenLog, clock: Clock) -> None:
    log = open_log(retention_ms=1000, file_delete_delay_ms=60_000, **SMALL)
    append_many(log, 30)
    region = log.read(0, 100_000).region
    assert region is not None
    expected = region.read()
    log.apply_retention(clock.now_ms, log.log_end_offset)
    assert log.log_start_offset > 0
    assert region.read() == expected  # an in-flight sendfile still sees its bytes
    deleted = [p for p in log.dir.iterdir() if p.name.endswith(".log.deleted")]
    assert deleted
    clock.advance(60_000)
    log.apply_retention(clock.now_ms, log.log_end_offset)
    assert not deleted[0].exists()
    # The region pins its file: a send still under way reads its bytes past the unlink.
    assert region.read() == expected
    fd = region.fd
    del region
    with pytest.raises(OSError):  # the last pin gone, the descriptor is closed
        os.fstat(fd)


def test_delete_records_before(open_log: OpenLog) -> None:
    log = open_log(**SMALL)
    append_many(log, 60, epoch=2)  # offsets 0..179
    log.append_as_leader(make_batch(3), 3)  # 180..182
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(100, high_watermark=99)
    segments_before = len(log.segments)
    assert log.delete_records_before(95, high_watermark=183) == 95
    assert log.log_start_offset == 95
    # Segments wholly below 95 are gone; the one holding it stays.
    assert len(log.segments) < segments_before
    assert log.segments[0].base_offset <= 95 < log.segments[0].next_offset
    with pytest.raises(OffsetOutOfRangeError):
        log.read(94, 100)
    assert log.read(95, 100).first_offset == 93  # the batch holding 95
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries] == [
        (2, 95),
        (3, 180),
    ]
    assert log.delete_records_before(10, high_watermark=183) == 95  # never backwards


def test_delete_records_leaves_the_epoch_file_to_the_next_flush(
    open_log: OpenLog, fsynced: list[str]
) -> None:
    """DeleteRecords (and retention) run on the event loop: the leader epoch file is cut at
    the new log start by the log's next flush, not fsynced there; reopened, it is cut anyway."""
    log = open_log(**SMALL)
    append_many(log, 60, epoch=2)
    log.append_as_leader(make_batch(3), 3)
    log.flush()
    epochs_file = log.dir / "leader-epoch-checkpoint"
    before = epochs_file.read_text()
    fsynced.clear()  # from here on
    assert log.delete_records_before(95, high_watermark=183) == 95
    assert fsynced == [] and epochs_file.read_text() == before
    log.flush()
    assert f"{epochs_file}.tmp" in fsynced  # written whole, fsynced, renamed over it
    assert epochs_file.read_text().split("\n")[1:-1] == ["2", "2 95", "3 180"]


# -- truncation -------------------------------------------------------------------------


def test_truncate_to(open_log: OpenLog) -> None:
    log = open_log(**SMALL)
    append_many(log, 40, epoch=1)
    log.append_as_leader(make_batch(3), 2)  # offsets 120..122 in epoch 2
    log.flush()
    assert not log.truncate_to(500)
    assert log.truncate_to(120)
    assert log.log_end_offset == 120 and log.recovery_point == 120
    assert log.latest_epoch == 1
    assert log.truncate_to(31)  # inside batch 30..32: the whole batch goes
    assert log.log_end_offset == 30
    assert all(segment.base_offset <= 30 for segment in log.segments)
    assert record_offsets(read_all(log)) == list(range(30))
    log.append_as_follower(make_batch(2, base_offset=30, leader_epoch=5))
    assert log.log_end_offset == 32 and log.latest_epoch == 5


def test_truncate_below_the_first_segment_starts_over(open_log: OpenLog) -> None:
    log = open_log(**SMALL)
    append_many(log, 40)
    log.apply_retention(10**15, log.log_end_offset)  # everything expires
    start = log.log_start_offset
    assert log.truncate_to(start - 5)
    assert (log.log_start_offset, log.log_end_offset, segment_bases(log)) == (
        start - 5,
        start - 5,
        [start - 5],
    )


def test_truncate_fully_and_start_at(open_log: OpenLog, tmp_path: Path) -> None:
    log = open_log(**SMALL)
    append_many(log, 30, epoch=3)
    log.truncate_fully_and_start_at(1000)
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (1000, 1000, 1000)
    assert log.leader_epoch_cache.entries == ()
    log.append_as_follower(make_batch(2, base_offset=1000, leader_epoch=4))
    log.close()
    reopened = open_log(recovery_point=1000, **SMALL)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (1000, 1002)
    assert not any(name.endswith(".deleted") for name in os.listdir(tmp_path / "topic-0"))


# -- timestamps ----------------------------------------------------------------------------


def test_offset_for_timestamp_and_max_timestamp(open_log: OpenLog) -> None:
    log = open_log(**SMALL)
    append_many(log, 50, epoch=6)  # batch i holds timestamps T0+10i .. T0+10i+2
    assert log.offset_for_timestamp(T0) == TimestampAndOffset(T0, 0, 6)
    assert log.offset_for_timestamp(T0 + 101) == TimestampAndOffset(T0 + 101, 31, 6)
    assert log.offset_for_timestamp(T0 + 103) == TimestampAndOffset(T0 + 110, 33, 6)
    assert log.offset_for_timestamp(T0 + 10**6) is None
    assert log.max_timestamp_offset() == TimestampAndOffset(T0 + 492, 149, 6)
    # Out-of-order timestamps: the largest sits in an early batch.
    log.append_as_leader(make_batch(3, timestamps=[T0 + 5000, T0 + 9000, T0 + 1]), 6)
    log.append_as_leader(make_batch(1, timestamp=T0 + 600), 6)
    assert log.max_timestamp_offset() == TimestampAndOffset(T0 + 9000, 151, 6)
    log.delete_records_before(32, high_watermark=log.log_end_offset)
    assert log.offset_for_timestamp(T0) == TimestampAndOffset(T0 + 102, 32, 6)


def test_max_timestamp_offset_of_empty_log(open_log: OpenLog) -> None:
    assert open_log().max_timestamp_offset() is None


def test_end_offset_for_epoch(open_log: OpenLog) -> None:
    log = open_log()
    append_many(log, 2, epoch=1)
    append_many(log, 2, epoch=4)
    assert log.end_offset_for_epoch(1) == (1, 6)
    assert log.end_offset_for_epoch(2) == (1, 6)
    assert log.end_offset_for_epoch(4) == (4, 12)
    assert log.end_offset_for_epoch(-1) == (-1, -1)


# -- flushing ------------------------------------------------------------------------------


def test_no_fsync_by_default_and_flush_moves_the_recovery_point(open_log: OpenLog) -> None:
    log = open_log(**SMALL)
    append_many(log, 30)
    assert log.recovery_point == 0
    log.flush(45)
    assert log.recovery_point == 45
    log.flush()
    assert log.recovery_point == log.log_end_offset == 90


def test_flush_messages(open_log: OpenLog) -> None:
    log = open_log(flush_messages=5)
    log.append_as_leader(make_batch(3), 0)
    assert log.recovery_point == 0
    log.append_as_leader(make_batch(3), 0)
    assert log.recovery_point == 6


def test_maybe_flush_after_roll_and_flush_ms(open_log: OpenLog, clock: Clock) -> None:
    log = open_log(flush_ms=1000, **SMALL)
    append_many(log, 30)
    log.maybe_flush(clock.now_ms)
    assert log.recovery_point == log.active_segment.base_offset
    clock.advance(1000)
    log.maybe_flush(clock.now_ms)
    assert log.recovery_point == log.log_end_offset


# -- one writer, concurrent readers ---------------------------------------------------------------


def test_reads_beside_a_writer_thread_see_only_whole_batches_below_their_bound(
    open_log: OpenLog,
) -> None:
    log = open_log(segment_bytes=4096, index_interval_bytes=256)
    errors: list[BaseException] = []
    done = threading.Event()

    def writer() -> None:
        try:
            for i in range(1500):
                log.append_as_leader(make_batch(1 + i % 4, value_size=i % 50), 0)
        except BaseException as exc:  # surfaced by the main thread
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    reads = 0
    while not done.is_set() or reads < 50:
        end = log.log_end_offset
        fetch_offset = end // 2
        fetched = log.read(fetch_offset, 3000, max_offset=end)
        if fetched.region is not None:
            batches = batches_in(fetched.region.read())
            assert batches[0].header.base_offset <= fetch_offset
            assert batches[-1].header.last_offset < end
        reads += 1
    thread.join()
    assert not errors
    assert record_offsets(read_all(log)) == list(range(log.log_end_offset))


def test_validated_append_skips_the_crc_pass_but_not_the_size_limits(open_log: OpenLog) -> None:
    log = open_log(max_message_bytes=500)
    batch = make_batch(2)
    batch[-1] ^= 1  # a CRC the produce path would have rejected: proof no second check runs
    info = log.append_as_leader(batch, 0, validated=True)
    assert (info.first_offset, info.last_offset) == (0, 1)
    with pytest.raises(RecordTooLargeError):
        log.append_as_leader(make_batch(1, value_size=600), 0, validated=True)
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(make_batch(1)[:-1], 0, validated=True)


def test_validated_append_keeps_log_append_time_stamped_by_the_produce_path(
    open_log: OpenLog, clock: Clock
) -> None:
    log = open_log(message_timestamp_type="LogAppendTime")
    batch = make_batch(2, timestamp=5)
    set_max_timestamp_and_type(batch, 0, clock.now_ms - 7, TimestampType.LOG_APPEND_TIME)
    info = log.append_as_leader(batch, 0, validated=True)
    assert info.log_append_time_ms == info.max_timestamp == clock.now_ms - 7
    (stored,) = read_all(log)
    assert stored.header.max_timestamp == clock.now_ms - 7
