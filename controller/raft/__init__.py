"""The replicated metadata quorum on pysyncobj — the only package that imports pysyncobj.

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

from controller.raft.batch import (
    BATCH_VERSION,
    FLAG_UNCONDITIONAL,
    REJECTED,
    STALE,
    Batch,
    decode_batch,
    encode_batch,
)
from controller.raft.core import RaftCore, open_journal
from controller.raft.events import (
    CANDIDATE,
    FOLLOWER,
    LEADER,
    AppendDone,
    CaughtUp,
    Committed,
    RaftEvent,
    RaftSettings,
    RaftStatus,
    Reset,
    StatusChanged,
)
from controller.raft.quorum import QuorumDescription, RaftQuorum
from controller.raft.seams import (
    PeerMessageGuard,
    decode_peer_message,
    encode_peer_message,
    is_raft_connection,
    simulated_time,
)

__all__ = [
    "BATCH_VERSION",
    "CANDIDATE",
    "FLAG_UNCONDITIONAL",
    "FOLLOWER",
    "LEADER",
    "REJECTED",
    "STALE",
    "AppendDone",
    "Batch",
    "CaughtUp",
    "Committed",
    "PeerMessageGuard",
    "QuorumDescription",
    "RaftCore",
    "RaftEvent",
    "RaftQuorum",
    "RaftSettings",
    "RaftStatus",
    "Reset",
    "StatusChanged",
    "decode_batch",
    "decode_peer_message",
    "encode_batch",
    "encode_peer_message",
    "is_raft_connection",
    "open_journal",
    "simulated_time",
]
