"""The metadata quorum seam.

:class:`MetadataQuorum` is what the controller and brokers see: append records
(on the active controller), learn of committed ones. :class:`VoterQuorum` is what a
node's controller role needs of the quorum it votes in (activation, catching up,
reading the log for brokers, DescribeQuorum). :class:`LocalQuorum` is the
one-voter quorum of a single node (no ``controller.quorum.voters``): its journal
is a file of checksummed entries, fsynced before an append counts as committed,
replayed on start — the Raft log of a quorum of one, with no peer to replicate
to. :class:`controller.raft.RaftQuorum` is the replicated implementation (one,
three or five voters named in ``controller.quorum.voters``).
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import crc32c
import structlog
import trio

from controller.image import MetadataImage
from controller.records import decode_record, encode_record
from wire.exceptions import DecodeError
from wire.primitives import Message

log = structlog.get_logger(__name__)

# Entry: payload length u32, crc32c(term, offset, payload) u32, term u32, offset u64, payload.
_ENTRY = struct.Struct(">IIIQ")
MAX_ENTRY_BYTES = 8 * 1024 * 1024

#: Hears of each run of records committed together, as (offset, record) pairs in offset order.
CommitListener = Callable[[Sequence[tuple[int, Message]]], None]


class NotControllerError(Exception):
    """This node is not the active controller; the caller should retry elsewhere."""


class StaleWriteError(NotControllerError):
    """A write validated against an image another write overtook; nothing was written."""


class QuorumTimeoutError(Exception):
    """An append was neither committed nor refused in time; it may still commit."""


class MetadataQuorum(Protocol):
    @property
    def leader_id(self) -> int: ...

    @property
    def epoch(self) -> int: ...

    @property
    def end_offset(self) -> int:
        """Offset the next committed record will get."""
        ...

    def is_leader(self) -> bool: ...

    async def append(self, records: Sequence[Message]) -> int:
        """Appends atomically; returns the offset of the last record once committed."""
        ...

    def add_listener(self, listener: CommitListener) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class QuorumDescription:
    """What DescribeQuorum reports."""

    leader_id: int
    epoch: int
    high_watermark: int
    is_leader: bool
    voters: tuple[tuple[int, int], ...]
    observers: tuple[tuple[int, int], ...]


class VoterQuorum(MetadataQuorum, Protocol):
    """The quorum as a node's controller role runs it."""

    @property
    def caught_up(self) -> trio.Event:
        """Set once this voter has replayed the committed log."""
        ...

    @property
    def log_start_offset(self) -> int: ...

    def add_reset_listener(self, listener: Callable[[MetadataImage], None]) -> None: ...

    def add_activation_listener(self, listener: Callable[[int], None]) -> None:
        """``listener(term)`` runs when this node becomes the active controller."""
        ...

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None: ...

    def snapshot(self) -> MetadataImage:
        """The image at ``log_start_offset - 1``."""
        ...

    def read(self, offset: int, max_records: int) -> list[tuple[int, Message]]: ...

    async def wait_for_records(self, offset: int, timeout_s: float) -> None: ...

    def record_observer(self, replica_id: int, fetch_offset: int) -> None: ...

    def describe(self) -> QuorumDescription: ...


