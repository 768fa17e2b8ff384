"""aiokafka 0.14.0, in process (one ``asyncio.run`` per operation)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar

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

T = TypeVar("T")
CLIENT_MAX_REQUEST_BYTES = 16 * 1024 * 1024
TOPIC_RESOURCE = 2


def _codecs() -> frozenset[str]:
    from aiokafka import codec

    codecs = {"none", "gzip"}
    if codec.has_snappy():
        codecs.add("snappy")
    if codec.has_lz4():
        codecs.add("lz4")
    if codec.has_zstd():
        codecs.add("zstd")
    return frozenset(codecs)


class AiokafkaDriver(Driver):
    name = "aiokafka"

    def __init__(self, bootstrap: str) -> None:
        super().__init__(bootstrap)
        self.capabilities = Capabilities(codecs=_codecs())

    @classmethod
    def check_available(cls) -> None:
        try:
            import aiokafka  # noqa: F401
        except ImportError as exc:
            raise DriverUnavailable(f"aiokafka is not installed ({settings.INSTALL_HINT})") from exc

    def _error(self, exc: BaseException) -> ClientError:
        code = getattr(exc, "errno", None)
        return ClientError(
            self.name,
            str(exc) or repr(exc),
            code=code if isinstance(code, int) else None,
            name=type(exc).__name__,
        )

    def _check(self, error_code: int, message: str | None) -> None:
        if error_code:
            from aiokafka.errors import for_code

            exc_type = for_code(error_code)
            raise ClientError(self.name, message or "", code=error_code, name=exc_type.__name__)

    def _run(self, factory: Callable[[], Awaitable[T]]) -> T:
        from aiokafka.errors import KafkaError

        async def guarded() -> T:
            return await asyncio.wait_for(factory(), settings.SUBPROCESS_TIMEOUT_S)

        try:
            return asyncio.run(guarded())
        except KafkaError as exc:
            raise self._error(exc) from exc

    def _common(self) -> dict[str, Any]:
        return {
            "bootstrap_servers": self.bootstrap,
            "client_id": "compat-aiokafka",
            "request_timeout_ms": settings.REQUEST_TIMEOUT_MS,
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
        from aiokafka import AIOKafkaProducer

        async def run() -> list[Delivery]:
            producer = AIOKafkaProducer(
                **self._common(),
                acks="all" if acks == -1 else acks,
                compression_type=None if compression == "none" else compression,
                max_request_size=CLIENT_MAX_REQUEST_BYTES,
                linger_ms=5,
            )
            await producer.start()
            try:
                futures = [
                    await producer.send(
                        topic,
                        value=r.value,
                        key=r.key,
                        partition=r.partition,
                        timestamp_ms=r.timestamp_ms,
                        headers=list(r.headers),
                    )
                    for r in records
                ]
                deliveries = []
                for record, future in zip(records, futures, strict=True):
                    meta = await future
                    if meta is None:  # acks=0: aiokafka resolves the future with None
                        partition = -1 if record.partition is None else record.partition
                        deliveries.append(Delivery(partition, None))
                        continue
                    offset = meta.offset if acks != 0 and meta.offset >= 0 else None
                    deliveries.append(Delivery(meta.partition, offset))
                return deliveries
            finally:
                await producer.stop()

        return self._run(run)

    def consume(
        self,
        topic: str,
        partitions: Sequence[int],
        *,
        count: int,
        start: int | Literal["beginning"] = "beginning",
        timeout_s: float = 20.0,
    ) -> list[ConsumedRecord]:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        async def run() -> list[ConsumedRecord]:
            consumer = AIOKafkaConsumer(
                **self._common(),
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                fetch_max_wait_ms=200,
                max_partition_fetch_bytes=4 * 1024 * 1024,
            )
            await consumer.start()
            out: list[ConsumedRecord] = []
            try:
                tps = [TopicPartition(topic, p) for p in partitions]
                consumer.assign(tps)
                if start == "beginning":
                    await consumer.seek_to_beginning(*tps)
                else:
                    for tp in tps:
                        consumer.seek(tp, start)
                deadline = time.monotonic() + timeout_s
                while len(out) < count and time.monotonic() < deadline:
                    batches = await consumer.getmany(timeout_ms=300)
                    for tp, messages in batches.items():
                        out.extend(
                            ConsumedRecord(
                                partition=tp.partition,
                                offset=m.offset,
                                key=m.key,
                                value=m.value,
                                headers=tuple((k, v) for k, v in m.headers),
                                timestamp_ms=m.timestamp,
                            )
                            for m in messages
                        )
            finally:
                await consumer.stop()
            return sort_consumed(out)

        return self._run(run)

    def list_offsets(self, topic: str, partition: int, spec: OffsetSpec) -> int:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        async def run() -> int:
            consumer = AIOKafkaConsumer(**self._common(), group_id=None, enable_auto_commit=False)
            await consumer.start()
            tp = TopicPartition(topic, partition)
            try:
                if spec == "earliest":
                    return int((await consumer.beginning_offsets([tp]))[tp])
                if spec == "latest":
                    return int((await consumer.end_offsets([tp]))[tp])
                found = (await consumer.offsets_for_times({tp: spec}))[tp]
                return -1 if found is None else int(found.offset)
            finally:
                await consumer.stop()

        return self._run(run)

    # -- admin -----------------------------------------------------------------------------

    def _admin_op(self, op: Callable[[Any], Awaitable[T]]) -> T:
        from aiokafka.admin import AIOKafkaAdminClient

        async def run() -> T:
            admin = AIOKafkaAdminClient(**self._common())
            await admin.start()
            try:
                return await op(admin)
            finally:
                await admin.close()

        return self._run(run)

    def metadata(self) -> ClusterMetadata:
        async def op(admin: Any) -> ClusterMetadata:
            cluster = await admin.describe_cluster()
            topics = await admin.describe_topics()
            return ClusterMetadata(
                brokers=frozenset((b["node_id"], b["host"], b["port"]) for b in cluster["brokers"]),
                topics={t["topic"]: len(t["partitions"]) for t in topics if t["error_code"] == 0},
            )

        return self._admin_op(op)

    def create_topic(
        self, name: str, partitions: int, configs: Mapping[str, str] | None = None
    ) -> None:
        from aiokafka.admin import NewTopic

        async def op(admin: Any) -> None:
            response = await admin.create_topics(
                [NewTopic(name, partitions, 1, topic_configs=dict(configs or {}))]
            )
            for t in response.to_object()["topic_errors"]:
                self._check(t["error_code"], t.get("error_message"))

        self._admin_op(op)

    def describe_topic_configs(self, topic: str) -> dict[str, str | None]:
        from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

        async def op(admin: Any) -> dict[str, str | None]:
            responses = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, topic)]
            )
            out: dict[str, str | None] = {}
            for response in responses:
                for resource in response.to_object()["resources"]:
                    self._check(resource["error_code"], resource.get("error_message"))
                    for entry in resource["config_entries"]:
                        out[entry["config_names"]] = entry["config_value"]
            return out

        return self._admin_op(op)

    def alter_topic_config(self, topic: str, key: str, value: str) -> None:
        from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

        async def op(admin: Any) -> None:
            responses = await admin.alter_configs(
                [ConfigResource(ConfigResourceType.TOPIC, topic, configs={key: value})]
            )
            for response in responses:
                for resource in response.to_object()["resources"]:
                    self._check(resource["error_code"], resource.get("error_message"))

        self._admin_op(op)

    def delete_topic(self, name: str) -> None:
        async def op(admin: Any) -> None:
            response = await admin.delete_topics([name])
            for t in response.to_object()["topic_error_codes"]:
                self._check(t["error_code"], None)

        self._admin_op(op)

    # -- consumer groups -------------------------------------------------------------------

    def start_member(
        self, topic: str, group: str, options: GroupOptions, *, count: int | None = None
    ) -> GroupMember:
        return GroupMember(
            self.name, python_member_command(self.name, self.bootstrap, topic, group, options, count),
            cwd=str(settings.PROJECT_ROOT))

    def list_groups(self) -> dict[str, str | None]:
        async def op(admin: Any) -> dict[str, str | None]:
            # ListGroups v0 rows: (group id, protocol type); no state.
            return {row[0]: None for row in await admin.list_consumer_groups()}

        return self._admin_op(op)

    def describe_group(self, group: str) -> GroupDescription:
        from aiokafka.protocol.group import MemberAssignment

        async def op(admin: Any) -> GroupDescription:
            for response in await admin.describe_consumer_groups([group]):
                for g in response.to_object()["groups"]:
                    if g["group"] != group:
                        continue
                    self._check(g["error_code"], None)
                    members = []
                    for m in g["members"]:
                        raw = m["member_assignment"]
                        parts: frozenset[tuple[str, int]] = frozenset()
                        if raw:
                            assignment = MemberAssignment.decode(raw)
                            parts = frozenset((t, p) for t, ps in assignment.assignment for p in ps)
                        members.append(MemberDescription(m["member_id"], m["client_id"], m["client_host"],
                                                         m.get("group_instance_id"), parts))
                    return GroupDescription(group, g["state"], tuple(members))
            raise ClientError(self.name, f"group {group} missing from DescribeGroups")

        return self._admin_op(op)

    def committed_offsets(self, group: str, topic: str) -> dict[int, int]:
        async def op(admin: Any) -> dict[int, int]:
            offsets = await admin.list_consumer_group_offsets(group)
            return {tp.partition: o.offset for tp, o in offsets.items() if tp.topic == topic and o.offset >= 0}

        return self._admin_op(op)
