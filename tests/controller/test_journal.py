"""The Raft journal: entries survive restarts, torn and corrupt tails are cut, the term and
vote are durable when setCurrentTerm returns, and entries are dropped only on conflict."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from controller.image import MetadataImage
from controller.journal import DurableJournal, JournalCorruptError
from controller.snapshot import write_snapshot_file


class FsyncLog:
    """Counts fsyncs, so tests can check what was durable when."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, fd: int) -> None:
        self.calls += 1
        os.fsync(fd)


def fill(journal: DurableJournal, count: int, term: int = 1, start: int = 1) -> None:
    for i in range(start, start + count):
        journal.add(f"command-{i}".encode(), i, term)


def test_entries_survive_a_restart(tmp_path: Path) -> None:
    journal = DurableJournal(tmp_path)
    fill(journal, 5)
    journal.sync()
    journal.setRaftCommitIndex(4)
    journal.close()
    again = DurableJournal(tmp_path)
    assert [again[i] for i in range(len(again))] == [(f"command-{i}".encode(), i, 1) for i in range(1, 6)]
    assert again.getRaftCommitIndex() == 4
    assert again[-1] == (b"command-5", 5, 1)
    assert again[1:3] == [(b"command-2", 2, 1), (b"command-3", 3, 1)]


@pytest.mark.parametrize("damage", ["torn", "zeros", "garbage", "flip"])
def test_a_damaged_tail_is_cut_off(tmp_path: Path, damage: str) -> None:
    journal = DurableJournal(tmp_path)
    fill(journal, 4)
    journal.sync()
    good = journal.size
    fill(journal, 1, start=5)
    journal.abandon()
    data = bytearray((tmp_path / "raft.journal").read_bytes())
    if damage == "torn":
        data = data[: len(data) - 3]
    elif damage == "zeros":
        data = data[:good] + bytes(40)
    elif damage == "garbage":
        data = data[:good] + random.Random(7).randbytes(64)
    else:
        data[-2] ^= 0x04
    (tmp_path / "raft.journal").write_bytes(bytes(data))
    again = DurableJournal(tmp_path)
    assert len(again) == 4 and again[-1][1] == 4
    assert (tmp_path / "raft.journal").stat().st_size == good
    # And it keeps working after the cut.
    again.add(b"next", 5, 2)
    again.close()
    assert DurableJournal(tmp_path)[-1] == (b"next", 5, 2)


def test_a_gap_or_a_term_going_back_ends_the_journal(tmp_path: Path) -> None:
    from controller import journal as module

    journal = DurableJournal(tmp_path)
    fill(journal, 3, term=2)
    journal.close()
    with open(tmp_path / "raft.journal", "ab") as f:
        f.write(module._encode_entry(b"old term", 4, 1))
    assert len(DurableJournal(tmp_path)) == 3


def test_term_and_vote_are_durable_before_set_current_term_returns(tmp_path: Path) -> None:
    fsyncs = FsyncLog()
    journal = DurableJournal(tmp_path, fsync=fsyncs)
    before = fsyncs.calls
    journal.setCurrentTerm(7, "127.0.0.1:9093")
    # The meta file and its directory were fsynced, and another process reads the vote.
    assert fsyncs.calls >= before + 2
    reader = DurableJournal(tmp_path)
    assert (reader.getCurrentTerm(), reader.getVotedForNodeId()) == (7, "127.0.0.1:9093")
    journal.setCurrentTerm(8, None)
    reader2 = DurableJournal(tmp_path)
    assert (reader2.getCurrentTerm(), reader2.getVotedForNodeId()) == (8, None)
    with pytest.raises(ValueError):
        journal.setCurrentTerm(6, None)


def test_a_corrupt_meta_file_stops_the_node(tmp_path: Path) -> None:
    journal = DurableJournal(tmp_path)
    journal.setCurrentTerm(3, "a:1")
    journal.close()
    meta = tmp_path / "raft.meta"
    data = bytearray(meta.read_bytes())
    data[10] ^= 1
    meta.write_bytes(bytes(data))
    with pytest.raises(JournalCorruptError):
        DurableJournal(tmp_path)


def test_commit_index_never_points_past_the_journal(tmp_path: Path) -> None:
    journal = DurableJournal(tmp_path)
    fill(journal, 3)
    journal.setRaftCommitIndex(10)
    assert journal.getRaftCommitIndex() == 3
    journal.onOneSecondTimer()
    journal.abandon()
    assert DurableJournal(tmp_path).getRaftCommitIndex() == 3


