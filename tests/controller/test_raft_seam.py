"""The seams into pysyncobj: what a voter makes durable before it speaks, what it accepts
from peers, and the guards around pysyncobj's follower."""

from __future__ import annotations

import os
import pickle
import random
from pathlib import Path
from typing import Any

import pytest

from controller.image import MetadataImage
from controller.journal import DurableJournal, RaftMeta
from controller.raft import (
    PeerMessageGuard,
    RaftCore,
    RaftEvent,
    RaftSettings,
    decode_peer_message,
    encode_peer_message,
    is_raft_connection,
    simulated_time,
)
from controller.snapshot import write_snapshot_file

VOTERS = {1: "voter-1", 2: "voter-2", 3: "voter-3"}


class RecordingTransport:
    """pysyncobj's transport interface; remembers what the durable state was at each send."""

    def __init__(self, directory: Path, peers: Any) -> None:
        self.directory = directory
        self.peers = {int(p.node_id): p for p in peers}
        self.sent: list[tuple[int, dict[str, Any], int, str | None]] = []
        self.guard: Any = None
        self.on_message: Any = None
        self.on_connected: Any = None

    def setOnMessageReceivedCallback(self, cb: Any) -> None:
        self.on_message = cb

    def setOnNodeConnectedCallback(self, cb: Any) -> None:
        self.on_connected = cb

    def setOnNodeDisconnectedCallback(self, cb: Any) -> None:
        pass

    def setOnReadonlyNodeConnectedCallback(self, cb: Any) -> None:
        pass

    def setOnReadonlyNodeDisconnectedCallback(self, cb: Any) -> None:
        pass

    def setOnUtilityMessageCallback(self, message: str, cb: Any) -> None:
        pass

    def tryGetReady(self) -> None:
        pass

    ready = True

    def send(self, node: Any, message: dict[str, Any]) -> bool:
        meta = RaftMeta(self.directory / "raft.meta")  # what another process would read now
        self.sent.append((int(node.node_id), dict(message), meta.term, meta.voted_for))
        return True

    def destroy(self) -> None:
        pass

    def connect_all(self) -> None:
        for peer in self.peers.values():
            self.on_connected(peer)

    def receive(self, peer: int, message: dict[str, Any]) -> None:
        self.guard.deliver(self.on_message, self.peers[peer], message)


def make_core(tmp_path: Path, clock: list[float]) -> tuple[RaftCore, RecordingTransport]:
    made: list[RecordingTransport] = []
    events: list[RaftEvent] = []

    def transport(syncobj: Any, self_node: Any, others: Any) -> RecordingTransport:
        made.append(RecordingTransport(tmp_path, others))
        return made[0]

    core = RaftCore(1, VOTERS, tmp_path, RaftSettings(), on_event=events.append, auto_tick=False,
                    transport_class=transport)
    made[0].guard = core.guard
    made[0].connect_all()
    return core, made[0]


def test_a_vote_is_durable_before_it_is_sent(tmp_path: Path) -> None:
    clock = [100.0]
    with simulated_time(lambda: clock[0], random.Random(1)):
        core, transport = make_core(tmp_path, clock)
        core.tick()
        transport.receive(2, {"type": "request_vote", "term": 5, "last_log_index": 10, "last_log_term": 4})
        votes = [s for s in transport.sent if s[1]["type"] == "response_vote"]
        assert votes, transport.sent
        _, message, term_on_disk, vote_on_disk = votes[0]
        assert message["term"] == 5
        assert (term_on_disk, vote_on_disk) == (5, "voter-2")
        # A second candidate in the same term gets nothing, also after a restart.
        transport.receive(3, {"type": "request_vote", "term": 5, "last_log_index": 10, "last_log_term": 4})
        assert len([s for s in transport.sent if s[1]["type"] == "response_vote"]) == 1
        core.destroy()
        again, transport2 = make_core(tmp_path, clock)
        again.tick()
        transport2.receive(3, {"type": "request_vote", "term": 5, "last_log_index": 10, "last_log_term": 4})
        assert not [s for s in transport2.sent if s[1]["type"] == "response_vote"]
        again.destroy()


def test_a_candidate_stores_its_term_and_own_vote_before_asking(tmp_path: Path) -> None:
    clock = [100.0]
    with simulated_time(lambda: clock[0], random.Random(2)):
        core, transport = make_core(tmp_path, clock)
        core.tick()
        clock[0] += 5.0  # past any election timeout
        core.tick()
        requests = [s for s in transport.sent if s[1]["type"] == "request_vote"]
        assert requests
        assert all(term == s[1]["term"] and vote == "voter-1" for s in requests for term, vote in [s[2:]])
        core.destroy()


