"""Settings, status and the events pysyncobj's thread posts to the Trio side."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controller.image import MetadataImage
from wire.primitives import Message


@dataclass(frozen=True, slots=True)
class RaftSettings:
    election_timeout_min_s: float = 0.6
    election_timeout_max_s: float = 1.5
    heartbeat_interval_s: float = 0.1
    #: A connection that has been silent this long is considered dead; so is a connection
    #: attempt that has not completed in this time.
    connection_timeout_s: float = 2.0
    #: TCP keepalive of the voters' connections (idle s, probe interval s, probes) and the
    #: longest time sent data may stay unacknowledged: a link that died silently (a network
    #: partition drops every packet, the peer's close included) is noticed in seconds, not
    #: when the kernel gives up on it minutes later.
    tcp_keepalive: tuple[int, int, int] = (1, 1, 2)
    tcp_user_timeout_s: float = 4.0
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
    #: Shared secret the voters' traffic is encrypted and authenticated with (pysyncobj's
    #: Fernet encryptor); None sends it in clear.
    secret: str | None = field(default=None, repr=False)


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

