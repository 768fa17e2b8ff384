"""The brokers the test harnesses start bind no fixed port: with the default scrape port
(127.0.0.1:9464) held by another process they start clean, their endpoint on a port of
their own."""

from __future__ import annotations

import errno
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat_tests.harness.broker import CormorantBroker
from tests.broker.broker_process import BrokerProcess

DEFAULT_METRICS_PORT = 9464
METRICS_URL = re.compile(r" metrics=http://127\.0\.0\.1:(\d+)/metrics")


@pytest.fixture
def default_metrics_port_taken() -> Iterator[None]:
    """Holds 127.0.0.1:9464 (or finds it held already: either way no test broker can have it)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        try:
            sock.bind(("127.0.0.1", DEFAULT_METRICS_PORT))
            sock.listen(1)
        except OSError as ex:
            if ex.errno != errno.EADDRINUSE:
                raise
        yield
    finally:
        sock.close()


def _metrics_port(ready_line: str) -> int:
    match = METRICS_URL.search(ready_line)
    assert match is not None, ready_line
    return int(match.group(1))


@pytest.mark.usefixtures("default_metrics_port_taken")
def test_broker_process_scrape_endpoint_is_ephemeral(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        port = _metrics_port(broker.ready_line)
    finally:
        broker.stop()
    assert port != DEFAULT_METRICS_PORT
    assert "metrics_listener_unavailable" not in broker.logs()


@pytest.mark.usefixtures("default_metrics_port_taken")
def test_compat_harness_scrape_endpoint_is_ephemeral(tmp_path: Path) -> None:
    broker = CormorantBroker(tmp_path)
    broker.start()
    try:
        ready = next(line for line in (tmp_path / "cormorant-1.stdout.log").read_text().splitlines()
                     if line.startswith("cormorant ready"))
        port = _metrics_port(ready)
    finally:
        broker.close()
    assert port != DEFAULT_METRICS_PORT
    assert "metrics_listener_unavailable" not in broker.log_tail()
