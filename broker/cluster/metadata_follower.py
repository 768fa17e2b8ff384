"""The broker's copy of the committed metadata log.

:class:`MetadataView` is what the rest of the broker reads (handlers, replica
manager, coordinators). It publishes an image only once the broker has caught
up with the log at start-up, and then only newer images — so the replica
manager never sees a half-replayed image (in which topics created later are
missing and their local logs would be deleted).

:class:`MetadataFollower` fills it on a broker-only node (``process.roles=
broker``): like a KRaft observer it sends Fetch for ``__cluster_metadata``
partition 0 to the active controller, long-polling, and applies the metadata
records in the returned batches with the pure state machine. When its offset
is older than what the controller still holds in memory, the answer names a
snapshot (``snapshot_id``) and the follower loads it with FetchSnapshot. A
combined node reads its own replica of the log instead (its controller's
image feeds the view).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog
import trio

from broker.cluster.controller_channel import (
    CLUSTER_METADATA_TOPIC,
    METADATA_TOPIC_ID,
    ChannelError,
    ControllerChannel,
)
from controller.delta import InvalidRecordError, MetadataDelta, MetadataPublisher, image_publisher
from controller.image import MetadataImage
from controller.snapshot import decode_record_batches, image_from_records
from wire.errors import ErrorCode
from wire.exceptions import DecodeError
from wire.generated.api_001_fetch import (
    FetchRequest,
    FetchRequestFetchPartition,
    FetchRequestFetchTopic,
    FetchResponse,
)
from wire.generated.api_059_fetch_snapshot import (
    FetchSnapshotRequest,
    FetchSnapshotRequestPartitionSnapshot,
    FetchSnapshotRequestSnapshotId,
    FetchSnapshotRequestTopicSnapshot,
    FetchSnapshotResponse,
)

log = structlog.get_logger(__name__)

#: Fetch v14: topic ids, snapshot ids, and ``replica_id`` still a plain field (v15 moved it).
FETCH_VERSION = 14
FETCH_MAX_WAIT_MS = 500
FETCH_MAX_BYTES = 8 * 1024 * 1024
FETCH_TIMEOUT_S = 5.0
FETCH_BACKOFF_S = 0.2

ImageListener = Callable[[MetadataImage], None]
ImagePreparer = Callable[[MetadataDelta, MetadataImage], Awaitable[None]]


class MetadataView:
    """The image this broker serves, published once caught up and only forwards.

    With preparers (:meth:`add_preparer`), an image is published only once they are done
    with it: slow work the listeners would otherwise do on the event loop (creating the
    directories and files of thousands of new partitions) is done before, off the loop, on
    every node alike — whichever controller wrote the records.
    """

    def __init__(self, on_publish_failed: Callable[[], None] = lambda: None) -> None:
        self.image = MetadataImage()
        #: Called when a publisher raised (Kafka's metadata-apply-error-count).
        self._on_publish_failed = on_publish_failed
        self._latest = self.image
        #: The delta that made ``_latest``, while it starts from a published image.
        self._latest_delta: MetadataDelta | None = None
        self.caught_up = trio.Event()
        self._publishers: list[MetadataPublisher] = []
        self._preparers: list[ImagePreparer] = []
        self._changed = trio.Event()
        self._pending = trio.Event()

    def add_publisher(self, publisher: MetadataPublisher) -> None:
        """``publisher(delta, image)`` hears of each image this view publishes, with what changed."""
        self._publishers.append(publisher)

    def add_listener(self, listener: ImageListener) -> None:
        self._publishers.append(image_publisher(listener))

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """A new image of the log and the delta that made it (the controller's publisher)."""
        # Kept if it follows the image published by then (checked when publishing).
        self._latest_delta = delta
        self._latest = image
        if self.caught_up.is_set():
            self._publish()

    def add_preparer(self, preparer: ImagePreparer) -> None:
        """``preparer(delta, image)`` is awaited with each image before the publishers hear of it; one that
        fails leaves its work to the listeners. Images are then published by :meth:`run`."""
        self._preparers.append(preparer)

    def update(self, image: MetadataImage) -> None:
        """A new image without its delta: published as what differs from the last one."""
        self._latest, self._latest_delta = image, None
        if self.caught_up.is_set():
            self._publish()

    def mark_caught_up(self) -> None:
        if not self.caught_up.is_set():
            log.info("metadata_caught_up", offset=self._latest.offset)
            self.caught_up.set()
            self._publish()

    def _newer(self) -> bool:
        # An image older than the one published (a snapshot loaded behind it) waits
        # until the log has moved past again.
        return not (self._latest.offset <= self.image.offset and self.image.offset >= 0)

    def _publish(self) -> None:
        if not self._newer():
            return
        if self._preparers:
            self._pending.set()  # run() prepares it, then publishes
            return
        self._publish_image(self._latest, self._latest_delta)

    def _publish_image(self, latest: MetadataImage, delta: MetadataDelta | None) -> None:
        if delta is None or delta.image is not self.image:
            # The first image once caught up, after a snapshot, or after images that came
            # while an earlier one was being prepared: all that differs.
            delta = MetadataDelta.between(self.image, latest)
        self.image = latest
        if self._latest is latest:
            self._latest_delta = None
        for publisher in self._publishers:
            try:
                publisher(delta, latest)
            except Exception:
                # As Kafka's broker (a non-fatal fault): the records are committed, the other
                # publishers still hear of them, and the broker serves on rather than stop.
                log.exception("metadata_publish_failed", offset=latest.offset,
                              publisher=getattr(publisher, "__qualname__", repr(publisher)))
                self._on_publish_failed()
        self._changed.set()
        self._changed = trio.Event()

    async def run(self) -> None:
        """Publishes the images that came in, each once the preparers are done with it (a
        newer one arriving meanwhile is prepared and published next)."""
        while True:
            await self._pending.wait()
            self._pending = trio.Event()
            if not self._newer():
                continue
            image, delta = self._latest, self._latest_delta
            if delta is None or delta.image is not self.image:
                delta = MetadataDelta.between(self.image, image)
            # Shielded: the records are committed whatever happens meanwhile, and the
            # listeners must hear of them.
            with trio.CancelScope(shield=True):
                for preparer in self._preparers:
                    try:
                        await preparer(delta, image)
                    except Exception:
                        log.exception("image_preparation_failed", offset=image.offset)
            if image.offset > self.image.offset or self.image.offset < 0:
                self._publish_image(image, delta)
            if self._latest is not image and self._newer():
                self._pending.set()

    async def wait_for(self, predicate: Callable[[MetadataImage], bool], timeout_s: float) -> bool:
        with trio.move_on_after(timeout_s):
            while not predicate(self.image):
                await self._changed.wait()
            return True
        return False


class MetadataFollower:
    """Fetches the committed metadata log from the controllers into a :class:`MetadataView`."""

    def __init__(self, channel: ControllerChannel, node_id: int, cluster_id: str, view: MetadataView) -> None:
        self.channel = channel
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.view = view
        self.image = MetadataImage()
        self.high_watermark = -1

    @property
    def next_offset(self) -> int:
        return self.image.offset + 1

    async def run(self) -> None:
        while True:
            try:
                await self._fetch_once()
            except (ChannelError, DecodeError, InvalidRecordError) as ex:
                log.info("metadata_fetch_failed", reason=str(ex), offset=self.next_offset)
                self.channel.forget_active()
                await trio.sleep(FETCH_BACKOFF_S)

    def _fetch_request(self) -> FetchRequest:
        return FetchRequest(
            cluster_id=self.cluster_id,
            replica_id=self.node_id,
            max_wait_ms=FETCH_MAX_WAIT_MS,
            min_bytes=1,
            max_bytes=FETCH_MAX_BYTES,
            topics=[FetchRequestFetchTopic(
                topic_id=METADATA_TOPIC_ID,
                partitions=[FetchRequestFetchPartition(partition=0, fetch_offset=self.next_offset,
                                                       partition_max_bytes=FETCH_MAX_BYTES)],
            )],
        )

    async def _fetch_once(self) -> None:
        reply = await self.channel.send_to_active(
            self._fetch_request(), FetchResponse, timeout_s=FETCH_TIMEOUT_S,
            not_controller=lambda r: r.error_code == ErrorCode.NOT_CONTROLLER, version=FETCH_VERSION)
        if reply.error_code != ErrorCode.NONE or not reply.responses or not reply.responses[0].partitions:
            raise ChannelError(f"metadata fetch failed: {ErrorCode.for_code(reply.error_code).name}")
        part = reply.responses[0].partitions[0]
        if part.snapshot_id.end_offset >= 0:
            await self._load_snapshot(part.snapshot_id.end_offset, part.snapshot_id.epoch)
            return
        if part.error_code != ErrorCode.NONE:
            raise ChannelError(f"metadata fetch failed: {ErrorCode.for_code(part.error_code).name}")
        self.high_watermark = part.high_watermark
        data = part.records
        if data is not None and not isinstance(data, (bytes, bytearray, memoryview)):
            raise ChannelError("unexpected record data")
        records = decode_record_batches(data or b"")
        delta = MetadataDelta(self.image)
        for offset, record in records:
            if offset < delta.offset + 1:
                continue
            if offset != delta.offset + 1:
                raise ChannelError(f"metadata records jump from {delta.offset} to {offset}")
            delta.replay(offset, record)
        if delta.offset != self.image.offset:
            # One delta per fetched run of records: the broker's publishers hear of it once.
            self.image = delta.apply()
            self.view.on_metadata_update(delta, self.image)
        if self.next_offset >= self.high_watermark:
            self.view.mark_caught_up()

    async def _load_snapshot(self, end_offset: int, epoch: int) -> None:
        log.info("metadata_snapshot_fetch", end_offset=end_offset, offset=self.next_offset)
        data = bytearray()
        size = -1
        while size < 0 or len(data) < size:
            request = FetchSnapshotRequest(
                cluster_id=self.cluster_id,
                replica_id=self.node_id,
                max_bytes=FETCH_MAX_BYTES,
                topics=[FetchSnapshotRequestTopicSnapshot(name=CLUSTER_METADATA_TOPIC, partitions=[
                    FetchSnapshotRequestPartitionSnapshot(
                        partition=0, current_leader_epoch=-1,
                        snapshot_id=FetchSnapshotRequestSnapshotId(end_offset=end_offset, epoch=epoch),
                        position=len(data))])],
            )
            reply = await self.channel.send_to_active(
                request, FetchSnapshotResponse, timeout_s=FETCH_TIMEOUT_S,
                not_controller=lambda r: r.error_code == ErrorCode.NOT_CONTROLLER)
            if reply.error_code != ErrorCode.NONE or not reply.topics or not reply.topics[0].partitions:
                raise ChannelError(f"snapshot fetch failed: {ErrorCode.for_code(reply.error_code).name}")
            part = reply.topics[0].partitions[0]
            if part.error_code != ErrorCode.NONE:
                raise ChannelError(f"snapshot fetch failed: {ErrorCode.for_code(part.error_code).name}")
            chunk = part.unaligned_records
            if not isinstance(chunk, (bytes, bytearray, memoryview)) or part.position != len(data):
                raise ChannelError("snapshot chunk out of place")
            if not chunk and part.size != len(data):
                raise ChannelError("empty snapshot chunk")
            data += chunk
            size = part.size
        image = image_from_records([record for _, record in decode_record_batches(bytes(data))], end_offset)
        self.image = image
        self.view.update(image)  # published as what differs from the view's image
        log.info("metadata_snapshot_loaded", end_offset=end_offset, bytes=len(data))
