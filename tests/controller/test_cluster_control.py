"""The active controller's broker lifecycle: registration, heartbeats, fencing on session
expiry, leader elections from the ISR (unclean or not), controlled shutdown, AlterPartition
and AllocateProducerIds — on the one-voter quorum, with a fake clock."""

from __future__ import annotations

import random
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from controller.apis import ClusterControl, HeartbeatReply, IsrChange, Registration
from controller.features import FEATURES, GROUP_VERSION, level
from controller.image import Endpoint
from controller.quorum import LocalQuorum
from controller.service import Controller, ControllerSettings, TopicRequest
from wire.errors import ErrorCode

CLUSTER_ID = "test-cluster"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def setup(tmp_path: Path, unclean: bool = False) -> tuple[ClusterControl, Controller, LocalQuorum, Clock]:
    quorum = LocalQuorum(1, tmp_path)
    controller = Controller(1, quorum, ControllerSettings(1, 1, unclean), random.Random(5))
    clock = Clock()
    control = ClusterControl(controller, CLUSTER_ID, session_timeout_s=9.0, clock=clock)
    control.activate(1)
    return control, controller, quorum, clock


def registration(broker_id: int, incarnation: int | None = None) -> Registration:
    return Registration(broker_id, CLUSTER_ID, uuid.UUID(int=incarnation or broker_id),
                        (Endpoint("PLAINTEXT", "127.0.0.1", 9000 + broker_id),), None)


async def join(control: ClusterControl, controller: Controller, broker_ids: list[int]) -> dict[int, int]:
    epochs = {}
    for broker_id in broker_ids:
        code, epoch = await control.register(registration(broker_id))
        assert code == ErrorCode.NONE and controller.image.brokers[broker_id].fenced
        epochs[broker_id] = epoch
    for broker_id, epoch in epochs.items():
        reply = await control.heartbeat(broker_id, epoch, controller.image.offset, False, False)
        assert reply == HeartbeatReply(is_caught_up=True, is_fenced=False)
    return epochs


def run(test: Callable[[], Awaitable[None]]) -> None:
    trio.run(test)


def test_a_broker_is_unfenced_once_caught_up(tmp_path: Path) -> None:
    async def main() -> None:
        control, controller, quorum, _ = setup(tmp_path)
        await controller.bootstrap()
        code, epoch = await control.register(registration(1))
        assert code == ErrorCode.NONE and epoch == controller.image.brokers[1].epoch
        behind = await control.heartbeat(1, epoch, epoch - 1, False, False)
        assert behind == HeartbeatReply(is_caught_up=False, is_fenced=True)
        caught_up = await control.heartbeat(1, epoch, epoch, False, False)
        assert caught_up == HeartbeatReply(is_caught_up=True, is_fenced=False)
        assert (await control.heartbeat(1, epoch + 7, epoch, False, False)).error == ErrorCode.STALE_BROKER_EPOCH
        assert (await control.heartbeat(9, 0, 0, False, False)).error == ErrorCode.BROKER_ID_NOT_REGISTERED
        # A retried registration (same incarnation) gets the same epoch.
        assert await control.register(registration(1)) == (ErrorCode.NONE, epoch)
        other = Registration(2, "another-cluster", uuid.uuid4(), (), None)
        assert (await control.register(other))[0] == ErrorCode.INCONSISTENT_CLUSTER_ID
        quorum.close()

    run(main)


