"""A crash at any step of a clean loses nothing.

The cleaner's fault hook is called at each named step (``.cleaned`` written,
renamed ``.swap``, each replaced segment renamed ``.deleted``, the new files
renamed into place). At the chosen call the hook copies the partition
directory as it is on disk at that instant — the files a crash there would
leave — and raises. Each copy is then opened as a log after an unclean
shutdown: recovery must complete or discard the swap, every key's latest
value must read back at its offset, offsets and indexes must be intact, and
a later clean must finish the job. Crashes inside a step's run of renames are
built from those copies by renaming only some of the files.
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from broker.log import LogManager, PartitionLog
from broker.log.cleaner import CLEAN_STEPS, CleanerConfig, LogCleaner
from broker.log.files import CLEANED_SUFFIX, SWAP_SUFFIX

from .helpers import Clock, read_all
from .test_cleaner import (
    TP,
    Compacted,
    assert_log_sound,
    compact_config,
    key,
    live_values,
    records_of,
    stray_files,
)

# Small segments, rolled by hand, so each group replaces several of them.
CONFIG = compact_config(segment_bytes=1200, index_interval_bytes=64)


class SimulatedCrash(Exception):
    pass


def build(root: Path, clock: Clock, hook: Callable[[str, PartitionLog], None] | None) -> tuple[Compacted, dict[bytes, bytes], int]:
    """A compacted log worth several groups of several segments; returns it with the
    expected live values and its log end offset. Everything is flushed first, so the
    recovery point is the log end, as for a log that has been idle."""
    c = Compacted(root, clock, CONFIG, fault_hook=hook)
    expected: dict[bytes, bytes] = {}
    for round_ in range(3):
        for k in range(8):
            value = f"v{round_}-{k}".encode()
            c.put((key(k), value))
            expected[key(k)] = value
            if k % 4 == 3:
                c.log.roll()
    c.put((key(0), None))  # a tombstone
    del expected[key(0)]
    c.put((b"last", b"x"))
    expected[b"last"] = b"x"
    c.log.roll()
    c.log.flush()
    return c, expected, c.log.log_end_offset


def crash_points(tmp_path: Path, clock: Clock) -> list[str]:
    """Every step the fault hook sees in one clean of the log :func:`build` makes."""
    seen: list[str] = []
    c, _, _ = build(tmp_path / "survey", clock, lambda step, log: seen.append(step))
    stats = c.clean()
    c.close()
    assert stats is not None and stats.completed
    return seen


def crash_at(root: Path, image: Path, clock: Clock, index: int) -> tuple[dict[bytes, bytes], int]:
    """Run a clean that crashes at the ``index``-th step, leaving its files in ``image``."""
    calls = 0

    def hook(step: str, log: PartitionLog) -> None:
        nonlocal calls
        calls += 1
        if calls == index + 1:
            shutil.copytree(log.dir, image / log.dir.name)
            raise SimulatedCrash(step)

    c, expected, log_end = build(root, clock, hook)
    stats = c.clean()
    assert stats is not None and not stats.completed, "the hook must have fired"
    c.log.close_handles()  # the crashed process's files are gone with it
    c.manager.close()
    return expected, log_end


def check_recovers(
    image: Path, expected: dict[bytes, bytes], log_end: int, clock: Clock, label: str
) -> None:
    """Open the crashed files as the next start would, and check nothing is lost."""
    for recovery_point in (log_end, 0):
        attempt = image.parent / f"{image.name}-rp{recovery_point}"
        shutil.copytree(image, attempt)
        log = PartitionLog.open(
            attempt / "t-0", CONFIG, clock, recovery_point, had_clean_shutdown=False
        )
        try:
            assert stray_files(log) == [], label
            assert log.log_end_offset == log_end, label
            records = records_of(read_all(log))
            assert live_values(records) == expected, label
            assert_log_sound(log)
        finally:
            log.close()

    # The next clean on the recovered log finishes the job.
    manager = LogManager([image], CONFIG, clock)
    try:
        recovered = manager.logs[TP]
        recovered.update_config(CONFIG)
        cleaner = LogCleaner(
            manager, CleanerConfig(), clock, last_stable_offset_of=lambda tp: log_end
        )
        trio.run(functools.partial(cleaner.clean_filthiest_log, in_thread=False))
        records = records_of(read_all(recovered))
        assert live_values(records) == expected, label
        keys = [r.key for r in records]
        assert len(keys) == len(set(keys)), f"{label}: one record per key after the next clean"
        assert_log_sound(recovered)
    finally:
        manager.close()


def test_the_steps_are_the_named_ones(tmp_path: Path, clock: Clock) -> None:
    steps = crash_points(tmp_path, clock)
    assert set(steps) == set(CLEAN_STEPS)
    groups = steps.count("cleaned")
    assert groups >= 2 and steps.count("swap") == groups == steps.count("swapped")
    assert steps.count("retire") >= 2 * groups, "groups replace several segments"


def test_a_crash_at_every_step_of_a_clean_loses_nothing(tmp_path: Path, clock: Clock) -> None:
    steps = crash_points(tmp_path, clock)
    for index, step in enumerate(steps):
        image = tmp_path / f"image-{index}"
        expected, log_end = crash_at(tmp_path / f"run-{index}", image, clock, index)
        check_recovers(image, expected, log_end, clock, f"crash at step {index} ({step})")


def _rename(directory: Path, old_suffix: str, new_suffix: str, kinds: tuple[str, ...]) -> None:
    for path in sorted(directory.iterdir()):
        for kind in kinds:
            if path.name.endswith(kind + old_suffix):
                path.rename(path.with_name(path.name[: -len(old_suffix)] + new_suffix))


@pytest.mark.parametrize(
    ("step", "old_suffix", "new_suffix", "kinds"),
    [
        # Inside step 1: the .log is renamed .swap, its indexes not yet.
        ("cleaned", CLEANED_SUFFIX, SWAP_SUFFIX, (".log",)),
        ("cleaned", CLEANED_SUFFIX, SWAP_SUFFIX, (".log", ".index")),
        # Inside step 4: some of the new files have lost .swap, others not.
        ("swapped-before", SWAP_SUFFIX, "", (".log",)),
        ("swapped-before", SWAP_SUFFIX, "", (".log", ".index")),
    ],
)
def test_a_crash_inside_a_run_of_renames_loses_nothing(
    tmp_path: Path,
    clock: Clock,
    step: str,
    old_suffix: str,
    new_suffix: str,
    kinds: tuple[str, ...],
) -> None:
    steps = crash_points(tmp_path, clock)
    if step == "cleaned":
        index = steps.index("cleaned")
    else:
        # The last "retire" of the first group: old segments renamed, new ones still .swap.
        index = steps.index("swapped") - 1
        assert steps[index] == "retire"
    image = tmp_path / "image"
    expected, log_end = crash_at(tmp_path / "run", image, clock, index)
    _rename(image / "t-0", old_suffix, new_suffix, kinds)
    check_recovers(image, expected, log_end, clock, f"{step}: {kinds} renamed")


def test_an_unfinished_swap_keeps_other_files_of_its_range(tmp_path: Path, clock: Clock) -> None:
    # Producer state snapshots are named by offset too; completing a swap must not take them.
    steps = crash_points(tmp_path, clock)
    image = tmp_path / "image"
    expected, log_end = crash_at(tmp_path / "run", image, clock, steps.index("swap"))
    snapshot = image / "t-0" / "00000000000000000003.snapshot"
    snapshot.write_bytes(b"producer state")
    check_recovers(image, expected, log_end, clock, "with a snapshot file")
    assert snapshot.exists()
