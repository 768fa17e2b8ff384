#!/usr/bin/env python3
"""Codec benchmark: Cormorant's wire/ against kafka-python's protocol classes.

Both decode the very same bytes and encode the very same message, in one run, and
the table reports operations per second and the Cormorant/kafka-python ratio.
Cormorant's encode is ``encode_parts`` (how its senders encode: record data of
128 KiB or more is referenced, not copied); ``encode()``, which copies everything
into one ``bytes``, is reported beside it.

Usage: python scripts/bench_wire.py [--seconds 0.5] [--markdown]
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from wire.batch_builder import build_batch
from wire.generated.api_000_produce import (
    ProduceRequest,
    ProduceRequestPartitionProduceData,
    ProduceRequestTopicProduceData,
)
from wire.generated.api_001_fetch import (
    FetchResponse,
    FetchResponseFetchableTopicResponse,
    FetchResponsePartitionData,
)
from wire.generated.api_003_metadata import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from wire.generated.api_011_join_group import JoinGroupRequest, JoinGroupRequestProtocol
from wire.records import NewRecord


def batch_of(size: int) -> bytes:
    return build_batch([NewRecord(key=b"k", value=b"v" * size, timestamp=1_700_000_000_000)])


def produce(size: int) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=30_000,
        topic_data=[
            ProduceRequestTopicProduceData(
                name="events",
                partition_data=[ProduceRequestPartitionProduceData(index=0, records=batch_of(size))],
            )
        ],
    )


def fetch() -> FetchResponse:
    records = batch_of(1000)
    return FetchResponse(
        session_id=0,
        responses=[
            FetchResponseFetchableTopicResponse(
                topic=f"topic-{t}",
                partitions=[
                    FetchResponsePartitionData(
                        partition_index=p, high_watermark=1000, last_stable_offset=1000,
                        log_start_offset=0, records=records,
                    )
                    for p in range(10)
                ],
            )
            for t in range(10)
        ],
    )


def metadata() -> MetadataResponse:
    return MetadataResponse(
        brokers=[MetadataResponseBroker(node_id=i, host="127.0.0.1", port=9092 + i) for i in range(3)],
        cluster_id="cormorant-bench",
        controller_id=0,
        topics=[
            MetadataResponseTopic(
                name=f"topic-{t}",
                topic_id=uuid.uuid4(),
                partitions=[
                    MetadataResponsePartition(
                        partition_index=p, leader_id=p % 3, leader_epoch=5,
                        replica_nodes=[0, 1, 2], isr_nodes=[0, 1, 2], offline_replicas=[],
                    )
                    for p in range(100)
                ],
            )
            for t in range(10)
        ],
    )


def join_group() -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id="bench-group",
        session_timeout_ms=45_000,
        rebalance_timeout_ms=300_000,
        member_id="consumer-1-0a1b2c3d",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=[
            JoinGroupRequestProtocol(name="range", metadata=b"\x00\x03" + b"x" * 40),
            JoinGroupRequestProtocol(name="cooperative-sticky", metadata=b"\x00\x03" + b"y" * 48),
        ],
    )


def rate(fn: Callable[[], Any], seconds: float) -> float:
    """Operations per second: the best of five timed rounds of about seconds/5 each."""
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t0
        if dt > 0.02:
            break
        n *= 4
    per_round = max(1, int(n * (seconds / 5) / dt))
    best = 0.0
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(per_round):
            fn()
        best = max(best, per_round / (time.perf_counter() - t0))
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    try:
        from kafka.protocol.consumer.fetch import FetchResponse as KFetchResponse
        from kafka.protocol.consumer.group import JoinGroupRequest as KJoinGroupRequest
        from kafka.protocol.metadata.metadata import MetadataResponse as KMetadataResponse
        from kafka.protocol.producer.produce import ProduceRequest as KProduceRequest
    except ImportError:
        print("kafka-python 3 is not installed (pip install 'kafka-python==3.0.12')", file=sys.stderr)
        return 2

    cases: list[tuple[str, Any, Any, int]] = [
        ("Produce v9 request, one 1 KiB batch", produce(1024), KProduceRequest, 9),
        ("Produce v9 request, one 1 MiB batch", produce(1024 * 1024), KProduceRequest, 9),
        ("Fetch v12 response, 100 partitions", fetch(), KFetchResponse, 12),
        ("Metadata v12 response, 1,000 partitions", metadata(), KMetadataResponse, 12),
        ("JoinGroup v7 request", join_group(), KJoinGroupRequest, 7),
    ]
    rows = []
    for name, msg, kcls, version in cases:
        data = msg.encode(version)
        ours = type(msg).decode(data, version)
        assert ours.encode(version) == data
        assert ours.encode_parts(version).to_bytes() == data
        theirs = kcls.decode(data, version=version)
        assert bytes(theirs.encode()) == data, f"kafka-python re-encodes {name} differently"
        cls = type(msg)
        dec_ours = rate(partial(cls.decode, data, version), args.seconds)
        dec_theirs = rate(partial(kcls.decode, data, version=version), args.seconds)
        enc_ours = rate(partial(ours.encode_parts, version), args.seconds)
        enc_bytes = rate(partial(ours.encode, version), args.seconds)
        enc_theirs = rate(theirs.encode, args.seconds)
        rows.append((name, len(data), dec_ours, dec_theirs, enc_ours, enc_theirs, enc_bytes))

    header = ("message", "bytes", "decode/s cormorant", "decode/s kafka-python", "ratio",
              "encode/s cormorant", "encode/s kafka-python", "ratio",
              "encode() to one bytes/s", "ratio")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, size, do, dt, eo, et, eb in rows:
        lines.append(
            f"| {name} | {size:,} | {do:,.0f} | {dt:,.0f} | {do / dt:.1f}x | {eo:,.0f} | {et:,.0f} "
            f"| {eo / et:.1f}x | {eb:,.0f} | {eb / et:.1f}x |"
        )
    import platform

    from wire import accel

    codec = "C accelerator" if accel.enabled() else "pure Python"
    print(
        f"Python {platform.python_version()}, kafka-python {__import__('kafka').__version__}, "
        f"Cormorant codec: {codec}\n"
    )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
