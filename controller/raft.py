"""The replicated metadata quorum on pysyncobj — the only module that imports pysyncobj.

Mirrors KRaft's split (KIP-595, KIP-631): a Raft log replicated by the voters in
``controller.quorum.voters``; the metadata records in it are applied by the pure
state machine (:func:`controller.state.apply`); the leader, once it has
committed an entry of its own term, is the active controller.

Three layers:

- **Seams into pysyncobj**, installed when this module is imported:
  ``pysyncobj.syncobj.createJournal`` returns a :class:`DurableJournal` handed in
  as the ``journalFile`` setting (checksummed, fsynced entries; term and vote
  fsynced before pysyncobj answers or asks for a vote — see
  :mod:`controller.journal`); and pysyncobj's peer messages, which it pickles,
  are unpickled with an unpickler that resolves no globals except
  ``_codecs.encode`` (which protocol-2 pickles of ``bytes`` need), so a peer
  cannot make a voter run code. That is defence in depth, not authentication:
  anyone who reaches a controller listener can still disturb the quorum, so
  controller listeners belong on trusted networks.
- :class:`RaftCore`: a pysyncobj ``SyncObj`` with one replicated method that
  applies a batch of metadata records, the applied image and the snapshot
  hooks. It knows nothing of Trio: production runs it on pysyncobj's own
  thread; the simulation (:mod:`controller.sim`) ticks it by hand on a fake
  clock. Log compaction writes the image as a snapshot file (custom
  serializer; never ``fork``, which is unsafe in a process running Trio).
- :class:`RaftQuorum`: the :class:`controller.quorum.MetadataQuorum` for Trio.
  pysyncobj's thread posts events (committed records, snapshot resets,
  append outcomes, role changes) to a queue and wakes the Trio loop with
  ``TrioToken.run_sync_soon``; Trio never waits on pysyncobj's thread.

Writes are compare-and-set: a batch carries the metadata end offset its records
were validated against, and every voter refuses (deterministically) a batch
whose offset is no longer the end — so a write validated by a controller that
has since lost leadership can never be applied on top of newer records.

Raft traffic rides on the controller listener's port: the Trio listener looks
at the first bytes of each connection (:func:`is_raft_connection`) and hands
pysyncobj's connections to its thread (:meth:`RaftQuorum.adopt_connection`).

Where pysyncobj's follower departs from Raft in ways that can lose committed
entries, the seams correct it — each found by the seeded simulation
(:mod:`controller.sim`), which fails without the correction:

- it drops every entry after ``prevLogIdx`` on each AppendEntries, also
  without a conflict (the journal keeps them: :mod:`controller.journal`);
- it raises its commit index on snapshot messages over its own, unchecked log,
  installs a snapshot even when it already holds the snapshot's last entry,
  clearing entries it acknowledged, and answers an AppendEntries it cannot take
  in a way that can keep the leader from ever repairing a long diverged log
  (:class:`PeerMessageGuard`);
- it lowers its stored commit index to the end of a log it has just shortened
  (the journal keeps the highest);
- after a crash between writing a snapshot and compacting, or when a leader's
  snapshot replaced its own in between, it clears or empties the journal
  (:func:`open_journal` finishes the compaction; the journal refuses a
  compaction its snapshot file does not cover).
"""

from __future__ import annotations

import bisect
import codecs
import collections
import contextlib
import functools
import io
import itertools
import os
import pickle
import random
import socket
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pysyncobj.pickle as _pysyncobj_pickle
import pysyncobj.serializer as _serializer_module
import pysyncobj.syncobj as _syncobj_module
import pysyncobj.tcp_connection as _tcp_connection_module
import structlog
import trio
from pysyncobj import SyncObj, SyncObjConf, replicated
from pysyncobj.config import FAIL_REASON
from pysyncobj.node import Node, TCPNode
from pysyncobj.tcp_connection import TcpConnection
from pysyncobj.transport import TCPTransport

from controller.image import MetadataImage
from controller.journal import DurableJournal, Fsync
from controller.quorum import (
    CommitListener,
    NotControllerError,
    QuorumTimeoutError,
    StaleWriteError,
)
from controller.records import decode_record, encode_record
from controller.snapshot import (
    SnapshotCorruptError,
    read_snapshot_entries,
    read_snapshot_file,
    write_snapshot_file,
)
from controller.state import InvalidRecordError, apply, apply_all
from wire.exceptions import DecodeError
from wire.primitives import Message

