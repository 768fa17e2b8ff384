"""The checkpoint task makes a follower's truncation durable off the event loop, and a fetcher
awaiting it appends only after a round that started after the truncation has rewritten the
recovery points (one already under way may have read them before)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

import trio

from broker.log.checkpoint import OffsetCheckpointFile
from broker.log.config import LogConfig
from broker.log.files import TopicPartition
from broker.log.manager import LogManager
from broker.observability.metrics import DisabledMetrics
from broker.replication.checkpoint_task import CheckpointTask
from broker.replication.replica_manager import ReplicaManager
from controller.image import BrokerImage, Endpoint, MetadataImage, PartitionImage, TopicImage
from tests.broker.log.helpers import make_batch

TOPIC = "t"
TOPIC_ID = uuid.UUID(int=7)


def image() -> MetadataImage:
    parts = {0: PartitionImage(TOPIC_ID, 0, (1, 2), (1, 2), 1, 3, 3)}
    return MetadataImage(
        topics_by_id={TOPIC_ID: TopicImage(TOPIC, TOPIC_ID, parts)},
        topic_ids={TOPIC: TOPIC_ID},
        brokers={n: BrokerImage(n, 0, uuid.UUID(int=n), (Endpoint("PLAINTEXT", "127.0.0.1", 1),), None, False)
                 for n in (1, 2)},
    )


class HeldRounds:
    """Holds each checkpoint round in its worker thread until the test lets it go."""

    def __init__(self, logs: LogManager) -> None:
        self.write = logs.write_high_watermarks
        self.entered = [threading.Event() for _ in range(8)]
        self.release = [threading.Event() for _ in range(8)]
        self.rounds = 0

    def __call__(self, high_watermarks: Mapping[TopicPartition, int]) -> None:
        n = self.rounds
        self.rounds += 1
        self.entered[n].set()
        self.release[n].wait(10)
        self.write(high_watermarks)


async def entered(event: threading.Event) -> None:
    deadline = time.monotonic() + 10
    while not event.is_set():
        assert time.monotonic() < deadline, "the round did not start"
        await trio.sleep(0.01)


def test_a_truncation_is_durable_after_a_round_that_started_after_it(tmp_path: Path) -> None:
    async def main() -> None:
        logs = LogManager([tmp_path], LogConfig(), lambda: int(time.time() * 1000))
        held = HeldRounds(logs)
        try:
            rm = ReplicaManager(2, logs, lambda _image, _topic: LogConfig(), {})
            rm.apply_image(image())
            task = CheckpointTask(logs, rm, DisabledMetrics(), 600.0, lambda: int(time.time() * 1000))
            logs.request_checkpoint = task.request
            log = logs.get_or_create(TOPIC, 0)
            for _ in range(40):
                log.append_as_leader(make_batch(2), 3)
            log.flush()
            logs.checkpoint_all()
            checkpoint = tmp_path / "recovery-point-offset-checkpoint"
            assert OffsetCheckpointFile(checkpoint).read() == {TopicPartition(TOPIC, 0): 80}
            logs.write_high_watermarks = held  # type: ignore[method-assign]
            async with trio.open_nursery() as nursery:
                nursery.start_soon(task.run)
                with trio.fail_after(1):
                    await task.durable()  # nothing truncated: at once
                task.request()
                await entered(held.entered[0])  # a round under way ...
                assert logs.truncate_to(TOPIC, 0, 30)  # ... when the follower truncates
                task.truncated()
                done = trio.Event()

                async def follower() -> None:
                    await task.durable()
                    done.set()

                nursery.start_soon(follower)
                held.release[0].set()
                await entered(held.entered[1])  # the round after it
                assert not done.is_set()
                held.release[1].set()
                with trio.fail_after(10):
                    await done.wait()
                assert OffsetCheckpointFile(checkpoint).read() == {TopicPartition(TOPIC, 0): 30}
                nursery.cancel_scope.cancel()
        finally:
            for event in held.release:
                event.set()
            logs.close(0)

    trio.run(main)
