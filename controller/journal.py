"""The metadata quorum's Raft journal: checksummed entries, a durable term and vote.

:class:`DurableJournal` implements the journal interface pysyncobj's ``SyncObj``
calls (``add``, ``clear``, ``deleteEntriesFrom``, ``deleteEntriesTo``, item access,
``len``, ``setRaftCommitIndex``/``getRaftCommitIndex``, ``setCurrentTerm``/
``getCurrentTerm``/``getVotedForNodeId``, ``onOneSecondTimer``, ``_destroy``; the
camelCase names are pysyncobj's). It does not import pysyncobj: only
:mod:`controller.raft` does, and installs this class at pysyncobj's one journal
factory. Everything here runs on pysyncobj's thread.

Files, in the quorum's directory:

- ``raft.journal``: an 8-byte header, then entries ``length u32 | crc32c u32 |
  index u64 | term u64 | command``; the CRC covers index, term and command. On
  load, the first entry that is short, fails its CRC, breaks the run of indexes
  or goes back in term ends the journal; the file is cut there (a torn or
  corrupt tail), so what remains is always a prefix that was written whole.
- ``raft.meta``: the current term, the vote and the last synced commit index,
  replaced atomically (write a temporary file, fsync, rename, fsync the
  directory). A meta file that exists but fails its CRC stops the node: a voter
  that forgot its vote could vote twice in one term.

Durability (Raft's "persistent state ... updated on stable storage before
responding to RPCs"):

- ``setCurrentTerm`` is durable when it returns. pysyncobj calls it before any
  message that reflects the new term or vote: a candidate calls
  ``__setCurrentTerm(term + 1, self)`` before it sends ``request_vote`` (in
  ``SyncObj._onTick``), and a voter calls ``__setCurrentTerm(term, candidate)``
  before it sends ``response_vote`` (in ``SyncObj.__onMessageReceived``, read in
  pysyncobj 0.3.x). Its own ``FileJournal`` renames the meta file without any
  fsync.
- ``add`` appends without fsync; :meth:`DurableJournal.sync` fsyncs. The quorum
  calls ``sync`` before any message leaves the node and at the end of every
  tick, so an entry is on disk before it is acknowledged to a leader, sent to a
  follower, or counted towards the leader's own majority.
- Truncations (``clear``, ``deleteEntriesTo``, and ``deleteEntriesFrom`` outside
  a message) are durable when they return. ``clear`` and ``deleteEntriesTo`` follow a snapshot file
  that pysyncobj renamed into place without fsync, so they fsync that file and
  its directory first: entries are never dropped before the snapshot that
  replaces them is durable.

Truncation only on conflict. On every AppendEntries, pysyncobj's follower calls
``deleteEntriesFrom(prevLogIdx + 1)`` and then adds the message's entries, even
when the entries it holds after ``prevLogIdx`` agree with the message. Raft
deletes entries only when one conflicts with the leader's (same index,
different term): an AppendEntries overtaken by a later one, or a stale
success response moving the leader's next index back, must not cost a
follower entries it has acknowledged. So while a peer message is handled
(:meth:`DurableJournal.begin_message` … :meth:`DurableJournal.end_message`,
called by the transport around pysyncobj's handler), ``deleteEntriesFrom``
only hides the entries: an ``add`` of the same entry brings it back without
touching the file, the first different ``add`` really truncates (durably),
and whatever is still hidden when the handler returns is restored. pysyncobj
computes its commit index and its answer from the shortened log, which is
exactly Raft's bound (the last entry the leader's message vouched for).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import overload

import crc32c
import structlog

from controller.snapshot import SnapshotCorruptError, read_snapshot_entries

log = structlog.get_logger(__name__)

JOURNAL_MAGIC = b"CMRJ"
META_MAGIC = b"CMRM"
FORMAT_VERSION = 1
_FILE_HEADER = struct.Struct(">4sHH")
_ENTRY = struct.Struct(">IIQQ")
_META = struct.Struct(">4sHQQH")
_CRC = struct.Struct(">I")
_NO_VOTE = 0xFFFF
#: A larger length field can only be corruption: commands are bounded far below it.
MAX_ENTRY_BYTES = 64 * 1024 * 1024
#: pysyncobj's default commit index for a journal that never stored one.
DEFAULT_COMMIT_INDEX = 1

Entry = tuple[bytes, int, int]
Fsync = Callable[[int], None]


class JournalCorruptError(Exception):
    """Durable Raft state cannot be read; starting anyway could break Raft's guarantees."""


