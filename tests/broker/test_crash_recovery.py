"""A real broker killed with SIGKILL while holding many partitions of unflushed records:
it recovers them in its recovery threads, cuts a torn write, keeps every whole record,
and takes and serves records again."""

from __future__ import annotations

from pathlib import Path

from tests.broker.broker_process import BrokerProcess
from tests.broker.scale_clients import create_topics, produce_one_each, read_all

TOPICS = [f"crash-{i}" for i in range(10)]
PARTITIONS = 100


def test_kill9_with_nothing_flushed_recovers_every_partition_and_cuts_a_torn_tail(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(data, {"num.recovery.threads.per.data.dir": "2"}).start()
    try:
        assert create_topics(broker.bootstrap, TOPICS, PARTITIONS) == dict.fromkeys(TOPICS)
        assert produce_one_each(broker.bootstrap, TOPICS, PARTITIONS, "first") == {}
        broker.kill9()  # nothing was ever flushed: every partition's recovery point is 0
        # A crash in the middle of an append leaves part of a batch at the end of a log.
        torn = data / "crash-3-7" / "00000000000000000000.log"
        whole = torn.stat().st_size
        with torn.open("ab") as f:
            f.write(bytes(range(40)))
        broker.start(timeout=120)
        assert torn.stat().st_size == whole
        got = read_all(broker.bootstrap, TOPICS, PARTITIONS, expected=len(TOPICS) * PARTITIONS)
        assert len(got) == len(TOPICS) * PARTITIONS
        assert all([m.split()[0] for m in v] == [b"first"] for v in got.values())
        assert produce_one_each(broker.bootstrap, TOPICS, PARTITIONS, "second") == {}
        broker.kill9()
        broker.start(timeout=120)
        got = read_all(broker.bootstrap, TOPICS, PARTITIONS, expected=2 * len(TOPICS) * PARTITIONS)
        assert len(got) == len(TOPICS) * PARTITIONS
        assert all([m.split()[0] for m in v] == [b"first", b"second"] for v in got.values())
        logs = broker.logs()
        assert "segment_truncated_in_recovery" in logs
        assert logs.count("log_dir_loaded") >= 3  # three starts, one summary line each
    finally:
        broker.kill9()
