"""Client telemetry (KIP-714) against a broker process: client metrics subscriptions as
CLIENT_METRICS config resources, GetTelemetrySubscriptions (71) and PushTelemetry (72) with
each of Kafka's errors, and pushed metrics on the broker's Prometheus endpoint."""

from __future__ import annotations

import gzip
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    Gauge,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)

from broker.telemetry.requests import kafka_uuid_text
from broker.tools.client import CLIENT_SOFTWARE_NAME, KafkaClient
from tests.broker.broker_process import BrokerProcess
from tests.observability.helpers import MetricsBroker, scrape, value
from wire.errors import ErrorCode
from wire.generated.api_032_describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsRequestDescribeConfigsResource,
    DescribeConfigsResponse,
)
from wire.generated.api_033_alter_configs import (
    AlterConfigsRequest,
    AlterConfigsRequestAlterableConfig,
    AlterConfigsRequestAlterConfigsResource,
    AlterConfigsResponse,
)
from wire.generated.api_044_incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsRequestAlterableConfig,
    IncrementalAlterConfigsRequestAlterConfigsResource,
    IncrementalAlterConfigsResponse,
)
from wire.generated.api_071_get_telemetry_subscriptions import (
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
)
from wire.generated.api_072_push_telemetry import PushTelemetryRequest, PushTelemetryResponse
from wire.generated.api_074_list_config_resources import (
    ListConfigResourcesRequest,
    ListConfigResourcesResponse,
)
from wire.primitives import ZERO_UUID

CLIENT_METRICS = 16
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
MAX_BYTES = 4096


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MetricsBroker]:
    b = MetricsBroker(tmp_path_factory.mktemp("telemetry") / "data",
                      {"telemetry.max.bytes": str(MAX_BYTES)}).start()
    try:
        yield b
    finally:
        assert b.stop() == 0, b.logs()[-3000:]


@pytest.fixture
def client(broker: MetricsBroker) -> Iterator[KafkaClient]:
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        yield c


def alter(client: KafkaClient, name: str, *ops: tuple[str, int, str | None]) -> tuple[int, str | None]:
    r = client.send(IncrementalAlterConfigsRequest(resources=[IncrementalAlterConfigsRequestAlterConfigsResource(
        resource_type=CLIENT_METRICS, resource_name=name, configs=[
            IncrementalAlterConfigsRequestAlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops])]),
        IncrementalAlterConfigsResponse).responses[0]
    return r.error_code, r.error_message


def described(client: KafkaClient, name: str) -> dict[str, str | None]:
    r = client.send(DescribeConfigsRequest(resources=[DescribeConfigsRequestDescribeConfigsResource(
        resource_type=CLIENT_METRICS, resource_name=name)]), DescribeConfigsResponse).results[0]
    assert r.error_code == ErrorCode.NONE
    return {c.name: c.value for c in r.configs}


def listed(client: KafkaClient) -> list[str]:
    r = client.send(ListConfigResourcesRequest(), ListConfigResourcesResponse, 0)
    return [c.resource_name for c in r.config_resources]


def subscribe(client: KafkaClient, instance_id: uuid.UUID = ZERO_UUID) -> GetTelemetrySubscriptionsResponse:
    return client.send(GetTelemetrySubscriptionsRequest(client_instance_id=instance_id),
                       GetTelemetrySubscriptionsResponse)


def push(client: KafkaClient, sub: GetTelemetrySubscriptionsResponse, metrics: bytes = b"", *,
         compression: int = 0, subscription_id: int | None = None, terminating: bool = False) -> int:
    return client.send(PushTelemetryRequest(
        client_instance_id=sub.client_instance_id,
        subscription_id=sub.subscription_id if subscription_id is None else subscription_id,
        terminating=terminating, compression_type=compression, metrics=metrics), PushTelemetryResponse).error_code


def metrics_data(value_: float, name: str = "org.apache.kafka.producer.record.send.rate") -> bytes:
    point = NumberDataPoint(as_double=value_, attributes=[KeyValue(key="topic", value=AnyValue(string_value="t1"))])
    total = NumberDataPoint(as_int=7)
    data = MetricsData(resource_metrics=[ResourceMetrics(scope_metrics=[ScopeMetrics(metrics=[
        Metric(name=name, gauge=Gauge(data_points=[point])),
        Metric(name="org.apache.kafka.producer.record.send.total", sum=Sum(data_points=[total], is_monotonic=True)),
    ])])])
    return bytes(data.SerializeToString())


def test_advertised(client: KafkaClient) -> None:
    """The broker's metrics pipeline is its telemetry receiver: 71 and 72 are offered at v0."""
    assert (client.api_versions[71].min_version, client.api_versions[71].max_version) == (0, 0)
    assert (client.api_versions[72].min_version, client.api_versions[72].max_version) == (0, 0)