def fsync_directory(path: Path, fsync: Fsync = os.fsync) -> None:
    """Makes renames and creations inside ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fsync(fd)
    finally:
        os.close(fd)


def _fsync_file(path: Path, fsync: Fsync) -> None:
    if not path.exists():
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        fsync(fd)
    finally:
        os.close(fd)


def _encode_entry(command: bytes, index: int, term: int) -> bytes:
    body = struct.pack(">QQ", index, term) + command
    return _ENTRY.pack(len(command), crc32c.crc32c(body), index, term) + command


class RaftMeta:
    """Term, vote and commit index in one atomically replaced, checksummed file."""

    def __init__(self, path: Path, fsync: Fsync = os.fsync) -> None:
        self.path = path
        self._fsync = fsync
        self.term = 0
        self.voted_for: str | None = None
        self.commit_index = DEFAULT_COMMIT_INDEX
        self._load()

    def _load(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        fixed = _META.size
        if len(data) < fixed + _CRC.size:
            raise JournalCorruptError(f"{self.path} is truncated ({len(data)} bytes)")
        (crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
        if crc32c.crc32c(data[: len(data) - _CRC.size]) != crc:
            raise JournalCorruptError(f"{self.path} fails its checksum")
        magic, version, term, commit, vote_len = _META.unpack_from(data, 0)
        if magic != META_MAGIC or version != FORMAT_VERSION:
            raise JournalCorruptError(f"{self.path} is not a Raft meta file of version {FORMAT_VERSION}")
        # Length 0xFFFF stands for "no vote", which is not the same as an empty node id.
        vote_bytes = 0 if vote_len == _NO_VOTE else vote_len
        if fixed + vote_bytes + _CRC.size != len(data):
            raise JournalCorruptError(f"{self.path} has a vote of the wrong length")
        self.term = term
        self.commit_index = commit
        self.voted_for = None if vote_len == _NO_VOTE else data[fixed : fixed + vote_len].decode()

    def store(self) -> None:
        vote = b"" if self.voted_for is None else self.voted_for.encode()
        vote_len = _NO_VOTE if self.voted_for is None else len(vote)
        if self.voted_for is not None and len(vote) >= _NO_VOTE:
            raise ValueError("node id too long")
        body = _META.pack(META_MAGIC, FORMAT_VERSION, self.term, self.commit_index, vote_len) + vote
        data = body + _CRC.pack(crc32c.crc32c(body))
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            self._fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        fsync_directory(self.path.parent, self._fsync)


class DurableJournal:
    """pysyncobj's journal, with checksummed fsynced entries and a durable term and vote."""

    def __init__(self, directory: Path, *, snapshot_path: Path | None = None, fsync: Fsync = os.fsync) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.path = directory / "raft.journal"
        self.snapshot_path = snapshot_path
        self._fsync = fsync
        self.meta = RaftMeta(directory / "raft.meta", fsync)
        self._entries: list[Entry] = []
        self._positions: list[int] = []
        self._commit_index = self.meta.commit_index
        self._stored_commit_index = self.meta.commit_index
        self._fd = -1
        self._size = 0
        self._synced_size = 0
        self._dirty = False
        #: Entries hidden by deleteEntriesFrom during a message; still in the file.
        self._hidden: list[Entry] = []
        self._hidden_positions: list[int] = []
        self._in_message = False
        self._open()

    # ------------------------------------------------------------ loading

    def _open(self) -> None:
        fresh = not self.path.exists() or self.path.stat().st_size == 0
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if fresh:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, _FILE_HEADER.pack(JOURNAL_MAGIC, FORMAT_VERSION, 0), 0)
            self._fsync(self._fd)
            fsync_directory(self.directory, self._fsync)
            self._size = self._synced_size = _FILE_HEADER.size
            return
        size = os.fstat(self._fd).st_size
        data = os.pread(self._fd, size, 0)
        if len(data) < _FILE_HEADER.size:
            raise JournalCorruptError(f"{self.path} is shorter than its header")
        magic, version, _ = _FILE_HEADER.unpack_from(data, 0)
        if magic != JOURNAL_MAGIC or version != FORMAT_VERSION:
            raise JournalCorruptError(f"{self.path} is not a Raft journal of version {FORMAT_VERSION}")
        end = self._scan(data)
        if end < len(data):
            log.warning("raft_journal_truncated", path=str(self.path), bytes=len(data) - end,
                        entries=len(self._entries))
            os.ftruncate(self._fd, end)
            self._fsync(self._fd)
        self._size = self._synced_size = end

    def _scan(self, data: bytes) -> int:
        pos = _FILE_HEADER.size
        previous: Entry | None = None
        while pos + _ENTRY.size <= len(data):
            length, crc, index, term = _ENTRY.unpack_from(data, pos)
            end = pos + _ENTRY.size + length
            if length > MAX_ENTRY_BYTES or end > len(data):
                break
            if crc32c.crc32c(data[pos + 8 : end]) != crc:
                break
            if index < 1 or (previous is not None and (index != previous[1] + 1 or term < previous[2])):
                break
            previous = (data[pos + _ENTRY.size : end], index, term)
            self._entries.append(previous)
            self._positions.append(pos)
            pos = end
        return pos

    # ------------------------------------------------------------ durability

    def sync(self) -> None:
        """Makes every entry added so far durable (a no-op when nothing is pending)."""
        if self._dirty:
            self._fsync(self._fd)
            self._synced_size = self._size
            self._dirty = False

    @property
    def size(self) -> int:
        """Bytes written to the journal file."""
        return self._size

    @property
    def synced_size(self) -> int:
        """Bytes of the journal file known to be on stable storage."""
        return self._synced_size

    def _store_meta(self) -> None:
        self.sync()
        self.meta.commit_index = self._durable_commit_index()
        self.meta.store()
        self._stored_commit_index = self.meta.commit_index

    def _durable_commit_index(self) -> int:
        # A commit index past the journal's end would replay entries this node does not have.
        last = self._entries[-1][1] if self._entries else DEFAULT_COMMIT_INDEX
        return min(self._commit_index, last)

    def _snapshot_covers(self, position: int) -> bool:
        """Whether the snapshot file's previous entry is the entry at ``position``."""
        if position >= len(self._entries):
            return False
        if self.snapshot_path is None:
            return True
        try:
            _, previous = read_snapshot_entries(self.snapshot_path)
        except (OSError, SnapshotCorruptError):
            return False
        return previous == self._entries[position]

    def _make_snapshot_durable(self) -> None:
        if self.snapshot_path is not None:
            _fsync_file(self.snapshot_path, self._fsync)
            fsync_directory(self.snapshot_path.parent, self._fsync)

    # ------------------------------------------------------------ pysyncobj's interface

    def begin_message(self) -> None:
        """A peer message is about to be handled (see "Truncation only on conflict")."""
        self._in_message = True

    def end_message(self) -> None:
        self._in_message = False
        if self._hidden:
            log.debug("raft_journal_entries_kept", first=self._hidden[0][1], count=len(self._hidden))
            self._entries += self._hidden
            self._positions += self._hidden_positions
            self._hidden = []
            self._hidden_positions = []

    def add(self, command: bytes, idx: int, term: int) -> None:
        if not isinstance(command, bytes):
            raise TypeError("journal commands are bytes")
        if self._hidden:
            if self._hidden[0] == (command, idx, term):
                self._entries.append(self._hidden.pop(0))
                self._positions.append(self._hidden_positions.pop(0))
                return
            # A conflicting entry: the hidden ones go for good.
            self._truncate_at(self._hidden_positions[0])
            self._hidden = []
            self._hidden_positions = []
        if self._entries:
            last = self._entries[-1]
            if idx != last[1] + 1 or term < last[2]:
                raise ValueError(f"entry {idx}@{term} does not follow {last[1]}@{last[2]}")
        if len(command) > MAX_ENTRY_BYTES:
            raise ValueError(f"entry of {len(command)} bytes exceeds {MAX_ENTRY_BYTES}")
        data = _encode_entry(command, idx, term)
        os.pwrite(self._fd, data, self._size)
        self._entries.append((command, idx, term))
        self._positions.append(self._size)
        self._size += len(data)
        self._dirty = True

    def clear(self) -> None:
        # pysyncobj clears the journal right after it installs a snapshot.
        self._make_snapshot_durable()
        self._truncate_at(_FILE_HEADER.size)
        self._entries.clear()
        self._positions.clear()
        self._hidden = []
        self._hidden_positions = []

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        if entryFrom < 0:
            raise ValueError("negative journal position")
        if entryFrom >= len(self._entries):
            return
        if self._in_message:
            self._hidden = self._entries[entryFrom:] + self._hidden
            self._hidden_positions = self._positions[entryFrom:] + self._hidden_positions
        else:
            self._truncate_at(self._positions[entryFrom])
        del self._entries[entryFrom:]
        del self._positions[entryFrom:]

    def deleteEntriesTo(self, entryTo: int) -> None:
        if entryTo <= 0:
            return
        self.end_message()
        if not self._snapshot_covers(entryTo):
            # pysyncobj compacts on the tick after it wrote a snapshot; a snapshot installed
            # from the leader in between replaced both the file and the journal, and the
            # position it asks for no longer means what it did. Dropping entries the
            # snapshot on disk does not cover would lose them.
            log.info("raft_compaction_skipped", position=entryTo, entries=len(self._entries))
            return
        # Log compaction: the snapshot now stands for the entries dropped here.
        self._make_snapshot_durable()
        kept = self._entries[entryTo:]
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        positions: list[int] = []
        try:
            out = bytearray(_FILE_HEADER.pack(JOURNAL_MAGIC, FORMAT_VERSION, 0))
            for command, index, term in kept:
                positions.append(len(out))
                out += _encode_entry(command, index, term)
            os.write(fd, out)
            self._fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        fsync_directory(self.directory, self._fsync)
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_RDWR)
        self._entries = kept
        self._positions = positions
        self._size = self._synced_size = len(out)
        self._dirty = False

    def _truncate_at(self, position: int) -> None:
        os.ftruncate(self._fd, position)
        self._fsync(self._fd)
        self._size = self._synced_size = position
        self._dirty = False

    @overload
    def __getitem__(self, item: int) -> Entry: ...
    @overload
    def __getitem__(self, item: slice) -> list[Entry]: ...
    def __getitem__(self, item: int | slice) -> Entry | list[Entry]:
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        # Raft needs no durable commit index; it is stored lazily (onOneSecondTimer) so a
        # restarted node can replay what it knows was committed before it hears a leader.
        # It never goes down: pysyncobj lowers it to the end of a log it has just shortened,
        # but committed entries stay committed (and the journal keeps the hidden ones).
        self._commit_index = max(self._commit_index, raftCommitIndex)

    def getRaftCommitIndex(self) -> int:
        return self._durable_commit_index()

    def setCurrentTerm(self, term: int, votedForNodeId: str | None) -> None:
        if term < self.meta.term:
            raise ValueError(f"term {term} is older than the stored term {self.meta.term}")
        self.meta.term = term
        self.meta.voted_for = votedForNodeId
        self._store_meta()

    def getCurrentTerm(self) -> int:
        return self.meta.term

    def getVotedForNodeId(self) -> str | None:
        return self.meta.voted_for

    def onOneSecondTimer(self) -> None:
        if self._durable_commit_index() != self._stored_commit_index:
            self._store_meta()

    def _destroy(self) -> None:
        self.close()

    # ------------------------------------------------------------ ours

    def close(self) -> None:
        if self._fd < 0:
            return
        self._store_meta()
        os.close(self._fd)
        self._fd = -1

    def abandon(self) -> None:
        """Drops the file handle without syncing anything (a simulated crash)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
