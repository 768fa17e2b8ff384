"""A real broker, real clients, a real scrape: every metric of docs/metrics.md is served
with exactly its documented attributes, and the numbers match the traffic.

kafka-python and confluent-kafka produce and consume (idempotence off), both admin
clients create topics, a raw client provokes one broker-side error
(NOT_ENOUGH_REPLICAS) and one malformed frame.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.tools.client import KafkaClient
from tests.observability.helpers import (
    MetricDoc,
    MetricsBroker,
    metric_dictionary,
    scrape,
    value,
)
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.generated.api_000_produce import (
    ProduceRequest,
    ProduceRequestPartitionProduceData,
    ProduceRequestTopicProduceData,
    ProduceResponse,
)
from wire.records import NewRecord

kafka = pytest.importorskip("kafka", reason="kafka-python is not installed (pip install -e '.[test]')")
confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")

TIMEOUT_S = 20.0
PER_PARTITION = 10
KP_TOPIC, KP_PARTITIONS = "obs-kafka-python", 3
CK_TOPIC, CK_PARTITIONS = "obs-confluent", 2
MIN_ISR_TOPIC = "obs-min-isr"
GROUP, LAG = "obs-group", 5
#: Series that only exist with what a single node without groups cannot have.
# Series this PLAINTEXT broker has no reason to show (authentications: tests/broker/test_sasl_bad_input.py).
OPTIONAL_SERIES = ("per follower of a led partition", "per committed partition led here",
                   "per listener and mechanism used", "per client metric data point pushed")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MetricsBroker]:
    b = MetricsBroker(tmp_path_factory.mktemp("obs") / "data").start()
    try:
        yield b
    finally:
        b.stop()


def wait_for(predicate: object, what: str, timeout_s: float = TIMEOUT_S) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def drive_traffic(bootstrap: str) -> int:
    """Creates topics, produces and consumes with two clients; returns records produced."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KpTopicPartition
    from kafka.admin import NewTopic as KpNewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    admin.create_topics([
        KpNewTopic(KP_TOPIC, KP_PARTITIONS, 1),
        KpNewTopic(MIN_ISR_TOPIC, 1, 1, topic_configs={"min.insync.replicas": "2"}),
    ])  # fmt: skip
    admin.close()
    cadmin = AdminClient({"bootstrap.servers": bootstrap})
    cadmin.create_topics([NewTopic(CK_TOPIC, num_partitions=CK_PARTITIONS, replication_factor=1)])[
        CK_TOPIC
    ].result(timeout=TIMEOUT_S)

    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False, acks=1, linger_ms=0)
    for p in range(KP_PARTITIONS):
        for i in range(PER_PARTITION):
            producer.send(KP_TOPIC, value=b"k" * 100 + bytes([i]), partition=p).get(timeout=TIMEOUT_S)
    producer.close(timeout=TIMEOUT_S)

    cproducer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False, "acks": "all"})
    for p in range(CK_PARTITIONS):
        for i in range(PER_PARTITION):
            cproducer.produce(CK_TOPIC, value=b"c" * 200 + bytes([i]), partition=p)
    assert cproducer.flush(TIMEOUT_S) == 0

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             consumer_timeout_ms=int(TIMEOUT_S * 1000))
    consumer.assign([KpTopicPartition(KP_TOPIC, p) for p in range(KP_PARTITIONS)])
    consumer.seek_to_beginning()
    got = 0
    for _ in consumer:
        got += 1
        if got == KP_PARTITIONS * PER_PARTITION:
            break
    consumer.close()
    assert got == KP_PARTITIONS * PER_PARTITION

    cconsumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "obs-unused", "enable.auto.commit": False})
    cconsumer.assign([TopicPartition(CK_TOPIC, p, 0) for p in range(CK_PARTITIONS)])
    got = 0
    deadline = time.monotonic() + TIMEOUT_S
    while got < CK_PARTITIONS * PER_PARTITION and time.monotonic() < deadline:
        for msg in cconsumer.consume(num_messages=100, timeout=0.5):
            if msg.error() is None:
                got += 1
    cconsumer.close()
    assert got == CK_PARTITIONS * PER_PARTITION
    return (KP_PARTITIONS + CK_PARTITIONS) * PER_PARTITION


def offers_groups(bootstrap: str) -> bool:
    with KafkaClient.connect(bootstrap, timeout_s=TIMEOUT_S) as client:
        return 11 in client.api_versions  # JoinGroup


