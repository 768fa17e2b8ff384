"""The leader epoch cache of one partition: which offset each leader epoch started at.

Mirrors Kafka's LeaderEpochFileCache (KIP-101, KIP-279). Followers ask the
leader, through OffsetForLeaderEpoch, where their last epoch ended and
truncate there, so two replicas never keep different records at one offset.
Entries are kept with epochs and start offsets both strictly increasing, and
persisted to ``leader-epoch-checkpoint`` (checkpoint framing, ``epoch
start_offset`` lines), atomically. A new epoch, and the trimming done while a
log loads, are written by the log's next flush (before its recovery point
moves past them): recovery rebuilds the epochs of the batches after the
recovery point anyway, and a broker with many thousands of partitions must not
write a file per partition when they load or become leaders. Truncations
(replication, retention) are written and made durable at once.
"""

from __future__ import annotations

import bisect
import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

import structlog

from broker.log.checkpoint import parse_checkpoint_int, read_checkpoint, write_checkpoint
from broker.log.files import fsync_file

log = structlog.get_logger(__name__)

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
#: Changes kept for an unread checkpoint file before it is read after all (a busy log reads it).
_MAX_DEFERRED = 8
#: OffsetForLeaderEpoch's answer when the epoch is unknown.
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


#: The kinds of change kept until the file is read (plain tuples: every idle partition holds
#: two, the truncations its load made).
_ASSIGN, _ASSIGN_IF_NEWER, _TRUNCATE_FROM_END, _TRUNCATE_FROM_START = range(4)


