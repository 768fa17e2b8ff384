"""Connection quotas of a real broker process, as Kafka's ConnectionQuotas: the per-IP limit (and
its overrides) closes the extra connection, max.connections leaves it waiting unserved until a
slot frees, the creation rates slow accepting down or (per IP) hold and close, and the
connections already open keep being served throughout."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker.tools.client import ClientError, KafkaClient, parse_bootstrap
from tests.broker.broker_process import BrokerProcess
from tests.broker.test_client_quotas import alter, entry
from tests.observability.helpers import MetricsBroker, scrape, value
from wire.frame import encode_request
from wire.generated.api_018_api_versions import ApiVersionsRequest, ApiVersionsResponse

Start = Callable[[dict[str, str]], MetricsBroker]

WINDOWS = {"quota.window.num": "2", "quota.window.size.seconds": "1"}


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    started: list[MetricsBroker] = []

    def run(overrides: dict[str, str]) -> MetricsBroker:
        b = MetricsBroker(tmp_path / f"data{len(started)}", {**WINDOWS, **overrides}).start()
        started.append(b)
        return b

    yield run
    for b in started:
        assert b.stop() == 0, b.logs()[-3000:]


def connect(broker: BrokerProcess, timeout_s: float = 10) -> KafkaClient:
    host, port = parse_bootstrap(broker.bootstrap)
    return KafkaClient(host, port, timeout_s=timeout_s)


def served(c: KafkaClient) -> bool:
    try:
        c.send(ApiVersionsRequest(), ApiVersionsResponse, 0)
    except ClientError:
        return False
    return True


def test_per_ip_limit_and_override_close_the_extra_connection(start: Start) -> None:
    broker = start({"max.connections.per.ip": "1", "max.connections.per.ip.overrides": "localhost:3"})
    clients = [connect(broker) for _ in range(3)]  # localhost resolves to 127.0.0.1: three allowed
    try:
        with pytest.raises(ClientError):
            connect(broker, timeout_s=5)  # closed before its first answer
        assert all(served(c) for c in clients)
        clients.pop().close()
        deadline = time.monotonic() + 10
        replacement = None
        while replacement is None and time.monotonic() < deadline:  # the close reaches the broker first
            try:
                replacement = connect(broker, timeout_s=5)
            except ClientError:
                time.sleep(0.05)
        assert replacement is not None and served(replacement)
        clients.append(replacement)
    finally:
        for c in clients:
            c.close()
    assert "connection_refused" in broker.logs()
    refused = value(scrape(broker.metrics_url), "cormorant_network_connection_refused_total",
                    reason="max_connections_per_ip")
    assert refused >= 1


def test_max_connections_waits_for_a_slot(start: Start) -> None:
    broker = start({"max.connections": "2"})
    first, second = connect(broker), connect(broker)
    host, port = parse_bootstrap(broker.bootstrap)
    waiting = socket.create_connection((host, port), timeout=5)  # in the backlog, not served
    try:
        waiting.settimeout(1.0)
        waiting.sendall(encode_request(ApiVersionsRequest(), 0, 1, "waiting"))
        with pytest.raises(TimeoutError):
            waiting.recv(4)
        assert served(first) and served(second)  # the open ones are served meanwhile
        first.close()
        waiting.settimeout(10)
        assert len(waiting.recv(4)) == 4  # accepted once a slot freed, and answered
        blocked = value(scrape(broker.metrics_url), "cormorant_network_acceptor_blocked_time_seconds_total",
                        listener="PLAINTEXT")
        assert blocked >= 0.9
    finally:
        waiting.close()
        second.close()


def test_creation_rates(start: Start) -> None:
    broker = start({"max.connection.creation.rate": "4"})
    started = time.monotonic()
    clients = [connect(broker) for _ in range(12)]
    took = time.monotonic() - started
    for c in clients:
        assert served(c)
        c.close()
    # 12 connections at 4 a second over 2 one-second windows: the acceptor waits for the rate.
    assert took >= 1.0, took

    with connect(broker) as admin:
        assert alter(admin, entry({"ip": None}, connection_creation_rate=3.0)) == [0]
    refused = 0
    for _ in range(10):
        try:
            with connect(broker, timeout_s=5) as c:
                served(c)
        except ClientError:
            refused += 1  # held for the throttle time, then closed unserved
    assert refused > 0
    assert value(scrape(broker.metrics_url), "cormorant_network_connection_refused_total",
                 reason="connection_creation_rate_per_ip") == refused
    time.sleep(2.1)  # the windows have passed: accepted again
    with connect(broker) as c:
        assert served(c)
