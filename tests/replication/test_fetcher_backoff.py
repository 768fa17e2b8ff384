"""A follower's fetcher holds back a partition its leader refused (NOT_LEADER_OR_FOLLOWER, fenced
epoch, unknown partition) and asks again after replica.fetch.backoff.ms even when the leader epoch
has not moved: a leader that lags the metadata refuses for the epoch it has not applied yet and
accepts once it has, with no new epoch in between. Found by the controller-isolated nemesis
(seed 18): after the heal the followers, told of the new leader before it knew, held its
partitions forever and never rejoined the ISR."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TypeVar

import pytest
import trio
import trio.testing

from broker.cluster.controller_channel import ChannelError, PeerConnection
from broker.log.config import LogConfig
from broker.log.manager import LogManager
from broker.replication.fetcher import FetcherSettings, ReplicaFetchers, _LeaderFetcher
from broker.replication.replica_manager import ReplicaManager
from controller.image import BrokerImage, Endpoint, MetadataImage, PartitionImage, TopicImage
from wire.generated.api_001_fetch import FetchRequest
from wire.primitives import Message

TOPIC = "t"
TOPIC_ID = uuid.UUID(int=7)
_R = TypeVar("_R", bound=Message)


def image(epoch: int) -> MetadataImage:
    parts = {0: PartitionImage(TOPIC_ID, 0, (1, 2), (1, 2), 1, epoch, epoch)}
    return MetadataImage(
        topics_by_id={TOPIC_ID: TopicImage(TOPIC, TOPIC_ID, parts)},
        topic_ids={TOPIC: TOPIC_ID},
        brokers={n: BrokerImage(n, 0, uuid.UUID(int=n), (Endpoint("PLAINTEXT", "127.0.0.1", 1),), None, False)
                 for n in (1, 2)},
    )


def test_a_refused_partition_is_fetched_again_after_the_backoff(tmp_path: Path) -> None:
    async def main() -> None:
        logs = LogManager([tmp_path], LogConfig(), lambda: int(trio.current_time() * 1000))
        try:
            rm = ReplicaManager(2, logs, lambda _image, _topic: LogConfig(), {})
            current = image(4)
            rm.apply_image(current)
            fetchers = ReplicaFetchers(2, rm, lambda: current, FetcherSettings(backoff_ms=1000),
                                       truncate=lambda p, o: None, start_over=lambda p, o: None)
            fetcher = _LeaderFetcher(fetchers, 1)
            p = rm.get(TOPIC, 0)
            assert p is not None and p.leader == 1 and p.leader_epoch == 4
            fetcher._stall(p)  # the leader answered NOT_LEADER_OR_FOLLOWER at epoch 4
            assert fetcher._is_stalled(p, trio.current_time())
            await trio.sleep(0.5)
            assert fetcher._is_stalled(p, trio.current_time())  # within replica.fetch.backoff.ms
            await trio.sleep(0.6)
            assert not fetcher._is_stalled(p, trio.current_time())  # asked again, same epoch
            fetcher._stall(p)
            rm.apply_image(image(5))  # a new epoch releases it at once
            p = rm.get(TOPIC, 0)
            assert p is not None and p.leader_epoch == 5
            assert not fetcher._is_stalled(p, trio.current_time())
        finally:
            logs.close(0)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


class _SlowLeader(PeerConnection):
    """A leader's connection whose Fetch answer (empty) arrives ``delay_s`` after it is sent."""

    def __init__(self, delay_s: float) -> None:
        super().__init__("127.0.0.1", 1, "replica-fetcher-2")
        self.delay_s = delay_s
        self._versions[FetchRequest.API_KEY] = (0, 17)  # as its ApiVersions would say

    async def _open(self) -> trio.abc.Stream:
        return trio.testing.MemorySendStream()  # type: ignore[return-value]

    async def _exchange(self, stream: trio.abc.Stream, message: Message, version: int,
                        response_type: type[_R]) -> _R:
        await trio.sleep(self.delay_s)
        return response_type()


def test_a_fetch_waits_for_its_answer_as_long_as_replica_socket_timeout_ms(tmp_path: Path) -> None:
    """A leader of tens of thousands of partitions on a busy machine answers a full fetch in
    seconds: the follower waits replica.socket.timeout.ms for it (Kafka's request timeout of
    its fetcher), not the fetch's long-poll wait plus a fixed margin."""
    async def main() -> None:
        logs = LogManager([tmp_path], LogConfig(), lambda: int(trio.current_time() * 1000))
        try:
            rm = ReplicaManager(2, logs, lambda _image, _topic: LogConfig(), {})
            current = image(4)
            rm.apply_image(current)
            settings = FetcherSettings(max_wait_ms=500, socket_timeout_ms=30_000)
            fetchers = ReplicaFetchers(2, rm, lambda: current, settings,
                                       truncate=lambda p, o: None, start_over=lambda p, o: None)
            fetcher = _LeaderFetcher(fetchers, 1)
            p = rm.get(TOPIC, 0)
            assert p is not None
            started = trio.current_time()
            await fetcher._fetch_once(_SlowLeader(20.0), [p])  # answered after 20 s: accepted
            assert trio.current_time() - started == 20.0
            with pytest.raises(ChannelError):
                await fetcher._fetch_once(_SlowLeader(31.0), [p])
        finally:
            logs.close(0)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
