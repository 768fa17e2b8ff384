"""Deleting a topic has the log directory's checkpoints rewritten at once: the broker hands
the fsyncs to its checkpoint task's worker thread (tests/broker/log/test_manager.py shows the
caller no longer does them) and wakes it, so the deleted partitions leave the recovery-point
checkpoint within seconds, not at the task's interval (10 minutes here)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker.log.checkpoint import OffsetCheckpointFile
from tests.broker.broker_process import BrokerProcess

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

TIMEOUT_S = 20
#: The checkpoint task's interval, far longer than the test waits for a deletion's round.
INTERVAL_MS = 600_000


@pytest.fixture()
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", {
        "replica.high.watermark.checkpoint.interval.ms": str(INTERVAL_MS),
        "log.flush.offset.checkpoint.interval.ms": str(INTERVAL_MS),
    }).start()
    try:
        yield b
    finally:
        b.stop()


def checkpointed_topics(data_dir: Path) -> set[str]:
    path = data_dir / "recovery-point-offset-checkpoint"
    return {tp.topic for tp in OffsetCheckpointFile(path).read()} if path.exists() else set()


def wait_for(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} not within {TIMEOUT_S}s")


def delete(admin: AdminClient, topic: str) -> None:
    admin.delete_topics([topic], request_timeout=TIMEOUT_S)[topic].result(TIMEOUT_S)


def test_a_deleted_topic_leaves_the_checkpoint_at_once(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(t, 2, 1) for t in ("kept", "doomed", "first")]).values():
        future.result(TIMEOUT_S)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for topic in ("kept", "doomed"):
        producer.produce(topic, b"v")
    assert producer.flush(TIMEOUT_S) == 0
    # A first deletion runs a round that checkpoints the logs there are.
    delete(admin, "first")
    wait_for(lambda: checkpointed_topics(broker.data_dir) == {"kept", "doomed"},
             "the checkpoint round after the first deletion")
    delete(admin, "doomed")
    wait_for(lambda: checkpointed_topics(broker.data_dir) == {"kept"}, "the deleted topic leaving the checkpoint")
