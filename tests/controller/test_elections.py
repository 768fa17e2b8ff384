"""Operator-asked leader elections (ElectLeaders) and the leader-balance check, on the
one-voter quorum with a fake clock: preferred and unclean elections, their errors, and
which partitions ``auto.leader.rebalance.enable`` hands back."""

from __future__ import annotations

from pathlib import Path

from controller.apis import IsrChange
from controller.elections import PREFERRED, UNCLEAN, imbalanced_partitions
from controller.service import TopicRequest
from tests.controller.test_cluster_control import join, registration, run, setup
from wire.errors import ErrorCode


def leader_isr(controller: object, name: str, index: int = 0) -> tuple[int, tuple[int, ...]]:
    topic = controller.image.topic(name)  # type: ignore[attr-defined]
    assert topic is not None
    p = topic.partitions[index]
    return p.leader, p.isr


def test_preferred_election_returns_leadership_once_the_replica_is_back_in_sync(tmp_path: Path) -> None:
    async def main() -> None:
        control, controller, quorum, clock = setup(tmp_path)
        epochs = await join(control, controller, [1, 2, 3])
        await controller.create_topics([TopicRequest("t", assignments={0: [1, 2, 3], 1: [2, 3, 1]})])
        # Broker 1's session expires: broker 2 leads t-0, and 1 leaves the ISR.
        clock.now += 5.0
        for b in (2, 3):
            await control.heartbeat(b, epochs[b], controller.image.offset, False, False)
        clock.now += 5.0
        await control._expire_sessions()
        assert leader_isr(controller, "t") == (2, (2, 3))

        # Back, but not in sync: preferred election is not possible yet.
        code, epoch1 = await control.register(registration(1, incarnation=11))
        assert code == ErrorCode.NONE
        await control.heartbeat(1, epoch1, controller.image.offset, False, False)
        out = await controller.elect_leaders(PREFERRED, [("t", 0), ("t", 1), ("nope", 0)])
        assert out[("t", 0)].error == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
        assert out[("t", 1)].error == ErrorCode.ELECTION_NOT_NEEDED
        assert out[("nope", 0)].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert leader_isr(controller, "t") == (2, (2, 3))

        # The leader (2) adds 1 back to the ISR; now broker 1 can lead again.
        topic = controller.image.topic("t")
        assert topic is not None
        p = topic.partitions[0]
        change = IsrChange(topic.topic_id, None, 0, p.leader_epoch, p.partition_epoch, (2, 3, 1))
        code, results = await control.alter_partition(2, epochs[2], [change], 2)
        assert code == ErrorCode.NONE and results[0].error == ErrorCode.NONE
        assert imbalanced_partitions(controller.image, 10) == [("t", 0)]
        before = controller.image.topic("t").partitions[0].leader_epoch  # type: ignore[union-attr]
        out = await controller.elect_leaders(PREFERRED, None)
        # Every partition asked for: those needing no election are left out.
        assert list(out) == [("t", 0)] and out[("t", 0)].error == ErrorCode.NONE
        assert leader_isr(controller, "t") == (1, (2, 3, 1))
        assert controller.image.topic("t").partitions[0].leader_epoch == before + 1  # type: ignore[union-attr]
        assert imbalanced_partitions(controller.image, 10) == []
        assert await controller.elect_leaders(PREFERRED, None) == {}
        quorum.close()

    run(main)


def test_unclean_election_needs_a_leaderless_partition_and_a_live_replica(tmp_path: Path) -> None:
    async def main() -> None:
        control, controller, quorum, clock = setup(tmp_path)  # unclean.leader.election.enable=false
        epochs = await join(control, controller, [1, 2])
        await controller.create_topics([TopicRequest("solo", assignments={0: [1]}),
                                        TopicRequest("pair", assignments={0: [1, 2]})])
        topic = controller.image.topic("pair")
        assert topic is not None
        p = topic.partitions[0]
        # The ISR shrinks to the leader alone, then the leader dies: no clean candidate.
        change = IsrChange(topic.topic_id, None, 0, p.leader_epoch, p.partition_epoch, (1,))
        assert (await control.alter_partition(1, epochs[1], [change], 2))[0] == ErrorCode.NONE
        clock.now += 5.0
        await control.heartbeat(2, epochs[2], controller.image.offset, False, False)
        clock.now += 5.0
        await control._expire_sessions()
        assert leader_isr(controller, "pair") == (-1, (1,))
        assert leader_isr(controller, "solo") == (-1, (1,))

        out = await controller.elect_leaders(UNCLEAN, [("pair", 0), ("solo", 0)])
        assert out[("pair", 0)].error == ErrorCode.NONE
        assert out[("solo", 0)].error == ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
        assert leader_isr(controller, "pair") == (2, (2,))
        again = await controller.elect_leaders(UNCLEAN, [("pair", 0)])
        assert again[("pair", 0)].error == ErrorCode.ELECTION_NOT_NEEDED
        quorum.close()

    run(main)


def test_balance_check_leaves_brokers_within_the_allowed_share_alone(tmp_path: Path) -> None:
    async def main() -> None:
        control, controller, quorum, _ = setup(tmp_path)
        epochs = await join(control, controller, [1, 2])
        # Broker 1 is preferred for all 10 partitions.
        await controller.create_topics([TopicRequest("w", assignments={i: [1, 2] for i in range(10)})])
        # Its controlled shutdown moves every lead to broker 2, and takes it out of the ISRs.
        assert (await control.heartbeat(1, epochs[1], controller.image.offset, False, True)).error == ErrorCode.NONE
        assert {leader_isr(controller, "w", i) for i in range(10)} == {(2, (2,))}
        code, epoch = await control.register(registration(1, incarnation=21))
        assert code == ErrorCode.NONE
        await control.heartbeat(1, epoch, controller.image.offset, False, False)
        # Not in sync anywhere: nothing can be handed back yet.
        assert imbalanced_partitions(controller.image, 10) == []
        topic = controller.image.topic("w")
        assert topic is not None
        changes = [IsrChange(topic.topic_id, None, i, p.leader_epoch, p.partition_epoch, (2, 1))
                   for i, p in sorted(topic.partitions.items())]
        assert (await control.alter_partition(2, epochs[2], changes, 2))[0] == ErrorCode.NONE
        assert imbalanced_partitions(controller.image, 10) == [("w", i) for i in range(10)]
        await controller.elect_leaders(PREFERRED, [("w", i) for i in range(1, 10)])
        # One partition of ten led by another broker: 10 % is within 10 %, not within 5 %.
        assert imbalanced_partitions(controller.image, 10) == []
        assert imbalanced_partitions(controller.image, 5) == [("w", 0)]
        quorum.close()

    run(main)
