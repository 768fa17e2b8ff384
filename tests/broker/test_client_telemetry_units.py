"""Client telemetry (KIP-714) units: subscription configs, matching, subscription ids, the
bounded instance cache and the bounded series store."""

from __future__ import annotations

import gzip
import math
import uuid

import pytest
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    Gauge,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
)

from broker.telemetry.export import ClientMetricSeries, ClientTelemetry, PayloadError, decode
from broker.telemetry.manager import ClientMetricsManager, subscription_id, uuid_hash
from config import client_metrics
from config.client_metrics import ClientMetricsConfigError, parse_match, subscription, validate

ATTRS: dict[str, str | None] = {
    "client_instance_id": "3b241101-e2bb-4255-8caf-4136c566a962", "client_id": "producer-1",
    "client_software_name": "apache-kafka-java", "client_software_version": "4.3.0",
    "client_source_address": "127.0.0.1", "client_source_port": "50000",
}


@pytest.mark.parametrize(("configs", "invalid_request", "message"), [
    ({"x": "1"}, True, "Unknown client metrics configuration: x"),
    ({"interval.ms": "99"}, True, "Invalid value 99 for interval.ms, interval must be between 100 and 3600000 (1 hour)"),
    ({"interval.ms": "3600001"}, True,
     "Invalid value 3600001 for interval.ms, interval must be between 100 and 3600000 (1 hour)"),
    ({"interval.ms": "1.5"}, False, "Invalid value 1.5 for configuration interval.ms: Not a number of type INT"),
    ({"match": "client_id=a=b"}, False, "Illegal client matching pattern: client_id=a=b"),
    ({"match": "client_id=(", }, False, "Illegal client matching pattern: client_id=("),
    # RE2: linear time on client-sent values, so no backreferences
    ({"match": "client_id=(a)\\1"}, False, "Illegal client matching pattern: client_id=(a)\\1"),
    ({"match": "host=x"}, False, "Illegal client matching pattern: host=x"),
    ({"metrics": "a., b., a."}, False, "Configuration 'metrics' values must not be duplicated."),
    ({"metrics": "a.,,b."}, False, "Configuration 'metrics' values must not be empty."),
    ({"match": "client_id=x,client_id=x"}, False, "Configuration 'match' values must not be duplicated."),
])
def test_validation_errors(configs: dict[str, str], invalid_request: bool, message: str) -> None:
    with pytest.raises(ClientMetricsConfigError) as raised:
        validate("s", configs)
    assert raised.value.invalid_request is invalid_request
    assert str(raised.value) == message


def test_valid_subscription_defaults_and_lists() -> None:
    validate("s", {"interval.ms": "100", "metrics": "", "match": " client_id = p.* , client_source_port=5.*"})
    sub = subscription("s", {"metrics": "a., b."})
    assert sub.metrics == {"a.", "b."} and sub.interval_ms == 300_000 and not sub.match


def test_matching_is_whole_value_and_all_selectors() -> None:
    assert subscription("s", {"match": "client_id=producer-.*"}).matches(ATTRS)
    assert not subscription("s", {"match": "client_id=producer"}).matches(ATTRS)  # whole value
    assert subscription("s", {"match": "client_software_name=apache-kafka-java,client_software_version=4\\..*"}
                        ).matches(ATTRS)
    assert not subscription("s", {"match": "client_software_name=apache-kafka-java,client_id=other"}).matches(ATTRS)
    assert not subscription("s", {"match": "client_id=.*"}).matches({**ATTRS, "client_id": None})
    assert parse_match([]) == {}


def test_subscription_id_follows_metrics_and_interval() -> None:
    one, two = uuid.UUID(int=1), uuid.UUID(int=2 << 64)
    assert subscription_id(["a"], 1000, one) == subscription_id(["a"], 1000, one)
    assert subscription_id(["a"], 1000, one) != subscription_id(["a"], 2000, one)
    assert subscription_id(["a"], 1000, one) != subscription_id(["a", "b"], 1000, one)
    assert subscription_id(["a"], 1000, one) != subscription_id(["a"], 1000, two)
    # Kafka's Uuid.hashCode: the 64-bit halves XORed, then the 32-bit halves.
    assert uuid_hash(uuid.UUID(int=(5 << 64) | 3)) == 6
    assert -2**31 <= subscription_id(["x" * 100], 3_600_000, uuid.uuid4()) < 2**31


