"""kafka-python 3.0.12, in process."""

from __future__ import annotations

import re
import time
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

CLIENT_MAX_REQUEST_BYTES = 16 * 1024 * 1024
_ERROR_CODE = re.compile(r"\[Error (-?\d+)\]")


def _codecs() -> frozenset[str]:
    from kafka import codec

    codecs = {"none", "gzip"}
    if codec.has_snappy():
        codecs.add("snappy")
    if codec.has_lz4():
        codecs.add("lz4")
    if codec.has_zstd():
        codecs.add("zstd")
    return frozenset(codecs)


class KafkaPythonDriver(Driver):
    name = "kafka-python"

    def __init__(self, bootstrap: str) -> None:
        super().__init__(bootstrap)
        self.capabilities = Capabilities(codecs=_codecs())

    @classmethod
    def check_available(cls) -> None:
        try:
            import kafka  # noqa: F401
        except ImportError as exc:
            raise DriverUnavailable(
                f"kafka-python is not installed ({settings.INSTALL_HINT})"
            ) from exc

    def _error(self, exc: BaseException) -> ClientError:
        code = getattr(exc, "errno", None)
        if not isinstance(code, int):
            match = _ERROR_CODE.search(str(exc))
            code = int(match.group(1)) if match else None
        return ClientError(self.name, str(exc), code=code, name=type(exc).__name__)

    def _common(self) -> dict[str, Any]:
        return {
            "bootstrap_servers": self.bootstrap,
            "client_id": "compat-kafka-python",
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
        from kafka import KafkaProducer
        from kafka.errors import KafkaError

        config: dict[str, Any] = {
            **self._common(),
            "acks": "all" if acks == -1 else acks,
            "compression_type": None if compression == "none" else compression,
            "max_request_size": CLIENT_MAX_REQUEST_BYTES,
            "linger_ms": 5,
            "retries": 5,
            "delivery_timeout_ms": settings.DELIVERY_TIMEOUT_MS,
        }
        try:
            producer = KafkaProducer(**config)
        except KafkaError as exc:
            raise self._error(exc) from exc
        try:
            futures = [
                producer.send(
                    topic,
                    value=r.value,
                    key=r.key,
                    headers=list(r.headers),
                    partition=r.partition,
                    timestamp_ms=r.timestamp_ms,
                )
                for r in records
            ]
            producer.flush(timeout=settings.DELIVERY_TIMEOUT_MS / 1000)
            deliveries = []
            for future in futures:
                meta = future.get(timeout=settings.DELIVERY_TIMEOUT_MS / 1000)
                offset = meta.offset if acks != 0 and meta.offset >= 0 else None
                deliveries.append(Delivery(meta.partition, offset))
            return deliveries
        except KafkaError as exc:
            raise self._error(exc) from exc
        finally:
            producer.close(timeout=5)

    def consume(
        self,
        topic: str,
        partitions: Sequence[int],
        *,
        count: int,
        start: int | Literal["beginning"] = "beginning",
        timeout_s: float = 20.0,
    ) -> list[ConsumedRecord]:
        from kafka import KafkaConsumer, TopicPartition
        from kafka.errors import KafkaError

        consumer = KafkaConsumer(
            **self._common(),
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=200,
            max_partition_fetch_bytes=4 * 1024 * 1024,
        )
        out: list[ConsumedRecord] = []
        try:
            tps = [TopicPartition(topic, p) for p in partitions]
            consumer.assign(tps)
            if start == "beginning":
                consumer.seek_to_beginning(*tps)
            else:
                for tp in tps:
                    consumer.seek(tp, start)
            deadline = time.monotonic() + timeout_s
            while len(out) < count and time.monotonic() < deadline:
                batches = consumer.poll(timeout_ms=300)
                for tp, messages in batches.items():
                    for m in messages:
                        out.append(
                            ConsumedRecord(
                                partition=tp.partition,
                                offset=m.offset,
                                key=m.key,
                                value=m.value,
                                headers=tuple((k, v) for k, v in m.headers),
                                timestamp_ms=m.timestamp,
                            )
                        )
        except KafkaError as exc:
            raise self._error(exc) from exc
        finally:
            consumer.close(autocommit=False)
        return sort_consumed(out)

    def list_offsets(self, topic: str, partition: int, spec: OffsetSpec) -> int:
        from kafka import KafkaConsumer, TopicPartition
        from kafka.errors import KafkaError

        consumer = KafkaConsumer(**self._common(), group_id=None, enable_auto_commit=False)
        tp = TopicPartition(topic, partition)
        timeout_ms = settings.API_TIMEOUT_MS
        try:
            if spec == "earliest":
                return int(consumer.beginning_offsets([tp], timeout_ms=timeout_ms)[tp])
            if spec == "latest":
                return int(consumer.end_offsets([tp], timeout_ms=timeout_ms)[tp])
            found = consumer.offsets_for_times({tp: spec}, timeout_ms=timeout_ms)[tp]
            return -1 if found is None else int(found.offset)
        except KafkaError as exc:
            raise self._error(exc) from exc
        finally:
            consumer.close(autocommit=False)

    def metadata(self) -> ClusterMetadata:
        admin = self._admin()
        try:
            cluster = admin.describe_cluster()
            topics = admin.describe_topics()
        finally:
            admin.close()
        return ClusterMetadata(
            brokers=frozenset((b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]),
            topics={t["name"]: len(t["partitions"]) for t in topics if t["error_code"] == 0},
        )

    # -- admin -----------------------------------------------------------------------------

    def _admin(self) -> Any:
        from kafka.admin import KafkaAdminClient
        from kafka.errors import KafkaError

        try:
            return KafkaAdminClient(**self._common())
        except KafkaError as exc:
            raise self._error(exc) from exc

    def _run_admin(self, op: Any) -> Any:
        from kafka.errors import KafkaError

        admin = self._admin()
        try:
            return op(admin)
        except KafkaError as exc:
            raise self._error(exc) from exc
        finally:
            admin.close()

    def create_topic(
        self, name: str, partitions: int, configs: Mapping[str, str] | None = None
    ) -> None:
        spec = {
            name: {
                "num_partitions": partitions,
                "replication_factor": 1,
                "configs": dict(configs or {}),
            }
        }
        self._run_admin(lambda a: a.create_topics(spec, timeout_ms=settings.REQUEST_TIMEOUT_MS))

    def describe_topic_configs(self, topic: str) -> dict[str, str | None]:
        from kafka.admin import ConfigResource, ConfigResourceType

        result = self._run_admin(
            lambda a: a.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all"
            )
        )
        entries = result["topic"][topic]
        return {key: data["value"] for key, data in entries.items()}

    def alter_topic_config(self, topic: str, key: str, value: str) -> None:
        from kafka.admin import ConfigResource, ConfigResourceType

        result = self._run_admin(
            lambda a: a.alter_configs(
                [ConfigResource(ConfigResourceType.TOPIC, topic, configs={key: value})],
                raise_on_unknown=False,
            )
        )
        outcome = result["topic"][topic]
        if outcome != "OK":
            match = _ERROR_CODE.search(str(outcome))
            raise ClientError(self.name, str(outcome), code=int(match.group(1)) if match else None)

    def delete_topic(self, name: str) -> None:
        self._run_admin(lambda a: a.delete_topics([name], timeout_ms=settings.REQUEST_TIMEOUT_MS))

    # -- consumer groups -------------------------------------------------------------------

    def start_member(
        self, topic: str, group: str, options: GroupOptions, *, count: int | None = None
    ) -> GroupMember:
        return GroupMember(
            self.name, python_member_command(self.name, self.bootstrap, topic, group, options, count),
            cwd=str(settings.PROJECT_ROOT))

    def list_groups(self) -> dict[str, str | None]:
        groups = self._run_admin(lambda a: a.list_groups())
        return {g["group_id"]: g.get("group_state") or None for g in groups}

    def describe_group(self, group: str) -> GroupDescription:
        described = self._run_admin(lambda a: a.describe_groups([group]))[group]
        if described.get("error"):
            raise ClientError(self.name, str(described["error"]))
        members = []
        for m in described["members"]:
            assignment = m.get("member_assignment")
            parts = getattr(assignment, "assigned_partitions", None)
            if parts is None and isinstance(assignment, dict):
                parts = assignment.get("assigned_partitions")
            pairs = frozenset(
                (getattr(tp, "topic", None) or tp["topic"], p)
                for tp in parts or ()
                for p in (getattr(tp, "partitions", None) or tp["partitions"])
            )
            members.append(MemberDescription(m["member_id"], m["client_id"], m["client_host"],
                                             m.get("group_instance_id"), pairs))
        return GroupDescription(group, described["group_state"], tuple(members))

    def delete_group(self, group: str) -> None:
        from kafka import errors

        outcome = self._run_admin(lambda a: a.delete_groups([group]))[group]
        if outcome != "OK":
            error_type = getattr(errors, str(outcome), None)
            raise ClientError(self.name, str(outcome), code=getattr(error_type, "errno", None), name=str(outcome))

    def committed_offsets(self, group: str, topic: str) -> dict[int, int]:
        result = self._run_admin(lambda a: a.list_group_offsets(group))
        offsets = result.get(group, result)
        return {tp.partition: o.offset for tp, o in offsets.items() if tp.topic == topic and o.offset >= 0}
