"""The replica manager: the partitions this broker hosts, and their high watermarks.

It owns the high watermark (the log owns offsets), completes ``acks=all``
produces when the high watermark passes them, and wakes long-polling fetches
when data arrives — never by polling. Partitions appear, change leader or go
away when a metadata delta says so (:meth:`ReplicaManager.apply_delta`).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterable, Mapping

import structlog
import trio

from broker.eventloop.limits import describe_error
from broker.eventloop.pacing import Pacer
from broker.log.config import LogConfig
from broker.log.files import TopicPartition
from broker.log.manager import LogManager
from broker.log.producer_state import ProducerStateConfig, ProducerStateManager
from broker.replication import delayed_produce, fetch
from broker.replication.fetch import FetchParams, FetchSlot
from broker.replication.partition import Partition
from controller.delta import MetadataDelta
from controller.image import BROKER_RESOURCE, TOPIC_RESOURCE, MetadataImage, PartitionImage

__all__ = ["Partition", "ReplicaManager"]

log = structlog.get_logger(__name__)


#: New partitions in one image from which their logs are created in a worker thread.
CREATE_IN_THREAD_MIN_PARTITIONS = 16
#: New replicas made in one event-loop step when an image brings many.
HOST_SLICE = 250
#: Partitions whose expired producers are dropped in one event-loop step.
EXPIRATION_SLICE = 1_000


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class ReplicaManager:
    def __init__(
        self,
        node_id: int,
        log_manager: LogManager,
        log_config_for: Callable[[MetadataImage, str], LogConfig],
        checkpointed_high_watermarks: Mapping[tuple[str, int], int],
        *,
        producer_state_config: ProducerStateConfig | None = None,
        clock_ms: Callable[[], int] | None = None,
        min_insync_replicas: Callable[[str], int] | None = None,
    ) -> None:
        self.node_id = node_id
        #: ``min.insync.replicas`` of a topic (its config: topic override, else the broker's).
        self.min_insync_replicas = min_insync_replicas or (lambda _topic: 1)
        self.producer_state_config = producer_state_config or ProducerStateConfig()
        self.clock_ms = clock_ms or _wall_clock_ms
        self.log_manager = log_manager
        self.log_config_for = log_config_for
        self.partitions: dict[tuple[str, int], Partition] = {}
        #: Partitions this broker should host whose log could not be created yet, and why
        #: (a full disk, the open-file limit); retried by :meth:`retry_failed_creations`.
        self.failed_creations: dict[tuple[str, int], str] = {}
        self._checkpointed_hw = dict(checkpointed_high_watermarks)
        self._image: MetadataImage | None = None
        # Replicas prepare_image made, with the partition image each was made from: applying
        # that same image leaves them as they are.
        self._hosted_for: dict[tuple[str, int], PartitionImage] = {}

    # ------------------------------------------------------------ metadata

    def apply_image(self, image: MetadataImage) -> None:
        """Creates, updates and removes local replicas to match the image (everything that
        differs from the image applied before: at start, or without a delta)."""
        self.apply_delta(MetadataDelta.between(self._image or MetadataImage(), image), image)

    def apply_delta(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """Kafka's ReplicaManager.applyDelta: visits only the partitions the delta changed —
        deletes the local replicas it moved away or whose topic it deleted, creates or updates
        (leader or follower) the ones this broker hosts — and the partitions of the topics
        whose settings changed.

        A log that cannot be created (a limit was reached) leaves its partition in
        :attr:`failed_creations`; the others are created, and the broker serves on.
        """
        self._image = image
        topics = delta.topics
        failed_before = len(self.failed_creations)
        first_error: str | None = None
        stale: list[tuple[str, int]] = []
        for deleted in topics.deleted.values():
            for index in deleted.partitions:
                key = (deleted.name, index)
                existing = self.partitions.get(key)
                if existing is not None and existing.topic_id == deleted.topic_id:
                    stale.append(key)
                self.failed_creations.pop(key, None)
        for topic, part in topics.changed_partitions():
            if self.node_id not in part.replicas:
                key = (topic.name, part.partition)
                if key in self.partitions:
                    stale.append(key)
                self.failed_creations.pop(key, None)
        self._remove_all(list(dict.fromkeys(stale)))  # a topic deleted and created anew names a key twice
        hosted_for, self._hosted_for = self._hosted_for, {}
        for topic in topics.changed.values():
            config: LogConfig | None = None
            for part in topic.partition_changes.values():
                if self.node_id not in part.replicas:
                    continue
                if hosted_for.get((topic.name, part.partition)) is part:
                    continue
                config = config or self.log_config_for(image, topic.name)
                error = self._host(topic.name, topic.topic_id, part, config)
                first_error = first_error or error
        self._apply_config_changes(delta, image)
        if first_error is not None and not failed_before:
            log.error("partition_logs_not_created", partitions=len(self.failed_creations), error=first_error,
                      retry="until created")
        elif failed_before and not self.failed_creations:
            log.info("partition_logs_created_after_retry", partitions=failed_before)

    def _host(self, topic: str, topic_id: uuid.UUID, part: PartitionImage, config: LogConfig) -> str | None:
        """Creates or updates the local replica of ``part``; why its log could not be created, if not."""
        key = (topic, part.partition)
        existing = self.partitions.get(key)
        if existing is not None and existing.topic_id == topic_id:
            self._update(existing, part, config)
            return None
        if existing is not None:
            self._remove_all([key])
        try:
            self._create(topic, topic_id, part, config)
        except OSError as exc:
            self.failed_creations[key] = describe_error(exc)
            return self.failed_creations[key]
        self.failed_creations.pop(key, None)
        return None

    def _apply_config_changes(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """New settings of a topic reach its local logs; new dynamic log settings of this broker
        (or the cluster default), every local log."""
        if not delta.configs:
            return
        keys: Iterable[tuple[str, int]]
        if any(delta.config_changed(BROKER_RESOURCE, name) for name in ("", str(self.node_id))):
            keys = list(self.partitions)
        else:
            keys = [(name, index) for kind, name in delta.configs if kind == TOPIC_RESOURCE
                    for index in _indexes_of(image, name)]
        for key in keys:
            p = self.partitions.get(key)
            if p is None:
                continue
            config = self.log_config_for(image, p.topic)
            if config != p.log.config:
                p.log.update_config(config)
                p.wake()

    async def prepare_image(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """Before ``delta`` is applied: when it brings many partitions to this broker (a
        CreateTopics of thousands), create their logs in a worker thread, so that no
        directory or file is created on the event loop, then their replicas a slice per
        event-loop step (5,000 at once were a 150 ms step). :meth:`apply_delta` then finds
        them made. The records are committed: serving these partitions a moment before the
        image is published is what the image will say."""
        if self._image is None:
            return
        new: list[tuple[str, uuid.UUID, PartitionImage, LogConfig]] = []
        for topic in delta.topics.changed.values():
            config: LogConfig | None = None
            for part in topic.partition_changes.values():
                if self.node_id in part.replicas and (topic.name, part.partition) not in self.partitions:
                    config = config or self.log_config_for(image, topic.name)
                    new.append((topic.name, topic.topic_id, part, config))
        if len(new) < CREATE_IN_THREAD_MIN_PARTITIONS:
            return
        planned = self.log_manager.plan_new_logs([(name, part.partition, config) for name, _, part, config in new])
        created = await trio.to_thread.run_sync(self.log_manager.open_new_logs, planned)
        self.log_manager.adopt_new_logs(created)
        for start in range(0, len(new), HOST_SLICE):
            await trio.lowlevel.checkpoint()
            for name, topic_id, part, config in new[start:start + HOST_SLICE]:
                key = (name, part.partition)
                if key not in self.partitions and self._host(name, topic_id, part, config) is None:
                    self._hosted_for[key] = part

    def creation_failure(self, topic: str) -> str | None:
        """Why some log of ``topic`` could not be created here, if one could not (for the request's answer)."""
        for (name, _), why in self.failed_creations.items():
            if name == topic:
                return f"the topic exists, but broker {self.node_id} could not create all its logs yet: {why}"
        return None

    def retry_failed_creations(self) -> None:
        """Try again to create the logs that could not be created."""
        image = self._image
        if not self.failed_creations or image is None:
            return
        failed_before = len(self.failed_creations)
        for name, index in list(self.failed_creations):
            topic = image.topic(name)
            part = None if topic is None else topic.partitions.get(index)
            if topic is None or part is None or self.node_id not in part.replicas:
                del self.failed_creations[(name, index)]
                continue
            self._host(name, topic.topic_id, part, self.log_config_for(image, name))
        if self.failed_creations:
            raise OSError(f"{len(self.failed_creations)} partition logs still not created: "
                          f"{next(iter(self.failed_creations.values()))}")
        log.info("partition_logs_created_after_retry", partitions=failed_before)

    def _create(self, topic: str, topic_id: uuid.UUID, part: PartitionImage, config: LogConfig) -> None:
        plog = self.log_manager.get_or_create(topic, part.partition, config)
        if plog.config != config:
            plog.update_config(config)
        hw = min(self._checkpointed_hw.pop((topic, part.partition), 0), plog.log_end_offset)
        p = Partition(
            topic=topic,
            index=part.partition,
            topic_id=topic_id,
            log=plog,
            leader=part.leader,
            leader_epoch=part.leader_epoch,
            partition_epoch=part.partition_epoch,
            replicas=part.replicas,
            isr=part.isr,
            # Read when first used: a start with thousands of partitions reads no snapshot up front.
            producer_state=ProducerStateManager.load(plog, self.producer_state_config, self.clock_ms, lazily=True),
            local_id=self.node_id,
            min_insync_replicas_of=self.min_insync_replicas,
            high_watermark=max(hw, plog.log_start_offset),
        )
        self.partitions[(topic, part.partition)] = p
        if part.leader == self.node_id:
            self._become_leader(p)

    def _update(self, p: Partition, part: PartitionImage, config: LogConfig) -> None:
        was_leader = p.leader == self.node_id and p.leader_epoch == part.leader_epoch
        if part.partition_epoch != p.partition_epoch:
            p.pending_isr = None  # the controller decided: the committed ISR is the truth again
        for replica in set(part.isr) - set(p.isr):
            p.follower_caught_up_ms.setdefault(replica, self.clock_ms())
        p.leader, p.leader_epoch, p.partition_epoch = part.leader, part.leader_epoch, part.partition_epoch
        p.replicas, p.isr = part.replicas, part.isr
        if config is not p.log.config and config != p.log.config:
            p.log.update_config(config)
        if p.leader == self.node_id and not was_leader:
            self._become_leader(p)
        self.maybe_advance_high_watermark(p)
        p.wake()

    def _become_leader(self, p: Partition) -> None:
        p.log.leader_epoch_cache.assign(p.leader_epoch, p.log.log_end_offset)
        # Followers start unknown; the ISR gets a full lag period to fetch (as Kafka).
        now = self.clock_ms()
        p.follower_end_offsets.clear()
        p.follower_last_fetch.clear()
        p.follower_caught_up_ms = {r: now for r in p.isr if r != self.node_id}
        p.pending_isr = None
        if p.producer_state.loaded:  # else it is read, at the log end, when first used
            p.producer_state.sync()
        self.maybe_advance_high_watermark(p)
        log.debug("partition_leader", topic=p.topic, partition=p.index, leader_epoch=p.leader_epoch,
                 log_end_offset=p.log.log_end_offset, high_watermark=p.high_watermark, isr=list(p.isr))

    def _remove_all(self, keys: list[tuple[str, int]]) -> None:
        removed = [self.partitions.pop(key) for key in keys]
        for p in removed:
            p.online = False
            p.wake()
        if removed:
            self.log_manager.delete_partitions([TopicPartition(p.topic, p.index) for p in removed])
            log.info("partitions_removed", partitions=len(removed), topics=sorted({p.topic for p in removed}))

    # ------------------------------------------------------------ lookups

    def get(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def is_leader(self, p: Partition) -> bool:
        return p.leader == self.node_id

    # ------------------------------------------------------------ high watermark

    def maybe_advance_high_watermark(self, p: Partition) -> bool:
        """HW = the smallest log end offset over the ISR; it only moves forward."""
        return p.maybe_increment_high_watermark()

    def record_follower_fetch(self, p: Partition, replica: int, fetch_offset: int) -> None:
        """A follower fetched from ``fetch_offset``: everything below it is on its log.
        It counts as caught up now if it asked for this leader's log end, or as of its
        previous fetch if it has since reached the log end of that moment (Kafka's rule)."""
        if p.leader != self.node_id or replica not in p.replicas or replica == self.node_id:
            return
        now = self.clock_ms()
        leo = p.log.log_end_offset
        previous = p.follower_last_fetch.get(replica)
        if fetch_offset >= leo:
            p.follower_caught_up_ms[replica] = now
        elif previous is not None and fetch_offset >= previous[1]:
            p.follower_caught_up_ms[replica] = max(p.follower_caught_up_ms.get(replica, 0), previous[0])
        p.follower_last_fetch[replica] = (now, leo)
        p.follower_end_offsets[replica] = min(fetch_offset, leo)
        self.maybe_advance_high_watermark(p)

    def set_follower_high_watermark(self, p: Partition, leader_high_watermark: int) -> None:
        """A follower's high watermark: the leader's, as far as this log reaches."""
        hw = min(leader_high_watermark, p.log.log_end_offset)
        if hw != p.high_watermark:
            p.high_watermark = max(hw, p.log.log_start_offset)
            p.wake()

    def after_truncation(self, p: Partition) -> None:
        """The log was cut, or restarted at the leader's log start: producer state and the
        high watermark (kept within the log) follow it."""
        p.producer_state.sync()
        p.high_watermark = max(min(p.high_watermark, p.log.log_end_offset), p.log.log_start_offset)
        p.wake()

    # ------------------------------------------------------------ producer state

    async def remove_expired_producers(self, now_ms: int) -> None:
        """Every partition's expired producers, a slice of partitions per event-loop step
        (10,000 partitions at once were a 20 ms step)."""
        partitions = list(self.partitions.values())
        for start in range(0, len(partitions), EXPIRATION_SLICE):
            if start:
                await trio.lowlevel.checkpoint()
            for p in partitions[start:start + EXPIRATION_SLICE]:
                p.producer_state.remove_expired_producers(now_ms)

    def take_producer_snapshots(self) -> None:
        """Snapshot every partition's producer state at its log end (clean shutdown).

        Written without an fsync each, then made durable by one ``sync``: thousands of
        partitions must not cost thousands of fsyncs at shutdown.
        """
        for p in self.partitions.values():
            p.producer_state.take_snapshot(sync=False)
        os.sync()

    # ------------------------------------------------------------ waiting

    async def fetch_records(
        self,
        requested: Iterable[FetchSlot],
        params: FetchParams,
        pacer: Pacer,
        *,
        on_follower_out_of_isr: Callable[[], None] | None = None,
        on_wait: Callable[[int], None] | None = None,
    ) -> tuple[list[FetchSlot], int]:
        """Reads the partitions of a Fetch (Kafka's fetchMessages and Partition.fetchRecords,
        :mod:`broker.replication.fetch`); returns the answered slots and the record bytes read."""
        return await fetch.fetch_records(self, requested, params, pacer, on_follower_out_of_isr=on_follower_out_of_isr,
                                         on_wait=on_wait)

    async def wait_for_change(self, partitions: Iterable[Partition], deadline: float) -> None:
        """Returns when any of ``partitions`` changes (append, HW move, leadership) or at
        ``deadline`` (trio time)."""
        await delayed_produce.wait_for_change(partitions, deadline)


def _indexes_of(image: MetadataImage, topic: str) -> list[int]:
    """The partition indexes ``topic`` had in ``image``."""
    topic_image = image.topic(topic)
    return [] if topic_image is None else list(topic_image.partitions)
