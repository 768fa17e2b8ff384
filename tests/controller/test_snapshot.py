"""Snapshots: an image written as records rebuilds the same image; snapshot files refuse
corruption; record batches carry metadata records both ways."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from controller.image import MetadataImage
from controller.sim.workload import random_change
from controller.snapshot import (
    SnapshotCorruptError,
    decode_record_batches,
    encode_record_batches,
    image_from_records,
    image_records,
    read_snapshot_file,
    write_snapshot_file,
)
from controller.state import apply


def random_image(seed: int, changes: int = 200) -> MetadataImage:
    rng = random.Random(seed)
    image = MetadataImage()
    for _ in range(changes):
        for record in random_change(image, rng):
            image = apply(image, record, image.offset + 1)
    return image


@pytest.mark.parametrize("seed", range(8))
def test_image_records_rebuild_the_image(seed: int) -> None:
    image = random_image(seed)
    assert image.topics_by_id and image.brokers
    assert image_from_records(image_records(image), image.offset + 1) == image


def test_the_empty_image(tmp_path: Path) -> None:
    assert image_records(MetadataImage()) == []
    assert image_from_records([], 0) == MetadataImage()


def test_snapshot_file_round_trip(tmp_path: Path) -> None:
    image = random_image(3)
    path = tmp_path / "snap"
    last, previous = (b"\x00payload", 42, 3), (b"\x01", 41, 3)
    write_snapshot_file(path, image, image.offset + 1, last, previous, ["b:2", "a:1"])
    snap = read_snapshot_file(path)
    assert snap.image == image
    assert (snap.end_offset, snap.last_entry, snap.previous_entry) == (image.offset + 1, last, previous)
    assert snap.voters == ("a:1", "b:2")


@pytest.mark.parametrize("cut", [1, 10, 200])
def test_a_damaged_snapshot_file_is_refused(tmp_path: Path, cut: int) -> None:
    image = random_image(4)
    path = tmp_path / "snap"
    write_snapshot_file(path, image, image.offset + 1, (b"x", 2, 1), (b"y", 1, 1), [])
    data = path.read_bytes()
    path.write_bytes(data[:-cut])
    with pytest.raises(SnapshotCorruptError):
        read_snapshot_file(path)
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x20
    path.write_bytes(bytes(flipped))
    with pytest.raises(SnapshotCorruptError):
        read_snapshot_file(path)


def test_record_batches_round_trip() -> None:
    records = image_records(random_image(5)) * 6
    assert len(records) > 600  # several batches
    data = encode_record_batches(records, 100)
    decoded = decode_record_batches(data)
    assert [offset for offset, _ in decoded] == list(range(100, 100 + len(records)))
    assert [r for _, r in decoded] == records
    # A partial last batch is left for the next fetch.
    assert len(decode_record_batches(data[:-5])) < len(records)