log = structlog.get_logger(__name__)

JOURNAL_DIR_FILES = ("raft.journal", "raft.meta", "raft.snapshot")

# ---------------------------------------------------------------- seams into pysyncobj


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
        first = journal[0][1]  # type: ignore[index]
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
    """Whether a connection's first five bytes are pysyncobj's, not a Kafka request.

    pysyncobj frames are a native-order int32 length and a zlib stream (first
    byte 0x78); a Kafka request is a big-endian int32 size and an int16 API key
    whose high byte is 0 for every API.
    """
    return len(preamble) >= 5 and preamble[4] == 0x78


@contextlib.contextmanager
def simulated_time(clock: Callable[[], float], rng: random.Random) -> Iterator[None]:
    """Runs pysyncobj on a fake clock and a seeded Random (for the simulation only)."""
    saved = (_syncobj_module.monotonicTime, _syncobj_module.random)
    _syncobj_module.monotonicTime = clock  # type: ignore[attr-defined]
    _syncobj_module.random = rng  # type: ignore[assignment]
    try:
        yield
    finally:
        _syncobj_module.monotonicTime, _syncobj_module.random = saved  # type: ignore[attr-defined,assignment]


# ---------------------------------------------------------------- batches


_BATCH = struct.Struct(">BBqI")
_LEN = struct.Struct(">I")
BATCH_VERSION = 1
#: A barrier batch commits whatever the log holds; it carries no records.
FLAG_UNCONDITIONAL = 1


@dataclass(frozen=True, slots=True)
class Batch:
    expected_end_offset: int
    records: tuple[Message, ...]
    unconditional: bool = False


def encode_batch(records: Sequence[Message], expected_end_offset: int, unconditional: bool = False) -> bytes:
    out = bytearray(_BATCH.pack(BATCH_VERSION, FLAG_UNCONDITIONAL if unconditional else 0,
                                expected_end_offset, len(records)))
    for record in records:
        raw = encode_record(record)
        out += _LEN.pack(len(raw)) + raw
    return bytes(out)


def decode_batch(payload: bytes) -> Batch:
    if len(payload) < _BATCH.size:
        raise DecodeError("metadata batch shorter than its header", 0)
    version, flags, expected, count = _BATCH.unpack_from(payload, 0)
    if version != BATCH_VERSION:
        raise DecodeError(f"unknown metadata batch version {version}", 0)
    pos = _BATCH.size
    records: list[Message] = []
    for _ in range(count):
        if pos + _LEN.size > len(payload):
            raise DecodeError("metadata batch is truncated", pos)
        (length,) = _LEN.unpack_from(payload, pos)
        pos += _LEN.size
        if pos + length > len(payload):
            raise DecodeError("metadata record runs past the batch", pos)
        records.append(decode_record(payload[pos : pos + length]))
        pos += length
    if pos != len(payload):
        raise DecodeError("bytes after the last record of a metadata batch", pos)
    return Batch(expected, tuple(records), bool(flags & FLAG_UNCONDITIONAL))


#: Outcomes of applying a batch, as seen by the node that submitted it.
STALE = "stale"
REJECTED = "rejected"


# ---------------------------------------------------------------- settings, status, events


@dataclass(frozen=True, slots=True)
class RaftSettings:
    election_timeout_min_s: float = 0.6
    election_timeout_max_s: float = 1.5
    heartbeat_interval_s: float = 0.1
    #: A connection that has been silent this long is considered dead.
    connection_timeout_s: float = 2.0
    connection_retry_s: float = 0.5
    #: A leader that has not heard from a majority for this long steps down.
    leader_fallback_timeout_s: float = 3.0
    tick_period_s: float = 0.05
    #: Log compaction: after this many entries, or this long after the previous snapshot.
    snapshot_min_entries: int = 5000
    snapshot_min_interval_s: float = 300.0
    snapshot_chunk_bytes: int = 1 << 20
    #: Larger than any batch the controller writes, so pysyncobj never splits one.
    append_batch_bytes: int = 16 << 20
    append_timeout_s: float = 10.0
    #: Committed records kept in memory for brokers' fetches; older ones are served as a snapshot.
    retained_records: int = 20_000


