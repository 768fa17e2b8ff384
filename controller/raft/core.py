"""The pysyncobj side: voters, the transport on the controller listener, and :class:`RaftCore`."""

from __future__ import annotations

import bisect
import collections
import contextlib
import functools
import os
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import structlog
from pysyncobj import SyncObj, SyncObjConf, replicated
from pysyncobj.node import Node, TCPNode
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection
from pysyncobj.tcp_connection import monotonicTime as _monotonic
from pysyncobj.transport import TCPTransport

from controller.image import MetadataImage
from controller.journal import DurableJournal, Fsync
from controller.raft.batch import REJECTED, STALE, decode_batch
from controller.raft.events import (
    _ROLES,
    FOLLOWER,
    LEADER,
    CaughtUp,
    Committed,
    RaftEvent,
    RaftSettings,
    RaftStatus,
    Reset,
    StatusChanged,
)
from controller.raft.seams import PeerMessageGuard
from controller.snapshot import (
    SnapshotCorruptError,
    read_snapshot_file,
    write_snapshot_file,
)
from controller.state import InvalidRecordError, apply_all
from wire.exceptions import DecodeError

log = structlog.get_logger(__name__)


def expire_stalled_connects(connections: Mapping[Any, Any], timeout_s: float,
                            now: Callable[[], float] = _monotonic) -> list[Any]:
    """Drops the connection attempts that have not completed within ``timeout_s``; returns
    the nodes they were for.

    pysyncobj checks a connection's timeout only when its socket has an event or it sends.
    A connect whose SYN a network partition dropped has neither: it waits on the kernel's SYN
    retransmissions (1, 2, 4, 8, 16 s apart), so after the partition heals a voter stays cut
    off from the leader — and its broker serves stale metadata — until the next
    retransmission, up to tens of seconds later. Dropped here, the attempt is made afresh
    ``connection_retry_s`` later, with a new SYN that gets through as soon as the link is back.
    """
    expired = []
    for node, conn in list(connections.items()):
        if conn.state != CONNECTION_STATE.CONNECTING:
            continue
        started = getattr(conn, "_TcpConnection__lastReadTime", None)  # set when connect() began
        if isinstance(started, float) and now() - started > timeout_s:
            conn.disconnect()
            expired.append(node)
    return expired


def tune_socket(sock: socket.socket, user_timeout_s: float) -> None:
    """Bounds how long sent data may stay unacknowledged (Linux TCP_USER_TIMEOUT); keepalive
    only probes idle connections, so a link that died with data in flight needs this too."""
    option = getattr(socket, "TCP_USER_TIMEOUT", None)
    if option is None:
        return
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, option, int(user_timeout_s * 1000))


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

    _ready: bool  # set by pysyncobj's TCPTransport

    def __init__(self, syncObj: Any, selfNode: Any, otherNodes: Any, *, core: RaftCore) -> None:
        self._journal = core.journal
        self._guard = core.guard
        self._user_timeout_s = core.settings.tcp_user_timeout_s
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
        conf = self._syncObj.conf
        for node in expire_stalled_connects(self._connections, conf.connectionTimeout):
            log.info("raft_connect_timed_out", peer=getattr(node, "id", str(node)),
                     timeout_s=conf.connectionTimeout)
        super()._onTick()

    def _onOutgoingConnected(self, conn: Any) -> None:
        sock = getattr(conn, "_TcpConnection__socket", None)
        if isinstance(sock, socket.socket):
            tune_socket(sock, self._user_timeout_s)
        super()._onOutgoingConnected(conn)

    def _accept(self, sock: socket.socket) -> None:
        conf = self._syncObj.conf
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, conf.sendBufferSize)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, conf.recvBufferSize)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            tune_socket(sock, self._user_timeout_s)
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
        encrypted_key_exchange = self._syncObj.encryptor is not None and not conn.sendRandKey
        if encrypted_key_exchange and isinstance(message, bytes) and len(message) == 32:
            # With a secret, the first message is the peer's random key (it decrypted: it
            # knows the secret); pysyncobj answers with its own.
            super()._onIncomingMessageReceived(conn, message)
            return
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

    @replicated  # type: ignore[untyped-decorator]
    def apply_batch(self, payload: bytes) -> Any:
        return self._core._apply(self, payload)




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
            tcp_keepalive=settings.tcp_keepalive,
            commandsWaitLeader=False,
            dynamicMembershipChange=False,
            journalFile=self.journal,
            fullDumpFile=str(self.snapshot_path),
            useFork=False,
            serializer=self._serialize,
            deserializer=self._deserialize,
            onStateChanged=self._on_state_changed,
            onReady=self._on_ready,
            password=settings.secret,
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
    elif len(journal) and journal[0][1] > 1:
        journal.abandon()
        raise SnapshotCorruptError(f"{directory} holds a compacted journal but no snapshot")
    return journal