def test_session_expiry_fences_and_moves_leaders_within_the_isr(tmp_path: Path) -> None:
    async def main() -> None:
        control, controller, quorum, clock = setup(tmp_path)
        epochs = await join(control, controller, [1, 2, 3])
        await controller.create_topics([TopicRequest("t", assignments={0: [1, 2, 3]}),
                                        TopicRequest("u", assignments={0: [2, 1]}),
                                        TopicRequest("v", assignments={0: [1]})])

        def part(name: str) -> tuple[int, tuple[int, ...], int]:
            topic = controller.image.topic(name)
            assert topic is not None
            p = topic.partitions[0]
            return p.leader, p.isr, p.leader_epoch

        assert part("t") == (1, (1, 2, 3), 0)
        clock.now += 5.0
        for broker_id in (2, 3):
            await control.heartbeat(broker_id, epochs[broker_id], controller.image.offset, False, False)
        clock.now += 5.0  # broker 1 has been silent for 10 s > 9 s
        await control._expire_sessions()
        image = controller.image
        assert image.brokers[1].fenced and not image.brokers[2].fenced
        assert part("t") == (2, (2, 3), 1)
        assert part("u")[:2] == (2, (2,))
        # The last in-sync replica is gone: no leader, and it stays in the ISR.
        assert part("v")[:2] == (-1, (1,))
        # It comes back (re-registers, catches up): it leads its partition again.
        code, epoch = await control.register(registration(1, incarnation=11))
        assert code == ErrorCode.NONE
        await control.heartbeat(1, epoch, controller.image.offset, False, False)
        assert part("v")[:2] == (1, (1,))
        assert part("t")[0] == 2  # broker 1 rejoins this ISR only once its leader reports it caught up
        quorum.close()

    run(main)


def test_unclean_election_picks_a_live_replica(tmp_path: Path) -> None:
    async def main() -> None:
        control, controller, quorum, _ = setup(tmp_path, unclean=False)
        epochs = await join(control, controller, [1, 2])
        await controller.create_topics([TopicRequest("clean", assignments={0: [1, 2]}),
                                        TopicRequest("dirty", assignments={0: [1, 2]},
                                                     configs={"unclean.leader.election.enable": "true"})])
        # The ISR shrinks to the leader alone, then the leader dies.
        for name in ("clean", "dirty"):
            topic = controller.image.topic(name)
            assert topic is not None
            part = topic.partitions[0]
            change = IsrChange(topic.topic_id, None, 0, part.leader_epoch, part.partition_epoch, (1,))
            code, results = await control.alter_partition(1, epochs[1], [change], 2)
            assert code == ErrorCode.NONE and results[0].error == ErrorCode.NONE
            assert results[0].isr == (1,) and results[0].partition_epoch == part.partition_epoch + 1
        await control.heartbeat(1, epochs[1], controller.image.offset, False, want_shut_down=True)
        clean, dirty = controller.image.topic("clean"), controller.image.topic("dirty")
        assert clean is not None and dirty is not None
        assert clean.partitions[0].leader == -1
        assert (dirty.partitions[0].leader, dirty.partitions[0].isr) == (2, (2,))
        assert controller.image.topic_config("dirty") == {"unclean.leader.election.enable": "true"}
        quorum.close()

    run(main)


def test_controlled_shutdown_and_duplicate_registration(tmp_path: Path) -> None:
    async def main() -> None:
        control, controller, quorum, clock = setup(tmp_path)
        epochs = await join(control, controller, [1, 2])
        await controller.create_topics([TopicRequest("t", assignments={0: [1, 2]})])
        # Another process with broker 1's id, while broker 1's session is alive.
        assert (await control.register(registration(1, incarnation=99)))[0] == ErrorCode.DUPLICATE_BROKER_REGISTRATION
        reply = await control.heartbeat(1, epochs[1], controller.image.offset, False, want_shut_down=True)
        assert reply.should_shut_down and reply.is_fenced
        topic = controller.image.topic("t")
        assert topic is not None and topic.partitions[0].leader == 2
        # After a controlled shutdown the id is free at once.
        assert (await control.register(registration(1, incarnation=99)))[0] == ErrorCode.NONE
        clock.now += 1
        quorum.close()

    run(main)