LEADER = "leader"
CANDIDATE = "candidate"
FOLLOWER = "follower"
_ROLES = {0: FOLLOWER, 1: CANDIDATE, 2: LEADER}


@dataclass(frozen=True, slots=True)
class RaftStatus:
    node_id: int
    term: int = 0
    role: str = FOLLOWER
    leader_id: int = -1
    commit_index: int = 0
    last_applied: int = 0
    #: Metadata end offset applied on this node.
    end_offset: int = 0
    #: On the leader: each voter's log end, as a metadata offset.
    voter_end_offsets: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Committed:
    base_offset: int
    records: tuple[Message, ...]
    raft_index: int = 0


@dataclass(frozen=True, slots=True)
class Reset:
    """The applied state was replaced by a snapshot (at start, or installed by the leader)."""

    image: MetadataImage


@dataclass(frozen=True, slots=True)
class StatusChanged:
    status: RaftStatus


@dataclass(frozen=True, slots=True)
class CaughtUp:
    """This node has applied everything the leader had committed when it first heard it."""


@dataclass(frozen=True, slots=True)
class AppendDone:
    token: int
    result: Any
    error: int


RaftEvent = Committed | Reset | StatusChanged | CaughtUp | AppendDone

# ---------------------------------------------------------------- nodes and transport


class _Voter(Node):  # type: ignore[misc]
    # Sets of nodes iterate in hash order; int hashes keep that order the same in every
    # process (string hashes are salted), which the seeded simulation relies on.
    def __hash__(self) -> int:
        return int(self.node_id)


class _TcpVoter(TCPNode):  # type: ignore[misc]
    def __hash__(self) -> int:
        return int(self.node_id)


class _ControllerTransport(TCPTransport):  # type: ignore[misc]
    """pysyncobj's TCP transport, with the listening socket left to the controller listener.

    Outgoing connections are pysyncobj's own; incoming ones are accepted by the
    Trio listener and adopted here. Only voters may connect: pysyncobj's
    read-only nodes and its utility commands (add/remove nodes, transfer
    leadership) are refused.
    """

    def __init__(self, syncObj: Any, selfNode: Any, otherNodes: Any, *, core: RaftCore) -> None:
        self._journal = core.journal
        self._guard = core.guard
        self._adopted: collections.deque[socket.socket] = collections.deque()
        super().__init__(syncObj, selfNode, otherNodes)
        core.transport = self

    def _createServer(self) -> None:
        self._server = None

    def _maybeBind(self) -> None:
        if not self._ready:
            self._ready = True
            self._bindOverEvent.set()

    def adopt(self, sock: socket.socket) -> None:
        """Called from any thread; the socket is taken over at the next tick."""
        self._adopted.append(sock)

    def _onTick(self) -> None:
        while self._adopted:
            self._accept(self._adopted.popleft())
        super()._onTick()

    def _accept(self, sock: socket.socket) -> None:
        conf = self._syncObj.conf
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, conf.sendBufferSize)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, conf.recvBufferSize)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setblocking(False)
        except OSError:
            sock.close()
            return
        conn = TcpConnection(
            poller=self._syncObj._poller,
            socket=sock,
            timeout=conf.connectionTimeout,
            sendBufferSize=conf.sendBufferSize,
            recvBufferSize=conf.recvBufferSize,
            keepalive=conf.tcp_keepalive,
        )
        self._onNewIncomingConnection(conn)

    def _onIncomingMessageReceived(self, conn: Any, message: Any) -> None:
        if isinstance(message, str) and message in self._nodeAddrToNode:
            super()._onIncomingMessageReceived(conn, message)
            return
        log.warning("raft_peer_refused", reason="not a voter", message_type=type(message).__name__)
        self._unknownConnections.discard(conn)
        conn.disconnect()

    def _onMessageReceived(self, node: Any, message: Any) -> None:
        self._guard.deliver(super()._onMessageReceived, node, message)

    def send(self, node: Any, message: Any) -> bool:
        # Nothing leaves this node before the entries it reflects are durable.
        self._journal.sync()
        return bool(super().send(node, message))

    def destroy(self) -> None:
        super().destroy()
        while self._adopted:
            self._adopted.popleft().close()


