"""One client cannot stall the broker for the others or run it out of memory (issue:
isolation), against a real broker process: decoder caps answered as Kafka answers them,
a watcher connection's worst wait while an adversary runs, and memory bounds."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.broker.broker_process import SLOW_STEP, BrokerProcess
from tests.broker.raw_client import RawClient
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.frame import decode_response, encode_request
from wire.generated.api_000_produce import (
    ProduceRequest,
    ProduceRequestPartitionProduceData,
    ProduceRequestTopicProduceData,
    ProduceResponse,
)
from wire.generated.api_002_list_offsets import (
    ListOffsetsRequest,
    ListOffsetsRequestListOffsetsPartition,
    ListOffsetsRequestListOffsetsTopic,
    ListOffsetsResponse,
)
from wire.generated.api_003_metadata import MetadataResponse
from wire.generated.api_008_offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)
from wire.generated.api_009_offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
    OffsetFetchRequestTopics,
    OffsetFetchResponse,
)
from wire.generated.api_010_find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from wire.generated.api_011_join_group import (
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
)
from wire.generated.api_013_leave_group import (
    LeaveGroupRequest,
    LeaveGroupRequestMemberIdentity,
    LeaveGroupResponse,
)
from wire.generated.api_015_describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from wire.generated.api_018_api_versions import ApiVersionsRequest, ApiVersionsResponse
from wire.generated.api_019_create_topics import (
    CreateTopicsRequest,
    CreateTopicsRequestCreatableTopic,
    CreateTopicsResponse,
)
from wire.generated.api_021_delete_records import (
    DeleteRecordsRequest,
    DeleteRecordsRequestDeleteRecordsPartition,
    DeleteRecordsRequestDeleteRecordsTopic,
    DeleteRecordsResponse,
)
from wire.generated.api_032_describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsRequestDescribeConfigsResource,
    DescribeConfigsResponse,
)
from wire.primitives import Message, write_uvarint
from wire.records import CRC_OFFSET, NewRecord

ARRAY_CAP = 1_000_000
#: The watcher's worst ApiVersions round trip allowed while an adversary runs: a sanity
#: bound, wide because a test machine shared with other work delays any process (the
#: million-topic Metadata held it 0.8-1.1 s before). The broker's own CPU measure below
#: is what a machine's load does not blur.
WORST_WAIT_S = 1.0
#: The broker's own measure: no event-loop step may compute longer than this (CPU time,
#: which a busy machine does not inflate) while the adversary runs.
MAX_STEP_CPU_MS = 20.0
#: The longest step of a CreateTopics of 5,000 partitions (the controller's records are made in one).
CREATE_STEP_CPU_MS = 60.0
#: An idle broker's longest step: its periodic rounds over every partition are sliced.
BACKGROUND_STEP_CPU_MS = 10.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("isolation") / "data",
                      {"auto.create.topics.enable": "false", "event.loop.slow.step.ms": "20",
                       # full collections run during every test here, bounded as the rest
                       "event.loop.full.collection.interval.ms": "2000"}).start()
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


class Watcher:
    """A well-behaved client: ApiVersions every 20 ms, recording each round trip."""

    def __init__(self, bootstrap: str) -> None:
        self.client = RawClient(bootstrap)
        self.waits: list[float] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                started = time.perf_counter()
                resp = self.client.call(ApiVersionsRequest(), ApiVersionsResponse, 0)
                assert isinstance(resp, ApiVersionsResponse) and resp.error_code == 0
                self.waits.append(time.perf_counter() - started)
                self._stop.wait(0.02)
        except BaseException as ex:  # reported by stop()
            self.errors.append(ex)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        self.client.close()

    @property
    def worst(self) -> float:
        assert not self.errors, self.errors
        assert self.waits
        return max(self.waits)


def watch(broker: BrokerProcess, adversary: Callable[[], None]) -> float:
    """The watcher's worst wait while ``adversary`` runs (after a quiet warm-up); checks
    that no event-loop step computed longer than MAX_STEP_CPU_MS meanwhile."""
    logged = len(broker.logs())
    with Watcher(broker.bootstrap) as watcher:
        time.sleep(0.3)
        adversary()
        time.sleep(0.1)
    logs = broker.logs()[logged:]
    steps = [float(cpu) for cpu in SLOW_STEP.findall(logs)]
    print(f"watcher: {len(watcher.waits)} round trips, worst {watcher.worst * 1000:.1f} ms; "
          f"broker steps over 20 ms: {steps} (CPU ms)")
    # A failure names each slow step's task, its garbage collection and the stack it ran.
    assert all(cpu <= MAX_STEP_CPU_MS for cpu in steps), slow_step_reports(logs)
    return watcher.worst


def slow_step_reports(logs: str) -> str:
    """Each ``slow_task_step`` line of ``logs`` with the stack lines that follow it."""
    reports: list[str] = []
    for line in logs.splitlines():
        if "slow_task_step" in line:
            reports.append(line)
        elif reports and line.startswith("  "):
            reports[-1] += "\n" + line
    return "\n".join(reports)


def send_and_receive_raw(broker: BrokerProcess, frame: bytes) -> bytes:
    """The adversary: sends an encoded request and reads the response frame undecoded
    (decoding a million entries in this process would stall the watcher's thread here,
    not the broker)."""
    client = RawClient(broker.bootstrap)
    client.sock.settimeout(120)
    try:
        client.sock.sendall(frame)
        size = struct.unpack(">i", client._exactly(4))[0]
        return client._exactly(size)
    finally:
        client.close()


def test_a_metadata_request_for_a_million_topics_does_not_hold_the_others(broker: BrokerProcess) -> None:
    frame = frame_of(metadata_v1(ARRAY_CAP, 43))
    answered: list[bytes] = []
    worst = watch(broker, lambda: answered.append(send_and_receive_raw(broker, frame)))
    _, resp = decode_response(answered[0], MetadataResponse, 1)
    assert isinstance(resp, MetadataResponse)
    assert len(resp.topics) == ARRAY_CAP
    assert {t.error_code for t in resp.topics} == {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert worst < WORST_WAIT_S, f"the watcher waited {worst * 1000:.0f} ms"


PARTITIONS = 100_000


def many_partitions_requests() -> dict[str, tuple[Message, type[Message], int]]:
    """Requests naming 100,000 partitions (of a topic that does not exist): each is
    answered entry by entry, which is work that grows with the request."""
    indexes = range(PARTITIONS)
    return {
        "ListOffsets": (ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequestListOffsetsTopic(
            name="absent", partitions=[ListOffsetsRequestListOffsetsPartition(partition_index=i, timestamp=-1)
                                       for i in indexes])]), ListOffsetsResponse, 7),
        "OffsetFetch": (OffsetFetchRequest(group_id="g", topics=[
            OffsetFetchRequestTopic(name="absent", partition_indexes=list(indexes))]), OffsetFetchResponse, 5),
        "OffsetCommit": (OffsetCommitRequest(group_id="g", generation_id_or_member_epoch=-1, topics=[
            OffsetCommitRequestTopic(name="absent", partitions=[
                OffsetCommitRequestPartition(partition_index=i, committed_offset=1) for i in indexes])]),
                         OffsetCommitResponse, 7),
        "DeleteRecords": (DeleteRecordsRequest(timeout_ms=1000, topics=[DeleteRecordsRequestDeleteRecordsTopic(
            name="absent", partitions=[DeleteRecordsRequestDeleteRecordsPartition(partition_index=i, offset=1)
                                       for i in indexes])]), DeleteRecordsResponse, 2),
        "OffsetFetch v0": (OffsetFetchRequest(group_id="g", topics=[
            OffsetFetchRequestTopic(name="absent", partition_indexes=list(indexes))]), OffsetFetchResponse, 0),
        "OffsetFetch v8": (OffsetFetchRequest(groups=[OffsetFetchRequestGroup(group_id="g", topics=[
            OffsetFetchRequestTopics(name="absent", partition_indexes=list(indexes))])]), OffsetFetchResponse, 8),
        "DescribeGroups": (DescribeGroupsRequest(groups=[f"g{i}" for i in indexes]), DescribeGroupsResponse, 4),
        "DescribeConfigs": (DescribeConfigsRequest(resources=[DescribeConfigsRequestDescribeConfigsResource(
            resource_type=2, resource_name=f"t{i}") for i in indexes]), DescribeConfigsResponse, 4),
    }


@pytest.mark.parametrize("api", ["ListOffsets", "OffsetFetch", "OffsetFetch v0", "OffsetFetch v8", "OffsetCommit",
                                 "DeleteRecords", "DescribeGroups", "DescribeConfigs"])
def test_a_request_naming_100000_partitions_does_not_hold_the_others(broker: BrokerProcess, api: str) -> None:
    request, response_type, version = many_partitions_requests()[api]
    frame = encode_request(request, version, 44, "adversary")
    answered: list[bytes] = []
    worst = watch(broker, lambda: answered.append(send_and_receive_raw(broker, frame)))
    _, resp = decode_response(answered[0], response_type, version)
    assert isinstance(resp, response_type)
    assert worst < WORST_WAIT_S, f"the watcher waited {worst * 1000:.0f} ms"


def test_a_connection_pipelining_large_requests_does_not_hold_the_others(broker: BrokerProcess) -> None:
    """One connection sends 16 OffsetFetch requests naming 100,000 partitions each without
    waiting: at most 8 of them are in progress at once (the reader stops reading), and
    while they run the loop still serves everyone else."""
    request, _, version = many_partitions_requests()["OffsetFetch"]
    pipelined = 16
    frames = b"".join(encode_request(request, version, 100 + i, "adversary") for i in range(pipelined))
    answered: list[int] = []

    def adversary() -> None:
        client = RawClient(broker.bootstrap)
        client.sock.settimeout(120)
        try:
            client.sock.sendall(frames)
            for _ in range(pipelined):
                size = struct.unpack(">i", client._exactly(4))[0]
                answered.append(struct.unpack_from(">i", client._exactly(size))[0])
        finally:
            client.close()

    worst = watch(broker, adversary)
    assert answered == [100 + i for i in range(pipelined)]  # every one, in order
    assert worst < WORST_WAIT_S, f"the watcher waited {worst * 1000:.0f} ms"


def create_topic(broker: BrokerProcess, name: str, partitions: int = 1) -> None:
    client = RawClient(broker.bootstrap)
    client.sock.settimeout(120)
    try:
        resp = client.call(CreateTopicsRequest(topics=[CreateTopicsRequestCreatableTopic(
            name=name, num_partitions=partitions, replication_factor=1)], timeout_ms=60000), CreateTopicsResponse, 5)
        assert isinstance(resp, CreateTopicsResponse)
        assert resp.topics[0].error_code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS)
    finally:
        client.close()


def bad_crc_produce(topic: str, megabytes: int) -> bytes:
    """A Produce request of one batch of ``megabytes`` records of 1 MiB whose CRC is wrong."""
    batch = bytearray(build_batch([NewRecord(key=None, value=b"v" * (1024 * 1024), timestamp=int(time.time() * 1000))]
                                  * megabytes))
    batch[CRC_OFFSET] ^= 0xFF
    return encode_request(ProduceRequest(acks=1, timeout_ms=30000, topic_data=[ProduceRequestTopicProduceData(
        name=topic, partition_data=[ProduceRequestPartitionProduceData(index=0, records=bytes(batch))])]),
        7, 45, "adversary")


def test_a_64_mb_produce_with_a_bad_crc_does_not_hold_the_others(broker: BrokerProcess) -> None:
    """The batch's copy and CRC-32C run in a worker thread, and the copy a chunk at a time
    (one 64 MB copy holds the GIL, and the loop, for tens of milliseconds)."""
    create_topic(broker, "bad-crc")
    frame = bad_crc_produce("bad-crc", 64)
    answered: list[bytes] = []
    worst = watch(broker, lambda: answered.extend(send_and_receive_raw(broker, frame) for _ in range(3)))
    for reply in answered:
        _, resp = decode_response(reply, ProduceResponse, 7)
        assert isinstance(resp, ProduceResponse)
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.CORRUPT_MESSAGE
    assert worst < WORST_WAIT_S, f"the watcher waited {worst * 1000:.0f} ms"


def test_reading_a_100_mb_frame_takes_no_long_step(tmp_path: Path) -> None:
    """A 100 MB Produce with a bad CRC (the isolation benchmark's bad-crc adversary), sent
    twice, with every step over 5 ms logged: none of them computes for MAX_STEP_CPU_MS (the
    frame is read into memory mapped once at its announced size, never grown or copied)."""
    b = BrokerProcess(tmp_path / "data", {"event.loop.slow.step.ms": "5"}).start()
    try:
        create_topic(b, "bad-crc")
        frame = bad_crc_produce("bad-crc", 99)
        logged = len(b.logs())
        with Watcher(b.bootstrap) as watcher:
            for _ in range(2):
                _, resp = decode_response(send_and_receive_raw(b, frame), ProduceResponse, 7)
                assert isinstance(resp, ProduceResponse)
                assert resp.responses[0].partition_responses[0].error_code == ErrorCode.CORRUPT_MESSAGE
        steps = [float(cpu) for cpu in SLOW_STEP.findall(b.logs()[logged:])]
        print(f"watcher worst {watcher.worst * 1000:.1f} ms; steps over 5 ms: {steps} (CPU ms)")
        assert all(cpu <= MAX_STEP_CPU_MS for cpu in steps), steps
    finally:
        b.kill9()


def test_members_joining_and_leaving_in_a_loop_do_not_hold_the_others(broker: BrokerProcess) -> None:
    """500 members join (MEMBER_ID_REQUIRED) and leave in one LeaveGroup, three times over;
    then one LeaveGroup names 100,000 members the group does not have."""
    left: list[int] = []
    client = RawClient(broker.bootstrap)
    client.sock.settimeout(60)

    def join() -> JoinGroupResponse:
        response = client.call(JoinGroupRequest(
            group_id="churn", session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
            protocol_type="consumer", protocols=[JoinGroupRequestProtocol(name="range", metadata=b"")]),
            JoinGroupResponse, 5)
        assert isinstance(response, JoinGroupResponse)
        return response

    # The group coordinator's topic is created by the first FindCoordinator, then loaded.
    deadline = time.monotonic() + 30
    client.call(FindCoordinatorRequest(key="churn"), FindCoordinatorResponse, 1)
    while join().error_code != ErrorCode.MEMBER_ID_REQUIRED and time.monotonic() < deadline:
        time.sleep(0.1)
        client.call(FindCoordinatorRequest(key="churn"), FindCoordinatorResponse, 1)

    def adversary() -> None:
        try:
            for _ in range(3):
                members = []
                for _ in range(500):
                    joined = join()
                    assert joined.error_code == ErrorCode.MEMBER_ID_REQUIRED
                    members.append(joined.member_id)
                leave = client.call(LeaveGroupRequest(group_id="churn", members=[
                    LeaveGroupRequestMemberIdentity(member_id=m) for m in members]), LeaveGroupResponse, 3)
                assert isinstance(leave, LeaveGroupResponse)
                left.append(sum(1 for m in leave.members if m.error_code == ErrorCode.NONE))
            leave = client.call(LeaveGroupRequest(group_id="churn", members=[
                LeaveGroupRequestMemberIdentity(member_id=f"m{i}") for i in range(100_000)]), LeaveGroupResponse, 3)
            assert isinstance(leave, LeaveGroupResponse)
            unknown.update(m.error_code for m in leave.members)
        finally:
            client.close()

    unknown: set[int] = set()
    worst = watch(broker, adversary)
    assert left == [500, 500, 500]
    assert unknown == {ErrorCode.UNKNOWN_MEMBER_ID}
    assert worst < WORST_WAIT_S, f"the watcher waited {worst * 1000:.0f} ms"


#: Topics and partitions an OffsetCommit names in full: real ones, so that every offset
#: reaches the group coordinator (its records, their batch, and applying the outcome).
COMMITTED_TOPICS = ("committed-a", "committed-b")
COMMITTED_PARTITIONS = 5_000


def test_describe_configs_of_real_topics_does_not_hold_the_others(broker: BrokerProcess) -> None:
    """A real topic's settings are dozens of entries each, so the handler must pause on the
    count of entries, not only of resources (as the web console asks for 1,000 topics)."""
    create_topic(broker, "described")
    request = DescribeConfigsRequest(resources=[
        DescribeConfigsRequestDescribeConfigsResource(resource_type=2, resource_name="described")] * 5_000)
    frame = encode_request(request, 4, 46, "adversary")
    answered: list[bytes] = []
    worst = watch(broker, lambda: answered.append(send_and_receive_raw(broker, frame)))
    _, resp = decode_response(answered[0], DescribeConfigsResponse, 4)
    assert isinstance(resp, DescribeConfigsResponse)
    assert len(resp.results) == 5_000
    assert {r.error_code for r in resp.results} == {ErrorCode.NONE}
    assert all(any(c.name == "cleanup.policy" and c.value == "delete" for c in r.configs) for r in resp.results)
    assert worst < WORST_WAIT_S, f"the watcher waited {worst * 1000:.0f} ms"


def test_an_offset_commit_to_many_real_partitions_does_not_hold_the_others(broker: BrokerProcess) -> None:
    """The coordinator's side of a large OffsetCommit — its records and batch, the write, the
    offsets applied to the group — runs off the loop or a chunk at a time, as the handler does."""
    for name in COMMITTED_TOPICS:
        create_topic(broker, name, COMMITTED_PARTITIONS)
    client = RawClient(broker.bootstrap)
    client.sock.settimeout(60)
    commit = OffsetCommitRequest(group_id="committer", generation_id_or_member_epoch=-1, topics=[
        OffsetCommitRequestTopic(name=name, partitions=[
            OffsetCommitRequestPartition(partition_index=i, committed_offset=1000 + i)
            for i in range(COMMITTED_PARTITIONS)]) for name in COMMITTED_TOPICS])
    probe = OffsetFetchRequest(group_id="committer", require_stable=True, topics=[
        OffsetFetchRequestTopic(name=name, partition_indexes=[0, 4321, COMMITTED_PARTITIONS - 1])
        for name in COMMITTED_TOPICS])
    try:
        # The group coordinator's topic is created by the first FindCoordinator, then loaded.
        deadline = time.monotonic() + 30
        while True:
            found = client.call(FindCoordinatorRequest(key="committer"), FindCoordinatorResponse, 1)
            before = client.call(probe, OffsetFetchResponse, 7)
            assert isinstance(found, FindCoordinatorResponse) and isinstance(before, OffsetFetchResponse)
            if found.error_code == ErrorCode.NONE and before.error_code == ErrorCode.NONE:
                break
            assert time.monotonic() < deadline, (found.error_code, before.error_code)
            time.sleep(0.1)
        answered: list[Message] = []
        worst = watch(broker, lambda: answered.append(client.call(commit, OffsetCommitResponse, 7)))
        resp = answered[0]
        assert isinstance(resp, OffsetCommitResponse)
        for topic in resp.topics:
            assert [p.partition_index for p in topic.partitions] == list(range(COMMITTED_PARTITIONS))
            assert {p.error_code for p in topic.partitions} == {ErrorCode.NONE}
        after = client.call(probe, OffsetFetchResponse, 7)
        assert isinstance(after, OffsetFetchResponse)
        assert [[(p.partition_index, p.committed_offset, p.error_code) for p in t.partitions] for t in after.topics] \
            == [[(0, 1000, 0), (4321, 5321, 0), (COMMITTED_PARTITIONS - 1, 999 + COMMITTED_PARTITIONS, 0)]] * 2
    finally:
        client.close()
    assert worst < WORST_WAIT_S, f"the watcher waited {worst * 1000:.0f} ms"


def test_creating_5000_partitions_does_not_hold_the_others(broker: BrokerProcess) -> None:
    """The broker's side of a large CreateTopics — the logs made in a worker thread, the
    replicas a slice per step — and the controller's records: no step of CREATE_STEP_CPU_MS
    (one step made all 5,000 replicas: 150 ms)."""
    logged = len(broker.logs())
    with Watcher(broker.bootstrap) as watcher:
        time.sleep(0.3)
        create_topic(broker, "created-at-once", 5_000)
        time.sleep(0.5)
    steps = [float(cpu) for cpu in SLOW_STEP.findall(broker.logs()[logged:])]
    print(f"watcher: worst {watcher.worst * 1000:.1f} ms; steps over 20 ms: {steps} (CPU ms)")
    assert all(cpu <= CREATE_STEP_CPU_MS for cpu in steps), steps
    assert watcher.worst < WORST_WAIT_S, f"the watcher waited {watcher.worst * 1000:.0f} ms"


def test_background_rounds_over_10000_partitions_take_no_long_step(tmp_path: Path) -> None:
    """The periodic work that visits every partition (the high-watermark checkpoint every
    second here, the log flushes, the garbage collector's full collection every second here)
    is done off the loop, a slice at a time, or over what was allocated since the last one:
    over several rounds with 10,000 partitions created at run time, an idle broker logs no
    step of BACKGROUND_STEP_CPU_MS (a full collection walking their replicas took 140 ms)."""
    b = BrokerProcess(tmp_path / "data", {"event.loop.slow.step.ms": "5",
                                          "replica.high.watermark.checkpoint.interval.ms": "1000",
                                          "event.loop.full.collection.interval.ms": "1000"}).start()
    try:
        for name in COMMITTED_TOPICS:
            create_topic(b, name, COMMITTED_PARTITIONS)
        time.sleep(2.0)  # the creation's own work done
        logged = len(b.logs())
        time.sleep(5.0)
        steps = [float(cpu) for cpu in SLOW_STEP.findall(b.logs()[logged:])]
        print(f"steps over 5 ms: {steps} (CPU ms)")
        assert all(cpu <= BACKGROUND_STEP_CPU_MS for cpu in steps), steps
    finally:
        b.kill9()


# ------------------------------------------------------------------ request memory


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def memory_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("memory") / "data", {
        "socket.request.read.timeout.ms": "3000", "queued.max.request.bytes": "209715200",
        "event.loop.slow.step.ms": "20"}).start()
    try:
        yield b
    finally:
        b.kill9()


def test_a_thousand_connections_announcing_100_mb_frames_keep_memory_bounded(memory_broker: BrokerProcess) -> None:
    assert memory_broker.proc is not None
    pid = memory_broker.proc.pid
    before = rss_bytes(pid)
    socks: list[socket.socket] = []
    peak = before

    def adversary() -> None:
        nonlocal peak
        chunk = struct.pack(">i", 100 * 1024 * 1024) + b"\x00" * (60 * 1024)
        for _ in range(1000):
            s = socket.create_connection(("127.0.0.1", memory_broker.port), timeout=10)
            s.setblocking(False)
            try:
                s.send(chunk)  # what the socket takes; the rest is the attack's business
            except BlockingIOError:
                pass
            socks.append(s)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            peak = max(peak, rss_bytes(pid))
            time.sleep(0.1)

    try:
        worst = watch(memory_broker, adversary)
        assert memory_broker.proc.poll() is None
        print(f"broker RSS {before >> 20} MB before, {peak >> 20} MB at most during the attack")
        # 1,000 x 100 MB announced: two frames' worth admitted, each holding what arrived.
        assert peak - before < 96 * 1024 * 1024, f"RSS grew by {(peak - before) >> 20} MB"
        assert worst < WORST_WAIT_S, f"the watcher waited {worst * 1000:.0f} ms"
    finally:
        for s in socks:
            s.close()


def test_connections_opened_and_closed_500_a_second_do_not_hold_the_others(broker: BrokerProcess) -> None:
    """Connection churn: 500 connections a second for 2 s, each sending an ApiVersions and
    closing without reading the answer; the watcher is served meanwhile, the broker's
    memory does not keep what the closed connections held, and no connection is left."""
    assert broker.proc is not None
    pid = broker.proc.pid
    request = encode_request(ApiVersionsRequest(), 0, 45, "churn")
    opened = 0

    def fds() -> int:
        return len(list(Path(f"/proc/{pid}/fd").iterdir()))

    fds_before, before = fds(), rss_bytes(pid)

    def adversary() -> None:
        nonlocal opened
        started = time.monotonic()
        while opened < 1000:
            # Paced at 500 a second; a slow machine just takes longer.
            time.sleep(max(0.0, started + opened / 500 - time.monotonic()))
            with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
                s.sendall(request)
            opened += 1

    worst = watch(broker, adversary)
    assert broker.proc.poll() is None
    deadline = time.monotonic() + 10
    while fds() > fds_before + 5 and time.monotonic() < deadline:
        time.sleep(0.1)
    after = rss_bytes(pid)
    print(f"{opened} connections; fds {fds_before} -> {fds()}; RSS {before >> 20} -> {after >> 20} MB")
    assert fds() <= fds_before + 5, "connections closed by the client are still open in the broker"
    assert after - before < 32 * 1024 * 1024, f"RSS grew by {(after - before) >> 20} MB"
    assert worst < WORST_WAIT_S, f"the watcher waited {worst * 1000:.0f} ms"


def test_a_started_frame_must_finish_within_the_read_timeout(memory_broker: BrokerProcess) -> None:
    sock = socket.create_connection(("127.0.0.1", memory_broker.port), timeout=10)
    sock.sendall(struct.pack(">i", 1000) + b"\x00\x12")
    started = time.monotonic()
    closed_after = None
    try:
        while time.monotonic() - started < 15:
            time.sleep(0.5)
            sock.sendall(b"\x00")  # a byte now and then: never idle, never done
    except (BrokenPipeError, ConnectionResetError):
        closed_after = time.monotonic() - started
    finally:
        sock.close()
    assert closed_after is not None and 2.5 <= closed_after < 10
    assert "request frame not completed in time" in memory_broker.logs()


def test_a_frame_that_does_not_fit_waits_unread_until_memory_frees(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", {"queued.max.request.bytes": "1048576"}).start()
    try:
        hog = socket.create_connection(("127.0.0.1", b.port), timeout=10)
        hog.sendall(struct.pack(">i", 2 * 1024 * 1024) + b"\x00" * 1000)  # admitted, then slow
        time.sleep(0.5)
        # ApiVersions v0 padded to 1.5 MB (bytes after a request are tolerated): it does not fit.
        body = struct.pack(">hhih", 18, 0, 7, -1) + b"\x00" * (1536 * 1024)
        waiter = socket.create_connection(("127.0.0.1", b.port), timeout=10)
        waiter.sendall(frame_of(body))
        waiter.settimeout(1.5)
        with pytest.raises(TimeoutError):
            waiter.recv(4)
        hog.close()  # the hog's reservation is released...
        waiter.settimeout(10)
        size = struct.unpack(">i", waiter.recv(4, socket.MSG_WAITALL))[0]  # ...and the waiter is read
        reply = waiter.recv(size, socket.MSG_WAITALL)
        assert struct.unpack_from(">ih", reply) == (7, 0)
        waiter.close()
    finally:
        b.kill9()


def test_frames_announced_and_trickled_do_not_hold_up_a_frame_that_fits(tmp_path: Path) -> None:
    """Slowloris connections announcing large frames fill request memory; a producer's
    ordinary 200 KB frame that fits in what is left is read at once, not queued behind
    them until their reservations are closed (the isolation benchmark's producer stalled
    45 s that way)."""
    b = BrokerProcess(tmp_path / "data", {"queued.max.request.bytes": "4194304"}).start()
    hogs: list[socket.socket] = []
    try:
        for _ in range(6):  # 3 MiB each: the first is admitted, the rest wait
            hog = socket.create_connection(("127.0.0.1", b.port), timeout=10)
            hog.sendall(struct.pack(">i", 3 * 1024 * 1024) + b"\x00" * 1000)
            hogs.append(hog)
        time.sleep(0.5)
        body = struct.pack(">hhih", 18, 0, 9, -1) + b"\x00" * (200 * 1024)
        started = time.monotonic()
        client = socket.create_connection(("127.0.0.1", b.port), timeout=10)
        client.sendall(frame_of(body))
        client.settimeout(3)  # the hogs are closed for their rate after a 5 s grace
        size = struct.unpack(">i", client.recv(4, socket.MSG_WAITALL))[0]
        reply = client.recv(size, socket.MSG_WAITALL)
        waited = time.monotonic() - started
        assert struct.unpack_from(">ih", reply) == (9, 0)
        assert waited < 2.0, f"a frame that fits waited {waited:.1f} s"
        client.close()
    finally:
        for hog in hogs:
            hog.close()
        b.kill9()


def test_a_large_frame_trickled_in_is_closed_long_before_the_read_timeout(broker: BrokerProcess) -> None:
    """The default read timeout is 60 s; a 10 MB frame arriving at 1 KB/s holds its 10 MB
    reservation, so it is closed once it falls behind 256 KiB/s after a 5 s grace."""
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    sock.sendall(struct.pack(">i", 10 * 1024 * 1024) + b"\x00\x12")
    started = time.monotonic()
    closed_after = None
    try:
        while time.monotonic() - started < 30:
            time.sleep(0.25)
            sock.sendall(b"\x00" * 256)
    except (BrokenPipeError, ConnectionResetError):
        closed_after = time.monotonic() - started
    finally:
        sock.close()
    assert closed_after is not None and 4.5 <= closed_after < 15
