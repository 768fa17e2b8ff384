"""Offset checkpoint files: Kafka's text format, atomic replacement, strict parsing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.log.checkpoint import OffsetCheckpointFile
from broker.log.errors import CheckpointError
from broker.log.files import TopicPartition


def test_writes_kafka_format(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    OffsetCheckpointFile(path).write({TopicPartition("b", 1): 42, TopicPartition("a-b.c_d", 0): 7})
    assert path.read_text() == "0\n2\na-b.c_d 0 7\nb 1 42\n"


def test_missing_file_reads_empty(tmp_path: Path) -> None:
    assert OffsetCheckpointFile(tmp_path / "nope").read() == {}


topics = st.text(alphabet="abcxyz._-0189", min_size=1, max_size=20)


@settings(max_examples=50, deadline=None)
@given(
    st.dictionaries(
        st.tuples(topics, st.integers(0, 10_000)), st.integers(-1, 2**63 - 1), max_size=20
    )
)
def test_round_trip(
    tmp_path_factory: pytest.TempPathFactory, raw: dict[tuple[str, int], int]
) -> None:
    offsets = {TopicPartition(t, p): o for (t, p), o in raw.items()}
    path = tmp_path_factory.mktemp("cp") / "log-start-offset-checkpoint"
    checkpoint = OffsetCheckpointFile(path)
    checkpoint.write(offsets)
    assert checkpoint.read() == offsets


def test_replace_is_atomic_and_leaves_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    checkpoint = OffsetCheckpointFile(path)
    checkpoint.write({TopicPartition("t", 0): 1})
    inode = path.stat().st_ino
    checkpoint.write({TopicPartition("t", 0): 2})
    assert checkpoint.read() == {TopicPartition("t", 0): 2}
    # A new file renamed over the old one, never the old one rewritten in place.
    assert path.stat().st_ino != inode
    assert sorted(os.listdir(tmp_path)) == ["replication-offset-checkpoint"]


def test_stale_temp_file_is_ignored_and_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    (tmp_path / "cp.tmp").write_text("garbage from a crash mid-write")
    OffsetCheckpointFile(path).write({TopicPartition("t", 3): 9})
    assert OffsetCheckpointFile(path).read() == {TopicPartition("t", 3): 9}


@pytest.mark.parametrize(
    "content",
    [
        "",
        "0\n",
        "1\n1\nt 0 5\n",  # unknown version
        "0\nx\n",
        "0\n2\nt 0 5\n",  # fewer entries than announced
        "0\n1\nt 0 5\nu 0 6\n",  # more
        "0\n1\nt 0\n",  # missing field
        "0\n1\nt zero 5\n",
        "0\n1\nt 0 5.5\n",
        "0\n1\nt -1 5\n",
        "0\n2\nt 0 5\nt 0 6\n",  # duplicate partition
        "0\n1\nt 0 5\nt 0 6\n",  # a duplicate that makes up the announced count
        "0\n1\nt \u0660 5\n",  # a digit, not an ASCII one
        "0\n1\nt 0 1_000\n",
    ],
)
def test_malformed_files_are_rejected(tmp_path: Path, content: str) -> None:
    path = tmp_path / "cp"
    path.write_text(content)
    with pytest.raises(CheckpointError):
        OffsetCheckpointFile(path).read()


def test_a_checkpoint_not_written_by_us_reads_as_before(tmp_path: Path) -> None:
    """Other whitespace and line ends than write()'s are read field by field, as before."""
    path = tmp_path / "cp"
    path.write_text("0\n3\nt 0 5\r\nu  1 -1\nv 007 -0")
    expected = {("t", 0): 5, ("u", 1): -1, ("v", 7): 0}
    assert OffsetCheckpointFile(path).read_entries() == expected
    assert OffsetCheckpointFile(path).read() == {TopicPartition(t, p): o for (t, p), o in expected.items()}


def test_many_entries_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    offsets = {TopicPartition(f"topic.{i // 100}_x-y", i % 100): i * 7 - 3 for i in range(2_000)}
    OffsetCheckpointFile(path).write(offsets)
    assert OffsetCheckpointFile(path).read() == offsets
    assert OffsetCheckpointFile(path).read_entries() == {(tp.topic, tp.partition): o for tp, o in offsets.items()}


def test_topic_with_whitespace_cannot_be_written(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        OffsetCheckpointFile(tmp_path / "cp").write({TopicPartition("a b", 0): 1})


def test_two_writers_of_one_checkpoint_never_collide(tmp_path: Path) -> None:
    """The periodic checkpoint (a worker thread) and a follower's truncation (the event loop)
    write the same file at the same time: neither may fail, and the file is always one of the
    two, whole (they once shared the ``.tmp`` file, and one found it renamed away)."""
    import threading

    path = tmp_path / "recovery-point-offset-checkpoint"
    contents = [{TopicPartition("t", p): p * 1000 + who for p in range(200)} for who in range(2)]
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def write(offsets: dict[TopicPartition, int]) -> None:
        start.wait()
        try:
            for _ in range(300):
                OffsetCheckpointFile(path).write(offsets)
        except Exception as ex:  # reported by the test thread
            errors.append(ex)

    threads = [threading.Thread(target=write, args=(offsets,)) for offsets in contents]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[:1]
    assert OffsetCheckpointFile(path).read() in contents
