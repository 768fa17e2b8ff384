"""The follower's side of replication: fetch from each partition's leader.

One fetch loop per leader broker carries every partition this broker follows from it
(Kafka's ReplicaFetcherThread): a Fetch (v12, ``replica_id`` set, with each partition's
``current_leader_epoch`` and ``last_fetched_epoch``) long-polls the leader on the
inter-broker listener; the batches come back with the leader's offsets, epochs and
timestamps and are appended as they are (:meth:`Partition.append_records_to_follower`), which
also extends the leader-epoch cache. When the leader answers with a diverging epoch
(KIP-320) the follower truncates its log where the two part and fetches again; the
producer state and the high watermark follow the log (:meth:`ReplicaManager.after_truncation`).
The follower's high watermark is the leader's, as far as its own log reaches.

A partition whose leader or epoch changed is dropped from its loop until the metadata
says who leads it; a leader that cannot be reached is retried with a bounded backoff.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog
import trio

from broker.cluster.controller_channel import ChannelError, PeerConnection
from broker.cluster.peers import broker_address
from broker.log.errors import LogError
from broker.log.producer_state import ProducerStateError
from broker.replication.replica_manager import Partition, ReplicaManager
from broker.security.peer import PeerSecurity
from controller.delta import MetadataDelta
from controller.image import MetadataImage
from wire.errors import ErrorCode
from wire.generated.api_001_fetch import (
    FetchRequest,
    FetchRequestFetchPartition,
    FetchRequestFetchTopic,
    FetchResponse,
    FetchResponsePartitionData,
)
from wire.generated.api_002_list_offsets import (
    ListOffsetsRequest,
    ListOffsetsRequestListOffsetsPartition,
    ListOffsetsRequestListOffsetsTopic,
    ListOffsetsResponse,
)

log = structlog.get_logger(__name__)

FETCH_VERSION = 12
EARLIEST_TIMESTAMP = -2
#: Errors after which a partition waits for the metadata to name its leader again.
_WAIT_FOR_METADATA = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.UNKNOWN_TOPIC_ID,
})


@dataclass(frozen=True, slots=True)
class FetcherSettings:
    max_wait_ms: int = 500  # replica.fetch.wait.max.ms
    min_bytes: int = 1  # replica.fetch.min.bytes
    max_bytes: int = 10 * 1024 * 1024  # replica.fetch.response.max.bytes
    partition_max_bytes: int = 1024 * 1024  # replica.fetch.max.bytes
    backoff_ms: int = 1000  # replica.fetch.backoff.ms
    #: How long a fetch may take to be answered (its long-poll wait included): a leader of tens
    #: of thousands of partitions on a busy machine answers a full fetch in seconds.
    socket_timeout_ms: int = 30_000  # replica.socket.timeout.ms
    listener_name: str = "PLAINTEXT"  # inter.broker.listener.name
    #: TLS and SASL of the inter-broker listener; None for PLAINTEXT.
    security: PeerSecurity | None = None


class ReplicaFetchers:
    """Starts, feeds and stops one :class:`_LeaderFetcher` per leader this broker follows."""

    def __init__(self, node_id: int, replica_manager: ReplicaManager, image: Callable[[], MetadataImage],
                 settings: FetcherSettings, truncate: Callable[[Partition, int], None],
                 start_over: Callable[[Partition, int], None],
                 truncations_durable: Callable[[], Awaitable[None]] | None = None) -> None:
        self.node_id = node_id
        self.rm = replica_manager
        self.image = image
        self.settings = settings
        self.truncate = truncate
        self.start_over = start_over
        #: Returns once the truncations made so far are durable (their fsyncs and checkpoints
        #: run off the event loop); every fetcher awaits it before it appends.
        self.truncations_durable = truncations_durable
        self._fetchers: dict[int, _LeaderFetcher] = {}
        self._nursery: trio.Nursery | None = None

    def following(self, leader: int) -> list[Partition]:
        return [p for p in self.rm.partitions.values()
                if p.leader == leader and p.leader != self.node_id and self.node_id in p.replicas]

    def on_metadata_update(self, delta: MetadataDelta, _image: MetadataImage) -> None:
        """After the replica manager applied ``delta``: fetch from the new leaders of the
        partitions it changed, wake the others (their partition sets or epochs may have changed)."""
        if self._nursery is None or not delta.topics:
            return
        leaders = {part.leader for _, part in delta.topics.changed_partitions()
                   if part.leader >= 0 and part.leader != self.node_id and self.node_id in part.replicas}
        self._follow(leaders)

    def on_image(self, _: MetadataImage | None = None) -> None:
        """Called after the replica manager applied a new image: start loops for new
        leaders, wake the others (their partition sets or epochs may have changed)."""
        if self._nursery is None:
            return
        self._follow({p.leader for p in self.rm.partitions.values()
                      if p.leader >= 0 and p.leader != self.node_id and self.node_id in p.replicas})

    def _follow(self, leaders: set[int]) -> None:
        assert self._nursery is not None
        for leader in leaders - set(self._fetchers):
            fetcher = _LeaderFetcher(self, leader)
            self._fetchers[leader] = fetcher
            self._nursery.start_soon(fetcher.run)
        for fetcher in self._fetchers.values():
            fetcher.poke()

    def _finished(self, leader: int) -> None:
        self._fetchers.pop(leader, None)

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self.on_image()
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                self._nursery = None


class _LeaderFetcher:
    def __init__(self, owner: ReplicaFetchers, leader: int) -> None:
        self.owner = owner
        self.leader = leader
        self._poke = trio.Event()
        #: Partitions held back until the metadata moves their leader epoch past the first value
        #: or the trio clock passes the second: a leader that lags the metadata (it answers
        #: NOT_LEADER_OR_FOLLOWER for an epoch it has not applied yet) is asked again after
        #: replica.fetch.backoff.ms, as Kafka's fetcher delays a partition in error.
        self._stalled: dict[tuple[str, int], tuple[int, float]] = {}
        self._connection: PeerConnection | None = None
        self._address: tuple[str, int] | None = None

    def poke(self) -> None:
        self._poke.set()

    async def _connect(self) -> PeerConnection | None:
        address = broker_address(self.owner.image(), self.leader, self.owner.settings.listener_name)
        if address is None:
            return None
        if self._connection is None or address != self._address:
            if self._connection is not None:
                await self._connection.aclose()
            self._connection = PeerConnection(address[0], address[1], f"replica-fetcher-{self.owner.node_id}",
                                              self.owner.settings.security)
            self._address = address
        return self._connection

    async def run(self) -> None:
        settings = self.owner.settings
        backoff_s = settings.backoff_ms / 1000
        try:
            while True:
                now = trio.current_time()
                parts = [p for p in self.owner.following(self.leader) if not self._is_stalled(p, now)]
                if not self.owner.following(self.leader):
                    return  # no partition follows this leader any more
                if not parts:
                    await self._wait(backoff_s)
                    self._stalled.clear()  # retry in case the metadata is what lags
                    continue
                connection = await self._connect()
                if connection is None:
                    await self._wait(backoff_s)
                    continue
                try:
                    await self._fetch_once(connection, parts)
                except ChannelError as ex:
                    log.info("replica_fetch_failed", leader=self.leader, reason=str(ex))
                    await self._wait(backoff_s)
        finally:
            self.owner._finished(self.leader)
            if self._connection is not None:
                await self._connection.aclose()

    def _stall(self, p: Partition) -> None:
        self._stalled[(p.topic, p.index)] = (p.leader_epoch, trio.current_time() + self.owner.settings.backoff_ms / 1000)

    def _is_stalled(self, p: Partition, now: float) -> bool:
        held = self._stalled.get((p.topic, p.index))
        if held is None:
            return False
        epoch, until = held
        if epoch < p.leader_epoch or now >= until:
            del self._stalled[(p.topic, p.index)]
            return False
        return True

    async def _wait(self, seconds: float) -> None:
        with trio.move_on_after(seconds):
            await self._poke.wait()
        self._poke = trio.Event()

    async def _fetch_once(self, connection: PeerConnection, parts: list[Partition]) -> None:
        settings = self.owner.settings
        sent: dict[tuple[str, int], tuple[Partition, int, int]] = {}
        topics: dict[str, FetchRequestFetchTopic] = {}
        for p in parts:
            last_epoch = p.log.latest_epoch
            sent[(p.topic, p.index)] = (p, p.leader_epoch, p.log.log_end_offset)
            fetch_topic = topics.setdefault(p.topic, FetchRequestFetchTopic(topic=p.topic))
            fetch_topic.partitions.append(FetchRequestFetchPartition(
                partition=p.index, current_leader_epoch=p.leader_epoch, fetch_offset=p.log.log_end_offset,
                last_fetched_epoch=-1 if last_epoch is None else last_epoch,
                log_start_offset=p.log.log_start_offset, partition_max_bytes=settings.partition_max_bytes))
        request = FetchRequest(replica_id=self.owner.node_id, max_wait_ms=settings.max_wait_ms,
                               min_bytes=settings.min_bytes, max_bytes=settings.max_bytes,
                               isolation_level=0, topics=list(topics.values()))
        self._poke = trio.Event()
        reply = await connection.request(request, FetchResponse, settings.socket_timeout_ms / 1000, FETCH_VERSION)
        if reply.error_code != ErrorCode.NONE:
            log.info("replica_fetch_error", leader=self.leader, error=ErrorCode.for_code(reply.error_code).name)
            await self._wait(settings.backoff_ms / 1000)
            return
        if self.owner.truncations_durable is not None:
            # A truncation (of the previous answer's, or another fetcher's) is durable before
            # anything is appended after it: a crash must not skip recovering the new records.
            await self.owner.truncations_durable()
        for topic in reply.responses:
            for pd in topic.partitions:
                entry = sent.get((topic.topic, pd.partition_index))
                if entry is None:
                    continue
                p, epoch, fetch_offset = entry
                # Only if nothing changed while the fetch was out (metadata, truncation).
                if p.leader != self.leader or p.leader_epoch != epoch or p.log.log_end_offset != fetch_offset:
                    continue
                if self.owner.rm.get(p.topic, p.index) is not p:
                    continue
                await self._handle(connection, p, pd)

    async def _handle(self, connection: PeerConnection, p: Partition, pd: FetchResponsePartitionData) -> None:
        rm = self.owner.rm
        code = ErrorCode.for_code(pd.error_code)
        if code == ErrorCode.NONE:
            if pd.diverging_epoch.epoch >= 0 or pd.diverging_epoch.end_offset >= 0:
                self._truncate_at_divergence(p, pd.diverging_epoch.epoch, pd.diverging_epoch.end_offset)
                return
            records = pd.records
            if isinstance(records, bytes | bytearray | memoryview) and len(records) > 0:
                try:
                    p.append_records_to_follower(bytes(records))
                except (LogError, ProducerStateError) as ex:
                    log.warning("replica_append_failed", topic=p.topic, partition=p.index, error=repr(ex))
                    self._stall(p)
                    return
            rm.set_follower_high_watermark(p, pd.high_watermark)
            return
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            await self._handle_out_of_range(connection, p)
            return
        if code in _WAIT_FOR_METADATA:
            self._stall(p)
            return
        # UNKNOWN_LEADER_EPOCH (the leader has not seen the new epoch yet) and the rest: retry.
        log.debug("replica_fetch_partition_error", topic=p.topic, partition=p.index, error=code.name)

    def _truncate_at_divergence(self, p: Partition, leader_epoch: int, leader_end: int) -> None:
        """Kafka's follower truncation by epoch: to where the leader's epoch ends, or where
        ours ends if our log knows that epoch under a different end."""
        end = p.log.log_end_offset
        target = divergence_truncation_offset(p, leader_epoch, leader_end)
        log.info("replica_truncating", topic=p.topic, partition=p.index, leader=self.leader,
                 diverging_epoch=leader_epoch, leader_end_offset=leader_end, log_end_offset=end, truncate_to=target)
        self.owner.truncate(p, target)

    async def _handle_out_of_range(self, connection: PeerConnection, p: Partition) -> None:
        """Our log end is outside the leader's log: behind its start (start over there), or
        ahead of anything it can vouch for (back to our high watermark)."""
        request = ListOffsetsRequest(replica_id=self.owner.node_id, isolation_level=0, topics=[
            ListOffsetsRequestListOffsetsTopic(name=p.topic, partitions=[ListOffsetsRequestListOffsetsPartition(
                partition_index=p.index, current_leader_epoch=p.leader_epoch, timestamp=EARLIEST_TIMESTAMP)])])
        reply = await connection.request(request, ListOffsetsResponse, 10.0)
        answer = reply.topics[0].partitions[0] if reply.topics and reply.topics[0].partitions else None
        if answer is None or answer.error_code != ErrorCode.NONE:
            self._stall(p)
            return
        leader_start = answer.offset
        if p.log.log_end_offset < leader_start:
            log.info("replica_starting_over", topic=p.topic, partition=p.index, leader_log_start_offset=leader_start)
            self.owner.start_over(p, leader_start)
        elif p.log.log_end_offset > p.high_watermark:
            self.owner.truncate(p, p.high_watermark)
        else:
            self._stall(p)


def divergence_truncation_offset(p: Partition, leader_epoch: int, leader_end: int) -> int:
    """Where a follower truncates when the leader answers a diverging epoch (Kafka's
    truncation by leader epoch): where the leader's epoch ends, or where ours ends if our
    log knows that epoch under a different end."""
    end = p.log.log_end_offset
    if leader_epoch < 0 or leader_end < 0:
        return min(p.high_watermark, end)
    mine_epoch, mine_end = p.log.end_offset_for_epoch(leader_epoch)
    if mine_epoch < 0 or mine_end < 0:
        return min(leader_end, end)
    if mine_epoch != leader_epoch:
        return min(mine_end, end)
    return min(leader_end, mine_end)
