#!/usr/bin/env python3
"""Metadata response micro-benchmark: one broker's answer to "all topics", in process.

Builds a metadata image of TOPICS topics of PARTITIONS partitions each (one live broker)
and times, best of ROUNDS: building the v12 response's topics as the Metadata handler does
(``topic_metadata`` per topic: the first time, and again from the same image), counting its error codes as the dispatcher does, and encoding
the response frame (C encoder, and the pure-Python encoder used off the event loop).

Usage: python scripts/bench_metadata_response.py [--topics N] [--partitions N] [--rounds N]
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from broker.eventloop.pacing import defer_full_collections  # noqa: E402
from broker.handlers.h03_metadata import brokers_for, topic_metadata  # noqa: E402
from broker.server.response_errors import error_code_counts  # noqa: E402
from controller.image import BrokerImage, Endpoint, MetadataImage, PartitionImage, TopicImage  # noqa: E402
from wire.frame import encode_response  # noqa: E402
from wire.generated.api_003_metadata import MetadataResponse  # noqa: E402

LISTENER = "PLAINTEXT"
VERSION = 12


def build_image(topics: int, partitions: int) -> MetadataImage:
    broker = BrokerImage(1, 1, uuid.UUID(int=1), (Endpoint(LISTENER, "127.0.0.1", 9092),), None, False)
    by_id: dict[uuid.UUID, TopicImage] = {}
    ids: dict[str, uuid.UUID] = {}
    for t in range(topics):
        tid = uuid.UUID(int=t + 1)
        parts = {p: PartitionImage(tid, p, (1,), (1,), 1, 0, 0) for p in range(partitions)}
        name = f"topic-{t:05d}"
        by_id[tid] = TopicImage(name, tid, parts)
        ids[name] = tid
    return MetadataImage(offset=topics, topics_by_id=by_id, topic_ids=ids, brokers={1: broker})


def best(rounds: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    defer_full_collections()  # as the broker does: no full collection in the middle of a request
    image = build_image(args.topics, args.partitions)
    ordered = sorted(image.topics_by_id.values(), key=lambda t: t.name)

    def respond() -> MetadataResponse:
        response = MetadataResponse(brokers=brokers_for(image, LISTENER), cluster_id="c", controller_id=1)
        response.topics = [topic_metadata(image, topic, LISTENER) for topic in ordered]
        return response

    started = time.perf_counter()
    response = respond()
    first_s = time.perf_counter() - started
    build_s = best(args.rounds, respond)
    counts_s = best(args.rounds, lambda: error_code_counts(response))
    c_s = best(args.rounds, lambda: encode_response(response, VERSION, 1))
    py_s = best(args.rounds, lambda: encode_response(response, VERSION, 1, None, 1 << 20, True))
    size = encode_response(response, VERSION, 1).size
    print(f"{args.topics} topics x {args.partitions} partitions, v{VERSION}, {size:,} bytes; best of {args.rounds}:")
    print(f"  build: first {first_s * 1000:.0f} ms, again {build_s * 1000:.0f} ms, error counts {counts_s * 1000:.0f} ms, "
          f"encode C {c_s * 1000:.0f} ms, encode Python {py_s * 1000:.0f} ms")


if __name__ == "__main__":
    main()