def test_sync_fsyncs_only_pending_entries(tmp_path: Path) -> None:
    fsyncs = FsyncLog()
    journal = DurableJournal(tmp_path, fsync=fsyncs)
    fill(journal, 2)
    assert journal.synced_size < journal.size
    calls = fsyncs.calls
    journal.sync()
    assert fsyncs.calls == calls + 1 and journal.synced_size == journal.size
    journal.sync()
    assert fsyncs.calls == calls + 1


def test_truncation_outside_a_message_is_immediate(tmp_path: Path) -> None:
    journal = DurableJournal(tmp_path)
    fill(journal, 5)
    journal.deleteEntriesFrom(2)
    assert len(journal) == 2 and journal.synced_size == journal.size
    journal.abandon()
    assert len(DurableJournal(tmp_path)) == 2


def test_entries_matching_the_leader_are_kept(tmp_path: Path) -> None:
    # pysyncobj drops everything after prevLogIdx and re-adds the message's entries;
    # a stale message must not cost the follower the entries after those.
    journal = DurableJournal(tmp_path)
    fill(journal, 5)
    journal.sync()
    size = journal.size
    journal.begin_message()
    journal.deleteEntriesFrom(2)  # entries 3, 4, 5 hidden
    assert len(journal) == 2
    journal.add(b"command-3", 3, 1)  # the same entry: brought back without writing
    assert len(journal) == 3
    journal.sync()
    journal.end_message()
    assert len(journal) == 5 and journal.size == size
    journal.abandon()
    assert len(DurableJournal(tmp_path)) == 5


def test_a_conflicting_entry_truncates_for_good(tmp_path: Path) -> None:
    journal = DurableJournal(tmp_path)
    fill(journal, 5)
    journal.sync()
    journal.begin_message()
    journal.deleteEntriesFrom(2)
    journal.add(b"command-3", 3, 1)
    journal.add(b"new leader", 4, 2)  # conflicts with entry 4 of term 1
    journal.end_message()
    assert [journal[i][1:] for i in range(len(journal))] == [(1, 1), (2, 1), (3, 1), (4, 2)]
    journal.close()
    again = DurableJournal(tmp_path)
    assert again[-1] == (b"new leader", 4, 2) and len(again) == 4


def test_compaction_keeps_the_tail_and_makes_the_snapshot_durable(tmp_path: Path) -> None:
    fsyncs = FsyncLog()
    snapshot = tmp_path / "raft.snapshot"
    write_snapshot_file(snapshot, MetadataImage(), 0, (b"command-6", 6, 1), (b"command-5", 5, 1), [])
    journal = DurableJournal(tmp_path, snapshot_path=snapshot, fsync=fsyncs)
    fill(journal, 6)
    calls = fsyncs.calls
    journal.deleteEntriesTo(4)
    assert fsyncs.calls >= calls + 3  # snapshot, its directory, the new journal (and its directory)
    assert [journal[i][1] for i in range(len(journal))] == [5, 6]
    journal.add(b"command-7", 7, 1)
    journal.close()
    assert [e[1] for e in DurableJournal(tmp_path)[0:]] == [5, 6, 7]  # type: ignore[union-attr]


def test_compaction_never_drops_what_the_snapshot_does_not_cover(tmp_path: Path) -> None:
    # pysyncobj asks to compact up to the snapshot it wrote on the previous tick; if a
    # leader's older snapshot replaced it (and the journal) meanwhile, nothing may go.
    snapshot = tmp_path / "raft.snapshot"
    write_snapshot_file(snapshot, MetadataImage(), 0, (b"command-2", 2, 1), (b"command-1", 1, 1), [])
    journal = DurableJournal(tmp_path, snapshot_path=snapshot)
    fill(journal, 3)
    journal.deleteEntriesTo(38)
    journal.deleteEntriesTo(2)
    assert len(journal) == 3
    journal.deleteEntriesTo(0)
    assert len(journal) == 3


def test_clear_then_add_starts_anywhere(tmp_path: Path) -> None:
    journal = DurableJournal(tmp_path)
    fill(journal, 3)
    journal.clear()
    assert len(journal) == 0
    journal.add(b"prev", 40, 3)
    journal.add(b"last", 41, 3)
    journal.close()
    assert DurableJournal(tmp_path)[0] == (b"prev", 40, 3)


def test_entries_must_follow_each_other(tmp_path: Path) -> None:
    journal = DurableJournal(tmp_path)
    fill(journal, 2, term=2)
    with pytest.raises(ValueError):
        journal.add(b"gap", 4, 2)
    with pytest.raises(ValueError):
        journal.add(b"older term", 3, 1)
