"""One client cannot stall the broker for the others or run it out of memory (issue:
isolation), against a real broker process: decoder caps answered as Kafka answers them,
a watcher connection's worst wait while an adversary runs, and memory bounds."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import pytest

from tests.broker.broker_process import BrokerProcess
from tests.broker.raw_client import RawClient
from wire.errors import ErrorCode
from wire.generated.api_011_join_group import JoinGroupResponse
from wire.generated.api_018_api_versions import ApiVersionsRequest, ApiVersionsResponse
from wire.primitives import write_uvarint

ARRAY_CAP = 1_000_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("isolation") / "data").start()
    try:
        yield b
    finally:
        b.kill9()


def frame_of(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def join_group_v6(protocols: int, correlation_id: int) -> bytes:
    """JoinGroup v6 (flexible) naming ``protocols`` empty protocols."""
    w = bytearray(struct.pack(">hhih", 11, 6, correlation_id, 4) + b"test" + b"\x00")
    w += b"\x02g" + struct.pack(">ii", 10000, 10000) + b"\x01" + b"\x00" + b"\x09consumer"
    write_uvarint(w, protocols + 1)
    w += b"\x01\x01\x00" * protocols  # name "", metadata b"", no tagged fields
    w.append(0)
    return bytes(w)


def metadata_v1(topics: int, correlation_id: int) -> bytes:
    w = bytearray(struct.pack(">hhih", 3, 1, correlation_id, 4) + b"test")
    w += struct.pack(">i", topics) + b"\x00\x01t" * topics
    return bytes(w)


def test_an_array_over_the_cap_gets_invalid_request_where_the_response_can_say_so(
    broker: BrokerProcess,
) -> None:
    client = RawClient(broker.bootstrap)
    client.sock.sendall(frame_of(join_group_v6(ARRAY_CAP + 1, 41)))
    resp = client.receive(JoinGroupResponse, 6)
    assert isinstance(resp, JoinGroupResponse)
    assert resp.error_code == ErrorCode.INVALID_REQUEST
    # The connection stays usable.
    versions = client.call(ApiVersionsRequest(), ApiVersionsResponse, 0)
    assert isinstance(versions, ApiVersionsResponse) and versions.error_code == 0
    client.close()


def test_an_array_over_the_cap_closes_where_the_response_cannot_say_so(broker: BrokerProcess) -> None:
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=30)
    sock.sendall(frame_of(metadata_v1(ARRAY_CAP + 1, 42)))
    try:
        assert sock.recv(10) == b""
    except ConnectionResetError:
        pass
    sock.close()
    assert "malformed request" in broker.logs() and f"array length {ARRAY_CAP + 1}" in broker.logs()