def test_subscription_config_validation(client: KafkaClient) -> None:
    assert alter(client, "bad", ("metric", SET, "x")) == (
        ErrorCode.INVALID_REQUEST, "Unknown client metrics configuration: metric")
    assert alter(client, "bad", ("interval.ms", SET, "50")) == (
        ErrorCode.INVALID_REQUEST, "Invalid value 50 for interval.ms, interval must be between 100 and 3600000 (1 hour)")
    assert alter(client, "bad", ("interval.ms", SET, "soon")) == (
        ErrorCode.INVALID_CONFIG, "Invalid value soon for configuration interval.ms: Not a number of type INT")
    assert alter(client, "bad", ("match", SET, "client_colour=red")) == (
        ErrorCode.INVALID_CONFIG, "Illegal client matching pattern: client_colour=red")
    assert alter(client, "bad", ("match", SET, "client_id=[")) == (
        ErrorCode.INVALID_CONFIG, "Illegal client matching pattern: client_id=[")
    assert alter(client, "bad", ("match", SET, "client_id")) == (
        ErrorCode.INVALID_CONFIG, "Illegal client matching pattern: client_id")
    assert alter(client, "bad", ("interval.ms", APPEND, "1000")) == (
        ErrorCode.INVALID_CONFIG, "Can't APPEND to key interval.ms because its type is not LIST.")
    assert alter(client, "", ("metrics", SET, "*")) == (ErrorCode.INVALID_REQUEST, "Subscription name can't be empty")
    assert "bad" not in listed(client)


def test_subscription_lifecycle(client: KafkaClient) -> None:
    assert alter(client, "life", ("metrics", SET, "a.,b."), ("interval.ms", SET, "60000")) == (ErrorCode.NONE, None)
    assert alter(client, "life", ("metrics", APPEND, "c."), ("match", SET, "client_id=nobody")) == (
        ErrorCode.NONE, None)
    assert described(client, "life") == {"metrics": "a.,b.,c.", "interval.ms": "60000", "match": "client_id=nobody"}
    assert alter(client, "life", ("metrics", SUBTRACT, "a.")) == (ErrorCode.NONE, None)
    assert described(client, "life")["metrics"] == "b.,c."
    assert "life" in listed(client)
    # The legacy AlterConfigs replaces the whole subscription, with the same checks.
    legacy = client.send(AlterConfigsRequest(resources=[AlterConfigsRequestAlterConfigsResource(
        resource_type=CLIENT_METRICS, resource_name="life", configs=[
            AlterConfigsRequestAlterableConfig(name="interval.ms", value="1")])]), AlterConfigsResponse).responses[0]
    assert legacy.error_code == ErrorCode.INVALID_REQUEST
    assert alter(client, "life", ("metrics", DELETE, None), ("interval.ms", DELETE, None), ("match", DELETE, None)) == (
        ErrorCode.NONE, None)
    assert "life" not in listed(client)


def test_get_subscriptions(client: KafkaClient) -> None:
    first = subscribe(client)
    assert first.error_code == ErrorCode.NONE
    assert first.client_instance_id != ZERO_UUID
    assert first.accepted_compression_types == [4, 3, 1, 2]
    assert first.telemetry_max_bytes == MAX_BYTES and first.delta_temporality
    # Again within the push interval: throttled.
    assert subscribe(client, first.client_instance_id).error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    # A subscription for this client changes what it is asked for at once, with a new id.
    assert alter(client, "get-sub", ("metrics", SET, "org.apache.kafka.producer."), ("interval.ms", SET, "100"),
                 ("match", SET, f"client_software_name={CLIENT_SOFTWARE_NAME}, client_id=cormorant-.*")) == (
        ErrorCode.NONE, None)
    try:
        again = subscribe(client, first.client_instance_id)
        assert again.error_code == ErrorCode.NONE
        assert again.client_instance_id == first.client_instance_id
        assert again.requested_metrics == ["org.apache.kafka.producer."]
        assert again.push_interval_ms == 100
        assert again.subscription_id != first.subscription_id
        # A subscription that matches other clients only changes nothing here.
        assert alter(client, "other", ("metrics", SET, "*"), ("match", SET, "client_id=someone-else")) == (
            ErrorCode.NONE, None)
        other = subscribe(client)
        assert other.requested_metrics == ["org.apache.kafka.producer."]
    finally:
        alter(client, "get-sub", ("metrics", DELETE, None), ("interval.ms", DELETE, None), ("match", DELETE, None))
        alter(client, "other", ("metrics", DELETE, None), ("match", DELETE, None))


