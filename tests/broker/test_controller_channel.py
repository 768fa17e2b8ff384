"""The broker's way to the active controller when a controller is cut off from the network:
finding the new one takes one round of answers, and a request never waits longer than its own
timeout behind another one that hangs."""

from __future__ import annotations

import random
from typing import Any

import trio
import trio.testing

from broker.cluster.controller_channel import (
    FIND_ACTIVE_TIMEOUT_S,
    ChannelError,
    ControllerChannel,
    PeerConnection,
    describe_quorum_request,
)
from wire.generated.api_055_describe_quorum import (
    DescribeQuorumResponse,
    DescribeQuorumResponsePartitionData,
    DescribeQuorumResponseTopicData,
)
from wire.primitives import Message

VOTERS = [(1, "127.0.0.1", 1), (2, "127.0.0.1", 2), (3, "127.0.0.1", 3)]


def quorum_reply(epoch: int, leader: int) -> DescribeQuorumResponse:
    return DescribeQuorumResponse(topics=[DescribeQuorumResponseTopicData(
        topic_name="__cluster_metadata",
        partitions=[DescribeQuorumResponsePartitionData(partition_index=0, leader_id=leader, leader_epoch=epoch)])])


class Voters(ControllerChannel):
    """The network between this broker and the voters: each voter's answer, or silence (None)."""

    def __init__(self, answers: dict[int, tuple[int, int] | None], seed: int) -> None:
        super().__init__(VOTERS, "test", random.Random(seed))
        self.answers = answers

    async def send(self, voter: int, message: Message, response_type: Any, timeout_s: float = 5.0,
                   version: int | None = None) -> Any:
        answer = self.answers[voter]
        if answer is None:  # cut off: packets dropped, no reset
            await trio.sleep(timeout_s)
            raise ChannelError(f"voter {voter}: TooSlowError()")
        return quorum_reply(*answer)


def test_the_newest_epoch_wins_and_a_silent_voter_costs_nothing() -> None:
    # Voter 3 led epoch 10 and was cut off; voter 1 has not heard of the election yet; voter 2
    # won epoch 11. Whatever the order of the answers, the broker goes to 2 without waiting out 3.
    async def main(seed: int) -> None:
        channel = Voters({1: (10, 3), 2: (11, 2), 3: None}, seed)
        started = trio.current_time()
        assert await channel.find_active() == 2
        assert channel.active_id == 2
        assert trio.current_time() - started < FIND_ACTIVE_TIMEOUT_S

    for seed in range(20):
        trio.run(main, seed, clock=trio.testing.MockClock(autojump_threshold=0))


def test_no_leader_known_is_an_error_after_the_timeout() -> None:
    async def main() -> None:
        channel = Voters({1: (12, -1), 2: None, 3: None}, 1)
        started = trio.current_time()
        try:
            await channel.find_active()
        except ChannelError:
            pass
        else:
            raise AssertionError("a leader was named")
        assert trio.current_time() - started <= FIND_ACTIVE_TIMEOUT_S + 0.01

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_request_queued_behind_a_hanging_one_gives_up_in_its_own_time() -> None:
    """A controller that accepts connections and never answers (its process stalled, or the
    answers dropped): the second request's timeout counts from when it was made, not from when
    the first one gave up."""

    async def main() -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        accepted: list[trio.SocketStream] = []

        async def silent(stream: trio.SocketStream) -> None:
            accepted.append(stream)
            await trio.sleep_forever()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.serve_listeners, silent, listeners)
            connection = PeerConnection("127.0.0.1", port, "test")
            outcomes: dict[str, float] = {}

            async def ask(name: str, timeout_s: float) -> None:
                started = trio.current_time()
                try:
                    await connection.request(describe_quorum_request(), DescribeQuorumResponse, timeout_s)
                except ChannelError:
                    outcomes[name] = trio.current_time() - started

            async with trio.open_nursery() as requests:
                requests.start_soon(ask, "first", 3.0)
                await trio.sleep(0.1)
                requests.start_soon(ask, "second", 0.3)
            assert outcomes["first"] >= 3.0
            assert outcomes["second"] < 1.0, outcomes
            await connection.aclose()
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_voters_that_refuse_at_once_are_not_waited_for() -> None:
    # Two controllers stopped (their connections refused at once): the one left answers alone.
    class Refusing(Voters):
        async def send(self, voter: int, message: Message, response_type: Any, timeout_s: float = 5.0,
                       version: int | None = None) -> Any:
            if voter != 1:
                raise ChannelError(f"voter {voter}: connection refused")
            return quorum_reply(4, 1)

    async def main() -> None:
        channel = Refusing({}, 3)
        started = trio.current_time()
        assert await channel.find_active() == 1
        assert trio.current_time() - started < 0.01

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
