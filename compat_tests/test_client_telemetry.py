"""Client telemetry (KIP-714) with real clients: a client metrics subscription created with
Java 4.3's ``Admin.incrementalAlterConfigs`` on a CLIENT_METRICS resource (confluent-kafka's
AdminClient has no CLIENT_METRICS resource type), then producers with their default
``enable.metrics.push=true`` — a Java 4.3 ``KafkaProducer`` and a confluent-kafka 2.16
(librdkafka) ``Producer`` — push their producer metrics at the subscription's 1 s interval,
and the metrics show up on the broker's Prometheus endpoint labelled with the client's
instance id and client id; a producer no subscription matches pushes nothing.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from compat_tests.harness import settings

from .conftest import BrokerFactory
from .harness.broker import Broker
from .harness.scenario import unique_topic
from .test_quota_rates import metrics_url

pytestmark = pytest.mark.skipif(settings.target() != "cormorant",
                                reason="pushed metrics are read from Cormorant's metrics endpoint")
JAVA_SOURCE = Path(__file__).parent / "java" / "telemetry" / "ClientTelemetry.java"
PREFIX = "org.apache.kafka.producer."
SERIES = "cormorant_client_telemetry_value"
WAIT_S = 30.0


@pytest.fixture(scope="module")
def broker(broker_factory: BrokerFactory) -> Iterator[Broker]:
    b = broker_factory({})
    try:
        yield b
    finally:
        b.close()


@pytest.fixture(scope="module")
def java4(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    from .harness.drivers.java import compile_java4_programs

    cmd = compile_java4_programs(tmp_path_factory.mktemp("telemetry-java"), [JAVA_SOURCE])
    if cmd is None:
        pytest.skip("javac or kafka-clients 4.x not installed")
    return cmd


@pytest.fixture(scope="module")
def subscribed(java4: list[str], broker: Broker) -> None:
    """Producers whose client id starts with ``telemetry-matched-`` push producer metrics every second."""
    done = subprocess.run([*java4, "ClientTelemetry", "subscribe", broker.bootstrap, "producers", PREFIX, "1000",
                           "client_id=telemetry-matched-.*"], capture_output=True, text=True, timeout=120, check=True)
    assert '{"ok": true}' in done.stdout, done.stdout + done.stderr[-2000:]


def client_series(url: str, client_id: str) -> list[dict[str, str]]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return [dict(sample.labels) for family in text_string_to_metric_families(text) for sample in family.samples
            if sample.name == SERIES and sample.labels.get("client_id") == client_id]


def wait_for_series(url: str, client_id: str) -> list[dict[str, str]]:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        found = client_series(url, client_id)
        if found:
            return found
        time.sleep(0.5)
    return []


def java_producer(java4: list[str], broker: Broker, client_id: str, seconds: int) -> subprocess.Popen[str]:
    return subprocess.Popen([*java4, "ClientTelemetry", "produce", broker.bootstrap, unique_topic("telemetry"),
                             client_id, str(seconds)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str]) -> str:
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err[-3000:]
    return out


@pytest.mark.usefixtures("subscribed")
def test_java_producer_pushes_subscribed_metrics(java4: list[str], broker: Broker) -> None:
    url = metrics_url(broker)
    proc = java_producer(java4, broker, "telemetry-matched-java", 15)
    try:
        found = wait_for_series(url, "telemetry-matched-java")
    finally:
        out = finish(proc)
    instance = next(json.loads(line)["instance"] for line in out.splitlines() if line.startswith('{"instance"'))
    assert found, "no metrics of the Java producer on the metrics endpoint"
    assert all(s["metric_name"].startswith(PREFIX) for s in found)
    assert {s["client_instance_id"] for s in found} == {instance}
    assert {s["client_software_name"] for s in found} == {"apache-kafka-java"}


@pytest.mark.usefixtures("subscribed")
def test_unmatched_java_producer_pushes_nothing(java4: list[str], broker: Broker) -> None:
    url = metrics_url(broker)
    proc = java_producer(java4, broker, "telemetry-other-java", 5)
    out = finish(proc)
    assert any(line.startswith('{"instance"') for line in out.splitlines())  # it did ask the broker
    assert client_series(url, "telemetry-other-java") == []


@pytest.mark.usefixtures("subscribed")
def test_confluent_kafka_producer_pushes_subscribed_metrics(broker: Broker) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    url = metrics_url(broker)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "client.id": "telemetry-matched-rdkafka"})
    topic = unique_topic("telemetry-rdkafka")
    found: list[dict[str, str]] = []
    deadline = time.monotonic() + WAIT_S
    try:
        while time.monotonic() < deadline and not found:
            producer.produce(topic, b"v")
            producer.poll(0.2)
            found = client_series(url, "telemetry-matched-rdkafka")
    finally:
        producer.flush(10)
    assert found, "no metrics of the confluent-kafka producer on the metrics endpoint"
    assert all(s["metric_name"].startswith(PREFIX) for s in found)
    assert len({s["client_instance_id"] for s in found}) == 1


@pytest.mark.usefixtures("subscribed")
def test_unmatched_confluent_kafka_producer_pushes_nothing(broker: Broker) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    url = metrics_url(broker)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "client.id": "telemetry-other-rdkafka"})
    topic = unique_topic("telemetry-rdkafka-other")
    end = time.monotonic() + 4
    try:
        while time.monotonic() < end:
            producer.produce(topic, b"v")
            producer.poll(0.2)
    finally:
        assert producer.flush(10) == 0
    assert client_series(url, "telemetry-other-rdkafka") == []
