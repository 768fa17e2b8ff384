"""``cormorant topics`` against a real broker, and ``cormorant dump-log`` on real and hand-made segments."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.cli import main
from broker.tools.dump_log import dump_log
from tests.broker.broker_process import BrokerProcess
from tests.shared import ROOT
from wire.batch_builder import build_batch, build_control_batch
from wire.compression import Compression
from wire.records import ControlRecordType, NewRecord, TimestampType

BASE_TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("tools") / "data").start()
    try:
        yield b
    finally:
        assert b.stop() == 0


def topics(broker: BrokerProcess, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["topics", "--bootstrap-server", broker.bootstrap, *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ------------------------------------------------------------ topics


def test_topics_lifecycle(broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    assert topics(broker, capsys, "create", "tl", "--partitions", "3", "--config", "retention.ms=1000") == (
        0, "Created topic tl.\n", "")
    assert topics(broker, capsys, "create", "tl-other") == (0, "Created topic tl-other.\n", "")
    code, out, _ = topics(broker, capsys, "list")
    assert code == 0 and out.splitlines() == ["tl", "tl-other"]

    code, out, _ = topics(broker, capsys, "describe", "tl")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 4
    assert re.fullmatch(
        r"Topic: tl\tTopicId: [A-Za-z0-9_-]{22}\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: retention.ms=1000",
        lines[0],
    ), lines[0]
    assert lines[1:] == [f"\tTopic: tl\tPartition: {i}\tLeader: 1\tReplicas: 1\tIsr: 1" for i in range(3)]

    # The metadata tool prints the same topic id, in the same (Kafka's base64) form.
    topic_id = lines[0].split("TopicId: ")[1].split("\t")[0]
    assert main(["metadata", "image", "--bootstrap-server", broker.bootstrap]) == 0
    image = capsys.readouterr().out
    assert f"Topic: tl\tTopicId: {topic_id}\t" in image

    assert topics(broker, capsys, "alter-config", "tl", "--set", "segment.ms=100000", "--delete", "retention.ms") == (
        0, "Completed updating config for topic tl.\n", "")
    code, out, _ = topics(broker, capsys, "describe")
    assert code == 0
    assert "Configs: segment.ms=100000\n" in out
    assert "Topic: tl-other\t" in out

    assert topics(broker, capsys, "delete", "tl") == (0, "", "")
    code, out, _ = topics(broker, capsys, "list")
    assert out.splitlines() == ["tl-other"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("create", "te", "--partitions", "0"), "Number of partitions was set to an invalid non-positive value."),
        (("create", "te", "--replication-factor", "4"), "Unable to replicate the partition 4 time(s)"),
        (("create", "bad/name"), "illegal"),
        (("create", "te", "--config", "retention.ms"), "expected key=value"),
        (("describe", "te-missing"), "Topic 'te-missing' does not exist as expected"),
        (("delete", "te-missing"), "Topic 'te-missing' does not exist as expected"),
        (("alter-config", "te-missing", "--set", "retention.ms=1"), "The topic 'te-missing' does not exist."),
    ],
)
def test_topics_errors(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    code, out, err = topics(broker, capsys, *args)
    assert code == 1 and out == ""
    assert len(err.splitlines()) == 1
    assert err.startswith("cormorant topics: ") and message in err


def test_topics_existing_and_unreachable(broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    assert topics(broker, capsys, "create", "tx")[0] == 0
    code, _, err = topics(broker, capsys, "create", "tx")
    assert code == 1 and "Topic 'tx' already exists." in err
    code = main(["topics", "--bootstrap-server", "127.0.0.1:1", "list"])
    assert code == 1
    assert "cannot connect" in capsys.readouterr().err


def test_topics_command_line(broker: BrokerProcess) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "broker", "topics", "--bootstrap-server", broker.bootstrap, "create", "cli", "--partitions", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert (out.returncode, out.stdout) == (0, "Created topic cli.\n")


# ------------------------------------------------------------ dump-log


def test_dump_log_real_segment(broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    from broker.tools.client import KafkaClient
    from wire.generated.api_000_produce import (
        ProduceRequest,
        ProduceRequestPartitionProduceData,
        ProduceRequestTopicProduceData,
        ProduceResponse,
    )

    assert topics(broker, capsys, "create", "dl")[0] == 0
    with KafkaClient.connect(broker.bootstrap) as client:
        for i in range(2):
            batch = build_batch([NewRecord(key=b"ab", value=b"hello", timestamp=BASE_TS + i * 10 + j,
                                           headers=[("h1", b"x")]) for j in range(3)])
            request = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequestTopicProduceData(
                name="dl", partition_data=[ProduceRequestPartitionProduceData(index=0, records=batch)])])
            assert client.send(request, ProduceResponse, 9).responses[0].partition_responses[0].error_code == 0
    segment = broker.data_dir / "dl-0" / "00000000000000000000.log"
    out = io.StringIO()
    assert dump_log(segment, deep=True, out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[:2] == [f"Dumping {segment}", "Log starting offset: 0"]
    assert re.fullmatch(
        r"baseOffset: 0 lastOffset: 2 count: 3 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 "
        r"partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty "
        rf"position: 0 CreateTime: {BASE_TS + 2} size: (\d+) magic: 2 compresscodec: none crc: \d+ isvalid: true",
        lines[2],
    ), lines[2]
    size = int(re.search(r"size: (\d+)", lines[2]).group(1))  # type: ignore[union-attr]
    assert lines[3] == f"| offset: 0 CreateTime: {BASE_TS} keySize: 2 valueSize: 5 sequence: -1 headerKeys: [h1]"
    assert lines[6].startswith("baseOffset: 3 lastOffset: 5 count: 3 ") and f"position: {size} " in lines[6]
    assert len(lines) == 10


def _segment(tmp_path: Path, *batches: bytes, name: str = "00000000000000000100.log") -> Path:
    path = tmp_path / name
    path.write_bytes(b"".join(batches))
    return path


def test_dump_log_compressed_control_and_torn_tail(tmp_path: Path) -> None:
    data = build_batch(
        [NewRecord(key=None, value=b"v" * 100, timestamp=BASE_TS), NewRecord(key=b"k", value=None, timestamp=BASE_TS)],
        base_offset=100, compression=Compression.ZSTD, producer_id=7, producer_epoch=1, base_sequence=5,
        is_transactional=True, partition_leader_epoch=3,
    )
    marker = build_control_batch(ControlRecordType.COMMIT, producer_id=7, producer_epoch=1, coordinator_epoch=4,
                                 base_offset=102, timestamp_ms=BASE_TS + 1)
    appended = build_batch([NewRecord(key=b"a", value=b"b", timestamp=BASE_TS)], base_offset=110,
                           timestamp_type=TimestampType.LOG_APPEND_TIME)
    path = _segment(tmp_path, data, marker, appended, appended[:30])
    out, err = io.StringIO(), io.StringIO()
    assert dump_log(path, deep=True, out=out, err=err) == 0
    lines = out.getvalue().splitlines()
    assert lines[1] == "Log starting offset: 100"
    assert "baseSequence: 5 lastSequence: 6 producerId: 7 producerEpoch: 1 partitionLeaderEpoch: 3" in lines[2]
    assert "isTransactional: true isControl: false" in lines[2] and "compresscodec: zstd" in lines[2]
    assert lines[3] == f"| offset: 100 CreateTime: {BASE_TS} keySize: -1 valueSize: 100 sequence: 5 headerKeys: []"
    assert lines[4] == f"| offset: 101 CreateTime: {BASE_TS} keySize: 1 valueSize: -1 sequence: 6 headerKeys: []"
    assert "isControl: true" in lines[5]
    assert lines[6].endswith("endTxnMarker: COMMIT coordinatorEpoch: 4")
    assert "LogAppendTime:" in lines[7]
    assert lines[-1] == f"Found 30 invalid bytes at the end of {path.name}"
    # Offsets 102 -> 110 do not follow each other.
    assert err.getvalue().splitlines() == [f"Non-consecutive offsets in {path.absolute()}", "  102 is followed by 110"]


def test_dump_log_reports_bad_crc(tmp_path: Path) -> None:
    batch = bytearray(build_batch([NewRecord(key=None, value=b"payload", timestamp=BASE_TS)]))
    batch[-1] ^= 0xFF
    out = io.StringIO()
    assert dump_log(_segment(tmp_path, bytes(batch), name="00000000000000000000.log"), deep=False, out=out) == 0
    assert out.getvalue().splitlines()[2].endswith("isvalid: false")


def test_dump_log_zero_padding_and_bad_paths(tmp_path: Path) -> None:
    batch = build_batch([NewRecord(key=None, value=b"x", timestamp=BASE_TS)])
    out = io.StringIO()
    assert dump_log(_segment(tmp_path, batch, b"\0" * 64, name="00000000000000000000.log"), False, out) == 0
    assert out.getvalue().splitlines()[-1] == "Found 64 invalid bytes at the end of 00000000000000000000.log"
    err = io.StringIO()
    assert dump_log(tmp_path / "00000000000000000000.index", False, io.StringIO(), err) == 1
    assert dump_log(tmp_path / "missing.log", False, io.StringIO(), err) == 1
    assert dump_log(tmp_path / "00000000000000000009.log", False, io.StringIO(), err) == 1
    assert len(err.getvalue().splitlines()) == 3


# ------------------------------------------------------------ partitions


def partitions(broker: BrokerProcess, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["partitions", "--bootstrap-server", broker.bootstrap, *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_reassignment_progress_says_what_is_done_and_left() -> None:
    from broker.tools.partitions import reassignment_progress

    assert reassignment_progress([1, 2, 3], [2, 3], [1], isr=[1, 2]) == (
        "replicas [1,2,3]: 1 of 2 new replicas in sync [2], waiting for [3] to catch up; then removing [1]")
    assert reassignment_progress([2, 3], [2, 3], [], isr=[2, 3]) == "replicas [2,3]: 2 of 2 new replicas in sync [2,3]"


def test_partitions_reassign_status_and_elect_on_one_broker(
        broker: BrokerProcess, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert topics(broker, capsys, "create", "pr", "--partitions", "2")[0] == 0
    # Onto the broker it is on already: accepted, nothing moves.
    assert partitions(broker, capsys, "reassign", "pr:0=1") == (0, "pr-0: reassignment started\n", "")
    code, out, _ = partitions(broker, capsys, "reassign", "pr:0=1,7", "pr:9=1")
    assert code == 1
    assert "pr-0: INVALID_REPLICA_ASSIGNMENT" in out and "pr-9: UNKNOWN_TOPIC_OR_PARTITION" in out
    plan = tmp_path / "plan.json"
    plan.write_text('{"version": 1, "partitions": [{"topic": "pr", "partition": 1, "replicas": [1]}]}')
    assert partitions(broker, capsys, "reassign", "--file", str(plan)) == (0, "pr-1: reassignment started\n", "")
    assert partitions(broker, capsys, "reassign", "--cancel", "pr:1")[:2] == (
        1, "pr-1: NO_REASSIGNMENT_IN_PROGRESS: No ongoing reassignment for partition pr-1.\n")
    assert partitions(broker, capsys, "status") == (0, "No partition is being reassigned.\n", "")
    assert partitions(broker, capsys, "status", "--topic", "pr") == (0, "No partition is being reassigned.\n", "")
    assert partitions(broker, capsys, "elect-leaders", "pr:0") == (0, "pr-0: election not needed\n", "")
    assert partitions(broker, capsys, "elect-leaders") == (0, "No partition needed an election.\n", "")
    code, _, err = partitions(broker, capsys, "reassign", "pr-0")
    assert code == 1 and "expected TOPIC:PARTITION=" in err
