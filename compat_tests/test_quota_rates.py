"""Real clients held to a 1 MB/s produce quota and a 1 MB/s consume quota, within 10 %.

The Java client throttles itself (KIP-219); librdkafka ignores ``throttle_time_ms`` and is held
by the broker muting the connection for the throttle time. Both must run at the quota, without
errors.

The rate is measured where the quota applies, on the broker's own byte counters
(``cormorant.network.io``, scraped every 100 ms), as the least-squares slope over the steady
part of each run, from 3 MiB to 23 MiB of a 24 MiB run (some 20 s; the produce and the consume
run at once, each quota on its own direction of the counter). So neither the client's
start-up (a JVM takes seconds on a loaded machine) nor the allowance of the first window
(``quota.window.num - 1`` windows' worth, which Kafka lets through at once) skews it.

Kafka's windowed rate holds a client that could go faster in a sawtooth: each time the oldest
window slides out, a window's worth passes at once, then the client is held until the next.
Over a stretch the slope depends on where the stretch starts in that period, by up to one
period's worth: two one-second windows make the period short against the 20 s measured.
A consumer is held to its quota only when each fetch is small against one window's allowance
(a throttled fetch is answered empty, its bytes uncounted): the Java driver asks 4 MiB per
partition, so the broker's ``fetch.max.bytes`` is 64 KiB here, as an operator running consume
quotas this tight would set it, and the consumed topic is written in 16 KiB batches (a fetch
returns at least one whole batch, and librdkafka would batch a megabyte). For the same reason
librdkafka produces with 64 KiB batches (:func:`librdkafka_produce`).
"""

from __future__ import annotations

import re
import threading
import time
import urllib.request
from collections.abc import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.tools.client import KafkaClient
from compat_tests.conftest import BrokerFactory
from compat_tests.harness import settings
from compat_tests.harness.broker import Broker
from compat_tests.harness.drivers import Record
from compat_tests.harness.scenario import get_driver, unique_topic
from wire.batch_builder import build_batch
from wire.generated.api_000_produce import (
    ProduceRequest,
    ProduceRequestPartitionProduceData,
    ProduceRequestTopicProduceData,
    ProduceResponse,
)
from wire.generated.api_049_alter_client_quotas import (
    AlterClientQuotasRequest,
    AlterClientQuotasRequestEntityData,
    AlterClientQuotasRequestEntryData,
    AlterClientQuotasRequestOpData,
    AlterClientQuotasResponse,
)
from wire.records import NewRecord

pytestmark = pytest.mark.skipif(settings.target() != "cormorant", reason="Cormorant's byte counters")

RATE = 1 << 20  # 1 MiB/s
RECORD = 16 << 10
TOTAL = 24 << 20
STEADY = (3 << 20, 23 << 20)
#: The producers get every record queued at once: the last waits some 23 s to be sent.
DELIVERY_TIMEOUT_MS = 60_000
TOLERANCE = 0.10
SAMPLE_S = 0.1
METRICS_URL = re.compile(r" metrics=(http://\S+/metrics)")


def metrics_url(broker: Broker) -> str:
    stdout = broker.work_dir / f"{broker.target}-{broker._runs}.stdout.log"
    match = METRICS_URL.search(stdout.read_text())
    assert match, "no metrics endpoint in the ready line"
    return match.group(1)


def io_bytes(url: str, direction: str) -> float:
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "cormorant_network_io_bytes_total" and sample.labels.get("direction") == direction:
                return float(sample.value)
    raise AssertionError("cormorant_network_io_bytes_total not served")


def throttled_responses(url: str, quota_type: str) -> float:
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (sample.name == "cormorant_quota_throttle_time_milliseconds_count"
                    and sample.labels.get("quota_type") == quota_type):
                return float(sample.value)
    return 0.0