class _MetadataSyncObj(SyncObj):  # type: ignore[misc]
    def __init__(self, core: RaftCore, self_node: Any, other_nodes: Any, conf: Any, transport_class: Any) -> None:
        # Set before SyncObj starts its thread, which may apply entries at once.
        self._core = core
        core.syncobj = self
        super().__init__(self_node, other_nodes, conf, transportClass=transport_class)

    @replicated
    def apply_batch(self, payload: bytes) -> Any:
        return self._core._apply(self, payload)


# ---------------------------------------------------------------- the core


class RaftCore:
    """pysyncobj plus the metadata it applies; no Trio.

    ``voters`` maps node id to the voter's address (``host:port``; any unique
    string in the simulation). ``on_event`` is called on the thread that ticks
    pysyncobj. With ``transport_class`` None, the TCP transport is used.
    """

    def __init__(
        self,
        node_id: int,
        voters: Mapping[int, str],
        directory: Path,
        settings: RaftSettings,
        *,
        on_event: Callable[[RaftEvent], None],
        auto_tick: bool,
        journal: DurableJournal | None = None,
        transport_class: Callable[..., Any] | None = None,
        fsync: Fsync = os.fsync,
    ) -> None:
        if node_id not in voters:
            raise ValueError(f"node {node_id} is not a voter")
        self.node_id = node_id
        self.settings = settings
        self.directory = directory
        self.snapshot_path = directory / "raft.snapshot"
        self._fsync = fsync
        self._on_event = on_event
        self.journal = journal or open_journal(directory, fsync)
        self.guard = PeerMessageGuard(self.journal, lambda: int(self.syncobj.raftLastApplied))
        self._ids = {address: voter for voter, address in voters.items()}
        self.syncobj: Any = None
        self.transport: Any = None
        # Applied state: only pysyncobj's thread touches these.
        self.image = MetadataImage()
        self.end_offset = 0
        self._index_offsets: list[tuple[int, int]] = []
        self._index_floor = (0, 0)
        self._caught_up = False
        self.status = RaftStatus(node_id)

        node_class = _TcpVoter if transport_class is None else _Voter
        nodes = {voter: node_class(address, node_id=voter) for voter, address in voters.items()}
        conf = SyncObjConf(
            autoTick=auto_tick,
            autoTickPeriod=settings.tick_period_s,
            appendEntriesUseBatch=False,
            appendEntriesPeriod=settings.heartbeat_interval_s,
            raftMinTimeout=settings.election_timeout_min_s,
            raftMaxTimeout=settings.election_timeout_max_s,
            connectionTimeout=settings.connection_timeout_s,
            connectionRetryTime=settings.connection_retry_s,
            leaderFallbackTimeout=settings.leader_fallback_timeout_s,
            appendEntriesBatchSizeBytes=settings.append_batch_bytes,
            logCompactionMinEntries=settings.snapshot_min_entries,
            logCompactionMinTime=settings.snapshot_min_interval_s,
            logCompactionBatchSize=settings.snapshot_chunk_bytes,
            commandsWaitLeader=False,
            dynamicMembershipChange=False,
            journalFile=self.journal,
            fullDumpFile=str(self.snapshot_path),
            useFork=False,
            serializer=self._serialize,
            deserializer=self._deserialize,
            onStateChanged=self._on_state_changed,
            onReady=self._on_ready,
        )
        if transport_class is None:
            transport_class = functools.partial(_ControllerTransport, core=self)
        self.syncobj = _MetadataSyncObj(
            self, nodes[node_id], [n for v, n in nodes.items() if v != node_id], conf, transport_class
        )
        self.syncobj.addOnTickCallback(self._on_tick)

    # ------------------------------------------------------------ from other threads

    def submit(self, payload: bytes, callback: Callable[[Any, int], None]) -> None:
        """Queues a batch; ``callback(result, error)`` runs on pysyncobj's thread."""
        self.syncobj.apply_batch(payload, callback=callback)

    def adopt(self, sock: socket.socket) -> None:
        if self.transport is None or not hasattr(self.transport, "adopt"):
            sock.close()
            return
        self.transport.adopt(sock)

    def tick(self) -> None:
        """One pysyncobj tick, without waiting (manual ticking only)."""
        self.syncobj.doTick(0.0)

    def destroy(self) -> None:
        """Stops pysyncobj; its journal syncs and stores the commit index."""
        if self.syncobj.conf.autoTick:
            self.syncobj.destroy_synchronous()
        else:
            self.syncobj.destroy()
        self._release_files()

    def crash(self) -> None:
        """Stops without syncing anything: the simulation's hard kill."""
        if self.transport is not None:
            self.transport.destroy()
        self.journal.abandon()
        self._release_files()

    def _release_files(self) -> None:
        # pysyncobj leaves these open on destroy. A snapshot being received sits in a
        # buffered file; closed later by the garbage collector, it would write into the
        # file a new incarnation of this voter has opened under the same name.
        serializer = getattr(self.syncobj, "_SyncObj__serializer", None)
        incoming = getattr(serializer, "_Serializer__incomingTransmissionFile", None)
        if incoming is not None:
            with contextlib.suppress(OSError, ValueError):
                incoming.close()
        for transmission in getattr(serializer, "_Serializer__transmissions", {}).values():
            if "file" in transmission:
                with contextlib.suppress(OSError, ValueError):
                    transmission["file"].close()
        notifier = getattr(self.syncobj, "_SyncObj__pipeNotifier", None)
        for name in ("_PipeNotifier__pipeR", "_PipeNotifier__pipeW"):
            fd = getattr(notifier, name, None)
            if isinstance(fd, int):
                with contextlib.suppress(OSError):
                    os.close(fd)

    # ------------------------------------------------------------ pysyncobj's thread

    def _apply(self, syncobj: Any, payload: bytes) -> Any:
        index = syncobj.raftLastApplied + 1
        try:
            batch = decode_batch(payload)
        except DecodeError as ex:
            log.error("metadata_batch_undecodable", raft_index=index, error=str(ex))
            return REJECTED
        if not batch.unconditional and batch.expected_end_offset != self.end_offset:
            return STALE
        offset = self.end_offset
        try:
            image = apply_all(self.image, [(offset + i, record) for i, record in enumerate(batch.records)])
            offset += len(batch.records)
        except InvalidRecordError as ex:
            # Every voter refuses the same batch the same way; nothing of it is applied.
            log.error("metadata_batch_refused", raft_index=index, error=str(ex))
            return REJECTED
        base = self.end_offset
        self.image = image
        self.end_offset = offset
        self._remember_offset(index, offset)
        if batch.records:
            self._on_event(Committed(base, batch.records, index))
        return (base, offset)

    def _remember_offset(self, raft_index: int, end_offset: int) -> None:
        self._index_offsets.append((raft_index, end_offset))
        limit = max(self.settings.retained_records, 16)
        if len(self._index_offsets) > 2 * limit:
            cut = len(self._index_offsets) - limit
            self._index_floor = self._index_offsets[cut - 1]
            del self._index_offsets[:cut]

    def offset_at(self, raft_index: int) -> int:
        """Metadata end offset once entries up to ``raft_index`` are applied (as known here)."""
        pos = bisect.bisect_right(self._index_offsets, (raft_index, 1 << 62))
        if pos == 0:
            return self._index_floor[1]
        return self._index_offsets[pos - 1][1]

    def _serialize(self, file_name: str, data: Any) -> None:
        last, previous, cluster = data
        write_snapshot_file(Path(file_name), self.image, self.end_offset, tuple(last), tuple(previous),
                            [str(node.id) for node in cluster], self._fsync)
        log.info("raft_snapshot_written", end_offset=self.end_offset, raft_index=last[1])

    def _deserialize(self, file_name: str) -> Any:
        snapshot = read_snapshot_file(Path(file_name))
        self.image = snapshot.image
        self.end_offset = snapshot.end_offset
        self._index_offsets = []
        self._index_floor = (snapshot.last_entry[1], snapshot.end_offset)
        log.info("raft_snapshot_loaded", end_offset=snapshot.end_offset, raft_index=snapshot.last_entry[1])
        self._on_event(Reset(snapshot.image))
        return (snapshot.last_entry, snapshot.previous_entry, list(snapshot.voters))

    def _on_state_changed(self, old: int, new: int) -> None:
        term = self.syncobj.raftCurrentTerm
        if _ROLES.get(new) == LEADER:
            # One such line per node and term: tests check no term has two leaders.
            log.info("raft_leader_elected", term=term, leader=self.node_id)
        elif _ROLES.get(old) == LEADER:
            log.info("raft_leadership_lost", term=term, node_id=self.node_id)
        self._publish_status()

    def _on_ready(self) -> None:
        self._caught_up = True
        self._on_event(CaughtUp())

    def _on_tick(self) -> None:
        # Entries added during this tick are durable before the next tick counts them.
        self.journal.sync()
        self._publish_status()

    def _publish_status(self) -> None:
        status = self.syncobj.getStatus()
        role = _ROLES.get(status["state"], FOLLOWER)
        leader = status["leader"]
        leader_id = -1 if leader is None else self._ids.get(str(leader.id), -1)
        voter_offsets: dict[int, int] = {}
        if role == LEADER:
            voter_offsets[self.node_id] = self.end_offset
            for address, voter in self._ids.items():
                if voter != self.node_id:
                    match = status.get(f"match_idx_server_{address}", 0)
                    voter_offsets[voter] = self.offset_at(min(match, status["last_applied"]))
        new = RaftStatus(
            node_id=self.node_id,
            term=status["raft_term"],
            role=role,
            leader_id=leader_id,
            commit_index=status["commit_idx"],
            last_applied=status["last_applied"],
            end_offset=self.end_offset,
            voter_end_offsets=voter_offsets,
        )
        old = self.status
        self.status = new
        if (old.term, old.role, old.leader_id) != (new.term, new.role, new.leader_id):
            self._on_event(StatusChanged(new))


