"""max.partitions.per.request and max.partitions.per.broker, in the controller: every way
of creating partitions (CreateTopics, CreatePartitions, auto-creation) is bounded, with
Kafka's codes and a message naming the limit."""

from __future__ import annotations

import random
from pathlib import Path

import trio

from controller.apis import ClusterControl
from controller.quorum import LocalQuorum
from controller.service import Controller, ControllerSettings, TopicRequest
from tests.controller.test_cluster_control import CLUSTER_ID, Clock, join
from wire.errors import ErrorCode


async def controller_with_brokers(tmp_path: Path, brokers: list[int]) -> Controller:
    settings = ControllerSettings(1, 1, max_partitions_per_request=10, max_partitions_per_broker=12)
    controller = Controller(1, LocalQuorum(1, tmp_path), settings, random.Random(5))
    control = ClusterControl(controller, CLUSTER_ID, session_timeout_s=9.0, clock=Clock())
    control.activate(1)
    await join(control, controller, brokers)
    return controller


def test_create_topics_within_and_over_the_limits(tmp_path: Path) -> None:
    async def main() -> None:
        controller = await controller_with_brokers(tmp_path, [1])
        results = await controller.create_topics([
            TopicRequest("too-many", num_partitions=11),
            TopicRequest("a", num_partitions=6),
            TopicRequest("b", num_partitions=6),  # 12 in one request: over the per-request limit
        ])
        assert [r.error for r in results] == [ErrorCode.INVALID_PARTITIONS, ErrorCode.NONE,
                                              ErrorCode.POLICY_VIOLATION]
        assert "max.partitions.per.request=10" in (results[0].message or "")
        assert "max.partitions.per.request=10" in (results[2].message or "")
        results = await controller.create_topics([TopicRequest("c", num_partitions=6)])
        assert results[0].error == ErrorCode.NONE
        # Broker 1 hosts 12: the next partition anywhere is over max.partitions.per.broker.
        results = await controller.create_topics([TopicRequest("d", num_partitions=1)])
        assert results[0].error == ErrorCode.POLICY_VIOLATION
        assert "max.partitions.per.broker=12" in (results[0].message or "")
        outcome = await controller.create_partitions([("a", 7, None)], validate_only=False)
        assert outcome["a"][0] == ErrorCode.POLICY_VIOLATION and "max.partitions.per.broker" in str(outcome["a"][1])
        assert controller.image.topic("d") is None and len(controller.image.topic("a").partitions) == 6  # type: ignore[union-attr]

    trio.run(main)



def test_internal_topics_are_counted_but_not_held_to_the_per_broker_bound(tmp_path: Path) -> None:
    """A broker at max.partitions.per.broker still gets its coordinators' topics: groups,
    transactions and share groups keep working at the bound."""
    async def main() -> None:
        controller = await controller_with_brokers(tmp_path, [1])
        for name in ("a", "b"):
            assert (await controller.create_topics([TopicRequest(name, num_partitions=6)]))[0].error == ErrorCode.NONE
        assert (await controller.create_topics([TopicRequest("c", num_partitions=1)]))[0].error == \
            ErrorCode.POLICY_VIOLATION
        for name in ("__consumer_offsets", "__transaction_state", "__share_group_state"):
            results = await controller.create_topics([TopicRequest(name, num_partitions=3)])
            assert results[0].error == ErrorCode.NONE, results[0].message
        # Still refused for an ordinary topic, one named like an internal topic included.
        assert (await controller.create_topics([TopicRequest("c", num_partitions=1)]))[0].error == \
            ErrorCode.POLICY_VIOLATION
        results = await controller.create_topics([TopicRequest("__consumer_offsets-x", num_partitions=1)])
        assert results[0].error == ErrorCode.POLICY_VIOLATION

    trio.run(main)


def test_create_partitions_over_the_request_limit(tmp_path: Path) -> None:
    async def main() -> None:
        controller = await controller_with_brokers(tmp_path, [1, 2])
        assert (await controller.create_topics([TopicRequest("t", num_partitions=1)]))[0].error == ErrorCode.NONE
        outcome = await controller.create_partitions([("t", 12, None)], validate_only=False)
        assert outcome["t"][0] == ErrorCode.INVALID_PARTITIONS
        assert "max.partitions.per.request=10" in str(outcome["t"][1])
        outcome = await controller.create_partitions([("t", 11, None)], validate_only=False)
        assert outcome["t"] == (ErrorCode.NONE, None)

    trio.run(main)
