"""An ordered record writer for the tools: explicit partitions and CreateTimes, in order.

``cormorant replay`` must put records back with their original timestamps, and Spark's
Kafka sink cannot set a record's timestamp (its ProducerRecord has none), so the tools
write through this instead: record batches built with :mod:`wire.records`, sent with
Produce (acks=all) by :class:`broker.tools.client.KafkaClient` to each partition's leader.

Per partition there is at most one request in flight and a failed request is never
retried, so records land in the order given, each once, or the tool stops with the error
(Kafka's guarantee for a producer with max.in.flight=1 and retries=0).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType

from broker.tools.client import ClientError, KafkaClient, parse_bootstrap
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.generated.api_000_produce import (
    ProduceRequest,
    ProduceRequestPartitionProduceData,
    ProduceRequestTopicProduceData,
    ProduceResponse,
)
from wire.generated.api_003_metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from wire.generated.api_019_create_topics import (
    CreateTopicsRequest,
    CreateTopicsRequestCreatableTopic,
    CreateTopicsResponse,
)
from wire.records import NewRecord

#: Records and payload bytes per batch: well under the default message.max.bytes (1 MiB).
BATCH_RECORDS_MAX = 1000
BATCH_BYTES_MAX = 512 * 1024
PRODUCE_TIMEOUT_MS = 30_000
CREATE_TIMEOUT_MS = 30_000

Headers = Sequence[tuple[str, bytes | None]]


class ProduceError(Exception):
    """A record batch was refused; nothing after it was sent to that partition."""


@dataclass
class _Pending:
    records: list[NewRecord] = field(default_factory=list)
    size_bytes: int = 0


def _check(code: int, what: str, message: str | None = None) -> None:
    if code != ErrorCode.NONE:
        try:
            name = ErrorCode(code).name
        except ValueError:
            name = f"error {code}"
        raise ProduceError(f"{what}: {name}{f' ({message})' if message else ''}")


def topic_partitions(client: KafkaClient, topic: str) -> dict[int, int]:
    """partition -> leader node id, from Metadata (no auto-creation)."""
    response = client.send(
        MetadataRequest(topics=[MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False),
        MetadataResponse,
    )
    for t in response.topics:
        if t.name == topic:
            if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                return {}
            _check(t.error_code, f"metadata of {topic}")
            return {p.partition_index: p.leader_id for p in t.partitions}
    return {}


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> int:
    """Create ``topic`` with ``partitions`` unless it exists; returns its partition count."""
    with KafkaClient.connect(bootstrap) as client:
        existing = topic_partitions(client, topic)
        if existing:
            return len(existing)
        request = CreateTopicsRequest(
            topics=[CreateTopicsRequestCreatableTopic(
                name=topic, num_partitions=partitions, replication_factor=-1
            )],
            timeout_ms=CREATE_TIMEOUT_MS,
        )
        for result in client.send(request, CreateTopicsResponse).topics:
            if result.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:
                _check(result.error_code, f"creating {topic}", result.error_message)
        return len(topic_partitions(client, topic)) or partitions


class RecordWriter:
    """Buffers records per partition and sends them in order, one batch at a time."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self._bootstrap = bootstrap
        self._clients: dict[tuple[str, int], KafkaClient] = {}
        self._pending: dict[int, _Pending] = {}
        self.records_sent = 0
        with KafkaClient.connect(bootstrap) as client:
            response = client.send(
                MetadataRequest(
                    topics=[MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False
                ),
                MetadataResponse,
            )
        self._brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
        self._leaders: dict[int, int] = {}
        for t in response.topics:
            if t.name == topic:
                if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    raise ProduceError(f"topic {topic} does not exist")
                _check(t.error_code, f"metadata of {topic}")
                self._leaders = {p.partition_index: p.leader_id for p in t.partitions}
        if not self._leaders:
            raise ProduceError(f"topic {topic} does not exist")

    @property
    def partitions(self) -> int:
        return len(self._leaders)

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.flush()
        self.close()

    def send(
        self,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers = (),
        timestamp_ms: int | None = None,
    ) -> None:
        if partition not in self._leaders:
            raise ProduceError(f"{self.topic} has no partition {partition}")
        pending = self._pending.setdefault(partition, _Pending())
        size = len(key or b"") + len(value or b"") + sum(len(k) + len(v or b"") for k, v in headers)
        if pending.records and (
            len(pending.records) >= BATCH_RECORDS_MAX or pending.size_bytes + size > BATCH_BYTES_MAX
        ):
            self._send_partition(partition)
            pending = self._pending.setdefault(partition, _Pending())
        pending.records.append(NewRecord(key=key, value=value, headers=tuple(headers), timestamp=timestamp_ms))
        pending.size_bytes += size

    def flush(self) -> None:
        for partition in sorted(self._pending):
            self._send_partition(partition)

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def _client_for(self, partition: int) -> KafkaClient:
        leader = self._leaders[partition]
        address = self._brokers.get(leader)
        if address is None:
            # Leaderless partition or a broker missing from Metadata: use the bootstrap.
            address = parse_bootstrap(self._bootstrap)
        client = self._clients.get(address)
        if client is None:
            try:
                client = KafkaClient(*address, client_id="cormorant-tools")
            except ClientError as ex:
                raise ProduceError(f"cannot reach the leader of {self.topic}-{partition}: {ex}") from ex
            self._clients[address] = client
        return client

    def _send_partition(self, partition: int) -> None:
        pending = self._pending.pop(partition, None)
        if pending is None or not pending.records:
            return
        request = ProduceRequest(
            acks=-1,
            timeout_ms=PRODUCE_TIMEOUT_MS,
            topic_data=[ProduceRequestTopicProduceData(
                name=self.topic,
                partition_data=[ProduceRequestPartitionProduceData(
                    index=partition, records=build_batch(pending.records)
                )],
            )],
        )
        response = self._client_for(partition).send(request, ProduceResponse)
        for topic in response.responses:
            for p in topic.partition_responses:
                _check(p.error_code, f"producing to {self.topic}-{p.index}", p.error_message)
        self.records_sent += len(pending.records)
