"""Seams into pysyncobj: safe unpickling of peer messages, the durable journal and the
snapshot serializer, and the guard that corrects pysyncobj's follower (see the package's notes)."""

from __future__ import annotations

import codecs
import contextlib
import io
import pickle
import random
from collections.abc import Callable, Iterator
from typing import Any

import pysyncobj.pickle as _pysyncobj_pickle
import pysyncobj.serializer as _serializer_module
import pysyncobj.syncobj as _syncobj_module
import pysyncobj.tcp_connection as _tcp_connection_module
import structlog

from controller.journal import DurableJournal
from controller.snapshot import (
    SnapshotCorruptError,
    read_snapshot_entries,
)

log = structlog.get_logger(__name__)





class _PeerUnpickler(pickle.Unpickler):
    """Builds only containers and scalars: a peer's pickle cannot name a callable."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("_codecs", "encode"):
            return codecs.encode
        if (module, name) in (("__builtin__", "bytes"), ("builtins", "bytes")):
            return _empty_bytes
        raise pickle.UnpicklingError(f"peer message refers to {module}.{name}")


def _empty_bytes(*args: Any) -> bytes:
    # Protocol 2 pickles b"" as a call to bytes() without arguments; nothing else may call it.
    if args:
        raise pickle.UnpicklingError("peer message calls bytes() with arguments")
    return b""


def _peer_loads(data: Any) -> Any:
    return _PeerUnpickler(io.BytesIO(_pysyncobj_pickle.to_bytes(data))).load()


class _PeerPickle:
    """Stands in for ``pysyncobj.pickle`` where pysyncobj decodes what peers sent."""

    dumps = staticmethod(_pysyncobj_pickle.dumps)
    loads = staticmethod(_peer_loads)
    to_bytes = staticmethod(_pysyncobj_pickle.to_bytes)


_original_create_journal = _syncobj_module.createJournal


def _create_journal(journal_file: Any) -> Any:
    # The journal object itself travels in SyncObjConf.journalFile.
    if isinstance(journal_file, DurableJournal):
        return journal_file
    return _original_create_journal(journal_file)


_syncobj_module.createJournal = _create_journal


class _SnapshotSerializer(_serializer_module.Serializer):  # type: ignore[misc]
    """pysyncobj's snapshot store, with snapshots available as soon as they are written.

    pysyncobj withholds a snapshot from followers until the tick after it was
    written (its marker for "a forked child may still be writing"). Ours are
    written synchronously, and while one is withheld the leader's send loop
    spins until its time budget runs out, sending empty snapshot messages.
    """

    _Serializer__pid: int  # pysyncobj's private "writer process" marker

    def getTransmissionData(self, transmissionID: Any) -> Any:
        pid = self._Serializer__pid
        if pid not in (-1, -2):
            return super().getTransmissionData(transmissionID)
        self._Serializer__pid = 0
        try:
            return super().getTransmissionData(transmissionID)
        finally:
            self._Serializer__pid = pid


_syncobj_module.Serializer = _SnapshotSerializer
_syncobj_module.pickle = _PeerPickle
_tcp_connection_module.pickle = _PeerPickle


class PeerMessageGuard:
    """Hands a voter's peer messages to pysyncobj's handler, with three guards.

    - The journal keeps entries pysyncobj would drop without a conflict (see
      :mod:`controller.journal`).
    - Snapshot messages (AppendEntries without ``prevLogIdx``) lose their
      ``commit_index``: pysyncobj's follower would otherwise raise its commit
      index to the leader's over its *own* log — the log that is too far
      behind or diverged to be repaired by entries — and apply an uncommitted
      entry of an old term. The next regular AppendEntries, which checks
      ``prevLogIdx``/``prevLogTerm`` first, moves the commit index on.
    - A snapshot is not installed when this voter already holds its last entry
      or has applied past it (Raft's InstallSnapshot rule: keep the entries
      after a matching last entry). pysyncobj would clear the journal, entries
      this voter acknowledged included; a leader sends such a snapshot when a
      delayed answer sent its next index back. The last chunk becomes an
      AppendEntries heartbeat at that entry instead, which answers the leader
      with where this voter's log really stands.
    - An AppendEntries this voter cannot accept — it lacks ``prevLogIdx``, holds
      another term there, or ``prevLogIdx`` is None because the leader's next
      index for it lies past the leader's own log — becomes a heartbeat at the
      voter's last applied entry, which the leader holds too (it is committed):
      the voter answers "reset to the entry after my last applied one".
      pysyncobj would answer with its own log's end, and a leader that moves
      its next index ahead as it sends would keep bouncing between that end
      and its own, never reaching where a long diverged log parts from its own;
      answered this way the leader resends from the last applied entry and the
      conflict is settled in one round trip.
    """

    def __init__(self, journal: DurableJournal, last_applied: Callable[[], int]) -> None:
        self.journal = journal
        self.last_applied = last_applied
        self._snapshots: dict[Any, bytearray] = {}

    def deliver(self, handler: Callable[[Any, Any], None], node: Any, message: Any) -> None:
        if isinstance(message, dict) and message.get("type") == "append_entries":
            if "prevLogIdx" not in message:
                message["commit_index"] = 0
                message = self._check_snapshot(node, message)
            elif "transmission" not in message and not self._accepts(message):
                message = self._rewind(message)
        self.journal.begin_message()
        try:
            handler(node, message)
        finally:
            self.journal.end_message()

    def _check_snapshot(self, node: Any, message: dict[str, Any]) -> dict[str, Any]:
        chunk = message.get("serialized")
        if not isinstance(chunk, tuple) or len(chunk) != 3:
            return message
        data, first, last = chunk
        key = getattr(node, "id", node)
        if first:
            self._snapshots[key] = bytearray()
        buffer = self._snapshots.get(key)
        if buffer is None:
            return message
        buffer += data
        if not last:
            return message
        del self._snapshots[key]
        try:
            (_, index, term), _ = read_snapshot_entries(bytes(buffer))
        except SnapshotCorruptError:
            return message
        at = self._entry(index)
        if at is not None and at[2] == term:
            log.info("raft_snapshot_not_needed", snapshot_index=index, kept_through=index)
            return _heartbeat(message, index, term)
        if index > self.last_applied():
            return message
        heartbeat = self._at_last_applied(message)
        if heartbeat is not None:
            log.info("raft_snapshot_not_needed", snapshot_index=index, kept_through=heartbeat["prevLogIdx"])
            return heartbeat
        return message

    def _accepts(self, message: dict[str, Any]) -> bool:
        prev = message["prevLogIdx"]
        if prev is None:
            return False
        entry = self._entry(prev)
        return entry is not None and entry[2] == message.get("prevLogTerm")

    def _rewind(self, message: dict[str, Any]) -> dict[str, Any]:
        # pysyncobj's follower answers reset=True with next index prevLogIdx when the
        # term there differs, and with its log's end + 1 when it has no such entry:
        # asking about the entry after the last applied one, with a term no entry has,
        # gets "next = last applied + 1" either way, and changes nothing on this voter.
        return {"type": "append_entries", "term": message["term"], "commit_index": 0,
                "prevLogIdx": self.last_applied() + 1, "prevLogTerm": -1, "entries": []}

    def _at_last_applied(self, message: dict[str, Any]) -> dict[str, Any] | None:
        # Entries up to what this voter applied are committed: the leader holds them too.
        applied = self.last_applied()
        mine = self._entry(applied)
        return None if mine is None else _heartbeat(message, applied, mine[2])

    def _entry(self, index: int) -> tuple[bytes, int, int] | None:
        journal = self.journal
        if not len(journal):
            return None
        first = journal[0][1]
        position = index - first
        if 0 <= position < len(journal):
            entry = journal[position]
            assert isinstance(entry, tuple)
            return entry
        return None


def _heartbeat(message: dict[str, Any], index: int, term: int) -> dict[str, Any]:
    return {"type": "append_entries", "term": message["term"], "commit_index": 0,
            "prevLogIdx": index, "prevLogTerm": term, "entries": []}


def encode_peer_message(message: Any) -> bytes:
    """A pysyncobj peer message as pysyncobj puts it on the wire (before compression)."""
    return bytes(_PeerPickle.dumps(message))


def decode_peer_message(data: bytes) -> Any:
    """What a voter makes of a peer message: containers and scalars only."""
    return _peer_loads(data)


def is_raft_connection(preamble: bytes) -> bool:
    """Whether a connection's first five bytes are pysyncobj's, not a Kafka request or TLS.

    pysyncobj frames are a native-order int32 length and a zlib stream (first
    byte 0x78) or, with a secret, a Fernet token (base64 text starting "g"); a
    Kafka request is a big-endian int32 size and an int16 API key whose high byte
    is 0 for every API; a TLS ClientHello starts with record type 0x16 and major
    version 3 (a pysyncobj connection's first frame is short: its second byte is 0).
    """
    if len(preamble) < 5 or (preamble[0] == 0x16 and preamble[1] == 0x03):
        return False
    return preamble[4] in (0x78, 0x67)


@contextlib.contextmanager
def simulated_time(clock: Callable[[], float], rng: random.Random) -> Iterator[None]:
    """Runs pysyncobj on a fake clock and a seeded Random (for the simulation only)."""
    saved = (_syncobj_module.monotonicTime, _syncobj_module.random)
    _syncobj_module.monotonicTime = clock
    _syncobj_module.random = rng
    try:
        yield
    finally:
        _syncobj_module.monotonicTime, _syncobj_module.random = saved


