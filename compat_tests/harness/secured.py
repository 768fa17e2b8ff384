"""Secured listeners for the compatibility suite: certificates, client settings per client.

A :class:`ClientSecurity` says how a client connects (Kafka's ``security.protocol``, the CA
it trusts, its own certificate for mutual TLS, its SASL mechanism and credentials); each
client library gets it in its own spelling. :func:`roundtrip` and :func:`refused` run one
client against one listener: produce and consume through a consumer group, or connect and
expect to be refused.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from . import settings

CLIENTS = ("confluent", "kafka_python", "kcat")
#: Clients with a roundtrip here but no refusal check.
MORE_CLIENTS = ("aiokafka", "kafkajs")


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    protocol: str  # SSL, SASL_PLAINTEXT, SASL_SSL
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    mechanism: str | None = None
    user: str | None = None
    password: str | None = None

    def with_credentials(self, user: str, password: str) -> ClientSecurity:
        return replace(self, user=user, password=password)

    def librdkafka(self) -> dict[str, str]:
        out = {"security.protocol": self.protocol}
        if self.ca:
            out["ssl.ca.location"] = str(self.ca)
        if self.cert and self.key:
            out["ssl.certificate.location"] = str(self.cert)
            out["ssl.key.location"] = str(self.key)
        if self.mechanism:
            out["sasl.mechanism"] = self.mechanism
            out["sasl.username"] = self.user or ""
            out["sasl.password"] = self.password or ""
        return out

    def kafka_python(self) -> dict[str, object]:
        out: dict[str, object] = {"security_protocol": self.protocol}
        if self.ca:
            out["ssl_cafile"] = str(self.ca)
            out["ssl_check_hostname"] = True
        if self.cert and self.key:
            out["ssl_certfile"] = str(self.cert)
            out["ssl_keyfile"] = str(self.key)
        if self.mechanism:
            out["sasl_mechanism"] = self.mechanism
            out["sasl_plain_username"] = self.user
            out["sasl_plain_password"] = self.password
        return out

    def aiokafka(self) -> dict[str, object]:
        import ssl

        out: dict[str, object] = {"security_protocol": self.protocol}
        if self.protocol in ("SSL", "SASL_SSL"):
            context = ssl.create_default_context(cafile=str(self.ca) if self.ca else None)
            if self.cert and self.key:
                context.load_cert_chain(str(self.cert), str(self.key))
            out["ssl_context"] = context
        if self.mechanism:
            out["sasl_mechanism"] = self.mechanism
            out["sasl_plain_username"] = self.user
            out["sasl_plain_password"] = self.password
        return out

    def kafkajs(self) -> dict[str, Any]:
        """kafkajs' ``ssl`` (tls.connect options) and ``sasl`` settings."""
        out: dict[str, Any] = {}
        if self.protocol in ("SSL", "SASL_SSL"):
            tls: dict[str, object] = {"rejectUnauthorized": True}
            if self.ca:
                tls["ca"] = [self.ca.read_text()]
            if self.cert and self.key:
                tls["cert"] = self.cert.read_text()
                tls["key"] = self.key.read_text()
            out["ssl"] = tls
        if self.mechanism:
            out["sasl"] = {"mechanism": self.mechanism.lower(), "username": self.user, "password": self.password}
        return out

    def java(self) -> dict[str, str]:
        out = {"security.protocol": self.protocol}
        if self.ca:
            out["ssl.truststore.type"] = "PEM"
            out["ssl.truststore.location"] = str(self.ca)
        if self.cert and self.key:
            out["ssl.keystore.type"] = "PEM"
            out["ssl.keystore.location"] = str(self.cert.with_name(self.cert.stem + "-bundle.pem"))
        if self.mechanism:
            module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if self.mechanism == "PLAIN"
                      else "org.apache.kafka.common.security.scram.ScramLoginModule")
            out["sasl.mechanism"] = self.mechanism
            out["sasl.jaas.config"] = f'{module} required username="{self.user}" password="{self.password}";'
        return out


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def tls_init(directory: Path) -> Path:
    """Development certificates for 127.0.0.1/localhost from ``cormorant tls init`` in ``directory``."""
    import sys

    result = subprocess.run([sys.executable, "-m", "broker", "tls", "init", "--dir", str(directory),
                             "--hosts", "localhost,127.0.0.1"], capture_output=True, text=True, timeout=60,
                            cwd=settings.PROJECT_ROOT, check=False)
    assert result.returncode == 0, result.stderr
    assert "NOT for production" in result.stdout
    return directory


