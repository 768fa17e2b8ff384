"""The authorizer's audit log in a file of its own: JSON lines for every denial and every allowed
mutation, nothing for allowed reads, rotated at its size bound with a bounded number of backups,
and kept out of the broker's own log."""

from __future__ import annotations

import json
from pathlib import Path

from broker.tools.client import KafkaClient
from tests.broker.broker_process import BrokerProcess
from tests.broker.test_acl_apis import ALTER, AUTHORIZER, CLUSTER, DENY, WRITE, creation
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.generated.api_000_produce import (
    ProduceRequest,
    ProduceRequestPartitionProduceData,
    ProduceRequestTopicProduceData,
    ProduceResponse,
)
from wire.generated.api_003_metadata import MetadataRequest, MetadataResponse
from wire.generated.api_019_create_topics import (
    CreateTopicsRequest,
    CreateTopicsRequestCreatableTopic,
    CreateTopicsResponse,
)
from wire.generated.api_030_create_acls import CreateAclsRequest, CreateAclsResponse
from wire.records import NewRecord


def test_decisions_go_to_a_rotated_json_file(tmp_path: Path) -> None:
    audit = tmp_path / "audit" / "kafka-authorizer.log"
    broker = BrokerProcess(tmp_path / "data", {
        "authorizer.class.name": AUTHORIZER["authorizer.class.name"],
        "allow.everyone.if.no.acl.found": "true",
        "authorizer.audit.log.file": str(audit),
        "authorizer.audit.log.max.bytes": "4096",
        "authorizer.audit.log.backup.count": "2",
    }).start()
    try:
        with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
            # Allowed: no ACL names the cluster (allow.everyone.if.no.acl.found). An allowed ALTER.
            reply = c.send(CreateAclsRequest(creations=[
                creation("audited-", WRITE, "User:ANONYMOUS", rt=2, pattern=4, perm=DENY)]), CreateAclsResponse)
            assert reply.results[0].error_code == 0
            created = c.send(CreateTopicsRequest(timeout_ms=10_000, topics=[CreateTopicsRequestCreatableTopic(
                name="audited-x", num_partitions=1, replication_factor=1)]), CreateTopicsResponse)
            assert created.topics[0].error_code == 0
            # An allowed read is no mutation: not logged.
            assert c.send(MetadataRequest(topics=None), MetadataResponse).brokers
            first = audit.read_text().splitlines()
            batch = build_batch([NewRecord(key=b"k", value=b"v", timestamp=None)])
            for _ in range(40):  # denials, enough to rotate the 4 KiB file more than twice
                refused = c.send(ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequestTopicProduceData(
                    name="audited-x", partition_data=[ProduceRequestPartitionProduceData(index=0, records=batch)])]),
                    ProduceResponse)
                assert refused.responses[0].partition_responses[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
            events = [json.loads(line) for line in first]
            last = json.loads(audit.read_text().splitlines()[-1])
    finally:
        assert broker.stop() == 0, broker.logs()[-3000:]
    assert [(e["event"], e["operation"], e["resource_type"]) for e in events] == [
        ("authorization_allowed", "ALTER", "CLUSTER"),
        ("authorization_allowed", "CREATE", "CLUSTER"),
    ]
    alter = events[0]
    assert alter["principal"] == "User:ANONYMOUS" and alter["host"] == "127.0.0.1"
    assert alter["listener"] == "PLAINTEXT" and alter["api"] == "CreateAcls" and alter["decision"] == "ALLOWED"
    assert alter["timestamp"].endswith("Z")
    assert (last["decision"], last["operation"], last["resource_name"], last["acl"], last["api"]) == (
        "DENIED", "WRITE", "audited-x", "PREFIXED:audited-", "Produce")
    # Rotation: the file and two backups, each within the bound (plus one line).
    rotated = sorted(p.name for p in audit.parent.iterdir())
    assert rotated == ["kafka-authorizer.log", "kafka-authorizer.log.1", "kafka-authorizer.log.2"], rotated
    assert all(p.stat().st_size <= 4096 + 1024 for p in audit.parent.iterdir())
    assert "authorization_" not in broker.logs()


def test_denials_name_the_acl_pattern(tmp_path: Path) -> None:
    audit = tmp_path / "audit.log"
    broker = BrokerProcess(tmp_path / "data", {
        "authorizer.class.name": AUTHORIZER["authorizer.class.name"],
        "allow.everyone.if.no.acl.found": "true",
        "authorizer.audit.log.file": str(audit),
    }).start()
    try:
        with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
            reply = c.send(CreateAclsRequest(creations=[
                creation("kafka-cluster", ALTER, "User:ANONYMOUS", rt=CLUSTER, perm=DENY)]), CreateAclsResponse)
            assert reply.results[0].error_code == 0
            again = c.send(CreateAclsRequest(creations=[creation("t")]), CreateAclsResponse)
            assert again.results[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    finally:
        assert broker.stop() == 0, broker.logs()[-3000:]
    denied = [json.loads(line) for line in audit.read_text().splitlines() if '"DENIED"' in line]
    assert denied and denied[-1]["operation"] == "ALTER" and denied[-1]["acl"] == "LITERAL:kafka-cluster"
    assert denied[-1]["event"] == "authorization_denied" and denied[-1]["api"] == "CreateAcls"
