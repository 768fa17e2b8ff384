"""`cormorant serve` end to end: a real process, real sockets, real files."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker.broker_process import BrokerProcess
from tests.broker.raw_client import RawClient
from tests.shared import ROOT
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.generated.api_000_produce import (
    ProduceRequest,
    ProduceRequestPartitionProduceData,
    ProduceRequestTopicProduceData,
    ProduceResponse,
)
from wire.generated.api_001_fetch import (
    FetchRequest,
    FetchRequestFetchPartition,
    FetchRequestFetchTopic,
    FetchResponse,
)
from wire.generated.api_003_metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from wire.generated.api_018_api_versions import ApiVersionsRequest, ApiVersionsResponse
from wire.records import NewRecord, iter_records


def assert_closed(sock: socket.socket) -> None:
    """The broker closed the connection without answering (a reset when bytes were unread)."""
    try:
        assert sock.recv(100) == b""
    except ConnectionResetError:
        pass


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker of the test's own (it is restarted)."""
    b = BrokerProcess(tmp_path / "data").start()
    try:
        yield b
    finally:
        b.kill9()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the bad-input tests: each checks that the broker outlives its input and
    serves the other connections, which a broker that earlier inputs broke would fail too."""
    b = BrokerProcess(tmp_path_factory.mktemp("serve") / "data").start()
    try:
        yield b
    finally:
        b.kill9()


def produce(client: RawClient, topic: str, values: list[bytes], version: int = 9) -> ProduceResponse:
    batch = build_batch([NewRecord(key=b"k", value=v, timestamp=None) for v in values])
    req = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[
        ProduceRequestTopicProduceData(name=topic, partition_data=[ProduceRequestPartitionProduceData(index=0, records=batch)])
    ])
    resp = client.call(req, ProduceResponse, version)
    assert isinstance(resp, ProduceResponse)
    return resp


def fetch_all(client: RawClient, topic: str, version: int = 12) -> list[bytes | None]:
    req = FetchRequest(max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, topics=[
        FetchRequestFetchTopic(topic=topic, partitions=[FetchRequestFetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])
    ])
    resp = client.call(req, FetchResponse, version)
    assert isinstance(resp, FetchResponse)
    data = resp.responses[0].partitions[0].records
    assert data is not None
    buf = bytes(data)  # type: ignore[arg-type]
    values: list[bytes | None] = []
    pos = 0
    while pos < len(buf):
        size = struct.unpack_from(">i", buf, pos + 8)[0] + 12
        values += [r.value for r in iter_records(buf, pos)]
        pos += size
    return values


def test_version_flag() -> None:
    out = subprocess.run([sys.executable, "-m", "broker", "--version"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("cormorant ")


def test_bad_config_value_exits_2(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "broker", "serve", "--override", "num.partitions=zero"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 2
    assert "num.partitions" in out.stderr


def test_typo_names_the_closest_key(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "broker", "serve", "--override", "log.retention.hour=5"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 2
    assert "log.retention.hours" in out.stderr


def test_produce_fetch_restart(broker: BrokerProcess) -> None:
    client = RawClient(broker.bootstrap)
    versions = client.call(ApiVersionsRequest(), ApiVersionsResponse, 0)
    assert isinstance(versions, ApiVersionsResponse)
    assert {k.api_key for k in versions.api_keys} >= {0, 1, 3, 18}
    meta = client.call(MetadataRequest(topics=[MetadataRequestTopic(name="events")]), MetadataResponse, 12)
    assert isinstance(meta, MetadataResponse)
    assert meta.topics[0].error_code == ErrorCode.NONE  # auto-created
    assert meta.brokers[0].port == broker.port
    first = produce(client, "events", [b"a", b"b", b"c"])
    second = produce(client, "events", [b"d"])
    assert first.responses[0].partition_responses[0].base_offset == 0
    assert second.responses[0].partition_responses[0].base_offset == 3
    assert fetch_all(client, "events") == [b"a", b"b", b"c", b"d"]
    client.close()
    assert broker.stop() == 0
    broker.start()
    client = RawClient(broker.bootstrap)
    assert fetch_all(client, "events") == [b"a", b"b", b"c", b"d"]
    assert produce(client, "events", [b"e"]).responses[0].partition_responses[0].base_offset == 4
    client.close()


def test_unsupported_api_versions_gets_error_35_in_v0(shared_broker: BrokerProcess) -> None:
    client = RawClient(shared_broker.bootstrap)
    client.sock.sendall(struct.pack(">ihhih", 10, 18, 99, 7, -1))
    resp = client.receive(ApiVersionsResponse, 0)
    assert isinstance(resp, ApiVersionsResponse)
    assert resp.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert [k.api_key for k in resp.api_keys] == [18]


@pytest.mark.parametrize(("name", "version"), [("tests\n", "1.0"), ("tests", "1.0\n"), ("-tests", "1.0")])
def test_api_versions_refuses_illegal_software_names(shared_broker: BrokerProcess, name: str, version: str) -> None:
    """Kafka's ApiVersionsRequest.isValid: the whole name and version must match its pattern
    (a final newline included), else INVALID_REQUEST."""
    client = RawClient(shared_broker.bootstrap)
    try:
        hello = ApiVersionsRequest(client_software_name=name, client_software_version=version)
        resp = client.call(hello, ApiVersionsResponse, 3)
        assert isinstance(resp, ApiVersionsResponse) and resp.error_code == ErrorCode.INVALID_REQUEST
    finally:
        client.close()


@pytest.mark.parametrize(
    "frame",
    [
        struct.pack(">i", -1),
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc",  # a TLS ClientHello: a ~369 MB size prefix
        struct.pack(">i", 3) + b"\x00\x03\x00",  # shorter than a request header
        struct.pack(">ihhih", 10, 999, 0, 1, -1),  # unknown api key
        struct.pack(">ihhih", 10, 3, 99, 1, -1),  # unsupported version
        struct.pack(">ihhih", 14, 3, 1, 1, -1) + struct.pack(">i", 2**31 - 1),  # huge array count
    ],
    ids=["negative-size", "tls-hello", "short-header", "unknown-key", "bad-version", "huge-array"],
)
def test_bad_input_closes_only_that_connection(shared_broker: BrokerProcess, frame: bytes) -> None:
    bystander = RawClient(shared_broker.bootstrap)
    bad = socket.create_connection(("127.0.0.1", shared_broker.port), timeout=10)
    bad.sendall(frame)
    assert_closed(bad)
    bad.close()
    hello = ApiVersionsRequest(client_software_name="cormorant-tests", client_software_version="1.0")
    resp = bystander.call(hello, ApiVersionsResponse, 3)
    assert isinstance(resp, ApiVersionsResponse) and resp.error_code == 0
    bystander.close()


def test_sigterm_right_after_the_ready_line_is_a_clean_stop(tmp_path: Path) -> None:
    """The ready line means SIGTERM is handled: a stop sent the moment it appears exits 0 and
    leaves the clean-shutdown marker, so the next start does no recovery."""
    b = BrokerProcess(tmp_path / "data").start()
    assert b.stop() == 0, b.logs()
    assert list((tmp_path / "data").glob(".kafka_cleanshutdown")), "no clean-shutdown marker"
