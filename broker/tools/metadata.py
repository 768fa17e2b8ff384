"""``cormorant metadata quorum|image --bootstrap-server H:P``: the metadata quorum and image.

``quorum`` is kafka-metadata-quorum.sh's ``describe --status`` and
``--replication`` in one: DescribeQuorum, sent to any broker (which forwards
it to the active controller), prints the leader, its epoch (the Raft term),
the high watermark and each voter's log end offset and lag behind the leader.

``image`` prints what a client learns from Metadata and DescribeCluster: the
cluster id, the live brokers, and every topic with its id and each
partition's leader, leader epoch, replicas and ISR. ``--json`` prints either
as one JSON object (sorted, so two outputs compare equal when the metadata is
the same).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, TextIO

from broker.cluster.controller_channel import describe_quorum_request
from broker.tools.client import ClientError, KafkaClient
from broker.tools.topics import kafka_uuid
from wire.errors import ErrorCode
from wire.generated.api_003_metadata import MetadataRequest, MetadataResponse
from wire.generated.api_055_describe_quorum import DescribeQuorumResponse
from wire.generated.api_060_describe_cluster import DescribeClusterRequest, DescribeClusterResponse

EXIT_FAILURE = 1
#: DescribeQuorum is retried this long while the quorum elects a leader.
QUORUM_WAIT_S = 10.0


class ToolError(Exception):
    pass


def describe_quorum(client: KafkaClient, wait_s: float = QUORUM_WAIT_S) -> dict[str, Any]:
    deadline = time.monotonic() + wait_s
    while True:
        reply = client.send(describe_quorum_request(), DescribeQuorumResponse)
        part = reply.topics[0].partitions[0] if reply.topics and reply.topics[0].partitions else None
        if reply.error_code == ErrorCode.NONE and part is not None and part.error_code == ErrorCode.NONE:
            break
        if time.monotonic() >= deadline:
            code = reply.error_code if part is None else part.error_code
            raise ToolError(f"DescribeQuorum failed: {ErrorCode.for_code(code).name}")
        time.sleep(0.2)
    leader_leo = max((v.log_end_offset for v in part.current_voters if v.replica_id == part.leader_id),
                     default=part.high_watermark)

    def replica(state: Any, kind: str) -> dict[str, Any]:
        return {"node_id": state.replica_id, "log_end_offset": state.log_end_offset,
                "lag": max(0, leader_leo - state.log_end_offset) if state.log_end_offset >= 0 else None,
                "status": "Leader" if state.replica_id == part.leader_id else kind}

    voters = [replica(v, "Follower") for v in part.current_voters]
    observers = [replica(o, "Observer") for o in part.observers]
    return {
        "leader_id": part.leader_id,
        "leader_epoch": part.leader_epoch,
        "high_watermark": part.high_watermark,
        "max_follower_lag": max((v["lag"] or 0 for v in voters), default=0),
        "voters": voters,
        "observers": observers,
    }


def describe_image(client: KafkaClient) -> dict[str, Any]:
    meta = client.send(MetadataRequest(topics=None), MetadataResponse)
    cluster = client.send(DescribeClusterRequest(), DescribeClusterResponse)
    brokers = [{"node_id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack}
               for b in sorted(cluster.brokers, key=lambda b: b.broker_id)]
    topics = []
    for t in sorted(meta.topics, key=lambda t: t.name or ""):
        partitions = [
            {"partition": p.partition_index, "leader": p.leader_id, "leader_epoch": p.leader_epoch,
             "replicas": list(p.replica_nodes), "isr": list(p.isr_nodes),
             "error": ErrorCode.for_code(p.error_code).name if p.error_code else None}
            for p in sorted(t.partitions, key=lambda p: p.partition_index)
        ]
        topics.append({"name": t.name, "topic_id": kafka_uuid(t.topic_id), "internal": t.is_internal,
                       "partitions": partitions})
    return {"cluster_id": meta.cluster_id, "controller_id": meta.controller_id, "brokers": brokers,
            "topics": topics}


def print_quorum(q: dict[str, Any], out: TextIO) -> None:
    print(f"LeaderId:        {q['leader_id']}", file=out)
    print(f"LeaderEpoch:     {q['leader_epoch']}", file=out)
    print(f"HighWatermark:   {q['high_watermark']}", file=out)
    print(f"MaxFollowerLag:  {q['max_follower_lag']}", file=out)
    print(f"CurrentVoters:   {[v['node_id'] for v in q['voters']]}", file=out)
    print(f"CurrentObservers: {[o['node_id'] for o in q['observers']]}", file=out)
    print("", file=out)
    print(f"{'NodeId':<8}{'LogEndOffset':<14}{'Lag':<6}Status", file=out)
    for r in q["voters"] + q["observers"]:
        lag = "-" if r["lag"] is None else r["lag"]
        print(f"{r['node_id']:<8}{r['log_end_offset']:<14}{lag!s:<6}{r['status']}", file=out)


def print_image(image: dict[str, Any], out: TextIO) -> None:
    print(f"ClusterId: {image['cluster_id']}  ControllerId: {image['controller_id']}", file=out)
    print("Brokers:", file=out)
    for b in image["brokers"]:
        rack = f" rack={b['rack']}" if b["rack"] else ""
        print(f"  {b['node_id']}: {b['host']}:{b['port']}{rack}", file=out)
    for t in image["topics"]:
        print(f"Topic: {t['name']}\tTopicId: {t['topic_id']}\tPartitionCount: {len(t['partitions'])}", file=out)
        for p in t["partitions"]:
            print(f"\tPartition: {p['partition']}\tLeader: {p['leader']}\tLeaderEpoch: {p['leader_epoch']}"
                  f"\tReplicas: {','.join(map(str, p['replicas']))}\tIsr: {','.join(map(str, p['isr']))}",
                  file=out)


def run_metadata(args: argparse.Namespace) -> int:
    try:
        with KafkaClient.connect(args.bootstrap_server, timeout_s=20.0) as client:
            if args.action == "quorum":
                quorum = describe_quorum(client)
                if args.json:
                    print(json.dumps(quorum, sort_keys=True), file=sys.stdout)
                else:
                    print_quorum(quorum, sys.stdout)
            else:
                image = describe_image(client)
                if args.json:
                    print(json.dumps(image, sort_keys=True), file=sys.stdout)
                else:
                    print_image(image, sys.stdout)
    except (ClientError, ToolError) as ex:
        print(f"cormorant metadata: {ex}", file=sys.stderr)
        return EXIT_FAILURE
    return 0