def test_snapshot_messages_do_not_move_the_commit_index(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []
    journal = DurableJournal(tmp_path)
    for i in range(1, 8):
        journal.add(b"x", i, 3)
    guard = PeerMessageGuard(journal, lambda: 1)
    guard.deliver(lambda node, m: seen.append(m), None,
                  {"type": "append_entries", "term": 3, "commit_index": 40, "serialized": None})
    guard.deliver(lambda node, m: seen.append(m), None,
                  {"type": "append_entries", "term": 3, "commit_index": 40, "prevLogIdx": 7,
                   "prevLogTerm": 3, "entries": []})
    assert [m["commit_index"] for m in seen] == [0, 40]
    journal.close()


def test_an_append_the_voter_cannot_take_rewinds_the_leader_to_its_applied_entry(tmp_path: Path) -> None:
    # The voter applied up to 4 and holds 5..6 of term 2; the leader asks about entry 9
    # (past its log) and about entry 6 with another term.
    journal = DurableJournal(tmp_path)
    for i in range(1, 7):
        journal.add(b"x", i, 2)
    guard = PeerMessageGuard(journal, lambda: 4)
    seen: list[dict[str, Any]] = []
    for prev, term in ((9, 3), (6, 3), (None, None)):
        guard.deliver(lambda node, m: seen.append(m), None,
                      {"type": "append_entries", "term": 3, "commit_index": 5, "prevLogIdx": prev,
                       "prevLogTerm": term, "entries": [(b"y", 7, 3)]})
    assert all((m["prevLogIdx"], m["prevLogTerm"], m["entries"], m["commit_index"]) == (5, -1, [], 0)
               for m in seen)
    # An append it can take passes unchanged.
    guard.deliver(lambda node, m: seen.append(m), None,
                  {"type": "append_entries", "term": 3, "commit_index": 5, "prevLogIdx": 6, "prevLogTerm": 2,
                   "entries": [(b"y", 7, 3)]})
    assert seen[-1]["entries"] == [(b"y", 7, 3)]
    journal.close()


def test_a_snapshot_the_voter_does_not_need_is_not_installed(tmp_path: Path) -> None:
    # The voter holds entries 1..10 of term 2 and has applied up to 6; a leader sends a
    # snapshot ending at entry 8 (a delayed answer sent its next index back).
    journal = DurableJournal(tmp_path)
    for i in range(1, 11):
        journal.add(f"e{i}".encode(), i, 2)
    applied = [6]
    guard = PeerMessageGuard(journal, lambda: applied[0])
    snapshot = tmp_path / "from-leader"

    def send_snapshot(last: tuple[bytes, int, int]) -> list[dict[str, Any]]:
        write_snapshot_file(snapshot, MetadataImage(), 0, last, (b"p", last[1] - 1, last[2]), [])
        data = snapshot.read_bytes()
        seen: list[dict[str, Any]] = []
        for i, (chunk, first) in enumerate([(data[:20], True), (data[20:], False), (b"", False)]):
            guard.deliver(lambda node, m: seen.append(m), "leader",
                          {"type": "append_entries", "term": 4, "commit_index": 9,
                           "serialized": (chunk, first, i == 2)})
        return seen

    # It holds entry 8 of term 2: answered as a heartbeat at 8, so 9 and 10 are kept.
    last = send_snapshot((b"e8", 8, 2))[-1]
    assert (last["prevLogIdx"], last["prevLogTerm"], last["entries"]) == (8, 2, [])
    # A snapshot behind what it applied (and whose entry it no longer holds as such).
    last = send_snapshot((b"other", 5, 1))[-1]
    assert (last["prevLogIdx"], last["prevLogTerm"]) == (6, 2)
    # A snapshot ahead of it, with an entry it does not hold: installed as pysyncobj does.
    last = send_snapshot((b"e12", 12, 3))[-1]
    assert "serialized" in last and "prevLogIdx" not in last
    journal.close()


def test_peer_messages_round_trip_but_cannot_name_callables() -> None:
    message = {"type": "append_entries", "term": 2, "commit_index": 5, "prevLogIdx": 4, "prevLogTerm": 2,
               "entries": [(b"\x00batch", 5, 2), (b"", 6, 2)], "serialized": (b"", True, False)}
    assert decode_peer_message(encode_peer_message(message)) == message

    class Evil:
        def __reduce__(self) -> tuple[Any, ...]:
            return (os.system, ("true",))

    with pytest.raises(pickle.UnpicklingError):
        decode_peer_message(pickle.dumps({"type": "request_vote", "x": Evil()}, protocol=2))
    with pytest.raises(pickle.UnpicklingError):
        decode_peer_message(pickle.dumps({1, 2}, protocol=2))


def test_raft_connections_are_told_from_kafka_requests() -> None:
    import struct
    import zlib

    raft = struct.pack("i", 10) + zlib.compress(encode_peer_message("127.0.0.1:9093"), 3)
    assert is_raft_connection(raft[:5])
    kafka = struct.pack(">ihhi", 20, 18, 3, 1)
    assert not is_raft_connection(kafka[:5])
    assert not is_raft_connection(b"\x00\x00")


def test_encrypted_raft_connections_and_tls_are_told_apart() -> None:
    import ssl
    import struct
    import zlib

    from pysyncobj.encryptor import getEncryptor

    # With controller.quorum.secret, a voter's first frame is a Fernet token of its random key.
    token = getEncryptor("secret").encrypt(zlib.compress(encode_peer_message(os.urandom(32)), 3))
    assert is_raft_connection((struct.pack("i", len(token)) + token)[:5])
    # A TLS ClientHello (as Python's ssl writes it) on the same port is never taken for pysyncobj.
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        client.do_handshake()
    hello = outgoing.read()
    assert hello[0] == 0x16
    assert not is_raft_connection(hello[:5])
    for length in (0x67, 0x78, 0x167, 0x178):  # record lengths whose low byte looks like pysyncobj's
        assert not is_raft_connection(bytes([0x16, 0x03, 0x01, length >> 8, length & 0xFF]))