def measured_rate(url: str, direction: str, run: Callable[[], None]) -> float:
    """Runs ``run`` while sampling the byte counter; the steady rate in bytes per second."""
    base = io_bytes(url, direction)
    samples: list[tuple[float, float]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append((time.monotonic(), io_bytes(url, direction) - base))
            done.wait(SAMPLE_S)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        run()
    finally:
        done.set()
        sampler.join(timeout=10)
    return steady_rate(samples)


def steady_rate(samples: list[tuple[float, float]]) -> float:
    """The least-squares slope of ``(time, bytes)`` samples over the steady part of the run."""
    steady = [(t, b) for t, b in samples if STEADY[0] <= b <= STEADY[1]]
    assert len(steady) >= 50, f"too few samples in the steady part: {len(steady)} of {len(samples)}"
    mean_t = sum(t for t, _ in steady) / len(steady)
    mean_b = sum(b for _, b in steady) / len(steady)
    return (sum((t - mean_t) * (b - mean_b) for t, b in steady)
            / sum((t - mean_t) ** 2 for t, _ in steady))


def librdkafka_produce(bootstrap: str, topic: str, records: list[Record]) -> int:
    """librdkafka with 64 KiB batches (its default is 1 MB: at 1 MiB/s each request would be a
    second's worth, and the rate a staircase too coarse to measure over 20 s); the records
    acknowledged."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5,
                         "batch.size": 64 << 10, "message.timeout.ms": DELIVERY_TIMEOUT_MS})
    delivered: list[bool] = []
    for r in records:
        producer.produce(topic, r.value, r.key, on_delivery=lambda err, _m: delivered.append(err is None))
    assert producer.flush(DELIVERY_TIMEOUT_MS / 1000 + 5) == 0
    assert all(delivered), "a record was not acknowledged"
    return len(delivered)


def fill(bootstrap: str, topic: str, records: list[Record]) -> None:
    """Writes ``records`` one batch each, before any quota applies."""
    with KafkaClient.connect(bootstrap, timeout_s=20) as c:
        for r in records:
            batch = build_batch([NewRecord(key=r.key, value=r.value, timestamp=None)])
            reply = c.send(ProduceRequest(acks=1, timeout_ms=10_000, topic_data=[ProduceRequestTopicProduceData(
                name=topic, partition_data=[ProduceRequestPartitionProduceData(index=0, records=batch)])]),
                ProduceResponse)
            assert reply.responses[0].partition_responses[0].error_code == 0


def set_quotas(bootstrap: str) -> None:
    with KafkaClient.connect(bootstrap, timeout_s=20) as c:
        reply = c.send(AlterClientQuotasRequest(entries=[AlterClientQuotasRequestEntryData(
            entity=[AlterClientQuotasRequestEntityData(entity_type="user", entity_name=None)],
            ops=[AlterClientQuotasRequestOpData(key="producer_byte_rate", value=float(RATE)),
                 AlterClientQuotasRequestOpData(key="consumer_byte_rate", value=float(RATE))])]),
            AlterClientQuotasResponse)
        assert reply.entries[0].error_code == 0


@pytest.mark.parametrize("client", ["java", "confluent-kafka"])
def test_one_mib_per_second_produce_and_consume(broker_factory: BrokerFactory, client: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, "DELIVERY_TIMEOUT_MS", DELIVERY_TIMEOUT_MS)
    broker = broker_factory({"quota.window.num": "2", "quota.window.size.seconds": "1",
                             "fetch.max.bytes": str(64 << 10), "metrics.listener": "127.0.0.1:0"})
    url = metrics_url(broker)
    driver = get_driver(client, broker)
    topic = unique_topic(f"quota-rate-{client}")
    broker.create_topic(topic, 1)
    consumed_topic = unique_topic(f"quota-rate-read-{client}")
    broker.create_topic(consumed_topic, 1)
    records = [Record(key=b"k", value=bytes([i % 251]) * RECORD) for i in range(TOTAL // RECORD)]
    fill(broker.bootstrap, consumed_topic, records)
    set_quotas(broker.bootstrap)

    produced: list[int] = []

    def produce() -> None:
        if client == "confluent-kafka":
            produced.append(librdkafka_produce(broker.bootstrap, topic, records))
        else:
            produced.append(len(driver.produce(topic, records, acks=1)))

    consumed: list[int] = []
    rates: dict[str, float] = {}

    def measure(direction: str, run: Callable[[], None]) -> None:
        rates[direction] = measured_rate(url, direction, run)

    # The two quotas are independent (producer_byte_rate on received bytes, consumer_byte_rate
    # on transmitted ones), so both run at once: the produce requests' replies and the fetch
    # requests themselves are some hundred bytes a second against a MiB.
    consuming = threading.Thread(target=measure, args=("transmit", lambda: consumed.append(
        len(driver.consume(consumed_topic, [0], count=len(records), timeout_s=90)))), daemon=True)
    consuming.start()
    try:
        measure("receive", produce)
    finally:
        consuming.join(timeout=120)
    assert not consuming.is_alive(), "the consumer did not finish"
    assert produced == [len(records)]  # every record acknowledged: slowed, never refused
    assert consumed == [len(records)]
    produce_rate, consume_rate = rates["receive"], rates["transmit"]
    print(f"{client}: produce {produce_rate / RATE:.3f} MiB/s, consume {consume_rate / RATE:.3f} MiB/s")
    assert abs(produce_rate - RATE) <= TOLERANCE * RATE, produce_rate / RATE
    assert abs(consume_rate - RATE) <= TOLERANCE * RATE, consume_rate / RATE
    # The broker throttled both (it reports throttle_time_ms and mutes the connection).
    assert throttled_responses(url, "produce") > 0 and throttled_responses(url, "fetch") > 0
