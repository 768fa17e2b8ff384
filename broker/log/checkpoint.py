"""Kafka's checkpoint files: small text files replaced atomically.

Layout (Kafka's CheckpointFile): a version line (``0``), a line with the
number of entries, then one entry per line, fields separated by spaces. The
offset checkpoints in each log directory (``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint``, ``replication-offset-checkpoint``) hold
``topic partition offset`` entries; the leader epoch checkpoint reuses the
same framing with ``epoch start_offset`` entries.

Reading tolerates a missing file (nothing checkpointed yet) and rejects
anything malformed with :class:`CheckpointError`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from broker.log.errors import CheckpointError
from broker.log.files import TopicPartition, write_atomically

CHECKPOINT_VERSION = 0

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"

# A ``topic partition offset`` checkpoint exactly as write() makes it, read by two regular
# expressions rather than a check of each field: a start reads three of them, each with a
# line per partition. Anything else goes through the field by field reader that names the fault.
_WELL_FORMED_OFFSETS = re.compile(r"0\n([0-9]+)\n((?:\S+ [0-9]+ -?[0-9]+\n)*)")
_OFFSET_ENTRY = re.compile(r"(\S+) ([0-9]+) (-?[0-9]+)\n")


def write_checkpoint(path: Path, entries: Sequence[Sequence[object]], *, sync: bool = True) -> None:
    """Atomically replace ``path`` with a version-0 checkpoint of ``entries`` (durably with ``sync``)."""
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines.extend(" ".join(str(field) for field in entry) for entry in entries)
    write_atomically(path, ("\n".join(lines) + "\n").encode("utf-8"), sync=sync)


def read_checkpoint(path: Path, fields: int) -> list[list[str]] | None:
    """The entries of a checkpoint, each split into ``fields`` strings; None if there is no file."""
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"{path.name}: not UTF-8 text") from exc
    lines = text.splitlines()
    if len(lines) < 2:
        raise CheckpointError(f"{path.name}: missing the version and count lines")
    if lines[0].strip() != str(CHECKPOINT_VERSION):
        raise CheckpointError(f"{path.name}: unrecognised version {lines[0]!r}")
    count = parse_checkpoint_int(path, 2, lines[1])
    if count < 0:
        raise CheckpointError(f"{path.name}: negative entry count {count}")
    body = lines[2:]
    if len(body) != count:
        raise CheckpointError(f"{path.name}: expected {count} entries, found {len(body)} lines")
    entries = []
    for number, line in enumerate(body, start=3):
        parts = line.split()
        if len(parts) != fields:
            raise CheckpointError(
                f"{path.name}: line {number}: expected {fields} fields, got {line!r}"
            )
        entries.append(parts)
    return entries


def parse_checkpoint_int(path: Path, line_number: int, text: str) -> int:
    """An integer field of a checkpoint, or :class:`CheckpointError`."""
    # int() alone would accept "1_000" and surrounding whitespace; Kafka's parser would not.
    stripped = text.strip()
    digits = stripped[1:] if stripped.startswith("-") else stripped
    if not digits.isdigit() or not digits.isascii():
        raise CheckpointError(f"{path.name}: line {line_number}: not an integer: {text!r}")
    return int(stripped)


class OffsetCheckpointFile:
    """One of the ``topic partition offset`` checkpoints of a log directory."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Replace the file with ``offsets`` (sorted, so equal contents give equal files)."""
        # Each topic checked once, and sorted by a key of plain tuples: with a hundred thousand
        # partitions, the generated comparisons of TopicPartition took a quarter of a second.
        for topic in {tp.topic for tp in offsets}:
            if not topic or any(ch.isspace() for ch in topic):
                raise ValueError(f"topic name {topic!r} cannot be checkpointed")
        rows = sorted((tp.topic, tp.partition, offset) for tp, offset in offsets.items())
        write_checkpoint(self.path, rows)

    def read(self) -> dict[TopicPartition, int]:
        """The checkpointed offsets; empty if the file does not exist."""
        return {TopicPartition(topic, partition): offset for (topic, partition), offset in self.read_entries().items()}

    def read_entries(self) -> dict[tuple[str, int], int]:
        """The checkpointed offsets keyed by ``(topic, partition)``; empty if there is no file."""
        try:
            text = self.path.read_bytes().decode("utf-8")
        except FileNotFoundError:
            return {}
        except UnicodeDecodeError:
            return self._read_checked()
        well_formed = _WELL_FORMED_OFFSETS.fullmatch(text)
        if well_formed is not None:
            entries = _OFFSET_ENTRY.findall(well_formed[2])
            offsets = {(topic, int(partition)): int(offset) for topic, partition, offset in entries}
            if len(offsets) == len(entries) == int(well_formed[1]):
                return offsets
        return self._read_checked()

    def _read_checked(self) -> dict[tuple[str, int], int]:
        entries = read_checkpoint(self.path, fields=3)
        if entries is None:
            return {}
        offsets: dict[tuple[str, int], int] = {}
        for number, (topic, partition_text, offset) in enumerate(entries, start=3):
            partition = parse_checkpoint_int(self.path, number, partition_text)
            if partition < 0:
                raise CheckpointError(f"{self.path.name}: line {number}: negative partition")
            if (topic, partition) in offsets:
                raise CheckpointError(f"{self.path.name}: line {number}: {topic}-{partition} appears twice")
            offsets[topic, partition] = parse_checkpoint_int(self.path, number, offset)
        return offsets