class LeaderEpochCache:
    """Epoch start offsets of one partition, persisted on each change.

    Not thread-safe: its owner, the partition's log, serialises calls.
    """

    __slots__ = ("_deferred", "_entry_list", "_epoch_list", "_loaded", "_path", "_read_file", "_unflushed")

    def __init__(self, path: str | Path, *, exists: bool | None = None) -> None:
        """The cache of ``path`` (a missing file is an empty cache), read when first needed.

        ``exists=False`` says the file is known not to exist (a new log). Until the file
        is read, the changes a loading log or a new leader makes (:meth:`assign`, the
        unsynced truncations) are kept and applied after reading it: thousands of
        partitions starting up need not read thousands of files before serving.
        """
        self._path = os.fspath(path)  # a string: a Path per partition is memory for nothing
        # Entries changed since the file was last written durably.
        self._unflushed = False
        self._read_file = exists is not False
        self._loaded = False
        self._deferred: list[tuple[int, int, int]] | None = None
        self._epoch_list: list[int] = []
        self._entry_list: list[EpochEntry] = []

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        if self._read_file:
            path = Path(self._path)
            rows = read_checkpoint(path, fields=2) or []
            for number, (epoch, start_offset) in enumerate(rows, start=3):
                # Loading through _assign drops non-monotonic entries, as Kafka does.
                self._assign(
                    EpochEntry(
                        parse_checkpoint_int(path, number, epoch),
                        parse_checkpoint_int(path, number, start_offset),
                    )
                )
        deferred, self._deferred = self._deferred, None
        for kind, first, second in deferred or ():
            if kind == _ASSIGN:
                self.assign(first, second)
            elif kind == _ASSIGN_IF_NEWER:
                self.assign_if_newer(first, second)
            elif kind == _TRUNCATE_FROM_END:
                self.truncate_from_end(first, sync=False)
            else:
                self.truncate_from_start(first, sync=False)

    def _defer(self, kind: int, first: int, second: int = 0) -> bool:
        """Keep a change for when the file is read; False if it is read (or must be now)."""
        if self._loaded or (self._deferred is not None and len(self._deferred) >= _MAX_DEFERRED):
            self._load()
            return False
        if self._deferred is None:
            self._deferred = []
        self._deferred.append((kind, first, second))
        return True

    @property
    def _entries(self) -> list[EpochEntry]:
        self._load()
        return self._entry_list

    @property
    def _epochs(self) -> list[int]:
        self._load()
        return self._epoch_list

    @property
    def path(self) -> Path:
        return Path(self._path)

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset``.

        A no-op for the current epoch at an equal or later offset. Otherwise
        entries with an epoch at least ``epoch`` or a start offset at least
        ``start_offset`` are dropped first, which keeps both columns increasing.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry {EpochEntry(epoch, start_offset)}")
        if self._defer(_ASSIGN, epoch, start_offset):
            return
        if self._assign(EpochEntry(epoch, start_offset)):
            self._unflushed = True

    def assign_if_newer(self, epoch: int, start_offset: int) -> None:
        """Recovery's rule (Kafka's): ``epoch`` starts at ``start_offset`` if it is newer than
        every epoch known. Kept, like :meth:`assign`, until the file is read."""
        if self._defer(_ASSIGN_IF_NEWER, epoch, start_offset):
            return
        latest = self.latest_epoch
        if latest is None or epoch > latest:
            self.assign(epoch, start_offset)

    def _assign(self, entry: EpochEntry) -> bool:
        if entry.epoch < 0 or entry.start_offset < 0:
            raise ValueError(f"invalid leader epoch entry {entry}")
        latest = self.latest_entry
        if (
            latest is not None
            and entry.epoch == latest.epoch
            and entry.start_offset >= latest.start_offset
        ):
            return False
        removed = []
        while self._entries and (
            self._entries[-1].epoch >= entry.epoch
            or self._entries[-1].start_offset >= entry.start_offset
        ):
            removed.append(self._entries.pop())
            self._epochs.pop()
        if len(removed) > 1 or (removed and removed[0].start_offset != entry.start_offset):
            # Expected only when a leader's first append was lost; anything else is worth a look.
            log.warning(
                "leader_epoch_entries_replaced",
                path=os.path.basename(os.path.dirname(self._path)),
                new_epoch=entry.epoch,
                new_start_offset=entry.start_offset,
                removed=[(e.epoch, e.start_offset) for e in removed],
            )
        self._entries.append(entry)
        self._epochs.append(entry.epoch)
        return True

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """``(epoch, end_offset)`` as OffsetForLeaderEpoch answers it.

        The end offset of an epoch is the start offset of the next larger
        epoch, or the log end offset for the latest epoch. For an epoch this
        cache does not hold, the answer is the largest smaller epoch and the
        start of the next one; for an epoch older than every entry, the
        requested epoch and the first entry's start offset. UNDEFINED (-1) or
        an epoch beyond the latest gives ``(-1, -1)``.
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._entries[-1].epoch:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(self._epochs, requested_epoch)
        if higher == len(self._entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self._entries[0].start_offset
        return self._entries[higher - 1].epoch, self._entries[higher].start_offset

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch the record at ``offset`` was written in, None before the first entry."""
        starts = [e.start_offset for e in self._entries]
        slot = bisect.bisect_right(starts, offset)
        return self._entries[slot - 1].epoch if slot else None

    def truncate_from_end(self, end_offset: int, *, sync: bool = True) -> None:
        """Drop the entries starting at or after ``end_offset`` (the log was truncated there).

        Loading passes ``sync=False``: a lost write is redone by the next load, and the
        log's next flush makes it durable."""
        if not sync and self._defer(_TRUNCATE_FROM_END, end_offset):
            return
        if end_offset < 0 or not self._entries or self._entries[-1].start_offset < end_offset:
            return
        while self._entries and self._entries[-1].start_offset >= end_offset:
            self._entries.pop()
            self._epochs.pop()
        if sync:
            self._write()
        else:
            self._unflushed = True

    def truncate_from_start(self, start_offset: int, *, sync: bool = True) -> None:
        """Forget history before ``start_offset`` (the log start moved there).

        Entries starting at or before it are dropped, and the last of them is
        kept with its start moved up to ``start_offset``: the epoch of the
        first remaining record stays known.
        """
        if not sync and self._defer(_TRUNCATE_FROM_START, start_offset):
            return
        if not self._entries or self._entries[0].start_offset >= start_offset:
            return
        last_removed: EpochEntry | None = None
        while self._entries and self._entries[0].start_offset <= start_offset:
            last_removed = self._entries.pop(0)
            self._epochs.pop(0)
        if last_removed is not None:
            self._entries.insert(0, EpochEntry(last_removed.epoch, start_offset))
            self._epochs.insert(0, last_removed.epoch)
        if sync:
            self._write()
        else:
            self._unflushed = True

    def clear(self, *, sync: bool = True) -> None:
        """Forget everything (the log was emptied); without ``sync`` the file is replaced but
        not fsynced, and :meth:`sync_file` makes it durable."""
        if self._entries:
            self._entries.clear()
            self._epochs.clear()
        self._write(sync=sync)

    def sync_file(self) -> None:
        """fsync the file as last written (a truncation's, written without ``sync``); the
        directory's fsync makes its replacement durable. May run in a worker thread."""
        with contextlib.suppress(FileNotFoundError):
            fsync_file(self._path)

    def flush(self, *, sync: bool = True) -> None:
        """Write changes not written yet; without ``sync`` the caller makes them durable (``sync``)."""
        if self._deferred:
            self._load()
        if self._unflushed:
            self._write(sync=sync)

    def _write(self, *, sync: bool = True) -> None:
        write_checkpoint(Path(self._path), [(e.epoch, e.start_offset) for e in self._entries], sync=sync)
        self._unflushed = False