def open_journal(directory: Path, fsync: Fsync = os.fsync) -> DurableJournal:
    """Loads the journal, refusing a snapshot that is corrupt or missing when the journal needs it."""
    journal = DurableJournal(directory, snapshot_path=directory / "raft.snapshot", fsync=fsync)
    snapshot = directory / "raft.snapshot"
    if snapshot.exists():
        try:
            previous = read_snapshot_file(snapshot).previous_entry
        except (SnapshotCorruptError, OSError) as ex:
            journal.abandon()
            raise SnapshotCorruptError(f"cannot start from {snapshot}: {ex}") from ex
        # pysyncobj writes a snapshot, then drops the entries it covers on its next tick.
        # After a crash in between, it would find the journal not starting at the
        # snapshot and clear all of it — entries after the snapshot included, which
        # this voter may have acknowledged. Finish the compaction instead.
        entries = [journal[i] for i in range(len(journal))]
        if previous in entries[1:]:
            journal.deleteEntriesTo(entries.index(previous))
    elif len(journal) and journal[0][1] > 1:  # type: ignore[index]
        journal.abandon()
        raise SnapshotCorruptError(f"{directory} holds a compacted journal but no snapshot")
    return journal


# ---------------------------------------------------------------- the Trio side


@dataclass(slots=True)
class _PendingAppend:
    done: trio.Event = field(default_factory=trio.Event)
    result: Any = None
    error: int = FAIL_REASON.SUCCESS