def drive_group(bootstrap: str) -> None:
    """A group consumer reads KP_TOPIC whole and commits; then 5 more records arrive."""
    from kafka import KafkaConsumer, KafkaProducer

    consumer = KafkaConsumer(KP_TOPIC, bootstrap_servers=bootstrap, group_id=GROUP, enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=int(TIMEOUT_S * 1000))
    got = 0
    for _ in consumer:
        got += 1
        if got == KP_PARTITIONS * PER_PARTITION:
            break
    consumer.commit()
    consumer.close()
    assert got == KP_PARTITIONS * PER_PARTITION
    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False, acks=1)
    for _ in range(LAG):
        producer.send(KP_TOPIC, value=b"late", partition=0).get(timeout=TIMEOUT_S)
    producer.close(timeout=TIMEOUT_S)


def provoke_not_enough_replicas(bootstrap: str) -> ProduceResponse:
    batch = build_batch([NewRecord(key=None, value=b"refused")])
    request = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[ProduceRequestTopicProduceData(
        name=MIN_ISR_TOPIC, partition_data=[ProduceRequestPartitionProduceData(index=0, records=batch)])])
    with KafkaClient.connect(bootstrap, timeout_s=TIMEOUT_S) as client:
        return client.send(request, ProduceResponse)


def send_unknown_api(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as sock:
        sock.sendall(struct.pack(">ihhih", 10, 999, 0, 7, -1))
        sock.settimeout(TIMEOUT_S)
        assert sock.recv(10) == b""  # closed without an answer


def sample_names(doc: MetricDoc) -> list[str]:
    if doc.kind == "Histogram":
        return [doc.prometheus + suffix for suffix in ("_bucket", "_sum", "_count")]
    return [doc.prometheus]


def test_every_documented_metric_is_served_with_its_attributes(broker: MetricsBroker) -> None:
    docs = metric_dictionary()
    assert len(docs) >= 40, "docs/metrics.md dictionary did not parse"
    assert broker.metrics_url.startswith("http://127.0.0.1:")

    started = time.monotonic()
    produced = drive_traffic(broker.bootstrap)
    groups = offers_groups(broker.bootstrap)
    if groups:
        drive_group(broker.bootstrap)
        produced += LAG
    response = provoke_not_enough_replicas(broker.bootstrap)
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    send_unknown_api(broker.port)
    wait_for(lambda: value(scrape(broker.metrics_url), "cormorant_network_connection_active") == 0,
             "the connection gauge to return to 0 after every client closed")
    samples = scrape(broker.metrics_url)
    traffic_s = time.monotonic() - started

    # Every documented metric, with exactly its attributes.
    documented: set[str] = set()
    for doc in docs:
        names = sample_names(doc)
        documented.update(names)
        present = [n for n in names if samples.get(n)]
        if doc.series in OPTIONAL_SERIES and not present:
            continue
        assert present == names, f"{doc.name}: missing {set(names) - set(present)} (series: {doc.series})"
        for name in names:
            for labels in samples[name]:
                keys = {k for k, _ in labels if not (name.endswith("_bucket") and k == "le")}
                assert keys == set(doc.attributes), f"{name}: labels {sorted(keys)}, documented {doc.attributes}"
    served = {n for n in samples if n.startswith("cormorant_")}
    assert served <= documented, f"undocumented metrics: {sorted(served - documented)}"

    # Resource attributes.
    (target,) = samples["target_info"]
    info = dict(target)
    assert info["service_name"] == "cormorant"
    assert info["service_instance_id"] == "1"
    assert info["service_namespace"] == info["cormorant_cluster_id"]

    # Numbers that follow from the traffic.
    assert value(samples, "cormorant_produce_records_total") == produced
    produce_bytes = value(samples, "cormorant_produce_bytes_total")
    assert value(samples, "cormorant_produce_batch_size_bytes_sum") == produce_bytes
    assert value(samples, "cormorant_produce_batch_records_sum") == produced
    assert value(samples, "cormorant_network_io_bytes_total", direction="receive") >= produce_bytes
    assert value(samples, "cormorant_fetch_bytes_total", fetcher="consumer") >= produce_bytes
    assert value(samples, "cormorant_fetch_bytes_total", fetcher="follower") == 0
    assert value(samples, "cormorant_network_io_bytes_total", direction="transmit") >= produce_bytes
    for topic, partitions in ((KP_TOPIC, KP_PARTITIONS), (CK_TOPIC, CK_PARTITIONS)):
        for p in range(partitions):
            late = LAG if groups and (topic, p) == (KP_TOPIC, 0) else 0
            assert value(samples, "cormorant_log_end_offset", topic=topic, partition=str(p)) == PER_PARTITION + late
            assert value(samples, "cormorant_log_start_offset", topic=topic, partition=str(p)) == 0
            assert value(samples, "cormorant_log_size_bytes", topic=topic, partition=str(p)) > 0
            assert value(samples, "cormorant_log_segments", topic=topic, partition=str(p)) == 1
            assert value(samples, "cormorant_replication_isr_size", topic=topic, partition=str(p)) == 1
    assert value(samples, "cormorant_log_end_offset", topic=MIN_ISR_TOPIC, partition="0") == 0
    # Every hosted partition is led here (internal topics such as __consumer_offsets included).
    leaders = value(samples, "cormorant_replication_partitions", role="leader")
    assert leaders == len(samples["cormorant_log_end_offset"]) >= KP_PARTITIONS + CK_PARTITIONS + 1
    assert value(samples, "cormorant_replication_under_min_isr") == 1
    assert value(samples, "cormorant_replication_under_replicated") == 0
    assert value(samples, "cormorant_request_errors_total", api="Produce", error="NOT_ENOUGH_REPLICAS") == 1
    assert value(samples, "cormorant_network_decode_failures_total", reason="unknown_api") == 1
    assert value(samples, "cormorant_network_connection_opened_total", listener="PLAINTEXT") >= 7
    for api in ("Produce", "Fetch", "Metadata", "ApiVersions", "CreateTopics"):
        assert value(samples, "cormorant_request_duration_seconds_count", api=api) >= 1, api
    latency_sum = value(samples, "cormorant_request_duration_seconds_sum")
    assert 0 < latency_sum < traffic_s * 50  # long polls overlap; never absurd
    assert value(samples, "cormorant_request_active") == 0
    assert value(samples, "cormorant_controller_active") == 1
    assert value(samples, "cormorant_controller_brokers", state="unfenced") == 1
    assert value(samples, "cormorant_controller_metadata_offset") > 0
    assert value(samples, "cormorant_controller_commit_duration_seconds_count") >= 3  # topics, registration
    assert value(samples, "cormorant_log_recovery_duration_seconds") > 0

    if groups:
        for p in range(KP_PARTITIONS):
            lag = value(samples, "cormorant_group_lag", group=GROUP, topic=KP_TOPIC, partition=str(p))
            assert lag == (LAG if p == 0 else 0), (p, lag)
        assert value(samples, "cormorant_group_offset_commits_total") >= KP_PARTITIONS
        assert value(samples, "cormorant_group_rebalances_total") >= 1
        assert value(samples, "cormorant_group_rebalance_duration_seconds_count") >= 1
        assert value(samples, "cormorant_group_count") >= 1

    # The broker-side error was logged once, with its context.
    logged = [e for e in broker.log_events() if e.get("event") == "broker_error_returned"]
    assert len(logged) == 1, logged
    assert logged[0]["error"] == "NOT_ENOUGH_REPLICAS"
    assert logged[0]["where"] == [f"{MIN_ISR_TOPIC}-0"]
    assert logged[0]["api"] == "Produce"
    listening = [e for e in broker.log_events() if e.get("event") == "metrics_listening"]
    assert listening and broker.metrics_url.endswith(f":{listening[0]['port']}/metrics")


def test_event_loop_task_gauge_follows_client_connections(broker: MetricsBroker) -> None:
    """Each client connection is served by a task of its own: the gauge rises with open connections and
    falls back when they close (a count that only rises is what the soak looks for)."""
    connections = 25

    def tasks() -> float:
        return value(scrape(broker.metrics_url), "cormorant_eventloop_tasks")

    idle = tasks()
    assert idle > 0
    socks = [socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT_S) for _ in range(connections)]
    try:
        wait_for(lambda: tasks() >= idle + connections, f"{connections} more tasks than {idle} with the connections open")
    finally:
        for sock in socks:
            sock.close()
    wait_for(lambda: tasks() < idle + connections / 2, f"the task count to fall back towards {idle}")
    wait_for(lambda: value(scrape(broker.metrics_url), "cormorant_network_connection_active") == 0,
             "the connection gauge to return to 0")


def test_scrape_endpoint_answers_only_metrics(broker: MetricsBroker) -> None:
    import urllib.error
    import urllib.request

    base = broker.metrics_url.rsplit("/", 1)[0]
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(base + "/nope", timeout=TIMEOUT_S)
    assert caught.value.code == 404
    request = urllib.request.Request(broker.metrics_url, method="POST", data=b"x")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=TIMEOUT_S)
    assert caught.value.code == 405


def test_metrics_disabled_serves_nothing(tmp_path: Path) -> None:
    b = MetricsBroker(tmp_path / "data", {"metrics.enabled": "false"}).start()
    try:
        assert b.metrics_url == ""
        with KafkaClient.connect(b.bootstrap, timeout_s=TIMEOUT_S) as client:
            assert client.version_for(0) >= 3
    finally:
        assert b.stop() == 0