def test_manager_matches_unions_and_rematches() -> None:
    manager = ClientMetricsManager()
    manager.update_subscriptions({"a": {"metrics": "m1.", "interval.ms": "5000"},
                                  "b": {"metrics": "m2.", "interval.ms": "2000", "match": "client_id=producer-1"},
                                  "c": {"metrics": "m3.", "match": "client_id=nobody"}})
    iid = uuid.UUID(ATTRS["client_instance_id"])
    inst = manager.instance(iid, ATTRS, 0)
    assert inst.metrics == ("m1.", "m2.") and inst.push_interval_ms == 2000
    first_id = inst.subscription_id
    manager.update_subscriptions({"a": {"metrics": "*"}, "b": {"metrics": "m2.", "interval.ms": "2000"}})
    again = manager.instance(iid, {}, 10)
    assert again.metrics == (client_metrics.ALL_METRICS,) and again.subscription_id != first_id
    assert again.attributes == ATTRS  # the first request's attributes stay the instance's
    manager.update_subscriptions({})
    none = manager.instance(iid, {}, 20)
    assert none.metrics == () and none.push_interval_ms == client_metrics.DEFAULT_INTERVAL_MS


def test_push_timing() -> None:
    manager = ClientMetricsManager()
    manager.update_subscriptions({"a": {"metrics": "m.", "interval.ms": "1000"}})
    inst = manager.instance(uuid.uuid4(), ATTRS, 0)
    assert inst.get_allowed(0) and not inst.get_allowed(999)
    assert inst.push_allowed(400)  # the first push after a get may be early (jitter)
    assert not inst.push_allowed(1399) and inst.push_allowed(1400)


def test_cache_is_bounded_and_expires_with_its_series() -> None:
    telemetry = ClientTelemetry(ClientMetricsManager(cache_max_size=3))
    ids = [uuid.uuid4() for _ in range(4)]
    for n, iid in enumerate(ids):
        telemetry.manager.instance(iid, ATTRS, n)
        telemetry.series.record(iid, {"client_instance_id": str(iid)}, [("m", (), float(n))])
    assert telemetry.manager.instance_count == 3 and not telemetry.manager.known(ids[0])
    assert len(telemetry.series.values) == 3  # the evicted instance's series went with it
    # Idle past max(60 s, 3 push intervals of the default 300 s): expired, series dropped.
    telemetry.manager.expire(900_000 + 1)
    assert telemetry.manager.instance_count == 2 and not telemetry.manager.known(ids[1])
    telemetry.manager.expire(900_000 + 3)
    assert telemetry.manager.instance_count == 0 and not telemetry.series.values


def test_series_cap_counts_drops() -> None:
    series = ClientMetricSeries(max_series=2)
    iid = uuid.uuid4()
    series.record(iid, {}, [("a", (), 1.0), ("b", (), 2.0), ("c", (), 3.0), ("a", (), 4.0)])
    assert series.dropped == 1 and series.values[("a", ())] == 4.0 and len(series.values) == 2


def test_decode_bounds_and_errors() -> None:
    with pytest.raises(PayloadError):
        decode(1, gzip.compress(b"\0" * 5000), 1000)  # over 4x telemetry.max.bytes once decompressed
    with pytest.raises(PayloadError):
        decode(0, b"\x0a\x05abc", 1000)  # truncated protobuf
    assert decode(0, b"", 1000) == ([], 0)
    nan = MetricsData(resource_metrics=[ResourceMetrics(scope_metrics=[ScopeMetrics(metrics=[
        Metric(name="avg", gauge=Gauge(data_points=[NumberDataPoint(as_double=math.nan)])),
        Metric(name="rate", gauge=Gauge(data_points=[NumberDataPoint(as_double=2.5)]))])])])
    assert decode(0, nan.SerializeToString(), 1000) == ([("rate", (), 2.5)], 0)
    many = MetricsData(resource_metrics=[ResourceMetrics(scope_metrics=[ScopeMetrics(metrics=[
        Metric(name=f"m{i}", gauge=Gauge(data_points=[NumberDataPoint(as_double=float(i))])) for i in range(5)])])])
    assert decode(0, many.SerializeToString(), 1000, max_points=3) == ([(f"m{i}", (), float(i)) for i in range(3)], 2)


def test_collection_expires_idle_instances() -> None:
    now = [0]
    telemetry = ClientTelemetry(clock_ms=lambda: now[0])
    iid = uuid.uuid4()
    telemetry.manager.instance(iid, ATTRS, 0)
    telemetry.series.record(iid, {}, [("m", (), 1.0)])
    assert [o.value for o in telemetry.observations()] == [1.0]
    now[0] = 900_000
    assert telemetry.observations() == [] and telemetry.manager.instance_count == 0
