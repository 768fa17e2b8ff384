"""CoordinatorRuntime on a real log under Trio's MockClock: load, append, timers, unload.

The group shard is the coordinator under test; the runtime's contract (acks after
the high watermark, replay on load, timers on Trio's clock, NOT_COORDINATOR after
leadership moves) is what the transaction coordinator will rely on too.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import trio
import trio.testing

from broker.coordinator.runtime import CoordinatorRuntime, InternalTopic
from broker.group.group import JoinResult
from broker.group.records import OffsetAndMetadata
from broker.group.shard import GroupShard
from broker.group.shard_types import GroupConfig, JoinRequest
from broker.log.config import LogConfig
from broker.log.manager import LogManager
from broker.replication.replica_manager import ReplicaManager
from controller.image import BrokerImage, Endpoint, MetadataImage, PartitionImage, TopicImage
from controller.service import CreateTopicResult, TopicRequest
from tests.broker.group.fake import subscription
from wire.errors import ErrorCode

TOPIC = "__consumer_offsets"
TOPIC_ID = uuid.UUID(int=42)
PARTITIONS = 3


def image(leader: int = 1, epoch: int = 0) -> MetadataImage:
    parts = {p: PartitionImage(TOPIC_ID, p, (1,), (1,), leader, epoch, epoch) for p in range(PARTITIONS)}
    return MetadataImage(
        topics_by_id={TOPIC_ID: TopicImage(TOPIC, TOPIC_ID, parts)},
        topic_ids={TOPIC: TOPIC_ID},
        brokers={1: BrokerImage(1, 0, uuid.UUID(int=1), (Endpoint("PLAINTEXT", "h", 9092),), None, False)},
    )


class World:
    """A log directory with ``__consumer_offsets`` and a runtime on top (one "broker run")."""

    def __init__(self, tmp: Path, clock_ms: Callable[[], int]) -> None:
        self.log_manager = LogManager([tmp], LogConfig(), clock_ms)
        self.rm = ReplicaManager(1, self.log_manager, lambda _image, _topic: LogConfig(), {})
        self.rm.apply_image(image())

        async def no_create(_: InternalTopic) -> None:
            raise AssertionError("the topic exists")

        self.runtime: CoordinatorRuntime[GroupShard] = CoordinatorRuntime(
            name="group", node_id=1, topic=InternalTopic(TOPIC, PARTITIONS, 1, {}), image=image(),
            replica_manager=self.rm,
            shard_factory=lambda ctx: GroupShard(ctx, GroupConfig(initial_rebalance_delay_ms=0)),
            create_topic=no_create, clock_ms=clock_ms, rng=random.Random(1), append_timeout_ms=5000)

    def close(self) -> None:
        self.log_manager.close(0)


async def answer(start: Callable[[Callable[[object], None]], None]) -> object:
    box: list[object] = []
    done = trio.Event()

    def callback(value: object) -> None:
        box.append(value)
        done.set()

    start(callback)
    with trio.fail_after(60):
        await done.wait()
    return box[0]


async def until(check: Callable[[], bool]) -> None:
    with trio.fail_after(60):
        while not check():
            await trio.sleep(0.01)


def run(test: Callable[[], Awaitable[None]]) -> None:
    trio.run(test, clock=trio.testing.MockClock(autojump_threshold=0))


def join_request(member_id: str = "") -> JoinRequest:
    return JoinRequest("g", member_id, None, False, False, "c", "/127.0.0.1", 30_000, 10_000, "consumer",
                       [("range", subscription("t"))])


def test_commits_are_acknowledged_after_the_high_watermark_and_survive_a_reload(tmp_path: Path) -> None:
    async def main() -> None:
        now = [1_700_000_000_000]
        world = World(tmp_path, lambda: now[0])
        async with trio.open_nursery() as nursery:
            await nursery.start(world.runtime.run)
            world.runtime.on_image(image())
            await until(lambda: world.runtime.shard_for("g")[0] is ErrorCode.NONE)
            _, shard = world.runtime.shard_for("g")
            assert shard is not None
            result = await answer(lambda cb: shard.commit_offsets(
                "g", "", None, -1, {("t", 0): OffsetAndMetadata(7, 2, "meta", now[0])}, cb))
            assert result == {("t", 0): ErrorCode.NONE}
            p = world.rm.get(TOPIC, world.runtime.partition_for("g"))
            assert p is not None and p.high_watermark == p.log_end_offset == 1
            nursery.cancel_scope.cancel()
        world.close()

        again = World(tmp_path, lambda: now[0])
        async with trio.open_nursery() as nursery:
            await nursery.start(again.runtime.run)
            again.runtime.on_image(image())
            await until(lambda: again.runtime.shard_for("g")[0] is ErrorCode.NONE)
            _, shard = again.runtime.shard_for("g")
            assert shard is not None
            got = shard.fetch_offsets("g", [("t", 0)], False)[("t", 0)]
            assert (got.offset, got.leader_epoch, got.metadata) == (7, 2, "meta")
            nursery.cancel_scope.cancel()
        again.close()

    run(main)


def test_timers_run_on_trios_clock_and_leadership_loss_unloads(tmp_path: Path) -> None:
    async def main() -> None:
        world = World(tmp_path, lambda: 1_700_000_000_000)
        async with trio.open_nursery() as nursery:
            await nursery.start(world.runtime.run)
            world.runtime.on_image(image())
            await until(lambda: world.runtime.shard_for("g")[0] is ErrorCode.NONE)
            _, shard = world.runtime.shard_for("g")
            assert shard is not None
            started = trio.current_time()
            joined = await answer(lambda cb: shard.join_group(join_request(), cb))
            assert isinstance(joined, JoinResult) and joined.generation_id == 1
            # Nobody syncs: the member's session (10 s) expires on Trio's clock.
            group = shard.groups["g"]
            await until(lambda: not group.has(joined.member_id))
            assert 9.9 <= trio.current_time() - started <= 10.5

            # A new member waits for the (initial) rebalance; then another broker takes over.
            waiting: list[object] = []
            shard.join_group(join_request(), waiting.append)
            assert waiting == []
            moved = image(leader=2, epoch=1)
            world.rm.apply_image(moved)
            world.runtime.on_image(moved)
            assert world.runtime.shard_for("g")[0] is ErrorCode.NOT_COORDINATOR
            [answered] = waiting
            assert isinstance(answered, JoinResult) and answered.error is ErrorCode.NOT_COORDINATOR
            nursery.cancel_scope.cancel()
        world.close()

    run(main)


def test_loading_is_reported_until_replay_ends(tmp_path: Path) -> None:
    async def main() -> None:
        world = World(tmp_path, lambda: 1_700_000_000_000)
        world.runtime.on_image(image())  # before the runtime runs: loads are queued
        assert world.runtime.shard_for("g")[0] is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        assert world.runtime.is_loading()
        async with trio.open_nursery() as nursery:
            await nursery.start(world.runtime.run)
            await until(lambda: not world.runtime.is_loading())
            assert len(world.runtime.active_shards()) == PARTITIONS
            nursery.cancel_scope.cancel()
        world.close()

    run(main)


def test_the_facade_checks_group_status_like_kafka(tmp_path: Path) -> None:
    """validateGroupStatus: invalid id, then not active, then loading, then not coordinator;
    while loading a Heartbeat is answered NONE and a SyncGroup REBALANCE_IN_PROGRESS."""
    from broker.group.coordinator import GroupCoordinator
    from broker.group.shard_types import SyncRequest
    from config import build_config

    async def main() -> None:
        config, _ = build_config({"offsets.topic.num.partitions": str(PARTITIONS)})
        world = World(tmp_path, lambda: 1_700_000_000_000)
        current = image()

        class OffsetsTopicExists:
            async def create_topics(self, requests: Sequence[TopicRequest],
                                    validate_only: bool = False) -> list[CreateTopicResult]:
                raise AssertionError("the image has __consumer_offsets: nothing is created")

        coordinator = GroupCoordinator(config, 1, lambda: current, world.rm, OffsetsTopicExists(),
                                       world.runtime.clock_ms, random.Random(3), object())
        assert coordinator.heartbeat("", "m", None, 1) is ErrorCode.INVALID_GROUP_ID
        assert coordinator.heartbeat("g", "m", None, 1) is ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert coordinator.fetch_offsets("", None, False) == (ErrorCode.COORDINATOR_NOT_AVAILABLE, {})
        async with trio.open_nursery() as nursery:
            await nursery.start(coordinator.run)
            coordinator.on_image(image())
            assert coordinator.runtime.is_loading()
            assert coordinator.heartbeat("g", "m", None, 1) is ErrorCode.NONE
            sync = await coordinator.sync_group(SyncRequest("g", 1, "m", None, None, None))
            assert sync.error is ErrorCode.REBALANCE_IN_PROGRESS
            assert (await coordinator.join_group(join_request())).error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            assert coordinator.list_groups(set(), set())[0] is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            await until(lambda: not coordinator.runtime.is_loading())
            assert coordinator.heartbeat("g", "m", None, 1) is ErrorCode.UNKNOWN_MEMBER_ID
            joined = await coordinator.join_group(join_request())
            assert joined.error is ErrorCode.NONE and joined.generation_id == 1
            moved = image(leader=2, epoch=1)
            world.rm.apply_image(moved)
            coordinator.on_image(moved)
            assert coordinator.heartbeat("g", joined.member_id, None, 1) is ErrorCode.NOT_COORDINATOR
            coordinator.close()
            assert coordinator.heartbeat("g", "m", None, 1) is ErrorCode.COORDINATOR_NOT_AVAILABLE
            nursery.cancel_scope.cancel()
        world.close()

    run(main)