# -- confluent-kafka -------------------------------------------------------------------------

def _confluent_roundtrip(bootstrap: str, security: ClientSecurity, topic: str, group: str,
                         values: list[bytes]) -> list[bytes]:
    from confluent_kafka import Consumer, Producer

    common = {"bootstrap.servers": bootstrap, **security.librdkafka()}
    producer = Producer({**common, "acks": "all", "message.timeout.ms": settings.DELIVERY_TIMEOUT_MS})
    errors: list[str] = []
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, _msg: errors.append(str(err)) if err else None)
    left = producer.flush(settings.DELIVERY_TIMEOUT_MS / 1000)
    assert left == 0 and not errors, f"undelivered: {left}, errors: {errors}"
    consumer = Consumer({**common, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    got: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + settings.API_TIMEOUT_MS / 1000
        while len(got) < len(values) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, str(msg.error())
            got.append(msg.value() or b"")
        if got:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


#: How long a client is given to be served (or to report why not).
REFUSAL_WAIT_S = 8.0


def _confluent_refused(bootstrap: str, security: ClientSecurity) -> str:
    """Metadata asked for until the client reports why the broker refused it (its error_cb, with
    an error other than "all brokers down") or REFUSAL_WAIT_S passed; never answered."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    reported: list[tuple[int, str]] = []
    failures: list[str] = []
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, **security.librdkafka(),
                              "error_cb": lambda err: reported.append((err.code(), f"{err.name()}: {err.str()}"))}
    admin = AdminClient(config)
    deadline = time.monotonic() + REFUSAL_WAIT_S
    while True:
        try:
            admin.list_topics(timeout=0.5)
        except KafkaException as ex:
            failures.append(str(ex))
        else:
            raise AssertionError("confluent-kafka was served")
        admin.poll(0.1)  # serves error_cb: the client's own account of the refusal
        if any(code != KafkaError._ALL_BROKERS_DOWN for code, _ in reported) or time.monotonic() >= deadline:
            break
    admin.poll(0.2)
    return " | ".join([*failures[-1:], *(text for _, text in reported)])


# -- kafka-python ----------------------------------------------------------------------------

def _kafka_python_roundtrip(bootstrap: str, security: ClientSecurity, topic: str, group: str,
                            values: list[bytes]) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all",
                             request_timeout_ms=settings.REQUEST_TIMEOUT_MS, **security.kafka_python())
    try:
        for value in values:
            producer.send(topic, value).get(timeout=settings.DELIVERY_TIMEOUT_MS / 1000)
    finally:
        producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=settings.API_TIMEOUT_MS,
                             request_timeout_ms=settings.API_TIMEOUT_MS + 5000, **security.kafka_python())
    got: list[bytes] = []
    try:
        for msg in consumer:
            got.append(msg.value)
            if len(got) == len(values):
                break
        if got:
            consumer.commit()
    finally:
        consumer.close()
    return got


def _kafka_python_refused(bootstrap: str, security: ClientSecurity) -> str:
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=8000,
                                 api_version_auto_timeout_ms=8000, **security.kafka_python())
    except (KafkaError, OSError) as ex:
        return f"{type(ex).__name__}: {ex}"
    try:
        admin.list_topics()
    except (KafkaError, OSError) as ex:
        return f"{type(ex).__name__}: {ex}"
    finally:
        admin.close()
    raise AssertionError("kafka-python was served")


# -- kcat ------------------------------------------------------------------------------------

def _kcat(security: ClientSecurity) -> list[str]:
    exe = shutil.which("kcat") or shutil.which("kafkacat")
    assert exe is not None, "kcat is not installed"
    args = [exe]
    for key, value in security.librdkafka().items():
        args += ["-X", f"{key}={value}"]
    return args


def _kcat_roundtrip(bootstrap: str, security: ClientSecurity, topic: str, group: str,
                    values: list[bytes]) -> list[bytes]:
    timeout = settings.SUBPROCESS_TIMEOUT_S
    produced = subprocess.run([*_kcat(security), "-b", bootstrap, "-P", "-t", topic, "-X", "acks=all"],
                              input=b"\n".join(values) + b"\n", capture_output=True, timeout=timeout, check=False)
    assert produced.returncode == 0, produced.stderr.decode(errors="replace")
    consumed = subprocess.run([*_kcat(security), "-b", bootstrap, "-G", group, topic, "-X",
                               "auto.offset.reset=earliest", "-c", str(len(values)), "-f", "%s\n"],
                              capture_output=True, timeout=timeout, check=False)
    assert consumed.returncode == 0, consumed.stderr.decode(errors="replace")
    return [line for line in consumed.stdout.split(b"\n") if line]


def _kcat_refused(bootstrap: str, security: ClientSecurity) -> str:
    # kcat waits out its metadata timeout even once refused; the refusal itself comes in
    # milliseconds (the handshake's first round trips), and a served kcat has its metadata as fast.
    result = subprocess.run([*_kcat(security), "-b", bootstrap, "-L", "-m", "4"], capture_output=True,
                            timeout=settings.SUBPROCESS_TIMEOUT_S, check=False)
    assert result.returncode != 0, "kcat was served"
    return result.stderr.decode(errors="replace")


# -- aiokafka --------------------------------------------------------------------------------

def _aiokafka_roundtrip(bootstrap: str, security: ClientSecurity, topic: str, group: str,
                        values: list[bytes]) -> list[bytes]:
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                    request_timeout_ms=settings.REQUEST_TIMEOUT_MS, **security.aiokafka())
        await producer.start()
        try:
            for value in values:
                await producer.send_and_wait(topic, value)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                    auto_offset_reset="earliest", enable_auto_commit=False, **security.aiokafka())
        await consumer.start()
        got: list[bytes] = []
        try:
            deadline = time.monotonic() + settings.API_TIMEOUT_MS / 1000
            while len(got) < len(values) and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                got.extend(m.value or b"" for msgs in batches.values() for m in msgs)
            if got:
                await consumer.commit()
                partitions = consumer.assignment()
                committed = [await consumer.committed(TopicPartition(tp.topic, tp.partition)) for tp in partitions]
                assert sum(c or 0 for c in committed) == len(got), f"committed {committed}"
        finally:
            await consumer.stop()
        return got

    return asyncio.run(run())


# -- kafkajs ---------------------------------------------------------------------------------

def _kafkajs_roundtrip(bootstrap: str, security: ClientSecurity, topic: str, group: str,
                       values: list[bytes]) -> list[bytes]:
    import base64

    from .drivers.kafkajs import KafkajsDriver

    KafkajsDriver.check_available()
    driver = KafkajsDriver(bootstrap)
    records: list[dict[str, Any]] = [{"key": None, "value": base64.b64encode(v).decode(), "headers": [], "partition": 0,
                "timestamp": None} for v in values]
    driver.call("produce", records=records, topic=topic, acks=-1, compression="none", **security.kafkajs())
    consumed = driver.call("consume", timeout_s=settings.API_TIMEOUT_MS / 1000 + settings.SUBPROCESS_TIMEOUT_S,
                           topic=topic, partitions=[0, 1], start="beginning", count=len(values),
                           timeout_ms=settings.API_TIMEOUT_MS, commit=True, **security.kafkajs())
    got = [base64.b64decode(r["value"]) for r in consumed["records"]]
    if got:
        assert _committed_total(bootstrap, security, consumed["group"]) == len(got)
    return got


def _committed_total(bootstrap: str, security: ClientSecurity, group: str) -> int:
    """The sum of a group's committed offsets, read with confluent-kafka over the same listener."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, **security.librdkafka()})
    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    result = futures[group].result(timeout=settings.API_TIMEOUT_MS / 1000)
    return sum(max(tp.offset, 0) for tp in result.topic_partitions)


def roundtrip(client: str, bootstrap: str, security: ClientSecurity, topic: str, count: int = 3) -> list[bytes]:
    """Produces ``count`` records and consumes them with a consumer group; returns the values read."""
    values = [f"{client}-{i}".encode() for i in range(count)]
    run = {"confluent": _confluent_roundtrip, "kafka_python": _kafka_python_roundtrip,
           "kcat": _kcat_roundtrip, "aiokafka": _aiokafka_roundtrip, "kafkajs": _kafkajs_roundtrip}[client]
    got = run(bootstrap, security, topic, unique(f"group-{client}"), values)
    assert sorted(got) == sorted(values), f"{client} read {got}, expected {values}"
    return got


def refused(client: str, bootstrap: str, security: ClientSecurity) -> str:
    """Connects and expects to be refused; returns what the client reported."""
    run = {"confluent": _confluent_refused, "kafka_python": _kafka_python_refused, "kcat": _kcat_refused}[client]
    return run(bootstrap, security)


@contextlib.contextmanager
def suppressed_client_logs() -> Iterator[None]:
    import logging

    logger = logging.getLogger("kafka")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


# -- Java (kafka-clients 3.9 and 4.x, through compat_tests/java) -------------------------------

def java_roundtrip(variant: str, bootstrap: str, security: ClientSecurity, topic: str, count: int = 3,
                   refused: bool = False, java_config: dict[str, str] | None = None) -> str:
    """Produces with the Java producer, then a Java consumer group member reads and commits.
    With ``refused``, expects the producer to be refused and returns what it reported."""
    from .drivers.base import ClientError, Record
    from .groups import GroupOptions

    driver = secured_java_driver(variant, bootstrap, java_config or security.java())
    if refused:
        try:
            driver.produce(topic, [Record(key=None, value=b"refused")])
        except ClientError as ex:
            return str(ex)
        raise AssertionError(f"{variant} was served")
    deliveries = driver.produce(topic, [Record(key=None, value=f"{variant}-{i}".encode()) for i in range(count)])
    assert len(deliveries) == count
    member = driver.start_member(topic, unique(f"group-{variant}"), GroupOptions(), count=count)
    try:
        member.wait_until(lambda m: len(m.consumed()) >= count and sum(m.committed().values()) >= count,
                          settings.API_TIMEOUT_MS / 1000 + 20, f"{count} records consumed and committed")
    finally:
        member.stop()
    return ""


def secured_java_driver(variant: str, bootstrap: str, client_config: dict[str, str]) -> Any:
    """The Java driver of ``variant`` with Kafka client settings added to every operation."""
    import json

    from .drivers.java import Java4Driver, JavaDriver
    from .groups import GroupMember, GroupOptions

    base = {"java": JavaDriver, "java4": Java4Driver}[variant]
    base.check_available()

    class SecuredJavaDriver(base):  # type: ignore[valid-type,misc]
        def call(self, op: str, timeout_s: float = settings.SUBPROCESS_TIMEOUT_S, **args: Any) -> Any:
            return super().call(op, timeout_s, client_config=client_config, **args)

        def start_member(self, topic: str, group: str, options: GroupOptions, *,
                         count: int | None = None) -> GroupMember:
            payload = {"op": "group_member", "bootstrap": self.bootstrap, "client_config": client_config,
                       "timeouts": {"request_ms": settings.REQUEST_TIMEOUT_MS, "api_ms": settings.API_TIMEOUT_MS},
                       "topic": topic, "group": group, "options": options.to_json(), "count": count}
            return GroupMember(self.name, [*self.command(), json.dumps(payload)], cwd=self.cwd())

    return SecuredJavaDriver(bootstrap)
