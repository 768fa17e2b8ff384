"""Partition reassignment on the controller (one-voter quorum): start, progress through
AlterPartition, completion (leader handed over when it is removed), cancellation, errors."""

from __future__ import annotations

from pathlib import Path

from controller.apis import IsrChange
from controller.reassignment import ongoing
from controller.service import TopicRequest
from tests.controller.test_cluster_control import join, run, setup
from wire.errors import ErrorCode


def state(controller: object, name: str, index: int = 0) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    topic = controller.image.topic(name)  # type: ignore[attr-defined]
    assert topic is not None
    p = topic.partitions[index]
    return p.replicas, p.isr, p.leader


def test_a_reassignment_completes_when_the_new_replicas_are_in_sync(tmp_path: Path) -> None:
    async def main() -> None:
        control, controller, quorum, _ = setup(tmp_path)
        epochs = await join(control, controller, [1, 2, 3])
        await controller.create_topics([TopicRequest("t", assignments={0: [1, 2]})])
        out = await controller.alter_reassignments([("t", 0, [2, 3])])
        assert out == {("t", 0): out[("t", 0)]} and out[("t", 0)].error == ErrorCode.NONE
        # Widened: target first, then the replica being removed; broker 1 still leads.
        assert state(controller, "t") == ((2, 3, 1), (1, 2), 1)
        [moving] = ongoing(controller.image, None)
        assert (moving.replicas, moving.adding, moving.removing) == ((2, 3, 1), (3,), (1,))
        assert ongoing(controller.image, [("t", [1, 5]), ("nope", [0])]) == []

        # Broker 3 caught up: the leader adds it to the ISR, which completes the move in one record.
        topic = controller.image.topic("t")
        assert topic is not None
        p = topic.partitions[0]
        change = IsrChange(topic.topic_id, None, 0, p.leader_epoch, p.partition_epoch, (1, 2, 3))
        code, [result] = await control.alter_partition(1, epochs[1], [change], 2)
        assert code == ErrorCode.NONE and result.error == ErrorCode.NONE
        assert state(controller, "t") == ((2, 3), (2, 3), 2)
        after = controller.image.topic("t").partitions[0]  # type: ignore[union-attr]
        assert (result.leader, result.isr, result.partition_epoch) == (2, (2, 3), after.partition_epoch)
        assert after.leader_epoch == p.leader_epoch + 1
        assert ongoing(controller.image, None) == []
        quorum.close()

    run(main)


def test_removing_replicas_only_completes_at_once_and_cancel_goes_back(tmp_path: Path) -> None:
    async def main() -> None:
        control, controller, quorum, _ = setup(tmp_path)
        await join(control, controller, [1, 2, 3])
        await controller.create_topics([TopicRequest("shrink", assignments={0: [1, 2, 3]}),
                                        TopicRequest("move", assignments={0: [1, 2]})])
        out = await controller.alter_reassignments([("shrink", 0, [2, 1])])
        assert out[("shrink", 0)].error == ErrorCode.NONE
        assert state(controller, "shrink") == ((2, 1), (1, 2), 1)
        assert ongoing(controller.image, None) == []

        assert (await controller.alter_reassignments([("move", 0, [3])]))[("move", 0)].error == ErrorCode.NONE
        assert state(controller, "move")[0] == (3, 1, 2)
        cancelled = await controller.alter_reassignments([("move", 0, None)])
        assert cancelled[("move", 0)].error == ErrorCode.NONE
        assert state(controller, "move") == ((1, 2), (1, 2), 1)
        again = await controller.alter_reassignments([("move", 0, None)])
        assert again[("move", 0)].error == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
        quorum.close()

    run(main)


def test_bad_targets_are_refused_per_partition(tmp_path: Path) -> None:
    async def main() -> None:
        control, controller, quorum, _ = setup(tmp_path)
        await join(control, controller, [1, 2])
        await controller.create_topics([TopicRequest("t", assignments={0: [1], 1: [1], 2: [1]})])
        offset = controller.image.offset
        out = await controller.alter_reassignments([
            ("t", 0, [1, 9]), ("t", 1, [2, 2]), ("t", 2, []), ("t", 7, [1]), ("nope", 0, [1])])
        assert {k: o.error for k, o in out.items()} == {
            ("t", 0): ErrorCode.INVALID_REPLICA_ASSIGNMENT, ("t", 1): ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            ("t", 2): ErrorCode.INVALID_REPLICA_ASSIGNMENT, ("t", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        assert controller.image.offset == offset  # nothing written
        quorum.close()

    run(main)
