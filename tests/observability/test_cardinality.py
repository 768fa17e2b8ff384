"""1,000 client ids over 1,000 connections do not add a single series."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import pytest

from tests.observability.helpers import MetricsBroker, scrape, series_count, value
from wire.frame import encode_request
from wire.generated.api_003_metadata import MetadataRequest, MetadataRequestTopic
from wire.generated.api_018_api_versions import ApiVersionsRequest

CONNECTIONS = 1000
AT_ONCE = 250
TIMEOUT_S = 20.0


@pytest.fixture
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MetricsBroker]:
    b = MetricsBroker(tmp_path_factory.mktemp("card") / "data").start()
    try:
        yield b
    finally:
        b.stop()


def read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            assert chunk, "broker closed the connection"
            out += chunk
        return bytes(out)

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def talk(socks: list[socket.socket], first: int) -> None:
    """Every connection sends ApiVersions and Metadata under its own client id."""
    for i, sock in enumerate(socks):
        client_id = f"client-{first + i}"
        software = ApiVersionsRequest(client_software_name=f"sw-{first + i}", client_software_version="1.0")
        sock.sendall(encode_request(software, 3, 1, client_id=client_id))
        sock.sendall(encode_request(MetadataRequest(topics=[MetadataRequestTopic(name="card")]), 12, 2,
                                    client_id=client_id))
    for sock in socks:
        read_frame(sock)
        read_frame(sock)


def test_client_ids_and_connections_do_not_grow_series(broker: MetricsBroker) -> None:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT_S) as sock:
        talk([sock], -1)  # creates topic "card"; every series that traffic makes now exists
    before = scrape(broker.metrics_url)
    for first in range(0, CONNECTIONS, AT_ONCE):
        socks = [socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT_S) for _ in range(AT_ONCE)]
        try:
            talk(socks, first)
        finally:
            for sock in socks:
                sock.close()
    after = scrape(broker.metrics_url)
    assert value(after, "cormorant_network_connection_opened_total") == CONNECTIONS + 1
    assert value(after, "cormorant_request_duration_seconds_count", api="ApiVersions") == CONNECTIONS + 1
    assert series_count(after) == series_count(before), (
        {n for n in after if len(after[n]) != len(before.get(n, {}))}
    )
