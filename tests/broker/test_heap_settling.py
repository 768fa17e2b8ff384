"""Replicas created in bulk are frozen out of the garbage collector's reach (settle_heap), so
no periodic full collection walks them; when their topic is deleted they must still be freed,
which frozen reference cycles never are."""

from __future__ import annotations

import gc
import time
import weakref
from pathlib import Path

import trio

from broker.node import SETTLE_AFTER_NEW_REPLICAS, BrokerNode
from config import load_config
from controller.service import TopicRequest

PARTITIONS = SETTLE_AFTER_NEW_REPLICAS + 200


def test_the_logs_of_a_deleted_topic_created_in_bulk_are_freed(tmp_path: Path) -> None:
    data = tmp_path / "data"
    config, _ = load_config(None, [
        "listeners=PLAINTEXT://127.0.0.1:0", f"log.dirs={data}", "metrics.listener=",
        # the deleted logs' files are removed (and the logs dropped) within a second
        "log.segment.delete.delay.ms=100", "log.retention.check.interval.ms=200"])
    alive: list[int] = []
    frozen: list[int] = []

    async def main() -> None:
        node = BrokerNode(config)
        async with trio.open_nursery() as nursery:
            with trio.fail_after(60):
                await nursery.start(node.run)
                frozen_before = gc.get_freeze_count()
                await node.controller.create_topics([TopicRequest("bulk", PARTITIONS, 1)])
                while sum(1 for name, _ in node.replica_manager.partitions if name == "bulk") < PARTITIONS:
                    await trio.sleep(0.05)
                await trio.sleep(0.5)  # the publisher that settles runs after the replicas are made
                frozen.append(gc.get_freeze_count() - frozen_before)
                logs = [weakref.ref(p.log) for (name, _), p in node.replica_manager.partitions.items()
                        if name == "bulk"]
                await node.controller.delete_topics(["bulk"])
                deadline = time.monotonic() + 30
                while any(child.name.startswith("bulk-") for child in data.iterdir()) and time.monotonic() < deadline:
                    await trio.sleep(0.1)
                await trio.sleep(0.3)
                gc.collect()  # walks what is not frozen; frozen cycles stay
                alive.append(sum(1 for ref in logs if ref() is not None))
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        gc.unfreeze()  # this test process's heap is not the broker's to keep frozen
    assert frozen and frozen[0] > 0, "the replicas created in bulk were not frozen"
    assert not any(child.name.startswith("bulk-") for child in data.iterdir())
    assert alive == [0], f"{alive[0]} of {PARTITIONS} deleted partition logs are still alive"