class LocalQuorum:
    """A quorum of one voter: this node, always the leader of epoch 1."""

    def __init__(self, node_id: int, directory: Path) -> None:
        self.node_id = node_id
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "metadata.journal"
        self._records: list[Message] = []
        self._listeners: list[CommitListener] = []
        self._epoch = 1
        self._append_lock = trio.Lock()
        self._activation_listeners: list[Callable[[int], None]] = []
        self._observers: dict[int, int] = {}
        self._changed = trio.Event()
        # The journal is the whole log, read at once: nothing to catch up with.
        self._caught_up = trio.Event()
        self._caught_up.set()
        valid_end = self._load()
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        size = os.fstat(self._fd).st_size
        if size > valid_end:
            log.warning("metadata_journal_truncated", path=str(self.path), bytes=size - valid_end)
            os.ftruncate(self._fd, valid_end)
            os.fsync(self._fd)
        os.lseek(self._fd, valid_end, os.SEEK_SET)

    def _load(self) -> int:
        if not self.path.exists():
            return 0
        data = self.path.read_bytes()
        pos = 0
        while pos + _ENTRY.size <= len(data):
            length, crc, term, offset = _ENTRY.unpack_from(data, pos)
            end = pos + _ENTRY.size + length
            if length > MAX_ENTRY_BYTES or end > len(data) or offset != len(self._records):
                break
            payload = data[pos + _ENTRY.size : end]
            if crc32c.crc32c(data[pos + 8 : end]) != crc:
                break
            try:
                self._records.append(decode_record(payload))
            except DecodeError:
                break
            self._epoch = max(self._epoch, term)
            pos = end
        return pos

    def replay(self) -> Iterator[tuple[int, Message]]:
        """Every committed record, in order (for listeners added after start)."""
        yield from enumerate(self._records)

    @property
    def leader_id(self) -> int:
        return self.node_id

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def end_offset(self) -> int:
        return len(self._records)

    def is_leader(self) -> bool:
        return True

    def add_listener(self, listener: CommitListener) -> None:
        self._listeners.append(listener)

    async def append(self, records: Sequence[Message]) -> int:
        async with self._append_lock:  # one append at a time, in offset order
            out = bytearray()
            base = len(self._records)
            for i, record in enumerate(records):
                payload = encode_record(record)
                head = struct.pack(">IQ", self._epoch, base + i)
                crc = crc32c.crc32c(head + payload)
                out += struct.pack(">II", len(payload), crc) + head + payload
            # The write and its fsync are disk waits: in a worker thread, never on the event loop.
            await trio.to_thread.run_sync(self._write_durably, bytes(out))
            self._records.extend(records)
            committed = [(base + i, record) for i, record in enumerate(records)]
            for listener in self._listeners:
                listener(committed)
            self._changed.set()
            self._changed = trio.Event()
            return len(self._records) - 1

    def _write_durably(self, data: bytes) -> None:
        end = os.lseek(self._fd, 0, os.SEEK_CUR)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
            os.fsync(self._fd)
        except OSError:
            # A full disk: cut the torn entries off, or the next append would land after them
            # and be lost at the next start.
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, end)
            os.lseek(self._fd, end, os.SEEK_SET)
            raise

    # ------------------------------------------------------------ as the controller role's voter

    @property
    def caught_up(self) -> trio.Event:
        return self._caught_up

    @property
    def log_start_offset(self) -> int:
        return 0  # the journal keeps every record

    def add_reset_listener(self, listener: Callable[[MetadataImage], None]) -> None:
        """A quorum of one never installs a leader's snapshot: nothing to hear of."""

    def add_activation_listener(self, listener: Callable[[int], None]) -> None:
        self._activation_listeners.append(listener)

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The only voter leads from the start: its controller becomes active at once."""
        for listener in self._activation_listeners:
            listener(self._epoch)
        task_status.started()
        await trio.sleep_forever()

    def snapshot(self) -> MetadataImage:
        return MetadataImage()

    def read(self, offset: int, max_records: int) -> list[tuple[int, Message]]:
        if offset < 0:
            return []
        end = min(offset + max_records, len(self._records))
        return [(i, self._records[i]) for i in range(offset, end)]

    async def wait_for_records(self, offset: int, timeout_s: float) -> None:
        with trio.move_on_after(timeout_s):
            while len(self._records) <= offset:
                await self._changed.wait()

    def record_observer(self, replica_id: int, fetch_offset: int) -> None:
        if replica_id >= 0 and replica_id != self.node_id:
            self._observers[replica_id] = fetch_offset

    def describe(self) -> QuorumDescription:
        end = len(self._records)
        return QuorumDescription(leader_id=self.node_id, epoch=self._epoch, high_watermark=end, is_leader=True,
                                 voters=((self.node_id, end),), observers=tuple(sorted(self._observers.items())))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