@dataclass(frozen=True, slots=True)
class QuorumDescription:
    """What DescribeQuorum reports."""

    leader_id: int
    epoch: int
    high_watermark: int
    is_leader: bool
    voters: tuple[tuple[int, int], ...]
    observers: tuple[tuple[int, int], ...]


class RaftQuorum:
    """The replicated metadata quorum, for Trio code.

    ``voters`` are (node id, host, port) from ``controller.quorum.voters``. Call
    :meth:`run` in a nursery (it starts pysyncobj and stops it when cancelled);
    the other methods are for the Trio thread.
    """

    def __init__(
        self,
        node_id: int,
        voters: Sequence[tuple[int, str, int]],
        directory: Path,
        settings: RaftSettings | None = None,
    ) -> None:
        self.node_id = node_id
        self.voters = {voter: f"{host}:{port}" for voter, host, port in voters}
        self.directory = directory
        self.settings = settings or RaftSettings()
        self._core: RaftCore | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._events: collections.deque[RaftEvent] = collections.deque()
        self._wakeup = trio.Event()
        self._listeners: list[CommitListener] = []
        self._reset_listeners: list[Callable[[MetadataImage], None]] = []
        self._activation_listeners: list[Callable[[int], None]] = []
        self._end_offset = 0
        self._log_start_offset = 0
        self._base_image = MetadataImage()
        self._tail: collections.deque[tuple[int, Message]] = collections.deque()
        self._changed = trio.Event()
        self._pending: dict[int, _PendingAppend] = {}
        self._tokens = itertools.count(1)
        self._active_term: int | None = None
        self._establishing: int | None = None
        self.caught_up = trio.Event()
        self._observers: dict[int, int] = {}
        self._stopped = False
        self._nursery: trio.Nursery | None = None

    # ------------------------------------------------------------ MetadataQuorum

    @property
    def status(self) -> RaftStatus:
        return self._core.status if self._core is not None else RaftStatus(self.node_id)

    @property
    def leader_id(self) -> int:
        return self.status.leader_id

    @property
    def epoch(self) -> int:
        return self.status.term

    @property
    def end_offset(self) -> int:
        return self._end_offset

    def is_leader(self) -> bool:
        status = self.status
        return status.role == LEADER and self._active_term is not None and status.term == self._active_term

    def add_listener(self, listener: CommitListener) -> None:
        self._listeners.append(listener)

    def add_reset_listener(self, listener: Callable[[MetadataImage], None]) -> None:
        self._reset_listeners.append(listener)

    def add_activation_listener(self, listener: Callable[[int], None]) -> None:
        """``listener(term)`` runs when this node becomes the active controller."""
        self._activation_listeners.append(listener)

    async def append(self, records: Sequence[Message]) -> int:
        if not self.is_leader():
            raise NotControllerError(f"node {self.node_id} is not the active controller")
        _, end = await self._submit(encode_batch(records, self._end_offset))
        return end - 1

    def close(self) -> None:
        if self._core is not None and not self._stopped:
            self._stopped = True
            self._core.destroy()

    # ------------------------------------------------------------ lifecycle

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self.directory.mkdir(parents=True, exist_ok=True)
        journal = await trio.to_thread.run_sync(open_journal, self.directory)
        # Built on this (the main) thread: pysyncobj's thread stops when its creator's does.
        self._core = RaftCore(self.node_id, self.voters, self.directory, self.settings,
                              on_event=self._post, auto_tick=True, journal=journal)
        log.info("raft_started", node_id=self.node_id, voters=sorted(self.voters.items()),
                 term=journal.getCurrentTerm(), entries=len(journal))
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                while True:
                    await self._wakeup.wait()
                    self._wakeup = trio.Event()
                    while self._events:
                        self._handle(self._events.popleft())
        finally:
            with trio.CancelScope(shield=True):
                await self.aclose()

    async def aclose(self) -> None:
        if self._core is None or self._stopped:
            return
        self._stopped = True
        self._active_term = None
        core = self._core
        await trio.to_thread.run_sync(core.destroy)
        log.info("raft_stopped", node_id=self.node_id)

    def adopt_connection(self, sock: socket.socket) -> None:
        """Hands a peer's connection (accepted by the controller listener) to pysyncobj."""
        if self._core is None or self._stopped:
            sock.close()
            return
        self._core.adopt(sock)

    # ------------------------------------------------------------ events

    def _post(self, event: RaftEvent) -> None:
        # pysyncobj's thread (or Trio's, for appends refused at once).
        self._events.append(event)
        token = self._token
        if token is None:
            return
        with contextlib.suppress(trio.RunFinishedError):
            token.run_sync_soon(self._wake, idempotent=True)

    def _wake(self) -> None:
        self._wakeup.set()

    def _handle(self, event: RaftEvent) -> None:
        if isinstance(event, Committed):
            self._deliver(event)
        elif isinstance(event, Reset):
            self._reset(event.image)
        elif isinstance(event, AppendDone):
            pending = self._pending.get(event.token)
            if pending is not None:
                pending.result, pending.error = event.result, event.error
                pending.done.set()
        elif isinstance(event, StatusChanged):
            self._on_status(event.status)
        elif isinstance(event, CaughtUp):
            self.caught_up.set()

    def _deliver(self, event: Committed) -> None:
        if event.base_offset != self._end_offset:
            raise AssertionError(f"committed records at {event.base_offset}, expected {self._end_offset}")
        for i, record in enumerate(event.records):
            offset = event.base_offset + i
            self._tail.append((offset, record))
            self._end_offset = offset + 1
            for listener in self._listeners:
                listener(offset, record)
        while len(self._tail) > self.settings.retained_records:
            offset, record = self._tail.popleft()
            self._base_image = apply(self._base_image, record, offset)
            self._log_start_offset = offset + 1
        self._notify_changed()

    def _reset(self, image: MetadataImage) -> None:
        self._tail.clear()
        self._base_image = image
        self._log_start_offset = self._end_offset = image.offset + 1
        for listener in self._reset_listeners:
            listener(image)
        self._notify_changed()

    def _notify_changed(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def _on_status(self, status: RaftStatus) -> None:
        if status.role != LEADER:
            if self._active_term is not None:
                log.info("controller_deactivated", node_id=self.node_id, term=self._active_term)
            self._active_term = None
            return
        if self._active_term == status.term or self._establishing == status.term:
            return
        if self._nursery is not None:
            self._establishing = status.term
            self._nursery.start_soon(self._establish, status.term)

    async def _establish(self, term: int) -> None:
        # The leader is active once an entry of its own term commits: by then it has
        # applied everything committed before it (Raft §8, KRaft's leader change).
        try:
            await self._submit(encode_batch([], 0, unconditional=True))
        except (NotControllerError, QuorumTimeoutError) as ex:
            log.info("controller_activation_failed", node_id=self.node_id, term=term, error=str(ex))
            return
        finally:
            if self._establishing == term:
                self._establishing = None
        status = self.status
        if status.role == LEADER and status.term == term and not self._stopped:
            self._active_term = term
            log.info("controller_activated", node_id=self.node_id, term=term, end_offset=self._end_offset)
            for listener in self._activation_listeners:
                listener(term)

    async def _submit(self, payload: bytes) -> tuple[int, int]:
        core = self._core
        if core is None or self._stopped:
            raise NotControllerError("the quorum is not running")
        token = next(self._tokens)
        pending = _PendingAppend()
        self._pending[token] = pending
        try:
            core.submit(payload, functools.partial(self._append_done, token))
            with trio.fail_after(self.settings.append_timeout_s):
                await pending.done.wait()
        except trio.TooSlowError:
            raise QuorumTimeoutError(f"metadata append not committed within {self.settings.append_timeout_s}s") from None
        finally:
            self._pending.pop(token, None)
        if pending.error != FAIL_REASON.SUCCESS:
            raise NotControllerError(f"metadata append failed: {_fail_reason(pending.error)}")
        if pending.result == STALE:
            raise StaleWriteError("the metadata log moved on while this write was prepared")
        if pending.result == REJECTED or not isinstance(pending.result, tuple):
            raise ValueError("the metadata batch was refused by the state machine")
        base, end = pending.result
        return int(base), int(end)

    def _append_done(self, token: int, result: Any, error: int) -> None:
        self._post(AppendDone(token, result, error))

    # ------------------------------------------------------------ reading the log

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    def snapshot(self) -> MetadataImage:
        """The image at ``log_start_offset - 1``: what a broker behind the retained records starts from."""
        return self._base_image

    def read(self, offset: int, max_records: int) -> list[tuple[int, Message]]:
        """Committed records from ``offset`` (which must be at least ``log_start_offset``)."""
        if offset < self._log_start_offset or offset >= self._end_offset:
            return []
        start = offset - self._log_start_offset
        return list(itertools.islice(self._tail, start, start + max_records))

    async def wait_for_records(self, offset: int, timeout_s: float) -> None:
        """Returns once records past ``offset`` are committed, or after ``timeout_s``."""
        with trio.move_on_after(timeout_s):
            while self._end_offset <= offset:
                await self._changed.wait()

    def record_observer(self, replica_id: int, fetch_offset: int) -> None:
        if replica_id >= 0 and replica_id not in self.voters:
            self._observers[replica_id] = fetch_offset

    def describe(self) -> QuorumDescription:
        status = self.status
        voters = tuple((voter, status.voter_end_offsets.get(voter, -1)) for voter in sorted(self.voters))
        return QuorumDescription(
            leader_id=status.leader_id,
            epoch=status.term,
            high_watermark=self._end_offset,
            is_leader=status.role == LEADER,
            voters=voters,
            observers=tuple(sorted(self._observers.items())),
        )


def _fail_reason(code: int) -> str:
    for name in dir(FAIL_REASON):
        if not name.startswith("_") and getattr(FAIL_REASON, name) == code:
            return name
    return str(code)


__all__ = [
    "LEADER",
    "Batch",
    "QuorumDescription",
    "RaftCore",
    "RaftQuorum",
    "RaftSettings",
    "RaftStatus",
    "decode_batch",
    "encode_batch",
    "is_raft_connection",
    "open_journal",
    "simulated_time",
]
