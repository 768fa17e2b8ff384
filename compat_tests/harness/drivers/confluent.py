"""confluent-kafka 2.16.1 (bundled librdkafka 2.16.0), in process."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from .. import settings
from ..groups import (
    GroupDescription,
    GroupMember,
    GroupOptions,
    MemberDescription,
    python_member_command,
)
from .base import (
    Capabilities,
    ClientError,
    ClusterMetadata,
    Codec,
    ConsumedRecord,
    Delivery,
    Driver,
    DriverUnavailable,
    OffsetSpec,
    Record,
    sort_consumed,
)

CLIENT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
API_TIMEOUT_S = settings.API_TIMEOUT_MS / 1000


class ConfluentDriver(Driver):
    name = "confluent-kafka"

    def __init__(self, bootstrap: str) -> None:
        super().__init__(bootstrap)
        self.capabilities = Capabilities(
            codecs=frozenset({"none", "gzip", "snappy", "lz4", "zstd"})
        )

    @classmethod
    def check_available(cls) -> None:
        try:
            import confluent_kafka  # noqa: F401
        except ImportError as exc:
            raise DriverUnavailable(
                f"confluent-kafka is not installed ({settings.INSTALL_HINT})"
            ) from exc

    def _error(self, err: Any) -> ClientError:
        from confluent_kafka import KafkaError, KafkaException

        if isinstance(err, KafkaException) and err.args and isinstance(err.args[0], KafkaError):
            err = err.args[0]
        if isinstance(err, KafkaError):
            return ClientError(self.name, err.str(), code=err.code(), name=err.name())
        return ClientError(self.name, str(err), name=type(err).__name__)

    def _common(self) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.bootstrap,
            "client.id": "compat-confluent",
            "socket.timeout.ms": settings.REQUEST_TIMEOUT_MS,
        }

    # -- data ------------------------------------------------------------------------------

    def produce(
        self,
        topic: str,
        records: Sequence[Record],
        *,
        acks: int = -1,
        compression: Codec = "none",
    ) -> list[Delivery]:
        from confluent_kafka import Producer

        config = {
            **self._common(),
            "acks": str(acks),
            "compression.type": compression,
            "message.max.bytes": CLIENT_MAX_MESSAGE_BYTES,
            "linger.ms": 5,
            "request.timeout.ms": settings.REQUEST_TIMEOUT_MS,
            "message.timeout.ms": settings.DELIVERY_TIMEOUT_MS,
        }
        producer = Producer(config)
        results: list[Any] = [None] * len(records)

        def on_delivery(index: int) -> Any:
            def callback(err: Any, msg: Any) -> None:
                results[index] = err if err is not None else msg

            return callback

        for i, r in enumerate(records):
            kwargs: dict[str, Any] = {
                "value": r.value,
                "key": r.key,
                "headers": list(r.headers),
                "on_delivery": on_delivery(i),
            }
            if r.partition is not None:
                kwargs["partition"] = r.partition
            if r.timestamp_ms is not None:
                kwargs["timestamp"] = r.timestamp_ms
            try:
                producer.produce(topic, **kwargs)
            except Exception as exc:
                raise self._error(exc) from exc
            producer.poll(0)
        remaining = producer.flush(settings.DELIVERY_TIMEOUT_MS / 1000 + 5)
        if remaining:
            raise ClientError(self.name, f"{remaining} records still undelivered after flush")
        deliveries = []
        for result in results:
            if result is None or not hasattr(result, "partition"):
                raise self._error(result)
            offset = result.offset()
            deliveries.append(
                Delivery(result.partition(), offset if acks != 0 and offset >= 0 else None)
            )
        return deliveries

    def consume(
        self,
        topic: str,
        partitions: Sequence[int],
        *,
        count: int,
        start: int | Literal["beginning"] = "beginning",
        timeout_s: float = 20.0,
    ) -> list[ConsumedRecord]:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

        # The Python Consumer insists on a group.id even for assign(); nothing is committed.
        consumer = Consumer(
            {
                **self._common(),
                "group.id": f"compat-confluent-{uuid.uuid4().hex[:12]}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 200,
                "enable.partition.eof": False,
            }
        )
        out: list[ConsumedRecord] = []
        try:
            offset = OFFSET_BEGINNING if start == "beginning" else start
            consumer.assign([TopicPartition(topic, p, offset) for p in partitions])
            deadline = time.monotonic() + timeout_s
            while len(out) < count and time.monotonic() < deadline:
                messages = consumer.consume(num_messages=count - len(out), timeout=0.3)
                for m in messages:
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            continue
                        raise self._error(err)
                    out.append(
                        ConsumedRecord(
                            partition=m.partition(),
                            offset=m.offset(),
                            key=m.key(),
                            value=m.value(),
                            headers=tuple(m.headers() or ()),
                            timestamp_ms=m.timestamp()[1],
                        )
                    )
        finally:
            consumer.close()
        return sort_consumed(out)

    def list_offsets(self, topic: str, partition: int, spec: OffsetSpec) -> int:
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec as ConfluentOffsetSpec

        if spec == "earliest":
            offset_spec = ConfluentOffsetSpec.earliest()
        elif spec == "latest":
            offset_spec = ConfluentOffsetSpec.latest()
        else:
            offset_spec = ConfluentOffsetSpec.for_timestamp(spec)
        tp = TopicPartition(topic, partition)
        admin = self._admin()  # keep it alive until the future completes
        futures = admin.list_offsets({tp: offset_spec}, request_timeout=API_TIMEOUT_S)
        info = self._wait(futures[tp])
        return int(info.offset)

    def metadata(self) -> ClusterMetadata:
        try:
            md = self._admin().list_topics(timeout=API_TIMEOUT_S)
        except Exception as exc:
            raise self._error(exc) from exc
        return ClusterMetadata(
            brokers=frozenset((b.id, b.host, b.port) for b in md.brokers.values()),
            topics={name: len(t.partitions) for name, t in md.topics.items() if t.error is None},
        )

    # -- admin -----------------------------------------------------------------------------

    def _admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient(self._common())

    def _wait(self, future: Any) -> Any:
        try:
            return future.result(timeout=API_TIMEOUT_S + 5)
        except Exception as exc:
            raise self._error(exc) from exc

    def create_topic(
        self, name: str, partitions: int, configs: Mapping[str, str] | None = None
    ) -> None:
        from confluent_kafka.admin import NewTopic

        admin = self._admin()
        futures = admin.create_topics(
            [
                NewTopic(
                    name,
                    num_partitions=partitions,
                    replication_factor=1,
                    config=dict(configs or {}),
                )
            ],
            operation_timeout=API_TIMEOUT_S,
            request_timeout=API_TIMEOUT_S,
        )
        self._wait(futures[name])

    def describe_topic_configs(self, topic: str) -> dict[str, str | None]:
        from confluent_kafka.admin import ConfigResource, ResourceType

        resource = ConfigResource(ResourceType.TOPIC, topic)
        admin = self._admin()
        futures = admin.describe_configs([resource], request_timeout=API_TIMEOUT_S)
        entries = self._wait(next(iter(futures.values())))
        return {key: entry.value for key, entry in entries.items()}

    def alter_topic_config(self, topic: str, key: str, value: str) -> None:
        from confluent_kafka.admin import (
            AlterConfigOpType,
            ConfigEntry,
            ConfigResource,
            ResourceType,
        )

        resource = ConfigResource(
            ResourceType.TOPIC,
            topic,
            incremental_configs=[
                ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
            ],
        )
        admin = self._admin()
        futures = admin.incremental_alter_configs([resource], request_timeout=API_TIMEOUT_S)
        self._wait(next(iter(futures.values())))

    def delete_topic(self, name: str) -> None:
        admin = self._admin()
        futures = admin.delete_topics(
            [name], operation_timeout=API_TIMEOUT_S, request_timeout=API_TIMEOUT_S
        )
        self._wait(futures[name])

    # -- consumer groups -------------------------------------------------------------------

    def start_member(
        self, topic: str, group: str, options: GroupOptions, *, count: int | None = None
    ) -> GroupMember:
        return GroupMember(
            self.name, python_member_command(self.name, self.bootstrap, topic, group, options, count),
            cwd=str(settings.PROJECT_ROOT))

    def list_groups(self) -> dict[str, str | None]:
        admin = self._admin()  # keep it alive until the future completes
        result = self._wait(admin.list_consumer_groups(request_timeout=API_TIMEOUT_S))
        return {g.group_id: _state_name(g.state) if g.state is not None else None for g in result.valid}

    def describe_group(self, group: str) -> GroupDescription:
        admin = self._admin()
        d = self._wait(admin.describe_consumer_groups([group], request_timeout=API_TIMEOUT_S)[group])
        members = tuple(
            MemberDescription(
                m.member_id, m.client_id, m.host, m.group_instance_id,
                frozenset((tp.topic, tp.partition) for tp in (m.assignment.topic_partitions if m.assignment else [])),
            )
            for m in d.members
        )
        return GroupDescription(group, _state_name(d.state), members)

    def delete_group(self, group: str) -> None:
        admin = self._admin()
        self._wait(admin.delete_consumer_groups([group], request_timeout=API_TIMEOUT_S)[group])

    def committed_offsets(self, group: str, topic: str) -> dict[int, int]:
        from confluent_kafka import ConsumerGroupTopicPartitions

        admin = self._admin()
        futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                    request_timeout=API_TIMEOUT_S)
        result = self._wait(futures[group])
        return {tp.partition: tp.offset for tp in result.topic_partitions if tp.topic == topic and tp.offset >= 0}


def _state_name(state: Any) -> str:
    """librdkafka's ConsumerGroupState (PREPARING_REBALANCING...) as Kafka names the state."""
    names = {"UNKNOWN": "Unknown", "PREPARING_REBALANCING": "PreparingRebalance",
             "COMPLETING_REBALANCING": "CompletingRebalance", "STABLE": "Stable", "DEAD": "Dead", "EMPTY": "Empty"}
    return names.get(getattr(state, "name", str(state)), str(state))