def test_push_errors(broker: MetricsBroker, client: KafkaClient) -> None:
    before = scrape(broker.metrics_url)
    zero = GetTelemetrySubscriptionsResponse(client_instance_id=ZERO_UUID)
    assert push(client, zero) == ErrorCode.INVALID_REQUEST
    assert push(client, GetTelemetrySubscriptionsResponse(client_instance_id=uuid.UUID(int=1))) == (
        ErrorCode.INVALID_REQUEST)
    sub = subscribe(client)
    assert push(client, sub, subscription_id=sub.subscription_id + 1) == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    # That push used the early push the GetTelemetrySubscriptions allowed: the next is too soon.
    assert push(client, sub) == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert push(client, subscribe(client), compression=9) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert push(client, subscribe(client), b"\0" * (MAX_BYTES + 1)) == ErrorCode.TELEMETRY_TOO_LARGE
    assert push(client, subscribe(client), b"\xff\xff\xff\xff") == ErrorCode.INVALID_RECORD
    assert push(client, subscribe(client), b"not gzip", compression=1) == ErrorCode.INVALID_RECORD
    # A gzip bomb: small on the wire, far over the decompression bound.
    assert push(client, subscribe(client), gzip.compress(b"\0" * (MAX_BYTES * 64)), compression=1) == (
        ErrorCode.INVALID_RECORD)
    # A stranger's instance id is matched anew: its subscription id is not the one it sends.
    stranger = GetTelemetrySubscriptionsResponse(client_instance_id=uuid.uuid4(), subscription_id=12345)
    assert push(client, stranger) == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    # A terminating push is accepted even if early; nothing after it is.
    sub = subscribe(client)
    assert push(client, sub) == ErrorCode.NONE
    assert push(client, sub, terminating=True) == ErrorCode.NONE
    assert push(client, sub, terminating=True) == ErrorCode.INVALID_REQUEST
    after = scrape(broker.metrics_url)
    for name, more in (("cormorant_client_telemetry_unknown_subscription_requests_total", 2),
                       ("cormorant_client_telemetry_throttled_requests_total", 1),
                       ("cormorant_client_telemetry_export_errors_total", 3)):
        assert value(after, name) - value(before, name) == more, name


def test_not_offered_without_metrics(tmp_path: Path) -> None:
    """With metrics.enabled=false there is no telemetry receiver: as a Kafka broker without
    one, 71 and 72 are left out of ApiVersions."""
    b = BrokerProcess(tmp_path / "data", {"metrics.enabled": "false"}).start()
    try:
        with KafkaClient.connect(b.bootstrap, timeout_s=20) as c:
            assert 71 not in c.api_versions and 72 not in c.api_versions
            assert 74 in c.api_versions
    finally:
        assert b.stop() == 0, b.logs()[-3000:]


def test_pushed_metrics_are_exported(broker: MetricsBroker, client: KafkaClient) -> None:
    assert alter(client, "export", ("metrics", SET, "org.apache.kafka.producer."), ("interval.ms", SET, "100"),
                 ("match", SET, f"client_software_name={CLIENT_SOFTWARE_NAME}")) == (ErrorCode.NONE, None)
    try:
        sub = subscribe(client)
        assert sub.push_interval_ms == 100
        assert push(client, sub, gzip.compress(metrics_data(42.5)), compression=1) == ErrorCode.NONE
        samples = scrape(broker.metrics_url)
        instance = kafka_uuid_text(sub.client_instance_id)  # as Kafka's Uuid.toString
        assert value(samples, "cormorant_client_telemetry_value", metric_name="org.apache.kafka.producer.record.send.rate",
                     topic="t1", client_instance_id=instance, client_id="cormorant-admin",
                     client_software_name=CLIENT_SOFTWARE_NAME) == 42.5
        assert value(samples, "cormorant_client_telemetry_value",
                     metric_name="org.apache.kafka.producer.record.send.total", client_instance_id=instance) == 7
        assert value(samples, "cormorant_client_telemetry_exports_total") >= 1
        assert value(samples, "cormorant_client_telemetry_instances") >= 1
    finally:
        alter(client, "export", ("metrics", DELETE, None), ("interval.ms", DELETE, None), ("match", DELETE, None))


def test_instance_forgotten_when_its_connection_closes(broker: MetricsBroker) -> None:
    """As Kafka's ClientConnectionDisconnectListener: the instance (and its series) goes with the
    connection that last spoke for it."""
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as admin:
        assert alter(admin, "closing", ("metrics", SET, "org.apache.kafka."), ("interval.ms", SET, "100"),
                     ("match", SET, "client_id=cormorant-admin")) == (ErrorCode.NONE, None)
        try:
            with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
                sub = subscribe(c)
                assert push(c, sub, metrics_data(1.0)) == ErrorCode.NONE
                instance = kafka_uuid_text(sub.client_instance_id)
                assert value(scrape(broker.metrics_url), "cormorant_client_telemetry_value",
                             client_instance_id=instance) > 0
            deadline = time.monotonic() + 10
            while value(scrape(broker.metrics_url), "cormorant_client_telemetry_value", client_instance_id=instance):
                assert time.monotonic() < deadline, "the closed client's series stayed"
                time.sleep(0.1)
            # Back on a new connection it is a stranger: matched anew, so its id is current again.
            with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
                assert push(c, sub, metrics_data(2.0)) == ErrorCode.NONE
        finally:
            alter(admin, "closing", ("metrics", DELETE, None), ("interval.ms", DELETE, None), ("match", DELETE, None))