def test_an_unclean_restart_is_fenced_at_registration(tmp_path: Path) -> None:
    async def main() -> None:
        control, controller, quorum, clock = setup(tmp_path)
        await join(control, controller, [1, 2])
        await controller.create_topics([TopicRequest("t", assignments={0: [1, 2]})])
        clock.now += 10.0  # the old incarnation's session expired unnoticed
        code, _ = await control.register(registration(1, incarnation=42))
        assert code == ErrorCode.NONE
        topic = controller.image.topic("t")
        assert topic is not None
        assert (topic.partitions[0].leader, topic.partitions[0].isr) == (2, (2,))
        assert controller.image.brokers[1].fenced
        quorum.close()

    run(main)


def test_alter_partition_is_guarded_by_epochs(tmp_path: Path) -> None:
    async def main() -> None:
        control, controller, quorum, _ = setup(tmp_path)
        epochs = await join(control, controller, [1, 2, 3])
        await controller.create_topics([TopicRequest("t", assignments={0: [1, 2, 3]})])
        topic = controller.image.topic("t")
        assert topic is not None
        p = topic.partitions[0]

        async def alter(broker: int, isr: tuple[int, ...], leader_epoch: int = p.leader_epoch,
                        partition_epoch: int = p.partition_epoch, version: int = 2,
                        topic_id: uuid.UUID | None = topic.topic_id) -> ErrorCode:
            change = IsrChange(topic_id, None if topic_id else "t", 0, leader_epoch, partition_epoch, isr)
            code, results = await control.alter_partition(broker, epochs[broker], [change], version)
            assert code == ErrorCode.NONE
            return results[0].error

        assert await alter(2, (1, 2)) == ErrorCode.INVALID_REQUEST  # not the leader
        assert await alter(1, (1, 2), leader_epoch=p.leader_epoch - 1) == ErrorCode.FENCED_LEADER_EPOCH
        assert await alter(1, (1, 2), leader_epoch=p.leader_epoch + 1) == ErrorCode.NOT_CONTROLLER
        assert await alter(1, (1, 2), partition_epoch=p.partition_epoch + 3) == ErrorCode.INVALID_UPDATE_VERSION
        assert await alter(1, (2, 3)) == ErrorCode.INVALID_REQUEST  # leader missing
        assert await alter(1, (1, 4)) == ErrorCode.INVALID_REQUEST  # not a replica
        assert await alter(1, (1, 2), topic_id=uuid.UUID(int=7)) == ErrorCode.UNKNOWN_TOPIC_ID
        assert await alter(1, (1, 2), topic_id=None, version=1) == ErrorCode.NONE  # by name
        topic = controller.image.topic("t")
        assert topic is not None and topic.partitions[0].isr == (1, 2)
        # A fenced broker cannot join the ISR.
        await control.heartbeat(3, epochs[3], 0, want_fence=True, want_shut_down=False)
        p2 = topic.partitions[0]
        assert await alter(1, (1, 2, 3), p2.leader_epoch, p2.partition_epoch) == ErrorCode.INELIGIBLE_REPLICA
        assert await alter(1, (1, 2, 3), p2.leader_epoch, p2.partition_epoch,
                           version=0) == ErrorCode.OPERATION_NOT_ATTEMPTED
        code, _ = await control.alter_partition(1, epochs[1] + 100, [], 2)
        assert code == ErrorCode.STALE_BROKER_EPOCH
        quorum.close()

    run(main)


def test_alter_partition_answers_what_the_metadata_commits(tmp_path: Path) -> None:
    """An AlterPartition of many partitions in one request: each answer (ISR, leader and
    partition epochs) is what the committed metadata then holds for that partition."""
    async def main() -> None:
        control, controller, quorum, _ = setup(tmp_path)
        epochs = await join(control, controller, [1, 2, 3])
        await controller.create_topics([TopicRequest(f"t{i}", assignments={n: [1, 2, 3] for n in range(50)})
                                        for i in range(4)])
        changes = []
        for i in range(4):
            topic = controller.image.topic(f"t{i}")
            assert topic is not None
            for n, part in topic.partitions.items():
                shrunk = (1, 2) if n % 2 else (1, 3)
                changes.append(IsrChange(topic.topic_id, None, n, part.leader_epoch, part.partition_epoch, shrunk))
        code, results = await control.alter_partition(1, epochs[1], changes, 2)
        assert code == ErrorCode.NONE and len(results) == 200
        for change, result in zip(changes, results, strict=True):
            assert result.error == ErrorCode.NONE
            assert change.topic_id is not None
            committed = controller.image.topics_by_id[change.topic_id].partitions[change.partition]
            assert committed.isr == change.new_isr == result.isr
            assert (result.leader, result.leader_epoch, result.partition_epoch) == (
                committed.leader, committed.leader_epoch, committed.partition_epoch)
            assert committed.partition_epoch == change.partition_epoch + 1
        quorum.close()

    run(main)


def test_producer_id_blocks_need_a_current_broker_epoch(tmp_path: Path) -> None:
    async def main() -> None:
        control, controller, quorum, _ = setup(tmp_path)
        epochs = await join(control, controller, [1])
        assert (await control.allocate_producer_ids(1, epochs[1] + 1))[0] == ErrorCode.STALE_BROKER_EPOCH
        first = await control.allocate_producer_ids(1, epochs[1])
        second = await control.allocate_producer_ids(1, epochs[1])
        assert first[0] == second[0] == ErrorCode.NONE and second[1] == first[1] + first[2]
        quorum.close()

    run(main)


def test_a_new_controller_counts_sessions_from_its_activation(tmp_path: Path) -> None:
    """As Kafka rebuilds its BrokerHeartbeatManager on activation: silence under the previous
    controller (its heartbeats went there, or were lost with it) is not held against a broker."""
    async def main() -> None:
        control, controller, quorum, clock = setup(tmp_path)
        epochs = await join(control, controller, [1, 2, 3])
        clock.now += 30.0  # the brokers heartbeated to another controller meanwhile
        control.activate(2)
        await control._expire_sessions()
        assert not any(controller.image.brokers[b].fenced for b in epochs)
        clock.now += 5.0
        for broker_id in (1, 2):
            await control.heartbeat(broker_id, epochs[broker_id], controller.image.offset, False, False)
        clock.now += 4.5  # 9.5 s since the activation; 3 never reached this controller
        await control._expire_sessions()
        assert [b for b in epochs if controller.image.brokers[b].fenced] == [3]
        quorum.close()

    run(main)


def test_time_the_controller_did_not_run_is_not_held_against_brokers(tmp_path: Path) -> None:
    async def main() -> None:
        control, controller, quorum, clock = setup(tmp_path)
        epochs = await join(control, controller, [1, 2])
        clock.now += 10.0  # the controller's process was stalled: its check comes 9.5 s late
        control.credit_stall(9.5)
        await control._expire_sessions()
        assert not any(controller.image.brokers[b].fenced for b in epochs)
        control.credit_stall(0.1)  # jitter: no credit
        clock.now += 9.0
        await control._expire_sessions()
        assert all(controller.image.brokers[b].fenced for b in epochs)
        quorum.close()

    run(main)


def test_a_new_clusters_feature_levels_come_before_anything_else(tmp_path: Path) -> None:
    """Nothing waits for the bootstrap task: the first write of an activation writes the feature
    levels first, so no broker registers, nor topic is created, on an image without them."""
    async def main() -> None:
        control, controller, _, _ = setup(tmp_path)
        assert controller.image.features == {}
        code, epoch = await control.register(registration(1))
        assert code == ErrorCode.NONE
        assert level(controller.image.features, GROUP_VERSION) == 1
        assert controller.image.features == {f.name: f.default_level for f in FEATURES.values() if f.default_level}
        # The broker's epoch is the offset of its registration: after the feature records.
        assert epoch >= len(controller.image.features)
        written = controller.image.offset
        await controller.bootstrap()  # the task's own round then finds nothing to write
        assert controller.image.offset == written
    run(main)
